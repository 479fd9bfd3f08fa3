// A small pool of threads that run blocking work: the store's disk I/O, so neither the UCX
// progress thread nor a gRPC reactor ever waits on the disk, and (a pool of its own) the
// compression workers' slabs.
//
// Two queues: urgent jobs (a fetch is waiting for the bytes) run before background ones
// (demotions, prefetch, moves between spools, scrubbing). Thread-safe; the destructor runs the
// jobs already queued, then joins. Its threads are named `name` (thread_name.h).
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/thread_annotations.h"
#include "adjsnap/thread_name.h"

namespace adjsnap {

class IoPool {
 public:
  explicit IoPool(int threads, const std::string& name = "adjsnap-io") {
    for (int i = 0; i < threads; ++i) {
      threads_.push_back(NamedThread(name, [this] { Loop(); }));
    }
  }
  ~IoPool() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.NotifyAll();
    for (auto& t : threads_) t.join();
  }
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  void Submit(std::function<void()> job, bool urgent) ADJSNAP_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      (urgent ? urgent_ : background_).push_back(std::move(job));
    }
    cv_.NotifyOne();
  }

 private:
  void Loop() ADJSNAP_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (;;) {
      cv_.Wait(mu_, [&]() ADJSNAP_REQUIRES(mu_) {
        return stopping_ || !urgent_.empty() || !background_.empty();
      });
      auto& queue = !urgent_.empty() ? urgent_ : background_;
      if (queue.empty()) return;  // stopping, and nothing left to run
      std::function<void()> job = std::move(queue.front());
      queue.pop_front();
      lock.Unlock();
      job();
      lock.Lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> urgent_ ADJSNAP_GUARDED_BY(mu_);
  std::deque<std::function<void()>> background_ ADJSNAP_GUARDED_BY(mu_);
  bool stopping_ ADJSNAP_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the queues exist
};

}  // namespace adjsnap
