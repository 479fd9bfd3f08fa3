// Fault injection behind the disk tier's I/O seam (daemon/disk_tier/spool_io.h): passes every
// call to the kernel until told to fail one kind of call with an errno, to cut writes short,
// or to fail a write once a number of bytes went through (ENOSPC part-way through a spill).
// A fault lasts until Heal (a persistent EROFS or EIO, as a read-only remount or a dying device
// gives), and may be limited to the files under one path prefix (one spool of several).
// Thread-safe: I/O threads call it while the test changes the faults.
#pragma once

#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "disk_tier/spool_io.h"

namespace adjsnap::testing {

class FaultySpoolIo final : public SpoolIo {
 public:
  enum Op { kNone, kOpenForWrite, kWrite, kRead, kSync, kRename };

  // From now on `op` fails with `err`; for kWrite, only once `after_bytes` more bytes were
  // written (a write that crosses that point is cut there; the next one fails). With `prefix`,
  // only calls on files whose path begins with it fail.
  void Fail(Op op, int err, uint64_t after_bytes = 0, std::string prefix = "") {
    {
      std::lock_guard<std::mutex> lock(mu_);
      prefix_ = std::move(prefix);
    }
    write_budget_ = after_bytes;
    err_ = err;
    op_ = op;
  }
  // Every write of two or more 4 KiB pages moves only half of them (O_DIRECT files take whole
  // pages, so a short write ends on a page as the kernel's do).
  void ShortWrites(bool on) { short_ = on; }
  void Heal() {
    op_ = kNone;
    short_ = false;
  }
  // Every read of a file under `prefix` takes `delay` longer (a slow network filesystem). Those
  // reads are logged: each file's path in the order the reads began, and the most at once.
  void SlowReads(std::chrono::milliseconds delay, std::string prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    slow_prefix_ = std::move(prefix);
    slow_delay_ = delay;
  }
  std::vector<std::string> slow_reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return slow_reads_;
  }
  int most_slow_reads_at_once() {
    std::lock_guard<std::mutex> lock(mu_);
    return slow_most_;
  }
  // The fault heals by itself after `failures` more failed calls (a transient error that
  // clears), whatever the timing of the threads.
  void HealAfter(uint64_t failures) { heal_at_ = failures_ + failures; }
  uint64_t failures() const { return failures_; }
  // Calls that reached the seam (every kind): a spinning caller shows here.
  uint64_t calls() const { return calls_; }

  int Open(const char* path, int flags, mode_t mode) override {
    ++calls_;
    if (op_ == kOpenForWrite && (flags & (O_WRONLY | O_RDWR)) && Matches(path)) return Failed();
    int fd = SpoolIo::System()->Open(path, flags, mode);
    if (fd >= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      paths_[fd] = path;
    }
    return fd;
  }
  int Close(int fd) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      paths_.erase(fd);
    }
    return SpoolIo::System()->Close(fd);
  }
  ssize_t Pwrite(int fd, const void* data, size_t bytes, off_t offset) override {
    ++calls_;
    if (op_ == kWrite && Matches(fd)) {
      uint64_t left = write_budget_;
      if (left == 0) return Failed();
      if (bytes > left) bytes = left;
      write_budget_ = left - bytes;
    }
    if (short_ && bytes >= 2 * kPage) bytes = bytes / 2 / kPage * kPage;
    return SpoolIo::System()->Pwrite(fd, data, bytes, offset);
  }
  ssize_t Pread(int fd, void* data, size_t bytes, off_t offset) override {
    ++calls_;
    if (op_ == kRead && Matches(fd)) return Failed();
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = paths_.find(fd);
      if (!slow_prefix_.empty() && it != paths_.end() && it->second.rfind(slow_prefix_, 0) == 0) {
        delay = slow_delay_;
        slow_reads_.push_back(it->second);
        slow_most_ = std::max(slow_most_, ++slow_now_);
      }
    }
    if (delay.count() == 0) return SpoolIo::System()->Pread(fd, data, bytes, offset);
    std::this_thread::sleep_for(delay);
    ssize_t n = SpoolIo::System()->Pread(fd, data, bytes, offset);
    int err = errno;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --slow_now_;
    }
    errno = err;
    return n;
  }
  int Fdatasync(int fd) override {
    ++calls_;
    if (op_ == kSync && Matches(fd)) return Failed();
    return SpoolIo::System()->Fdatasync(fd);
  }
  int Fsync(int fd) override { return SpoolIo::System()->Fsync(fd); }
  int Rename(const char* from, const char* to) override {
    ++calls_;
    if (op_ == kRename && Matches(from)) return Failed();
    return SpoolIo::System()->Rename(from, to);
  }
  int Unlink(const char* path) override { return SpoolIo::System()->Unlink(path); }

 private:
  bool Matches(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return prefix_.empty() || path.rfind(prefix_, 0) == 0;
  }
  bool Matches(int fd) {
    std::string path;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (prefix_.empty()) return true;
      auto it = paths_.find(fd);
      if (it == paths_.end()) return false;
      path = it->second;
    }
    return Matches(path);
  }
  int Failed() {
    uint64_t n = ++failures_;
    if (heal_at_ != 0 && n >= heal_at_) {
      op_ = kNone;
      heal_at_ = 0;
    }
    errno = err_;
    return -1;
  }
  static constexpr size_t kPage = 4096;
  std::atomic<Op> op_{kNone};
  std::atomic<int> err_{0};
  std::atomic<uint64_t> write_budget_{0};
  std::atomic<bool> short_{false};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> heal_at_{0};  // failures_ at which the fault heals; 0: never
  std::atomic<uint64_t> calls_{0};
  std::mutex mu_;
  std::string prefix_;               // guarded by mu_
  std::map<int, std::string> paths_;  // open fds' paths, guarded by mu_
  std::string slow_prefix_;           // SlowReads, all guarded by mu_
  std::chrono::milliseconds slow_delay_{0};
  std::vector<std::string> slow_reads_;
  int slow_now_ = 0;
  int slow_most_ = 0;
};

}  // namespace adjsnap::testing
