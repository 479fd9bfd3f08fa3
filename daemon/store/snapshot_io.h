// Moving one snapshot between host memory and its spool file: compression on the way down,
// decompression and checksum verification on the way up. Blocking; called on I/O threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "snapd/zfp_codec.h"
#include "disk_tier/disk_tier.h"
#include "snapd/status.h"
#include "snapd/v1/catalog.pb.h"

namespace snapd {

// The codec and field a run's snapshots are compressed with.
compress::CodecSpec CodecOf(const v1::RunSpec& spec);
compress::FieldSpec FieldOf(const v1::RunSpec& spec);

// Bytes the snapshot's file holds before padding: the compressed size, or the raw size.
uint64_t FileContentBytes(const v1::SnapshotRecord& record);

// The run compresses its steps as soon as they are stored.
bool CompressesAtIngest(const v1::RunSpec& spec);

// A compressed copy of a snapshot, in a page-aligned buffer of its own.
struct PackedSnapshot {
  std::shared_ptr<char> bytes;  // readable to the next 4 KiB
  uint64_t size = 0;
  uint64_t checksum = 0;  // of the compressed bytes
  v1::Codec codec = v1::CODEC_NONE;
};

// Compresses the raw snapshot at `data`. FAILED_PRECONDITION when compressing does not make it
// smaller (it is then kept raw).
Result<PackedSnapshot> PackSnapshot(const compress::CodecSpec& codec,
                                    const compress::FieldSpec& field, const void* data,
                                    compress::CompressPool* pool);

// Decodes the stored bytes of `record` at `stored` into `raw`, checking the stored checksum
// first and, for a lossless codec, the checksum of the pushed bytes after. DATA_LOSS when a
// check fails or the bytes do not decode.
Status DecodeSnapshot(const v1::SnapshotRecord& record, const compress::FieldSpec& field,
                      const void* stored, void* raw, compress::CompressPool* pool);

struct WrittenSnapshot {
  uint64_t stored_bytes = 0;
  v1::Codec codec = v1::CODEC_NONE;  // NONE when compression did not shrink the snapshot
  uint64_t stored_checksum = 0;      // of the compressed bytes
};

// Writes the host copy of `record` at `data` (page-aligned) to file `name` in `spool`. A raw
// copy is compressed with `codec` when that makes it smaller; a copy compressed at ingest is
// written as it is. `spool` holds a reservation of FileContentBytes(record); it is shrunk to
// what was written, and returned on failure. `pool` codes the slabs in parallel (may be null).
Result<WrittenSnapshot> WriteSnapshot(DiskTier& disk, uint32_t spool, uint64_t run_id,
                                      const std::string& name, const v1::SnapshotRecord& record,
                                      const compress::CodecSpec& codec,
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
