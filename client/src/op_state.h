// Completion state shared by a request's handle (caller threads) and the progress thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"

namespace adjsnap::detail {

// Two phases: released (the caller's buffer is free) and completed (the final outcome).
// Completion implies release. Thread-safe.
struct OpState {
  void Release(const Status& s) ADJSNAP_EXCLUDES(mu) {
    std::vector<std::function<void()>> callbacks;
    {
      MutexLock lock(mu);
      if (released) return;
      released = true;
      release_status = s;
      callbacks.swap(on_release);
      cv.NotifyAll();
    }
    for (auto& f : callbacks) f();
  }
  // Runs `f` once the operation is released (or completes without a release first): now if
  // it has, else on the thread that releases it.
  void WhenReleased(std::function<void()> f) ADJSNAP_EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      if (!released) {
        on_release.push_back(std::move(f));
        return;
      }
    }
    f();
  }
  bool IsReleased() ADJSNAP_EXCLUDES(mu) {
    MutexLock lock(mu);
    return released;
  }
  void Complete(const Status& s) ADJSNAP_EXCLUDES(mu) {
    std::vector<std::function<void()>> callbacks;
    {
      MutexLock lock(mu);
      if (completed) return;
      if (!released) {
        released = true;
        release_status = s;
        callbacks.swap(on_release);
      }
      completed = true;
      final_status = s;
      for (auto& f : on_complete) callbacks.push_back(std::move(f));
      on_complete.clear();
      cv.NotifyAll();
    }
    for (auto& f : callbacks) f();
  }
  // Runs `f` once the operation completes: now, on this thread, if it already has; otherwise
  // on the thread that completes it.
  void WhenCompleted(std::function<void()> f) ADJSNAP_EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      if (!completed) {
        on_complete.push_back(std::move(f));
        return;
      }
    }
    f();
  }
  Status WaitReleased() ADJSNAP_EXCLUDES(mu) { return WaitReleasedFor(kForever); }
  Status WaitCompleted() ADJSNAP_EXCLUDES(mu) { return WaitCompletedFor(kForever); }
  // The same, for at most `timeout` (kForever: no limit): then DEADLINE_EXCEEDED, naming the
  // operation (`what`) and, from `explain`, what the daemon reports it waits for. The operation
  // goes on: its buffer stays in use until a wait returns something else.
  Status WaitReleasedFor(std::chrono::milliseconds timeout) ADJSNAP_EXCLUDES(mu) {
    return WaitFor(timeout, "released", [&]() ADJSNAP_REQUIRES(mu) { return released; },
                   [&]() ADJSNAP_REQUIRES(mu) { return release_status; });
  }
  Status WaitCompletedFor(std::chrono::milliseconds timeout) ADJSNAP_EXCLUDES(mu) {
    return WaitFor(
        timeout, "done", [&]() ADJSNAP_REQUIRES(mu) { return completed && released; },
        [&]() ADJSNAP_REQUIRES(mu) { return final_status; });
  }
  static constexpr std::chrono::milliseconds kForever = std::chrono::milliseconds::max();

  // Set before the operation's handle is handed out, never changed after: "push of step 5 of
  // run id 3"; what the daemon reports it waits for (may block on a control-plane call); the
  // handle's wait limit when the caller gives none.
  std::string what;
  std::function<std::string()> explain;
  std::chrono::milliseconds default_timeout = kForever;

  Mutex mu;
  CondVar cv;

 private:
  template <typename Done, typename Outcome>
  Status WaitFor(std::chrono::milliseconds timeout, const char* phase, Done done,
                 Outcome outcome) ADJSNAP_EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      if (timeout == kForever) {
        cv.Wait(mu, done);
        return outcome();
      }
      if (cv.WaitFor(mu, timeout, done)) return outcome();
    }
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.1f s", static_cast<double>(timeout.count()) / 1000.0);
    std::string why = explain ? explain() : std::string();
    return Status(Code::kDeadlineExceeded,
                  (what.empty() ? std::string("the operation") : what) + " was not " + phase +
                      " within " + limit + (why.empty() ? "" : "; " + why) +
                      " (it goes on: its buffer stays in use until a wait returns OK or "
                      "another error)");
  }

 public:
  bool released ADJSNAP_GUARDED_BY(mu) = false;
  // A fetch of a step stored as a chunk frame: the frame's bytes (set before Complete); 0 for
  // a raw step (FetchHandle::frame_bytes).
  std::atomic<uint64_t> frame_bytes{0};
  bool completed ADJSNAP_GUARDED_BY(mu) = false;
  Status release_status ADJSNAP_GUARDED_BY(mu);
  Status final_status ADJSNAP_GUARDED_BY(mu);
  std::vector<std::function<void()>> on_complete ADJSNAP_GUARDED_BY(mu);
  std::vector<std::function<void()>> on_release ADJSNAP_GUARDED_BY(mu);
};

// Completes `state` once `parts` operations have reported: with the first error, else OK. A
// device-tier push is stored once its copy landed and the daemon recorded it.
class JoinedCompletion {
 public:
  JoinedCompletion(std::shared_ptr<OpState> state, int parts)
      : state_(std::move(state)), left_(parts) {}
  void Done(const Status& s) ADJSNAP_EXCLUDES(mu_) {
    Status outcome;
    {
      MutexLock lock(mu_);
      if (!s.ok() && first_error_.ok()) first_error_ = s;
      if (--left_ != 0) return;
      outcome = first_error_;
    }
    state_->Complete(outcome);
  }

 private:
  std::shared_ptr<OpState> state_;
  Mutex mu_;
  int left_ ADJSNAP_GUARDED_BY(mu_);
  Status first_error_ ADJSNAP_GUARDED_BY(mu_);
};

}  // namespace adjsnap::detail
