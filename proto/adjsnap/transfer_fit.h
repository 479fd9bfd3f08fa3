// A tier's cost per transfer, `seconds = latency + bytes / bandwidth`, fitted from the transfers
// it really made. adjsnapd keeps the samples and reports the fit in Stats (TierStats.write_fit,
// read_fit); `adjsnap plan` prices a step with it, and only at sizes the samples speak for: a
// bandwidth taken from 4 KiB transfers is mostly their latency, and says nothing of 64 MiB ones.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "adjsnap/thread_annotations.h"

namespace adjsnap {

struct TransferSample {
  uint64_t bytes = 0;
  double seconds = 0;
};

struct TransferFit {
  // A fit speaks for sizes within this factor of the smallest and largest sample: past it the
  // line is an extrapolation, and plan calibrates instead.
  static constexpr double kCoverFactor = 2.0;

  double latency_seconds = 0;
  double bytes_per_second = 0;  // > 0 whenever samples > 0
  uint64_t samples = 0;
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;

  double Seconds(uint64_t bytes) const {
    return latency_seconds + static_cast<double>(bytes) / bytes_per_second;
  }
  bool Covers(uint64_t bytes) const {
    return samples > 0 && static_cast<double>(bytes) * kCoverFactor >= double(min_bytes) &&
           static_cast<double>(bytes) <= double(max_bytes) * kCoverFactor;
  }
};

// Least squares of seconds on bytes. Where the sizes are too close together to separate the
// two terms (largest < 2x smallest), or the line comes out with a negative latency or a
// non-positive slope (noise larger than the size's effect), the latency is 0 and the bandwidth
// is total bytes over total seconds: exact on average at the sizes seen, which is all such
// samples can say. Samples of 0 bytes or of no positive time are skipped.
TransferFit FitTransfers(std::span<const TransferSample> samples);

// The most recent kKept transfers of one tier in one direction. Thread-safe: Add from any
// thread (the data plane's, the disk tier's workers), Fit from the Stats call.
class TransferSamples {
 public:
  static constexpr size_t kKept = 64;
  void Add(uint64_t bytes, double seconds) ADJSNAP_EXCLUDES(mu_);
  TransferFit Fit() const ADJSNAP_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  std::array<TransferSample, kKept> ring_ ADJSNAP_GUARDED_BY(mu_){};
  size_t next_ ADJSNAP_GUARDED_BY(mu_) = 0;
  size_t count_ ADJSNAP_GUARDED_BY(mu_) = 0;
};

}  // namespace adjsnap
