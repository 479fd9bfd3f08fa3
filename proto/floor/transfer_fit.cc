#include "adjsnap/transfer_fit.h"

#include <algorithm>
#include <limits>

namespace adjsnap {

TransferFit FitTransfers(std::span<const TransferSample> samples) {
  TransferFit fit;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  fit.min_bytes = std::numeric_limits<uint64_t>::max();
  for (const TransferSample& s : samples) {
    if (s.bytes == 0 || !(s.seconds > 0)) continue;
    const auto x = static_cast<double>(s.bytes);
    n += 1;
    sx += x;
    sy += s.seconds;
    sxx += x * x;
    sxy += x * s.seconds;
    fit.min_bytes = std::min(fit.min_bytes, s.bytes);
    fit.max_bytes = std::max(fit.max_bytes, s.bytes);
    ++fit.samples;
  }
  if (fit.samples == 0) return TransferFit{};
  fit.bytes_per_second = sx / sy;
  if (fit.max_bytes < 2 * fit.min_bytes) return fit;
  // Centred sums: the raw ones differ by ~1e16 at GiB sizes and would cancel.
  const double var = sxx - sx * sx / n;
  const double cov = sxy - sx * sy / n;
  if (!(var > 0)) return fit;
  const double slope = cov / var;
  const double latency = (sy - slope * sx) / n;
  if (slope > 0 && latency >= 0) {
    fit.bytes_per_second = 1.0 / slope;
    fit.latency_seconds = latency;
  }
  return fit;
}

void TransferSamples::Add(uint64_t bytes, double seconds) {
  MutexLock lock(mu_);
  ring_[next_] = {bytes, seconds};
  next_ = (next_ + 1) % kKept;
  count_ = std::min(count_ + 1, kKept);
}

TransferFit TransferSamples::Fit() const {
  std::array<TransferSample, kKept> copy;
  size_t count = 0;
  {
    MutexLock lock(mu_);
    copy = ring_;
    count = count_;
  }
  return FitTransfers(std::span<const TransferSample>(copy.data(), count));
}

}  // namespace adjsnap
