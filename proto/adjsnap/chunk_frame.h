// The stored form of a snapshot compressed on the GPU (the nvCOMP codecs): the step is cut into
// chunks of equal raw size (the last may be shorter), each compressed on its own so that a batch
// of chunks is coded at once and each can be copied over PCIe while the next ones compress.
//
// Layout (little-endian):
//   FrameHeader (32 bytes): magic "SNC1", codec, reserved 0, raw bytes, chunk raw bytes, chunks
//   ChunkEntry [chunks] (8 bytes each): stored bytes, flags (kChunkStoredRaw: the chunk did not
//     shrink and is stored as it was)
//   the chunks, in order, each starting kChunkAlign-aligned from the frame's start, zero-padded
//   between them.
// A chunk's offset follows from the sizes before it, so a frame is dense: what the host and
// disk tiers hold and account is FramedBytes, not the raw size. The codec's parameter (an
// error bound) is not in the bytes: the catalog keeps it with each snapshot, as for zfp.
//
// Thread-safety: the functions are pure; concurrent calls on distinct buffers are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "adjsnap/status.h"

namespace adjsnap::compress {

constexpr uint32_t kFrameMagic = 0x31434e53;    // "SNC1"
constexpr uint64_t kChunkAlign = 16;            // nvCOMP's batched ANS needs 16, Bitcomp 8
constexpr uint32_t kMaxChunkBytes = 16u << 20;  // nvCOMP's largest chunk for Bitcomp and ANS
constexpr uint32_t kChunkStoredRaw = 1;         // ChunkEntry::flags

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t codec = 0;  // adjsnap.v1.Codec's number (the frame code does not read protos)
  uint16_t reserved = 0;
  uint64_t raw_bytes = 0;
  uint32_t chunk_bytes = 0;  // raw bytes per chunk; the last holds the remainder
  uint32_t chunks = 0;
  uint64_t reserved2 = 0;
};
static_assert(sizeof(FrameHeader) == 32, "the frame header is 32 bytes on the wire");

struct ChunkEntry {
  uint32_t stored_bytes = 0;
  uint32_t flags = 0;
};
static_assert(sizeof(ChunkEntry) == 8, "a chunk entry is 8 bytes on the wire");

// Where each part of a frame lies, from the header and the table alone.
struct FrameLayout {
  FrameHeader header;
  struct Chunk {
    uint64_t offset = 0;        // from the frame's start
    uint32_t stored_bytes = 0;  // bytes at offset
    uint32_t raw_bytes = 0;     // bytes it decodes to
    bool stored_raw = false;
  };
  std::vector<Chunk> chunks;
  uint64_t framed_bytes = 0;  // the whole frame: header, table, chunks and padding
};

// Chunks of `chunk_bytes` that cover `raw_bytes` (0 for an empty step).
uint32_t ChunkCount(uint64_t raw_bytes, uint32_t chunk_bytes);

// Where the first chunk starts: past the header and the table, aligned.
uint64_t ChunksOffset(uint32_t chunks);

// The largest frame of a step: every chunk stored raw, plus the header and table, so more than
// the raw step. The encoder's output buffer (CompressField) needs this much. A frame that comes
// out at the raw size or more is not worth sending: the data path (being built; see
// docs/architecture.md, "Compression on the GPU") is to send such a step raw, so that adjsnapd
// never holds more than a step's raw bytes.
uint64_t MaxFramedBytes(uint64_t raw_bytes, uint32_t chunk_bytes);

// INVALID_ARGUMENT naming the problem when `raw_bytes` cannot be framed in chunks of
// `chunk_bytes` (0, over kMaxChunkBytes, not a multiple of 8, or more than 2^32 chunks).
Status CheckChunking(uint64_t raw_bytes, uint32_t chunk_bytes);

// The layout of a frame whose chunks came out at `stored` bytes each (a chunk's raw size or
// more: it did not shrink and is stored raw; 0 is refused). The writer puts the header and table
// (WriteFrameHead) and each chunk at its offset.
Result<FrameLayout> LayOut(uint16_t codec, uint64_t raw_bytes, uint32_t chunk_bytes,
                           const std::vector<uint64_t>& stored);

// Writes the header and the chunk table of `layout` at `out` (ChunksOffset bytes) and zeroes
// the padding before each chunk, so that equal steps give equal frames.
void WriteFrameHead(const FrameLayout& layout, void* out);
void ZeroPadding(const FrameLayout& layout, void* frame);

// Reads and checks a frame of `bytes` bytes: the magic, the codec (`codec`), the raw size
// (`raw_bytes`), the chunking, every chunk inside the frame and smaller than its raw size
// unless marked raw, and no bytes past the last chunk. DATA_LOSS naming the first problem; the
// bytes came from a client or a disk and are trusted in nothing.
Result<FrameLayout> ReadFrame(const void* frame, uint64_t bytes, uint16_t codec,
                              uint64_t raw_bytes);

}  // namespace adjsnap::compress
