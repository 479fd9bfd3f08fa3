#include "compress/compress_pool.h"

#include <algorithm>

namespace snapd::compress {

int DefaultCompressThreads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
}

CompressPool::CompressPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

CompressPool::~CompressPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

void CompressPool::ParallelFor(size_t n, const std::function<void(size_t)>& body) {
  if (threads_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  Mutex done_mu;
  CondVar done_cv;
  size_t left = n;
  {
    MutexLock lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      tasks_.push_back([&, i] {
        body(i);
        MutexLock done(done_mu);
        if (--left == 0) done_cv.NotifyAll();
      });
    }
  }
  cv_.NotifyAll();
  MutexLock lock(done_mu);
  done_cv.Wait(done_mu, [&]() SNAPD_REQUIRES(done_mu) { return left == 0; });
}

void CompressPool::Loop() {
  MutexLock lock(mu_);
  for (;;) {
    cv_.Wait(mu_, [&]() SNAPD_REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.Unlock();
    task();
    lock.Lock();
  }
}

}  // namespace snapd::compress
