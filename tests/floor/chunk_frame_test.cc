#include "adjsnap/chunk_frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace adjsnap::compress {
namespace {

constexpr uint16_t kCodec = 5;  // bitcomp; the frame reads the number only

// A frame with chunk i's stored bytes all equal to i + 1, so a misplaced chunk shows.
std::vector<char> Frame(const FrameLayout& l) {
  std::vector<char> f(l.framed_bytes, '\x7f');
  WriteFrameHead(l, f.data());
  for (size_t i = 0; i < l.chunks.size(); ++i) {
    std::memset(f.data() + l.chunks[i].offset, static_cast<int>(i + 1), l.chunks[i].stored_bytes);
  }
  ZeroPadding(l, f.data());
  return f;
}

FrameLayout MustLayOut(uint64_t raw, uint32_t chunk, const std::vector<uint64_t>& stored) {
  auto l = LayOut(kCodec, raw, chunk, stored);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : FrameLayout{};
}

TEST(ChunkFrame, ChunksArePackedAlignedAndTheLastHoldsTheRemainder) {
  FrameLayout l = MustLayOut(2500, 1024, {100, 333, 50});
  ASSERT_EQ(l.chunks.size(), 3u);
  EXPECT_EQ(l.chunks[0].offset, ChunksOffset(3));
  EXPECT_EQ(l.chunks[0].raw_bytes, 1024u);
  EXPECT_EQ(l.chunks[2].raw_bytes, 2500u - 2048u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(l.chunks[i].offset % kChunkAlign, 0u) << i;
  EXPECT_EQ(l.chunks[1].offset, ChunksOffset(3) + 112);  // 100 rounded up to 16
  EXPECT_EQ(l.chunks[2].offset, l.chunks[1].offset + 336);
  EXPECT_EQ(l.framed_bytes, l.chunks[2].offset + 50);
}

TEST(ChunkFrame, AChunkThatDoesNotShrinkIsStoredRawAtItsRawSize) {
  FrameLayout l = MustLayOut(3000, 1024, {1024, 2000, 10});
  EXPECT_TRUE(l.chunks[0].stored_raw);
  EXPECT_EQ(l.chunks[0].stored_bytes, 1024u);
  EXPECT_TRUE(l.chunks[1].stored_raw);  // a codec's output may exceed its input
  EXPECT_EQ(l.chunks[1].stored_bytes, 1024u);
  EXPECT_FALSE(l.chunks[2].stored_raw);
}

TEST(ChunkFrame, MaxFramedBytesHoldsTheFrameOfChunksThatAllStayRaw) {
  for (uint64_t raw : {8ull, 1000ull, 4096ull, 4104ull, 1ull << 20, (1ull << 20) + 8}) {
    for (uint32_t chunk : {8u, 24u, 1000u, 4096u}) {
      uint32_t n = ChunkCount(raw, chunk);
      FrameLayout l = MustLayOut(raw, chunk, std::vector<uint64_t>(n, UINT64_MAX));
      EXPECT_LE(l.framed_bytes, MaxFramedBytes(raw, chunk)) << raw << " in " << chunk;
    }
  }
}

TEST(ChunkFrame, AWrittenFrameReadsBackAsItsLayout) {
  FrameLayout l = MustLayOut(5000, 2048, {700, 2048, 3});
  std::vector<char> f = Frame(l);
  auto r = ReadFrame(f.data(), f.size(), kCodec, 5000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->chunks.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r->chunks[i].offset, l.chunks[i].offset);
    EXPECT_EQ(r->chunks[i].stored_bytes, l.chunks[i].stored_bytes);
    EXPECT_EQ(r->chunks[i].raw_bytes, l.chunks[i].raw_bytes);
    EXPECT_EQ(r->chunks[i].stored_raw, l.chunks[i].stored_raw);
    EXPECT_EQ(f[r->chunks[i].offset], static_cast<char>(i + 1));
  }
  EXPECT_EQ(r->framed_bytes, f.size());
}

TEST(ChunkFrame, EqualChunksGiveEqualFrames) {
  FrameLayout l = MustLayOut(4000, 1024, {5, 6, 7, 8});
  std::vector<char> a = Frame(l);
  std::vector<char> b(l.framed_bytes, '\x55');
  WriteFrameHead(l, b.data());
  for (size_t i = 0; i < l.chunks.size(); ++i) {
    std::memset(b.data() + l.chunks[i].offset, static_cast<int>(i + 1), l.chunks[i].stored_bytes);
  }
  ZeroPadding(l, b.data());
  EXPECT_EQ(a, b);
}

TEST(ChunkFrame, BadChunkingIsRefusedNamingTheSize) {
  for (uint32_t chunk : {0u, 12u, kMaxChunkBytes + 8}) {
    Status s = CheckChunking(1 << 20, chunk);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << chunk;
    EXPECT_NE(s.message().find(std::to_string(chunk)), std::string::npos) << s.message();
  }
  EXPECT_FALSE(CheckChunking(uint64_t{8} << 32, 8).ok());  // 2^32 chunks
  EXPECT_TRUE(CheckChunking(uint64_t{8} << 32, 16).ok());
  EXPECT_FALSE(CheckChunking(UINT64_MAX, kMaxChunkBytes).ok());  // no wrap past 2^64
  EXPECT_FALSE(LayOut(kCodec, 4096, 1024, {1, 2, 3}).ok());     // a size missing
  EXPECT_FALSE(LayOut(kCodec, 4096, 1024, {1, 2, 0, 4}).ok());  // a chunk of no bytes
}

// Each damage to a good frame, and the words its refusal must hold.
struct Damage {
  const char* name;
  std::function<void(std::vector<char>&)> apply;
  const char* says;
};

TEST(ChunkFrame, EveryDamagedFrameIsRefusedNamingWhatIsWrong) {
  FrameLayout l = MustLayOut(5000, 2048, {700, 2048, 3});
  auto entry = [](std::vector<char>& f, int i) {
    return reinterpret_cast<ChunkEntry*>(f.data() + sizeof(FrameHeader)) + i;
  };
  auto head = [](std::vector<char>& f) { return reinterpret_cast<FrameHeader*>(f.data()); };
  std::vector<Damage> damages = {
      {"short", [](auto& f) { f.resize(20); }, "shorter than its 32-byte header"},
      {"magic", [&](auto& f) { head(f)->magic ^= 1; }, "magic"},
      {"reserved", [&](auto& f) { head(f)->reserved = 1; }, "reserved"},
      {"reserved2", [&](auto& f) { head(f)->reserved2 = 1; }, "reserved"},
      {"codec", [&](auto& f) { head(f)->codec = 7; }, "codec 7, the catalog says 5"},
      {"raw size", [&](auto& f) { head(f)->raw_bytes = 5008; }, "decodes to 5008"},
      {"chunk size", [&](auto& f) { head(f)->chunk_bytes = 12; }, "chunk size 12"},
      {"chunk count", [&](auto& f) { head(f)->chunks = 2; }, "2 chunks"},
      {"huge chunk count", [&](auto& f) { head(f)->chunk_bytes = 8, head(f)->chunks = 625; },
       "table runs past"},
      {"flags", [&](auto& f) { entry(f, 0)->flags = 2; }, "chunk 0 of 3: unknown flags"},
      {"raw chunk short", [&](auto& f) { entry(f, 1)->stored_bytes = 2040; }, "(marked raw)"},
      {"compressed not smaller", [&](auto& f) { entry(f, 2)->stored_bytes = 904; },
       "must be smaller"},
      {"empty chunk", [&](auto& f) { entry(f, 0)->stored_bytes = 0; }, "chunk 0 of 3"},
      {"chunk past the end", [&](auto& f) { entry(f, 2)->stored_bytes = 900; }, "runs past"},
      {"truncated", [](auto& f) { f.pop_back(); }, "runs past"},
      {"trailing", [](auto& f) { f.push_back(0); }, "1 bytes after the last chunk"},
  };
  for (const Damage& d : damages) {
    std::vector<char> f = Frame(l);
    d.apply(f);
    auto r = ReadFrame(f.data(), f.size(), kCodec, 5000);
    ASSERT_FALSE(r.ok()) << d.name;
    EXPECT_EQ(r.status().code(), Code::kDataLoss) << d.name;
    EXPECT_NE(r.status().message().find(d.says), std::string::npos)
        << d.name << ": " << r.status().message();
  }
}

// Whatever the bytes, a frame that reads has every chunk inside it, in order, not overlapping.
TEST(ChunkFrame, AnyFrameThatReadsHasItsChunksInsideIt) {
  FrameLayout l = MustLayOut(5000, 1024, {700, 1024, 3, 90, 904});
  std::vector<char> good = Frame(l);
  std::mt19937 rng(7);
  int read = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<char> f = good;
    size_t head = ChunksOffset(5);
    for (int k = 0, n = 1 + rng() % 3; k < n; ++k) f[rng() % head] = static_cast<char>(rng());
    if (rng() % 4 == 0) f.resize(rng() % (f.size() + 64), 0);
    auto r = ReadFrame(f.data(), f.size(), kCodec, 5000);
    if (!r.ok()) continue;
    ++read;
    uint64_t end = ChunksOffset(r->header.chunks);
    uint64_t raw = 0;
    for (const auto& c : r->chunks) {
      ASSERT_GE(c.offset, end);
      ASSERT_LE(c.offset + c.stored_bytes, f.size());
      end = c.offset + c.stored_bytes;
      raw += c.raw_bytes;
    }
    ASSERT_EQ(raw, 5000u);
  }
  EXPECT_GT(read, 0);  // the good frame's own bytes, at least, when no damage sticks
}

}  // namespace
}  // namespace adjsnap::compress
