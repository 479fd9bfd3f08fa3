#include "store/snapshot_io.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "snapd/checksum.h"

namespace snapd {
namespace {

using AlignedPtr = std::unique_ptr<char, void (*)(void*)>;

// A page-aligned scratch buffer for `bytes` (rounded up to the disk tier's alignment).
AlignedPtr Scratch(uint64_t bytes) {
  return AlignedPtr(static_cast<char*>(std::aligned_alloc(DiskTier::kAlignment,
                                                          DiskTier::FileBytes(bytes))),
                    std::free);
}

Status Mismatch(const char* what) {
  return Status::DataLoss(std::string("its stored copy does not match the checksum of the ") +
                          what + " recorded when it was stored");
}

}  // namespace

compress::CodecSpec CodecOf(const v1::RunSpec& spec) {
  return compress::CodecSpec{spec.codec(), spec.codec_param()};
}

compress::FieldSpec FieldOf(const v1::RunSpec& spec) {
  return compress::FieldSpec{spec.dtype(),
                             std::vector<uint64_t>(spec.shape().begin(), spec.shape().end()),
                             spec.bytes_per_step()};
}

uint64_t FileContentBytes(const v1::SnapshotRecord& r) {
  return r.codec() == v1::CODEC_NONE ? r.raw_bytes() : r.stored_bytes();
}

bool CompressesAtIngest(const v1::RunSpec& spec) {
  return spec.codec() != v1::CODEC_NONE && spec.compress_when() == v1::COMPRESS_AT_INGEST;
}

Result<PackedSnapshot> PackSnapshot(const compress::CodecSpec& codec,
                                    const compress::FieldSpec& field, const void* data,
                                    compress::CompressPool* pool) {
  SNAPD_ASSIGN_OR_RETURN(uint64_t max, compress::MaxCompressedBytes(codec, field));
  AlignedPtr buf = Scratch(max);
  if (!buf) return Status::ResourceExhausted("no memory for a compression buffer");
  SNAPD_ASSIGN_OR_RETURN(uint64_t n, compress::Compress(codec, field, data, buf.get(), max, pool));
  // Compression that does not shrink the snapshot is not worth a decode on the way back.
  if (n >= field.bytes) return Status::FailedPrecondition("compression does not shrink it");
  std::memset(buf.get() + n, 0, DiskTier::FileBytes(n) - n);
  PackedSnapshot p;
  p.checksum = Checksum(buf.get(), n);
  p.bytes = std::shared_ptr<char>(buf.release(), std::free);
  p.size = n;
  p.codec = codec.codec;
  return p;
}

Status DecodeSnapshot(const v1::SnapshotRecord& r, const compress::FieldSpec& field,
                      const void* stored, void* raw, compress::CompressPool* pool) {
  if (Checksum(stored, r.stored_bytes()) != r.stored_checksum()) {
    return Mismatch("compressed bytes");
  }
  SNAPD_RETURN_IF_ERROR(
      compress::Decompress({r.codec(), r.codec_param()}, field, stored, r.stored_bytes(), raw, pool));
  if (r.codec() == v1::CODEC_ZFP_REVERSIBLE && r.checksum_state() == v1::CHECKSUM_RECORDED &&
      Checksum(raw, r.raw_bytes()) != r.checksum()) {
    return Mismatch("bytes");
  }
  return Status::Ok();
}

Result<WrittenSnapshot> WriteSnapshot(DiskTier& disk, uint32_t spool, uint64_t run_id,
                                      const std::string& name, const v1::SnapshotRecord& record,
                                      const compress::CodecSpec& codec,
                                      const compress::FieldSpec& field, const void* data,
                                      compress::CompressPool* pool) {
  WrittenSnapshot w;
  const void* src = data;
  PackedSnapshot packed;
  if (record.codec() != v1::CODEC_NONE) {  // compressed at ingest: as it is
    w.stored_bytes = record.stored_bytes();
    w.codec = record.codec();
    w.stored_checksum = record.stored_checksum();
  } else {
    w.stored_bytes = field.bytes;
    if (codec.codec != v1::CODEC_NONE) {
      auto p = PackSnapshot(codec, field, data, pool);
      if (p.ok()) {
        packed = std::move(p).value();
        src = packed.bytes.get();
        w.stored_bytes = packed.size;
        w.codec = packed.codec;
        w.stored_checksum = packed.checksum;
        disk.Shrink(spool, field.bytes, packed.size);
      }
    }
  }
  Status s = disk.Write(spool, run_id, name, src, w.stored_bytes);
  if (!s.ok()) {
    disk.Unreserve(spool, w.stored_bytes);
    return s;
  }
  return w;
}

Status ReadSnapshot(DiskTier& disk, const v1::SnapshotRecord& r,
                    const compress::FieldSpec& field, void* raw, compress::CompressPool* pool) {
  if (r.codec() == v1::CODEC_NONE) {
    SNAPD_RETURN_IF_ERROR(disk.Read(r.spool(), r.run_id(), r.disk_name(), raw, r.raw_bytes()));
    if (r.checksum_state() == v1::CHECKSUM_RECORDED && Checksum(raw, r.raw_bytes()) != r.checksum()) {
      return Mismatch("bytes");
    }
    return Status::Ok();
  }
  AlignedPtr packed = Scratch(r.stored_bytes());
  if (!packed) return Status::ResourceExhausted("no memory for a decompression buffer");
  SNAPD_RETURN_IF_ERROR(
      disk.Read(r.spool(), r.run_id(), r.disk_name(), packed.get(), r.stored_bytes()));
  return DecodeSnapshot(r, field, packed.get(), raw, pool);
}

Status VerifySnapshot(DiskTier& disk, const v1::SnapshotRecord& r,
                      const compress::FieldSpec& field, compress::CompressPool* pool) {
  AlignedPtr raw = Scratch(r.raw_bytes());
  if (!raw) return Status::ResourceExhausted("no memory for a verification buffer");
  return ReadSnapshot(disk, r, field, raw.get(), pool);
}

}  // namespace snapd
