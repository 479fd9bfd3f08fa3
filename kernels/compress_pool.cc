#include "adjsnap/compress_pool.h"

#include <algorithm>
#include <thread>

#include "adjsnap/thread_annotations.h"

namespace adjsnap::compress {

int DefaultCompressThreads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
}

void CompressPool::ParallelFor(size_t n, const std::function<void(size_t)>& body) {
  if (!workers_ || n <= 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  Mutex done_mu;
  CondVar done_cv;
  size_t left = n;
  for (size_t i = 0; i < n; ++i) {
    workers_->Submit(
        [&, i] {
          body(i);
          MutexLock done(done_mu);
          if (--left == 0) done_cv.NotifyAll();
        },
        /*urgent=*/false);
  }
  MutexLock lock(done_mu);
  done_cv.Wait(done_mu, [&]() ADJSNAP_REQUIRES(done_mu) { return left == 0; });
}

}  // namespace adjsnap::compress
