// The host tier pinned for the GPU chunk by chunk (client/src/host_pinning.h), with a recording
// pin function in place of cudaHostRegister: what a push waits for, the background order, a
// failing chunk, teardown.
#include "host_pinning.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace adjsnap::detail {
namespace {

constexpr uint64_t kChunk = 1 << 20;

// Records each pin and unpin by chunk index; pins of chunk `hold` wait until Let() is called,
// pins of chunk `fail` fail.
class Recorder {
 public:
  explicit Recorder(char* base, size_t hold = SIZE_MAX, size_t fail = SIZE_MAX)
      : base_(base), hold_(hold), fail_(fail) {}
  HostPinning::PinFn Pin() {
    return [this](char* at, size_t bytes) {
      size_t i = static_cast<size_t>(at - base_) / kChunk;
      if (i == hold_) {
        std::unique_lock<std::mutex> lock(mu_);
        holding_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return let_; });
      }
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.push_back(i);
      sizes_.push_back(bytes);
      if (i == fail_) return Status::ResourceExhausted("locked-memory limit");
      return Status::Ok();
    };
  }
  HostPinning::UnpinFn Unpin() {
    return [this](char* at) {
      std::lock_guard<std::mutex> lock(mu_);
      unpinned_.push_back(static_cast<size_t>(at - base_) / kChunk);
    };
  }
  void WaitHolding() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return holding_; });
  }
  void Let() {
    std::lock_guard<std::mutex> lock(mu_);
    let_ = true;
    cv_.notify_all();
  }
  std::vector<size_t> pinned() {
    std::lock_guard<std::mutex> lock(mu_);
    return pinned_;
  }
  std::vector<size_t> sizes() {
    std::lock_guard<std::mutex> lock(mu_);
    return sizes_;
  }
  std::vector<size_t> unpinned() {
    std::lock_guard<std::mutex> lock(mu_);
    return unpinned_;
  }

 private:
  char* const base_;
  const size_t hold_, fail_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false, let_ = false;
  std::vector<size_t> pinned_, sizes_, unpinned_;
};

// Waits for WhenPinned's answer.
Status Pin(HostPinning& pinning, uint64_t offset, uint64_t bytes) {
  std::promise<Status> answer;
  pinning.WhenPinned(offset, bytes, [&](Status s) { answer.set_value(s); });
  auto f = answer.get_future();
  if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return Status::Internal("no answer in 10 s");
  }
  return f.get();
}

bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(HostPinning, APushWaitsOnlyForTheChunksItsBlockLiesIn) {
  std::vector<char> tier(64 * kChunk);
  Recorder rec(tier.data());
  HostPinning pinning(tier.data(), tier.size(), kChunk, rec.Pin(), rec.Unpin());
  EXPECT_EQ(pinning.chunks(), 64u);
  EXPECT_FALSE(pinning.Pinned(0, 1));
  // A block of 2 MiB + 8 bytes from the middle of chunk 10: chunks 10, 11 and 12, nothing else.
  uint64_t offset = 10 * kChunk + kChunk / 2;
  ASSERT_TRUE(Pin(pinning, offset, 2 * kChunk + 8).ok());
  EXPECT_EQ(rec.pinned(), (std::vector<size_t>{10, 11, 12}));
  EXPECT_TRUE(pinning.Pinned(offset, 2 * kChunk + 8));
  EXPECT_FALSE(pinning.Pinned(9 * kChunk, 8));
  EXPECT_EQ(pinning.pinned_chunks(), 3u);
  // Pinned already: answered at once, on the caller's thread, pinning nothing more.
  std::thread::id answered_on;
  pinning.WhenPinned(11 * kChunk, 100, [&](Status s) {
    EXPECT_TRUE(s.ok());
    answered_on = std::this_thread::get_id();
  });
  EXPECT_EQ(answered_on, std::this_thread::get_id());
  EXPECT_EQ(rec.pinned().size(), 3u);
  // A copy never crosses a chunk: the pieces meet at chunk boundaries and cover the block.
  auto pieces = pinning.Pieces(offset, 2 * kChunk + 8);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], std::make_pair(offset, kChunk / 2));
  EXPECT_EQ(pieces[1], std::make_pair(11 * kChunk, kChunk));
  EXPECT_EQ(pieces[2], std::make_pair(12 * kChunk, kChunk / 2 + 8));
}

