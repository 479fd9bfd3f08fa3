#include "tiering/snapshot_io.h"

#include <cstdlib>
#include <memory>

namespace adjsnap {
namespace {

using AlignedPtr = std::unique_ptr<char, void (*)(void*)>;

// A page-aligned scratch buffer for `bytes` (rounded up to the disk tier's alignment).
AlignedPtr Scratch(uint64_t bytes) {
  return AlignedPtr(
      static_cast<char*>(std::aligned_alloc(DiskTier::kAlignment, DiskTier::FileBytes(bytes))),
      std::free);
}

// A file out of reach (its spool failed, its servers gone) leaves the step recorded: the answer
// is UNAVAILABLE, naming the step besides what the disk tier names (the spool, the path, the
// errno), so a caller retrying later knows what it waits for.
Status NameTheStep(const std::string& step_name, Status read) {
  if (read.code() != Code::kUnavailable) return read;
  return Status::Unavailable(step_name + " is unavailable: " + read.message());
}

}  // namespace

uint64_t FileContentBytes(const v1::SnapshotRecord& r) {
  return r.codec() == v1::CODEC_NONE ? r.raw_bytes() : r.stored_bytes();
}

Result<WrittenSnapshot> WriteSnapshot(DiskTier& disk, const DiskTier::Space& space, uint64_t run_id,
                                      const std::string& name, const v1::SnapshotRecord& record,
                                      const compress::CodecSpec& codec,
                                      const compress::FieldSpec& field, const void* data,
                                      compress::CompressPool* pool, const Checksums& sums) {
  WrittenSnapshot w;
  const void* src = data;
  PackedSnapshot packed;
  if (record.codec() != v1::CODEC_NONE) {  // compressed at ingest, or a frame: as it is
    w.stored_bytes = record.stored_bytes();
    w.codec = record.codec();
    w.stored_checksum = record.stored_checksum();
  } else {
    w.stored_bytes = field.bytes;
    if (codec.codec != v1::CODEC_NONE && !compress::IsGpuCodec(codec.codec)) {
      auto p = PackSnapshot(codec, field, data, pool, sums);
      if (p.ok()) {
        packed = std::move(p).value();
        src = packed.bytes.get();
        w.stored_bytes = packed.size;
        w.codec = packed.codec;
        w.stored_checksum = packed.checksum;
      }
    }
  }
  ADJSNAP_RETURN_IF_ERROR(disk.Write(space, run_id, name, src, w.stored_bytes));
  return w;
}

Status ReadSnapshot(DiskTier& disk, const v1::SnapshotRecord& r, const compress::FieldSpec& field,
                    void* raw, compress::CompressPool* pool, const Checksums& sums,
                    const std::string& step_name) {
  if (r.codec() == v1::CODEC_NONE) {
    ADJSNAP_RETURN_IF_ERROR(NameTheStep(
        step_name, disk.Read(r.spool(), r.run_id(), r.disk_name(), raw, r.raw_bytes())));
    if (r.checksum_state() == v1::CHECKSUM_RECORDED) {
      return sums.Verify(raw, r.raw_bytes(), r.checksum(), "bytes");
    }
    return Status::Ok();
  }
  if (IsFramed(r)) {  // served as stored: read into the step's block, checked, never decoded
    ADJSNAP_RETURN_IF_ERROR(NameTheStep(
        step_name, disk.Read(r.spool(), r.run_id(), r.disk_name(), raw, r.stored_bytes())));
    return sums.Verify(raw, r.stored_bytes(), r.stored_checksum(), "framed bytes");
  }
  AlignedPtr packed = Scratch(r.stored_bytes());
  if (!packed) return Status::ResourceExhausted("no memory for a decompression buffer");
  ADJSNAP_RETURN_IF_ERROR(NameTheStep(
      step_name, disk.Read(r.spool(), r.run_id(), r.disk_name(), packed.get(), r.stored_bytes())));
  return DecodeSnapshot(r, field, packed.get(), raw, pool, sums);
}

Status VerifySnapshot(DiskTier& disk, const v1::SnapshotRecord& r, const compress::FieldSpec& field,
                      compress::CompressPool* pool, const Checksums& sums,
                      const std::string& step_name) {
  AlignedPtr raw = Scratch(r.raw_bytes());
  if (!raw) return Status::ResourceExhausted("no memory for a verification buffer");
  return ReadSnapshot(disk, r, field, raw.get(), pool, sums, step_name);
}

}  // namespace adjsnap
