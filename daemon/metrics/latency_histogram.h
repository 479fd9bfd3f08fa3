// A latency histogram with fixed bucket bounds, cheap enough to observe on the UCX progress
// thread: one relaxed atomic add per bucket hit, no lock. Read by Stats (as cumulative
// counts, the way Prometheus histograms are exposed) from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "adjsnap/v1/control.pb.h"

namespace adjsnap {

class LatencyHistogram {
 public:
  // Upper bounds in seconds, from 100 us (a small eager push) to 10 s (a push that waited for
  // a demotion to disk); slower ones count only in +Inf.
  static constexpr std::array<double, 16> kBounds = {
      1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
      5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0};

  void Observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  }
  // Cumulative counts per bound (the last is +Inf, the total), and the sum in seconds.
  void Fill(v1::Histogram* h) const {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += buckets_[i].load(std::memory_order_relaxed);
      if (i < kBounds.size()) {
        h->add_upper_bounds(kBounds[i]);
        h->add_cumulative_counts(cumulative);
      }
    }
    h->set_count(cumulative);
    h->set_sum_seconds(static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9);
  }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace adjsnap
