// Snapshot compression with zfp: reversible (bit-exact), fixed-rate, fixed-precision and
// fixed-accuracy modes over a run's dtype and shape.
//
// A compressed snapshot is a sequence of independent slabs: the field is cut along its slowest
// dimension into slabs of whole zfp blocks (4 rows) of about kSlabBytes raw bytes, each a zfp
// stream of its own, so slabs can be coded by different threads and a damaged slab does not
// spoil the others. Layout (little-endian):
//   u32 magic "SZF1", u32 slab count S, u64 compressed bytes of each slab [S], the S streams.
// The codec and its parameter are not in the bytes: the catalog keeps them with each snapshot
// (zfp's own header is not written, as its GPU path would not keep it either).
//
// Thread-safety: the functions are pure; concurrent calls on distinct buffers are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "adjsnap/compress_pool.h"
#include "adjsnap/status.h"
#include "adjsnap/v1/control.pb.h"

namespace adjsnap::compress {

constexpr uint64_t kSlabBytes = 2ull << 20;  // small enough to balance workers

// The field a snapshot holds, as the codec sees it.
struct FieldSpec {
  v1::Dtype dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<uint64_t> shape;  // C order (slowest first); empty = 1-D of all elements
  uint64_t bytes = 0;           // raw bytes
};

struct CodecSpec {
  v1::Codec codec = v1::CODEC_NONE;
  double param = 0;  // rate (bits/value), precision (bits) or accuracy (absolute tolerance)
};

// INVALID_ARGUMENT, naming the problem, when `codec` cannot apply to `field` (zfp codes
// float32/float64/int32/int64 only; lossy modes need floats; parameters out of range).
Status Validate(const CodecSpec& codec, const FieldSpec& field);

// An upper bound of Compress's output for this field.
Result<uint64_t> MaxCompressedBytes(const CodecSpec& codec, const FieldSpec& field);

// Compresses `field.bytes` bytes at `raw` into `out` (capacity `out_bytes`, at least
// MaxCompressedBytes; 8-byte aligned); returns the bytes written. With a pool, the slabs are
// coded by its workers in parallel (the output is the same).
Result<uint64_t> Compress(const CodecSpec& codec, const FieldSpec& field, const void* raw,
                          void* out, uint64_t out_bytes, CompressPool* pool = nullptr);

// Decompresses `in_bytes` at `in` into `raw` (`field.bytes` bytes). DATA_LOSS when the bytes
// are not a well-formed compressed snapshot of this field.
Status Decompress(const CodecSpec& codec, const FieldSpec& field, const void* in,
                  uint64_t in_bytes, void* raw, CompressPool* pool = nullptr);

// "zfp-accuracy 1e-06", for messages and tables (the nvCOMP codecs too).
std::string CodecName(const CodecSpec& codec);

// The nvCOMP codecs (bitcomp, bitcomp-lossy, ans): libadjsnap applies them on the GPU, in chunk
// frames (adjsnap/chunk_frame.h); zfp's functions refuse them.
bool IsGpuCodec(v1::Codec codec);

// INVALID_ARGUMENT naming the problem when an nvCOMP codec's parameter cannot apply to `field`:
// bitcomp and ans take none; bitcomp-lossy needs float32 or float64 data and an error bound
// that is finite, > 0 and whose double is a normal number of the dtype (BitcompDelta). Needs
// no nvCOMP: adjsnapd checks a run's codec without it (it stores frames, never codes them).
Status CheckGpuCodec(const CodecSpec& codec, const FieldSpec& field);

// Bitcomp's quantization step for an absolute error bound: nvCOMP rounds the step down to a
// power of two and keeps every error within half of it, so 2 * bound keeps it within bound.
double BitcompDelta(double bound);

}  // namespace adjsnap::compress
