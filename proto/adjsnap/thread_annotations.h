// Clang thread-safety annotations (-Wthread-safety) and the annotated Mutex, MutexLock and
// CondVar that make them checkable (std::mutex carries no capability attribute). The
// annotations are no-ops on other compilers; the types are thin wrappers either way.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define ADJSNAP_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define ADJSNAP_THREAD_ANNOTATION_(x)
#endif

#define ADJSNAP_CAPABILITY(x) ADJSNAP_THREAD_ANNOTATION_(capability(x))
#define ADJSNAP_SCOPED_CAPABILITY ADJSNAP_THREAD_ANNOTATION_(scoped_lockable)
#define ADJSNAP_GUARDED_BY(x) ADJSNAP_THREAD_ANNOTATION_(guarded_by(x))
#define ADJSNAP_REQUIRES(...) ADJSNAP_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define ADJSNAP_EXCLUDES(...) ADJSNAP_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define ADJSNAP_ACQUIRE(...) ADJSNAP_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define ADJSNAP_RELEASE(...) ADJSNAP_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))

namespace adjsnap {

class ADJSNAP_CAPABILITY("mutex") Mutex {
 public:
  void lock() ADJSNAP_ACQUIRE() { mu_.lock(); }
  void unlock() ADJSNAP_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock()/Lock() drop and retake it inside the scope.
class ADJSNAP_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ADJSNAP_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() ADJSNAP_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void Unlock() ADJSNAP_RELEASE() {
    mu_.unlock();
    held_ = false;
  }
  void Lock() ADJSNAP_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable over Mutex. Predicates run with the mutex held; annotate them
// `[&]() ADJSNAP_REQUIRES(mu) { ... }` so the analysis sees that.
class CondVar {
 public:
  template <typename Predicate>
  void Wait(Mutex& mu, Predicate done) ADJSNAP_REQUIRES(mu) {
    cv_.wait(mu, done);
  }
  template <typename Duration, typename Predicate>
  bool WaitFor(Mutex& mu, Duration timeout, Predicate done) ADJSNAP_REQUIRES(mu) {
    return cv_.wait_for(mu, timeout, done);
  }
  template <typename TimePoint, typename Predicate>
  bool WaitUntil(Mutex& mu, TimePoint deadline, Predicate done) ADJSNAP_REQUIRES(mu) {
    return cv_.wait_until(mu, deadline, done);
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace adjsnap
