// One thread that runs tasks in submission order: libadjsnap's device recorder tells the daemon
// which steps the device tier holds, in order, off the solver's thread.
// Thread-safe: Submit() from any thread. The destructor runs the tasks already submitted, then
// joins.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "adjsnap/thread_annotations.h"
#include "adjsnap/thread_name.h"

namespace adjsnap::detail {

class TaskThread {
 public:
  explicit TaskThread(const std::string& name) : thread_(NamedThread(name, [this] { Run(); })) {}
  ~TaskThread() {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    cv_.NotifyOne();
    thread_.join();
  }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  void Submit(std::function<void()> task) ADJSNAP_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.NotifyOne();
  }

 private:
  void Run() ADJSNAP_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (;;) {
      cv_.Wait(mu_, [&]() ADJSNAP_REQUIRES(mu_) { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and drained
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.Unlock();
      task();
      lock.Lock();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ ADJSNAP_GUARDED_BY(mu_);
  bool stopping_ ADJSNAP_GUARDED_BY(mu_) = false;
  std::thread thread_;  // declared last: starts once the members above exist
};

}  // namespace adjsnap::detail
