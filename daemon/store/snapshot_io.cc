#include "store/snapshot_io.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "checksum.h"

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
  return Status::DataLoss(std::string("its disk copy does not match the checksum of the ") +
                          what + " recorded when it was written");
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

Result<WrittenSnapshot> WriteSnapshot(DiskTier& disk, uint32_t spool, uint64_t run_id,
                                      const std::string& name, const compress::CodecSpec& codec,
                                      const compress::FieldSpec& field, const void* data,
                                      compress::CompressPool* pool) {
  WrittenSnapshot w;
  w.stored_bytes = field.bytes;
  const void* src = data;
  AlignedPtr packed(nullptr, std::free);
  if (codec.codec != v1::CODEC_NONE) {
    auto max = compress::MaxCompressedBytes(codec, field);
    if (max.ok()) packed = Scratch(*max);
    if (packed) {
      auto n = compress::Compress(codec, field, data, packed.get(), *max, pool);
      // Compression that does not shrink the snapshot is not worth a decode on the way back.
      if (n.ok() && *n < field.bytes) {
        std::memset(packed.get() + *n, 0, DiskTier::FileBytes(*n) - *n);
        src = packed.get();
        w.stored_bytes = *n;
        w.codec = codec.codec;
        w.stored_checksum = Checksum(packed.get(), *n);
        disk.Shrink(spool, field.bytes, *n);
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
  bool recorded = r.checksum_state() == v1::CHECKSUM_RECORDED;
  if (r.codec() == v1::CODEC_NONE) {
    SNAPD_RETURN_IF_ERROR(disk.Read(r.spool(), r.run_id(), r.disk_name(), raw, r.raw_bytes()));
    if (recorded && Checksum(raw, r.raw_bytes()) != r.checksum()) return Mismatch("bytes");
    return Status::Ok();
  }
  AlignedPtr packed = Scratch(r.stored_bytes());
  if (!packed) return Status::ResourceExhausted("no memory for a decompression buffer");
  SNAPD_RETURN_IF_ERROR(
      disk.Read(r.spool(), r.run_id(), r.disk_name(), packed.get(), r.stored_bytes()));
  if (Checksum(packed.get(), r.stored_bytes()) != r.stored_checksum()) {
    return Mismatch("compressed bytes");
  }
  SNAPD_RETURN_IF_ERROR(compress::Decompress({r.codec(), r.codec_param()}, field, packed.get(),
                                             r.stored_bytes(), raw, pool));
  if (r.codec() == v1::CODEC_ZFP_REVERSIBLE && recorded &&
      Checksum(raw, r.raw_bytes()) != r.checksum()) {
    return Mismatch("bytes");
  }
  return Status::Ok();
}

Status VerifySnapshot(DiskTier& disk, const v1::SnapshotRecord& r,
                      const compress::FieldSpec& field, compress::CompressPool* pool) {
  AlignedPtr raw = Scratch(r.raw_bytes());
  if (!raw) return Status::ResourceExhausted("no memory for a verification buffer");
  return ReadSnapshot(disk, r, field, raw.get(), pool);
}

}  // namespace snapd