TEST(HostPinning, TheBackgroundSweepPinsEveryChunkOnceWithWaitingPushesFirst) {
  std::vector<char> tier(8 * kChunk + 4096);  // a last, partial chunk
  Recorder rec(tier.data(), /*hold=*/0);
  HostPinning pinning(tier.data(), tier.size(), kChunk, rec.Pin(), rec.Unpin());
  pinning.PinAllInBackground();
  pinning.PinAllInBackground();  // idempotent
  rec.WaitHolding();             // the sweep is pinning chunk 0
  std::promise<Status> answer;
  pinning.WhenPinned(7 * kChunk, 16, [&](Status s) { answer.set_value(s); });
  rec.Let();
  ASSERT_TRUE(answer.get_future().get().ok());
  ASSERT_TRUE(Eventually([&] { return pinning.pinned_chunks() == 9; }));
  // Chunk 0 (being pinned when the push asked), then the push's chunk 7, then the rest in
  // address order; none twice.
  EXPECT_EQ(rec.pinned(), (std::vector<size_t>{0, 7, 1, 2, 3, 4, 5, 6, 8}));
  EXPECT_EQ(rec.sizes().back(), 4096u);  // the last chunk is only what the tier has
}

TEST(HostPinning, AChunkThatCannotBePinnedFailsThePushesThatNeedItNamingTheRange) {
  std::vector<char> tier(4 * kChunk);
  Recorder rec(tier.data(), SIZE_MAX, /*fail=*/2);
  HostPinning pinning(tier.data(), tier.size(), kChunk, rec.Pin(), rec.Unpin());
  Status s = Pin(pinning, kChunk + 10, 2 * kChunk);  // chunks 1, 2 and 3
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("bytes 2097152..3145728 of adjsnapd's host tier"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("locked-memory limit"), std::string::npos) << s.ToString();
  // Asked again: the same answer at once, without another try.
  size_t tries = rec.pinned().size();
  EXPECT_EQ(Pin(pinning, 2 * kChunk, 8).code(), Code::kResourceExhausted);
  EXPECT_EQ(rec.pinned().size(), tries);
  // Other chunks serve.
  EXPECT_TRUE(Pin(pinning, 0, kChunk).ok());
}

TEST(HostPinning, TeardownAnswersWaitingPushesAndUnpinsExactlyWhatWasPinned) {
  std::vector<char> tier(4 * kChunk);
  Recorder rec(tier.data(), /*hold=*/1);
  std::promise<Status> waiting;
  std::thread let;
  {
    HostPinning pinning(tier.data(), tier.size(), kChunk, rec.Pin(), rec.Unpin());
    ASSERT_TRUE(Pin(pinning, 3 * kChunk, 8).ok());
    pinning.WhenPinned(kChunk, 8, [](Status) {});  // held in the pin of chunk 1
    rec.WaitHolding();
    pinning.WhenPinned(0, 8, [&](Status s) { waiting.set_value(s); });  // queued behind it
    let = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      rec.Let();
    });
  }  // the destructor waits for chunk 1's pin, then answers what is still queued
  let.join();
  auto f = waiting.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status s = f.get();
  auto pinned = rec.pinned();
  std::sort(pinned.begin(), pinned.end());
  // Normally the destructor stopped the thread before it reached the queued request; were
  // the teardown slower than the 100 ms hold, the request was served first. Either way it was
  // answered, and every pinned chunk, and only those, was unpinned.
  if (s.code() == Code::kAborted) {
    EXPECT_EQ(pinned, (std::vector<size_t>{1, 3}));
  } else {
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(pinned, (std::vector<size_t>{0, 1, 3}));
  }
  auto unpinned = rec.unpinned();
  std::sort(unpinned.begin(), unpinned.end());
  EXPECT_EQ(unpinned, pinned);
}

}  // namespace
}  // namespace adjsnap::detail
