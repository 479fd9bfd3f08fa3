// The daemon's compression workers: a fixed pool of threads that code the slabs of one
// snapshot in parallel (see zfp_codec.h), so a large snapshot is compressed by several
// workers at once.
//
// ParallelFor is called from I/O threads (never from a worker), hands the slabs to the
// workers and waits for them; workers never wait on each other, so the pool cannot deadlock.
// The queue is bounded by the slabs in flight. Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "thread_annotations.h"

namespace snapd::compress {

class CompressPool {
 public:
  // `threads` == 0 runs everything on the calling thread.
  explicit CompressPool(int threads);
  ~CompressPool();
  CompressPool(const CompressPool&) = delete;
  CompressPool& operator=(const CompressPool&) = delete;

  // Runs body(0) ... body(n-1) on the workers and returns when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t)>& body) SNAPD_EXCLUDES(mu_);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop() SNAPD_EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ SNAPD_GUARDED_BY(mu_);
  bool stopping_ SNAPD_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the queue exists
};

// Worker count when the configuration says 0: the cores minus one (at least one).
int DefaultCompressThreads();

}  // namespace snapd::compress
