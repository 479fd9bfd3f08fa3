// The daemon's compression workers: a fixed pool of threads that code the slabs of one
// snapshot in parallel (see zfp_codec.h), so a large snapshot is compressed by several
// workers at once.
//
// ParallelFor is called from I/O threads (never from a worker), hands the slabs to the
// workers and waits for them; workers never wait on each other, so the pool cannot deadlock.
// The queue is bounded by the slabs in flight. Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "adjsnap/io_pool.h"

namespace adjsnap::compress {

class CompressPool {
 public:
  // `threads` == 0 runs everything on the calling thread.
  explicit CompressPool(int threads)
      : threads_(threads),
        workers_(threads > 0 ? std::make_unique<IoPool>(threads, "adjsnap-zfp") : nullptr) {}

  // Runs body(0) ... body(n-1) on the workers and returns when all are done.
  void ParallelFor(size_t n, const std::function<void(size_t)>& body);
  int threads() const { return threads_; }

 private:
  const int threads_;
  std::unique_ptr<IoPool> workers_;  // the same worker pool the store runs disk I/O on
};

// Worker count when the configuration says 0: the cores minus one (at least one).
int DefaultCompressThreads();

}  // namespace adjsnap::compress
