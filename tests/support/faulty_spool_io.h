// Fault injection behind the disk tier's I/O seam (daemon/disk_tier/spool_io.h): passes every
// call to the kernel until told otherwise. Faults:
//   - Fail: one kind of call fails with an errno; for writes, once a number of bytes went through
//     (ENOSPC part-way through a spill). One such fault at a time; it may heal by itself
//     (HealAfter).
//   - Add: more faults beside it, each a kind of call (kAny: every kind) and an errno, on the
//     paths under a prefix: ENOTCONN, ESTALE or ETIMEDOUT from a network filesystem's server,
//     EIO from readdir, EINVAL for O_DIRECT (a filesystem without it). LoseMount is every call
//     under a prefix failing (a FUSE client gone: ENOTCONN; a mount gone: ENOENT).
//   - Hang: calls of a kind under a prefix block until the test calls Release (a hard-mounted
//     server that stopped answering); AwaitHung waits until that many are blocked.
//   - ShortWrites, SlowReads: writes cut short, reads made slow.
// Every fault lasts until Heal (a persistent EROFS or EIO, as a read-only remount or a dying
// device gives). A call on a descriptor is matched by the path it was opened with.
// Thread-safe: I/O threads call it while the test changes the faults. A test that hangs calls
// releases them before it destroys what made them (a store's I/O threads are joined).
#pragma once

#include <errno.h>
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "disk_tier/spool_io.h"

namespace adjsnap::testing {

class FaultySpoolIo final : public SpoolIo {
 public:
  enum Op {
    kNone,
    kOpenForWrite,  // Open with O_WRONLY or O_RDWR
    kWrite,         // Pwrite
    kRead,          // Pread
    kSync,          // Fdatasync
    kRename,
    kOpenForRead,  // Open without write access: a file to read, a directory to sync
    kOpenDirect,   // Open with O_DIRECT (besides kOpenForWrite or kOpenForRead)
    kFsync,
    kUnlink,
    kMkdir,
    kRmdir,
    kChmod,
    kStat,  // Stat, Lstat and Fstat
    kStatvfs,
    kReadDir,
    kAny,  // every call but Close
  };

  ~FaultySpoolIo() override { Release(); }

