#include "ingest/packing.h"

#include <cstdlib>
#include <cstring>

#include "disk_tier/disk_tier.h"

namespace adjsnap {

compress::CodecSpec CodecOf(const v1::RunSpec& spec) {
  return compress::CodecSpec{spec.codec(), spec.codec_param()};
}

compress::FieldSpec FieldOf(const v1::RunSpec& spec) {
  return compress::FieldSpec{spec.dtype(),
                             std::vector<uint64_t>(spec.shape().begin(), spec.shape().end()),
                             spec.bytes_per_step()};
}

bool CompressesAtIngest(const v1::RunSpec& spec) {
  return spec.codec() != v1::CODEC_NONE && !compress::IsGpuCodec(spec.codec()) &&
         spec.compress_when() == v1::COMPRESS_AT_INGEST;
}

bool IsFramed(const v1::SnapshotRecord& record) { return compress::IsGpuCodec(record.codec()); }

uint64_t ServedBytes(const v1::SnapshotRecord& record) {
  return IsFramed(record) ? record.stored_bytes() : record.raw_bytes();
}

Result<PackedSnapshot> PackSnapshot(const compress::CodecSpec& codec,
                                    const compress::FieldSpec& field, const void* data,
                                    compress::CompressPool* pool, const Checksums& sums) {
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t max, compress::MaxCompressedBytes(codec, field));
  // Page-aligned and padded to the disk tier's alignment: the copy may be written as it is.
  std::unique_ptr<char, void (*)(void*)> buf(
      static_cast<char*>(std::aligned_alloc(DiskTier::kAlignment, DiskTier::FileBytes(max))),
      std::free);
  if (!buf) return Status::ResourceExhausted("no memory for a compression buffer");
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t n, compress::Compress(codec, field, data, buf.get(), max, pool));
  // Compression that does not shrink the snapshot is not worth a decode on the way back.
  if (n >= field.bytes) return Status::FailedPrecondition("compression does not shrink it");
  std::memset(buf.get() + n, 0, DiskTier::FileBytes(n) - n);
  PackedSnapshot p;
  p.checksum = sums.Hash(buf.get(), n);
  p.bytes = std::shared_ptr<char>(buf.release(), std::free);
  p.size = n;
  p.codec = codec.codec;
  return p;
}

Status DecodeSnapshot(const v1::SnapshotRecord& r, const compress::FieldSpec& field,
                      const void* stored, void* raw, compress::CompressPool* pool,
                      const Checksums& sums) {
  ADJSNAP_RETURN_IF_ERROR(
      sums.Verify(stored, r.stored_bytes(), r.stored_checksum(), "compressed bytes"));
  ADJSNAP_RETURN_IF_ERROR(compress::Decompress({r.codec(), r.codec_param()}, field, stored,
                                             r.stored_bytes(), raw, pool));
  if (r.codec() == v1::CODEC_ZFP_REVERSIBLE && r.checksum_state() == v1::CHECKSUM_RECORDED) {
    return sums.Verify(raw, r.raw_bytes(), r.checksum(), "bytes");
  }
  return Status::Ok();
}

}  // namespace adjsnap
