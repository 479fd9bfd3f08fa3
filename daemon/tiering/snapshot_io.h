// Moving one snapshot between host memory and its spool file: compression on the way down,
// decompression and checksum verification on the way up (ingest/packing.h codes the bytes;
// the checksum owner, ingest/checksums.h, hashes them). Blocking; called on I/O threads.
#pragma once

#include <cstdint>
#include <string>

#include "disk_tier/disk_tier.h"
#include "ingest/checksums.h"
#include "ingest/packing.h"
#include "adjsnap/status.h"
#include "adjsnap/v1/catalog.pb.h"
#include "adjsnap/zfp_codec.h"

namespace adjsnap {

// Bytes the snapshot's file holds before padding: the compressed size, or the raw size.
uint64_t FileContentBytes(const v1::SnapshotRecord& record);

struct WrittenSnapshot {
  uint64_t stored_bytes = 0;
  v1::Codec codec = v1::CODEC_NONE;  // NONE when compression did not shrink the snapshot
  uint64_t stored_checksum = 0;      // of the compressed bytes
};

// Writes the host copy of `record` at `data` (page-aligned) to file `name` in the room `space`
// reserved (FileContentBytes(record)). A raw copy is compressed with `codec` when that makes it
// smaller; a copy compressed at ingest is written as it is. The disk tier keeps what the file
// takes of `space` and takes back the rest. `pool` codes the slabs in parallel (may be null).
Result<WrittenSnapshot> WriteSnapshot(DiskTier& disk, const DiskTier::Space& space, uint64_t run_id,
                                      const std::string& name, const v1::SnapshotRecord& record,
                                      const compress::CodecSpec& codec,
                                      const compress::FieldSpec& field, const void* data,
                                      compress::CompressPool* pool, const Checksums& sums);

// Reads `record`'s file into `raw` (record.raw_bytes() bytes, page-aligned, writable to the
// next 4 KiB), decompressing it. DATA_LOSS when the stored bytes fail their checksum or do not
// decode, or the file is lost (DiskTier::Read); a lossless snapshot is also checked against the
// checksum of the pushed bytes. UNAVAILABLE, naming the step as `step_name` says (StepName: the
// run's name, as the solver knows it) and the spool, when the file is out of reach and may be
// intact (the step stays recorded).
Status ReadSnapshot(DiskTier& disk, const v1::SnapshotRecord& record,
                    const compress::FieldSpec& field, void* raw, compress::CompressPool* pool,
                    const Checksums& sums, const std::string& step_name);

// The same checks without keeping the bytes (the recovery scrub); uses its own buffers.
Status VerifySnapshot(DiskTier& disk, const v1::SnapshotRecord& record,
                      const compress::FieldSpec& field, compress::CompressPool* pool,
                      const Checksums& sums, const std::string& step_name);

}  // namespace adjsnap
