// One thread that performs the client's bulk copies into and out of the mapped host tier, so
// Push() and FetchAsync() return at once and the progress thread never stalls on a memcpy.
// Thread-safe: Submit() from any thread; tasks run in submission order. The destructor runs
// the tasks already submitted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "thread_annotations.h"

namespace snapd::detail {

class CopyThread {
 public:
  CopyThread() : thread_([this] { Run(); }) {}
  ~CopyThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  CopyThread(const CopyThread&) = delete;
  CopyThread& operator=(const CopyThread&) = delete;

  void Submit(std::function<void()> task) SNAPD_EXCLUDES(mu_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void Run() SNAPD_EXCLUDES(mu_) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and drained
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_ SNAPD_GUARDED_BY(mu_);
  bool stopping_ SNAPD_GUARDED_BY(mu_) = false;
  std::thread thread_;  // declared last: starts once the members above exist
};

}  // namespace snapd::detail
