#include "log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>

namespace adjsnap::log {
namespace {

uint64_t Count(const char* surface, const char* reason) {
  for (const RejectionCount& r : RejectionCounts()) {
    if (std::strcmp(r.surface, surface) == 0 && std::strcmp(r.reason, reason) == 0) return r.count;
  }
  ADD_FAILURE() << surface << "/" << reason << " is not counted";
  return 0;
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A failing spool retried in a loop must not flood the journal: the first lines of a kind per
// interval, then one line counting the repeats; other kinds keep their own lines.
TEST(RateLimitedLog, LogsTheFirstLinesOfAKindThenCountsTheRepeatsInOneLine) {
  RateLimitedLog log("disk tier", 2, std::chrono::milliseconds(200));
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 100; ++i) log.Write(Level::kWarn, "failed writes", "EIO on spool A");
  log.Write(Level::kWarn, "failed reads", "EIO reading step 3");
  EXPECT_EQ(log.suppressed("failed writes"), 98u);
  EXPECT_EQ(log.suppressed("failed reads"), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  log.Write(Level::kWarn, "failed writes", "EIO on spool A");
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Occurrences(out, "disk tier: EIO on spool A"), 3u) << out;
  EXPECT_EQ(Occurrences(out, "disk tier: EIO reading step 3"), 1u) << out;
  EXPECT_EQ(Occurrences(out, "disk tier: 98 more failed writes not logged"), 1u) << out;
  EXPECT_EQ(Occurrences(out, "\n"), 5u) << out;  // nothing else was written
  EXPECT_EQ(log.suppressed("failed writes"), 0u);
}

TEST(RejectionLog, CountsEachRejectionUnderItsSurfaceAndReason) {
  const uint64_t am = Count("data_plane", "unknown_am_id");
  const uint64_t arena = Count("arena_socket", "malformed");
  const uint64_t data = Count("data_plane", "malformed");
  RejectionLog data_plane(Surface::kDataPlane, /*lines_per_second=*/1);
  RejectionLog arena_socket(Surface::kArenaSocket);
  for (int i = 0; i < 5; ++i) data_plane.Reject(Reason::kUnknownAmId, "test");  // 4 not logged
  arena_socket.Reject(Reason::kMalformed, "test");
  EXPECT_EQ(Count("data_plane", "unknown_am_id"), am + 5);
  EXPECT_EQ(Count("arena_socket", "malformed"), arena + 1);
  EXPECT_EQ(Count("data_plane", "malformed"), data);  // the same reason elsewhere is apart
}

TEST(RejectionLog, ALogMadeWithANameOnlyCountsNothing) {
  uint64_t before = 0;
  for (const RejectionCount& r : RejectionCounts()) before += r.count;
  RejectionLog store("store");
  store.Reject("push refused", "test");
  store.Reject(Reason::kMalformed, "test");
  uint64_t after = 0;
  for (const RejectionCount& r : RejectionCounts()) after += r.count;
  EXPECT_EQ(after, before);
}

TEST(RejectionLog, EveryCountedPairIsListedOnceWithPrometheusNames) {
  std::set<std::string> pairs;
  for (const RejectionCount& r : RejectionCounts()) {
    for (const char* label : {r.surface, r.reason}) {
      ASSERT_NE(label, nullptr);
      EXPECT_GT(std::strlen(label), 0u);
      EXPECT_EQ(std::strspn(label, "abcdefghijklmnopqrstuvwxyz_"), std::strlen(label)) << label;
    }
    EXPECT_TRUE(pairs.insert(std::string(r.surface) + "/" + r.reason).second)
        << r.surface << "/" << r.reason << " twice";
  }
  EXPECT_EQ(pairs.size(), 18u);
}

}  // namespace
}  // namespace adjsnap::log
