// Moving one snapshot between host memory and its spool file: compression on the way down,
// decompression and checksum verification on the way up. Blocking; called on I/O threads.
#pragma once

#include <cstdint>
#include <string>

#include "compress/zfp_codec.h"
#include "disk_tier/disk_tier.h"
#include "snapd/status.h"
#include "snapd/v1/catalog.pb.h"

namespace snapd {

// The codec and field a run's snapshots are compressed with.
compress::CodecSpec CodecOf(const v1::RunSpec& spec);
compress::FieldSpec FieldOf(const v1::RunSpec& spec);

// Bytes the snapshot's file holds before padding: the compressed size, or the raw size.
uint64_t FileContentBytes(const v1::SnapshotRecord& record);

struct WrittenSnapshot {
  uint64_t stored_bytes = 0;
  v1::Codec codec = v1::CODEC_NONE;  // NONE when compression did not shrink the snapshot
  uint64_t stored_checksum = 0;      // of the compressed bytes
};

// Writes the raw snapshot at `data` (field.bytes bytes, page-aligned) to file `name` in
// `spool`, compressed with `codec` when that makes it smaller. `spool` holds a reservation of
// field.bytes; it is shrunk to what was written, and returned on failure.
// `pool` codes the slabs in parallel (may be null).
Result<WrittenSnapshot> WriteSnapshot(DiskTier& disk, uint32_t spool, uint64_t run_id,
                                      const std::string& name, const compress::CodecSpec& codec,
                                      const compress::FieldSpec& field, const void* data,
                                      compress::CompressPool* pool);

// Reads `record`'s file into `raw` (record.raw_bytes() bytes, page-aligned, writable to the
// next 4 KiB), decompressing it. DATA_LOSS when the stored bytes fail their checksum or do not
// decode; a lossless snapshot is also checked against the checksum of the pushed bytes.
Status ReadSnapshot(DiskTier& disk, const v1::SnapshotRecord& record,
                    const compress::FieldSpec& field, void* raw, compress::CompressPool* pool);

// The same checks without keeping the bytes (the recovery scrub); uses its own buffers.
Status VerifySnapshot(DiskTier& disk, const v1::SnapshotRecord& record,
                      const compress::FieldSpec& field, compress::CompressPool* pool);

}  // namespace snapd
