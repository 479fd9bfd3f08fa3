// CopyPool: see copy_pool.h.
#include "copy_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "adjsnap/checksum.h"
#include "adjsnap/thread_name.h"

namespace adjsnap::detail {

CopyPool::CopyPool(int threads, StripeCopy copy) : copy_(copy) {
  for (int i = 1; i < threads; ++i)
    helpers_.push_back(NamedThread("adjsnap-copy", [this] { Helper(); }));
}

CopyPool::~CopyPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  work_cv_.NotifyAll();
  for (auto& t : helpers_) t.join();
}

int CopyPool::Choose(int requested, std::string* error) {
  if (requested < 0 || requested > kMaxThreads) {
    *error = "ClientOptions.copy_threads " + std::to_string(requested) +
             " is not in 0 (the default) to " + std::to_string(kMaxThreads);
    return 0;
  }
  if (const char* env = std::getenv("ADJSNAP_COPY_THREADS"); env && *env) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || n < 1 || n > kMaxThreads) {
      *error = "ADJSNAP_COPY_THREADS must be a whole number from 1 to " +
               std::to_string(kMaxThreads) + ", got '" + env + "'";
      return 0;
    }
    return static_cast<int>(n);
  }
  if (requested > 0) return requested;
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0
                  ? CPU_COUNT(&set)
                  : static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores, 1, 4);
}

void CopyPool::Copy(void* dst, const void* src, size_t bytes) {
  // ForStripes calls no stripe for no bytes: memcpy may not be given a null pointer even then.
  char* to = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  ForStripes(bytes, [&](size_t begin, size_t n) { copy_(to + begin, from + begin, n); });
}

uint64_t CopyPool::CopyWithChecksum(void* dst, const void* src, size_t bytes) {
  static_assert(kStripeAlign % kChecksumBlockBytes == 0, "a stripe starts at a block");
  char* to = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  std::atomic<uint64_t> sum{0};  // the blocks' terms add up in any order (wrapping)
  ForStripes(bytes, [&](size_t begin, size_t n) {
    sum.fetch_add(CopySummingBlocks(to + begin, from + begin, n, begin / kChecksumBlockBytes),
                  std::memory_order_relaxed);
    StoreFence();  // this thread's streaming stores are done before the job is
  });
  return FinishChecksum(sum.load(), bytes);
}

void CopyPool::ForStripes(size_t bytes, const std::function<void(size_t, size_t)>& work) {
  if (helpers_.empty() || bytes < kMinParallelBytes) {
    if (bytes > 0) work(0, bytes);
    return;
  }
  MutexLock serial(serial_);
  {
    MutexLock lock(mu_);
    stripes_ = static_cast<int>(std::min<size_t>(threads(), bytes / kMinStripe));
    // Equal shares rounded up to the alignment; the last stripe takes the remainder.
    const size_t share = (bytes + stripes_ - 1) / stripes_;  // rounded up: no byte left over
    stripe_ = (share + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
    work_ = &work;
    bytes_ = bytes;
    next_ = 0;
    done_ = 0;
  }
  work_cv_.NotifyAll();
  TakeStripes();
  MutexLock lock(mu_);
  done_cv_.Wait(mu_, [&]() ADJSNAP_REQUIRES(mu_) { return done_ == stripes_; });
  stripes_ = 0;  // helpers that wake now find nothing to take
  work_ = nullptr;
}

void CopyPool::TakeStripes() {
  MutexLock lock(mu_);
  while (next_ < stripes_) {
    const size_t begin = static_cast<size_t>(next_++) * stripe_;
    const size_t n = begin >= bytes_ ? 0 : std::min(stripe_, bytes_ - begin);
    const auto* work = work_;
    lock.Unlock();
    if (n > 0) (*work)(begin, n);  // rounding up may, in principle, leave the last one empty
    lock.Lock();
    if (++done_ == stripes_) done_cv_.NotifyAll();
  }
}

void CopyPool::Helper() {
  for (;;) {
    {
      MutexLock lock(mu_);
      work_cv_.Wait(mu_, [&]() ADJSNAP_REQUIRES(mu_) { return stopping_ || next_ < stripes_; });
      if (stopping_) return;
    }
    TakeStripes();
  }
}

}  // namespace adjsnap::detail
