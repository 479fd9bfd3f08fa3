#include "adjsnap/chunk_frame.h"

#include <cstring>

namespace adjsnap::compress {
namespace {

uint64_t AlignUp(uint64_t n) { return (n + kChunkAlign - 1) / kChunkAlign * kChunkAlign; }

uint32_t RawBytesOf(uint64_t raw_bytes, uint32_t chunk_bytes, uint32_t i, uint32_t chunks) {
  return i + 1 < chunks ? chunk_bytes
                        : static_cast<uint32_t>(raw_bytes - uint64_t{chunk_bytes} * i);
}

std::string ChunkName(uint32_t i, uint32_t chunks) {
  return "chunk " + std::to_string(i) + " of " + std::to_string(chunks);
}

// Without overflow for any raw_bytes (a frame's header is read from untrusted bytes).
uint64_t Chunks64(uint64_t raw_bytes, uint32_t chunk_bytes) {
  return raw_bytes / chunk_bytes + (raw_bytes % chunk_bytes != 0);
}

}  // namespace

uint32_t ChunkCount(uint64_t raw_bytes, uint32_t chunk_bytes) {
  if (chunk_bytes == 0) return 0;
  return static_cast<uint32_t>(Chunks64(raw_bytes, chunk_bytes));
}

uint64_t ChunksOffset(uint32_t chunks) {
  return AlignUp(sizeof(FrameHeader) + uint64_t{chunks} * sizeof(ChunkEntry));
}

uint64_t MaxFramedBytes(uint64_t raw_bytes, uint32_t chunk_bytes) {
  uint32_t chunks = ChunkCount(raw_bytes, chunk_bytes);
  // Each chunk's start is padded by less than kChunkAlign.
  return ChunksOffset(chunks) + raw_bytes + uint64_t{chunks} * kChunkAlign;
}

Status CheckChunking(uint64_t raw_bytes, uint32_t chunk_bytes) {
  if (chunk_bytes == 0 || chunk_bytes > kMaxChunkBytes || chunk_bytes % 8 != 0) {
    return Status::InvalidArgument("chunk size " + std::to_string(chunk_bytes) +
                                   " must be a multiple of 8 in [8, " +
                                   std::to_string(kMaxChunkBytes) + "]");
  }
  if (Chunks64(raw_bytes, chunk_bytes) > UINT32_MAX) {
    return Status::InvalidArgument(std::to_string(raw_bytes) + " bytes in chunks of " +
                                   std::to_string(chunk_bytes) + " is over 2^32 chunks");
  }
  return Status::Ok();
}

Result<FrameLayout> LayOut(uint16_t codec, uint64_t raw_bytes, uint32_t chunk_bytes,
                           const std::vector<uint64_t>& stored) {
  ADJSNAP_RETURN_IF_ERROR(CheckChunking(raw_bytes, chunk_bytes));
  uint32_t chunks = ChunkCount(raw_bytes, chunk_bytes);
  if (stored.size() != chunks) {
    return Status::InvalidArgument(std::to_string(stored.size()) + " chunk sizes for " +
                                   std::to_string(chunks) + " chunks");
  }
  FrameLayout l;
  l.header.codec = codec;
  l.header.raw_bytes = raw_bytes;
  l.header.chunk_bytes = chunk_bytes;
  l.header.chunks = chunks;
  uint64_t at = ChunksOffset(chunks);
  for (uint32_t i = 0; i < chunks; ++i) {
    FrameLayout::Chunk c;
    c.raw_bytes = RawBytesOf(raw_bytes, chunk_bytes, i, chunks);
    if (stored[i] == 0) {
      return Status::InvalidArgument(ChunkName(i, chunks) + " compressed to 0 bytes");
    }
    c.stored_raw = stored[i] >= c.raw_bytes;
    c.stored_bytes = c.stored_raw ? c.raw_bytes : static_cast<uint32_t>(stored[i]);
    c.offset = AlignUp(at);
    at = c.offset + c.stored_bytes;
    l.chunks.push_back(c);
  }
  l.framed_bytes = at;
  return l;
}

void WriteFrameHead(const FrameLayout& layout, void* out) {
  auto* p = static_cast<char*>(out);
  std::memcpy(p, &layout.header, sizeof(FrameHeader));
  p += sizeof(FrameHeader);
  for (const auto& c : layout.chunks) {
    ChunkEntry e{c.stored_bytes, c.stored_raw ? kChunkStoredRaw : 0};
    std::memcpy(p, &e, sizeof e);
    p += sizeof e;
  }
  uint64_t head = sizeof(FrameHeader) + layout.chunks.size() * sizeof(ChunkEntry);
  std::memset(p, 0, ChunksOffset(layout.header.chunks) - head);
}

void ZeroPadding(const FrameLayout& layout, void* frame) {
  auto* p = static_cast<char*>(frame);
  uint64_t end = ChunksOffset(layout.header.chunks);
  for (const auto& c : layout.chunks) {
    std::memset(p + end, 0, c.offset - end);
    end = c.offset + c.stored_bytes;
  }
}

Result<FrameLayout> ReadFrame(const void* frame, uint64_t bytes, uint16_t codec,
                              uint64_t raw_bytes) {
  auto bad = [](const std::string& what) { return Status::DataLoss("compressed frame: " + what); };
  if (bytes < sizeof(FrameHeader)) {
    return bad(std::to_string(bytes) + " bytes, shorter than its 32-byte header");
  }
  FrameLayout l;
  std::memcpy(&l.header, frame, sizeof(FrameHeader));
  const FrameHeader& h = l.header;
  if (h.magic != kFrameMagic) return bad("no SNC1 magic");
  if (h.reserved != 0 || h.reserved2 != 0) return bad("reserved header bits set");
  if (h.codec != codec) {
    return bad("codec " + std::to_string(h.codec) + ", the catalog says " + std::to_string(codec));
  }
  if (h.raw_bytes != raw_bytes) {
    return bad("decodes to " + std::to_string(h.raw_bytes) + " bytes, the step has " +
               std::to_string(raw_bytes));
  }
  if (Status s = CheckChunking(raw_bytes, h.chunk_bytes); !s.ok()) return bad(s.message());
  if (h.chunks != ChunkCount(raw_bytes, h.chunk_bytes)) {
    return bad(std::to_string(h.chunks) + " chunks, " + std::to_string(raw_bytes) +
               " bytes in chunks of " + std::to_string(h.chunk_bytes) + " need " +
               std::to_string(ChunkCount(raw_bytes, h.chunk_bytes)));
  }
  uint64_t at = ChunksOffset(h.chunks);
  if (at > bytes) return bad("its chunk table runs past its " + std::to_string(bytes) + " bytes");
  const auto* table = static_cast<const char*>(frame) + sizeof(FrameHeader);
  for (uint32_t i = 0; i < h.chunks; ++i) {
    ChunkEntry e;
    std::memcpy(&e, table + uint64_t{i} * sizeof e, sizeof e);
    FrameLayout::Chunk c;
    c.raw_bytes = RawBytesOf(raw_bytes, h.chunk_bytes, i, h.chunks);
    c.stored_raw = e.flags == kChunkStoredRaw;
    c.stored_bytes = e.stored_bytes;
    if (e.flags & ~kChunkStoredRaw) return bad(ChunkName(i, h.chunks) + ": unknown flags");
    if (c.stored_raw ? c.stored_bytes != c.raw_bytes
                     : c.stored_bytes == 0 || c.stored_bytes >= c.raw_bytes) {
      return bad(ChunkName(i, h.chunks) + ": " + std::to_string(c.stored_bytes) +
                 " stored bytes for " + std::to_string(c.raw_bytes) + " raw" +
                 (c.stored_raw ? " (marked raw)" : " (a compressed chunk must be smaller)"));
    }
    c.offset = AlignUp(at);
    if (c.offset > bytes || c.stored_bytes > bytes - c.offset) {
      return bad(ChunkName(i, h.chunks) + " runs past the frame's " + std::to_string(bytes) +
                 " bytes");
    }
    at = c.offset + c.stored_bytes;
    l.chunks.push_back(c);
  }
  if (at != bytes) {
    return bad(std::to_string(bytes - at) + " bytes after the last chunk");
  }
  l.framed_bytes = at;
  return l;
}

}  // namespace adjsnap::compress
