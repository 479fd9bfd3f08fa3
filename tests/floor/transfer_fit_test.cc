#include "adjsnap/transfer_fit.h"

#include <gtest/gtest.h>

#include <vector>

namespace adjsnap {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

TEST(FitTransfers, SeparatesLatencyFromBandwidth) {
  // 2 ms per operation plus 1 GB/s, at 1, 4, 16 and 64 MiB.
  std::vector<TransferSample> s;
  for (uint64_t mib : {1, 4, 16, 64}) s.push_back({mib * kMiB, 2e-3 + double(mib * kMiB) / 1e9});
  TransferFit fit = FitTransfers(s);
  EXPECT_EQ(fit.samples, 4u);
  EXPECT_EQ(fit.min_bytes, kMiB);
  EXPECT_EQ(fit.max_bytes, 64 * kMiB);
  EXPECT_NEAR(fit.latency_seconds, 2e-3, 1e-9);
  EXPECT_NEAR(fit.bytes_per_second, 1e9, 1e3);
  EXPECT_NEAR(fit.Seconds(32 * kMiB), 2e-3 + 32.0 * kMiB / 1e9, 1e-9);
}

TEST(FitTransfers, OneSizeGivesItsMeanTimeAndNoLatency) {
  // All at 64 MiB: the two terms cannot be told apart, but the time at that size is known.
  std::vector<TransferSample> s = {{64 * kMiB, 0.030}, {64 * kMiB, 0.034}, {64 * kMiB, 0.032}};
  TransferFit fit = FitTransfers(s);
  EXPECT_EQ(fit.latency_seconds, 0);
  EXPECT_NEAR(fit.Seconds(64 * kMiB), 0.032, 1e-12);
}

TEST(FitTransfers, NoisyLineWithNegativeInterceptFallsBackToTheMeanRate) {
  // Time grows faster than size (a cache filling): the line's intercept is negative.
  std::vector<TransferSample> s = {{1 * kMiB, 0.0001}, {8 * kMiB, 0.010}, {64 * kMiB, 0.100}};
  TransferFit fit = FitTransfers(s);
  EXPECT_EQ(fit.latency_seconds, 0);
  EXPECT_NEAR(fit.bytes_per_second, double(73 * kMiB) / 0.1101, 1e-3);
}

TEST(FitTransfers, SkipsEmptyAndUntimedSamples) {
  std::vector<TransferSample> s = {{0, 0.5}, {kMiB, 0}, {kMiB, -1}};
  TransferFit fit = FitTransfers(s);
  EXPECT_EQ(fit.samples, 0u);
  EXPECT_FALSE(fit.Covers(kMiB));
}

TEST(TransferFit, CoversOnlySizesNearItsSamples) {
  // The case: tiny steps seen, a 64 MiB step planned.
  std::vector<TransferSample> s = {{4096, 1e-4}, {8192, 1.2e-4}};
  TransferFit fit = FitTransfers(s);
  EXPECT_TRUE(fit.Covers(4096));
  EXPECT_TRUE(fit.Covers(16384));
  EXPECT_TRUE(fit.Covers(2048));
  EXPECT_FALSE(fit.Covers(16385));
  EXPECT_FALSE(fit.Covers(2047));
  EXPECT_FALSE(fit.Covers(64 * kMiB));
}

TEST(TransferSamples, FitsOnlyTheMostRecent) {
  TransferSamples samples;
  // Old tiny transfers, then more than kKept large ones: the tiny ones are gone.
  for (int i = 0; i < 10; ++i) samples.Add(4096, 1e-3);
  for (size_t i = 0; i < TransferSamples::kKept; ++i) samples.Add(64 * kMiB, 0.064);
  TransferFit fit = samples.Fit();
  EXPECT_EQ(fit.samples, TransferSamples::kKept);
  EXPECT_EQ(fit.min_bytes, 64 * kMiB);
  EXPECT_NEAR(fit.Seconds(64 * kMiB), 0.064, 1e-12);
}

}  // namespace
}  // namespace adjsnap