  // From now on `op` fails with `err`; for kWrite, only once `after_bytes` more bytes were
  // written (a write that crosses that point is cut there; the next one fails). With `prefix`,
  // only calls on files whose path begins with it fail. Replaces the last Fail's fault.
  void Fail(Op op, int err, uint64_t after_bytes = 0, std::string prefix = "") {
    {
      std::lock_guard<std::mutex> lock(mu_);
      prefix_ = std::move(prefix);
    }
    write_budget_ = after_bytes;
    err_ = err;
    op_ = op;
  }
  // Besides the others: every call of kind `op` (kAny: of every kind) on a path under `prefix`
  // ("": every path) fails with `err`.
  void Add(Op op, int err, std::string prefix = "") {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.push_back({op, err, std::move(prefix), nullptr});
  }
  // The filesystem under `prefix` is gone: every call there fails with `err`.
  void LoseMount(std::string prefix, int err = ENOTCONN) { Add(kAny, err, std::move(prefix)); }
  // Calls of kind `op` on a path under `prefix` block, each until Release.
  void Hang(Op op, std::string prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.push_back({op, 0, std::move(prefix), std::make_shared<Gate>()});
  }
  // Lets the blocked calls go on and ends the hangs: with `err` 0 each call then goes to the
  // kernel (the server answered late), else it fails with `err` (a soft mount's ETIMEDOUT).
  void Release(int err = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = rules_.begin(); it != rules_.end();) {
      if (it->gate) {
        it->gate->open = true;
        it->gate->err = err;
        it = rules_.erase(it);
      } else {
        ++it;
      }
    }
    cv_.notify_all();
  }
  // Calls blocked by Hang now.
  int hung() {
    std::lock_guard<std::mutex> lock(mu_);
    return hung_;
  }
  // Waits until at least `n` calls are blocked; false if that did not happen within `limit`
  // (a bound for a broken test, not a timing the test relies on).
  bool AwaitHung(int n, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return hung_ >= n; });
  }
  // Every write of two or more 4 KiB pages moves only half of them (O_DIRECT files take whole
  // pages, so a short write ends on a page as the kernel's do).
  void ShortWrites(bool on) { short_ = on; }
  // Ends every fault (blocked calls go on to the kernel).
  void Heal() {
    op_ = kNone;
    short_ = false;
    Release();
    std::lock_guard<std::mutex> lock(mu_);
    rules_.clear();
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
  // Fail's fault heals by itself after `failures` more failed calls (a transient error that
  // clears), whatever the timing of the threads.
  void HealAfter(uint64_t failures) { heal_at_ = failures_ + failures; }
  // Calls Fail's fault failed.
  uint64_t failures() const { return failures_; }
  // Calls Add's and LoseMount's faults failed.
  uint64_t added_failures() const { return added_failures_; }
  // Calls that reached the seam (every kind but Close): a spinning caller shows here.
  uint64_t calls() const { return calls_; }

  int Open(const char* path, int flags, mode_t mode) override {
    ++calls_;
    const bool write = flags & (O_WRONLY | O_RDWR);
    if (op_ == kOpenForWrite && write && Matches(path)) return Failed();
    if (int err =
            Check({write ? kOpenForWrite : kOpenForRead, (flags & O_DIRECT) ? kOpenDirect : kNone},
                  path)) {
      return Fault(err);
    }
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
    return SpoolIo::System()->Close(fd);  // always: a descriptor is never leaked by a fault
  }
  ssize_t Pwrite(int fd, const void* data, size_t bytes, off_t offset) override {
    ++calls_;
    if (int err = Check({kWrite}, PathOf(fd))) return Fault(err);
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
    if (int err = Check({kRead}, PathOf(fd))) return Fault(err);
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
    if (int err = Check({kSync}, PathOf(fd))) return Fault(err);
    if (op_ == kSync && Matches(fd)) return Failed();
    return SpoolIo::System()->Fdatasync(fd);
  }
  int Fsync(int fd) override {
    ++calls_;
    if (int err = Check({kFsync}, PathOf(fd))) return Fault(err);
    return SpoolIo::System()->Fsync(fd);
  }
  int Rename(const char* from, const char* to) override {
    ++calls_;
    if (int err = Check({kRename}, from)) return Fault(err);
    if (op_ == kRename && Matches(from)) return Failed();
    return SpoolIo::System()->Rename(from, to);
  }
  int Unlink(const char* path) override {
    ++calls_;
    if (int err = Check({kUnlink}, path)) return Fault(err);
    return SpoolIo::System()->Unlink(path);
  }
  int Mkdir(const char* path, mode_t mode) override {
    ++calls_;
    if (int err = Check({kMkdir}, path)) return Fault(err);
    return SpoolIo::System()->Mkdir(path, mode);
  }
  int Rmdir(const char* path) override {
    ++calls_;
    if (int err = Check({kRmdir}, path)) return Fault(err);
    return SpoolIo::System()->Rmdir(path);
  }
  int Chmod(const char* path, mode_t mode) override {
    ++calls_;
    if (int err = Check({kChmod}, path)) return Fault(err);
    return SpoolIo::System()->Chmod(path, mode);
  }
  int Stat(const char* path, struct stat* st) override {
    ++calls_;
    if (int err = Check({kStat}, path)) return Fault(err);
    return SpoolIo::System()->Stat(path, st);
  }
  int Lstat(const char* path, struct stat* st) override {
    ++calls_;
    if (int err = Check({kStat}, path)) return Fault(err);
    return SpoolIo::System()->Lstat(path, st);
  }
  int Fstat(int fd, struct stat* st) override {
    ++calls_;
    if (int err = Check({kStat}, PathOf(fd))) return Fault(err);
    return SpoolIo::System()->Fstat(fd, st);
  }
  int Statvfs(const char* path, struct statvfs* st) override {
    ++calls_;
    if (int err = Check({kStatvfs}, path)) return Fault(err);
    return SpoolIo::System()->Statvfs(path, st);
  }
  // A fault fails the listing after its first name (a readdir that fails part-way, as EIO from a
  // damaged directory block does), so a caller must not take a partial listing for the whole.
  int ReadDir(const char* path, std::vector<DirEntry>* entries) override {
    ++calls_;
    int err = Check({kReadDir}, path);
    std::vector<DirEntry> all;
    if (SpoolIo::System()->ReadDir(path, &all) != 0) return -1;
    if (err == 0) {
      entries->insert(entries->end(), all.begin(), all.end());
      return 0;
    }
    if (!all.empty()) entries->push_back(all.front());
    return Fault(err);
  }

 private:
  struct Gate {
    bool open = false;
    int err = 0;
  };
  struct Rule {
    Op op;
    int err;
    std::string prefix;
    std::shared_ptr<Gate> gate;  // a Hang's; null for a failure
  };
  // The errno a call of one of `ops` on `path` fails with, 0 to go on; blocks while a Hang
  // holds it.
  int Check(std::initializer_list<Op> ops, const std::string& path) {
    std::unique_lock<std::mutex> lock(mu_);
    for (size_t i = 0; i < rules_.size(); ++i) {
      const Rule& r = rules_[i];
      bool kind = r.op == kAny;
      for (Op op : ops) kind = kind || (op != kNone && op == r.op);
      if (!kind || path.rfind(r.prefix, 0) != 0) continue;
      if (!r.gate) return r.err;
      std::shared_ptr<Gate> gate = r.gate;
      ++hung_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return gate->open; });
      --hung_;
      if (gate->err) return gate->err;
      i = static_cast<size_t>(-1);  // the rules changed meanwhile: from the first again
    }
    return 0;
  }
  int Fault(int err) {
    ++added_failures_;
    errno = err;
    return -1;
  }
  std::string PathOf(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = paths_.find(fd);
    return it == paths_.end() ? std::string() : it->second;
  }
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
  std::atomic<uint64_t> added_failures_{0};
  std::atomic<uint64_t> calls_{0};
  std::mutex mu_;
  std::condition_variable cv_;        // a Gate opened, or hung_ grew
  std::string prefix_;                // guarded by mu_
  std::vector<Rule> rules_;           // Add's, LoseMount's and Hang's, guarded by mu_
  int hung_ = 0;                      // calls blocked in Check, guarded by mu_
  std::map<int, std::string> paths_;  // open fds' paths, guarded by mu_
  std::string slow_prefix_;           // SlowReads, all guarded by mu_
  std::chrono::milliseconds slow_delay_{0};
  std::vector<std::string> slow_reads_;
  int slow_now_ = 0;
  int slow_most_ = 0;
};

}  // namespace adjsnap::testing
