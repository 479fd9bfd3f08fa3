// Copies one large buffer with several threads. A single core's memcpy is not the memory
// system's limit: on this project's 2-core test machine two threads copy 1.1-1.3x as fast as
// one, and on a 16-core server four copy 3.5x as fast (docs/architecture.md, "Copy threads",
// has the figures). The kernel's first touch of a page scales the same way. libadjsnap copies a host
// push into the mapped tier, and a fetch out of it, on its loop thread while the caller waits;
// the loop thread takes one stripe and the pool's helpers the others, first to map the tier
// pages (MADV_POPULATE), then to copy.
//
// ForStripes() and Copy() return once every stripe is done, so the buffers only need to
// outlive the call, as for memcpy. Jobs are serialized: one at a time uses the helpers
// (libadjsnap copies on one thread anyway). Thread-safe; the destructor joins the helpers.
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/thread_annotations.h"

namespace adjsnap::detail {

class CopyPool {
 public:
  // Below this many bytes a job is one call on the caller's thread: waking a helper costs more
  // than it saves.
  static constexpr size_t kMinParallelBytes = size_t{4} << 20;
  // Stripes are at least kMinStripe bytes and whole multiples of kStripeAlign (but the last),
  // about equal: the job takes as long as its longest stripe.
  static constexpr size_t kMinStripe = size_t{1} << 20;
  static constexpr size_t kStripeAlign = size_t{64} << 10;
  // The most threads a pool may have (ClientOptions.copy_threads, ADJSNAP_COPY_THREADS).
  static constexpr int kMaxThreads = 64;

  // Copies one stripe: memcpy, or (tests) a function that also records which thread ran it.
  using StripeCopy = void* (*)(void*, const void*, size_t);
  static void* PlainCopy(void* dst, const void* src, size_t n) { return std::memcpy(dst, src, n); }

  // `threads` share a large job, the caller's included: 1 = the caller alone, no helper.
  explicit CopyPool(int threads, StripeCopy copy = &PlainCopy);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // Runs work(begin, n) over [0, bytes) in stripes, on the caller and the helpers.
  void ForStripes(size_t bytes, const std::function<void(size_t, size_t)>& work)
      ADJSNAP_EXCLUDES(serial_, mu_);
  void Copy(void* dst, const void* src, size_t bytes) ADJSNAP_EXCLUDES(serial_, mu_);
  // Copy() that returns Checksum(src, bytes), computed inside the copy (CopySummingBlocks in
  // adjsnap/checksum.h: one read of the bytes, stores past the cache, fenced on every thread
  // before it returns). A push's copy into the host tier: adjsnapd records the checksum with it.
  uint64_t CopyWithChecksum(void* dst, const void* src, size_t bytes)
      ADJSNAP_EXCLUDES(serial_, mu_);
  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // The thread count libadjsnap uses: `requested` (ClientOptions.copy_threads) must be 0 to
  // kMaxThreads; then ADJSNAP_COPY_THREADS, else `requested` when nonzero, else min(4, the cores
  // this process may run on). An unusable value is an error naming it (*error set, 0 returned).
  static int Choose(int requested, std::string* error);

 private:
  void Helper() ADJSNAP_EXCLUDES(mu_);
  // Runs stripes of the current job until none is left.
  void TakeStripes() ADJSNAP_EXCLUDES(mu_);

  const StripeCopy copy_;
  Mutex serial_;  // one job at a time
  Mutex mu_;
  CondVar work_cv_;  // helpers: a job has stripes left, or stop
  CondVar done_cv_;  // the caller: every stripe done
  const std::function<void(size_t, size_t)>* work_ ADJSNAP_GUARDED_BY(mu_) = nullptr;
  size_t bytes_ ADJSNAP_GUARDED_BY(mu_) = 0;
  size_t stripe_ ADJSNAP_GUARDED_BY(mu_) = 0;
  int stripes_ ADJSNAP_GUARDED_BY(mu_) = 0;
  int next_ ADJSNAP_GUARDED_BY(mu_) = 0;  // the next stripe to hand out
  int done_ ADJSNAP_GUARDED_BY(mu_) = 0;  // stripes finished
  bool stopping_ ADJSNAP_GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;  // last: started once the fields above exist
};

}  // namespace adjsnap::detail
