// Compressing one snapshot in memory and decoding it back (the zfp codec, slabs coded in
// parallel by the compression workers), with the checksums that guard the compressed bytes.
// Blocking; called on I/O threads. Used at ingest (ingest/ingest.h) and when a step moves to
// or from its spool file (tiering/snapshot_io.h).
#pragma once

#include <cstdint>
#include <memory>

#include "ingest/checksums.h"
#include "adjsnap/status.h"
#include "adjsnap/v1/catalog.pb.h"
#include "adjsnap/zfp_codec.h"

namespace adjsnap {

// The codec and field a run's snapshots are compressed with.
compress::CodecSpec CodecOf(const v1::RunSpec& spec);
compress::FieldSpec FieldOf(const v1::RunSpec& spec);

// The run compresses its steps as soon as they are stored.
bool CompressesAtIngest(const v1::RunSpec& spec);

// A step libadjsnap pushed as a chunk frame (an nvCOMP codec, compressed where the solver is;
// adjsnap/chunk_frame.h): adjsnapd stores, moves and serves its bytes as they came and never decodes
// them; its checksum covers those bytes. A step of such a run that came raw is not framed.
bool IsFramed(const v1::SnapshotRecord& record);

// The bytes a fetch of the step carries: a framed step's frame, else its raw bytes.
uint64_t ServedBytes(const v1::SnapshotRecord& record);

// A compressed copy of a snapshot, in a page-aligned buffer of its own.
struct PackedSnapshot {
  std::shared_ptr<char> bytes;  // readable to the next 4 KiB
  uint64_t size = 0;
  uint64_t checksum = 0;  // of the compressed bytes
  v1::Codec codec = v1::CODEC_NONE;
};

// Compresses the raw snapshot at `data`. FAILED_PRECONDITION when compressing does not make it
// smaller (it is then kept raw). `sums` takes the checksum of the compressed bytes.
Result<PackedSnapshot> PackSnapshot(const compress::CodecSpec& codec,
                                    const compress::FieldSpec& field, const void* data,
                                    compress::CompressPool* pool, const Checksums& sums);

// Decodes the stored bytes of `record` at `stored` into `raw`, checking the stored checksum
// first and, for a lossless codec, the checksum of the pushed bytes after. DATA_LOSS when a
// check fails or the bytes do not decode.
Status DecodeSnapshot(const v1::SnapshotRecord& record, const compress::FieldSpec& field,
                      const void* stored, void* raw, compress::CompressPool* pool,
                      const Checksums& sums);

}  // namespace adjsnap
