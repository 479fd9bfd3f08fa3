// Fault injection behind the disk tier's I/O seam (daemon/disk_tier/spool_io.h): passes every
// call to the kernel until told to fail one kind of call with an errno, to cut writes short,
// or to fail a write once a number of bytes went through (ENOSPC part-way through a spill).
// Thread-safe: I/O threads call it while the test changes the faults.
#pragma once

#include <errno.h>
#include <fcntl.h>

#include <atomic>
#include <cstdint>

#include "disk_tier/spool_io.h"

namespace snapd::testing {

class FaultySpoolIo final : public SpoolIo {
 public:
  enum Op { kNone, kOpenForWrite, kWrite, kRead, kSync };

  // From now on `op` fails with `err`; for kWrite, only once `after_bytes` more bytes were
  // written (a write that crosses that point is cut there; the next one fails).
  void Fail(Op op, int err, uint64_t after_bytes = 0) {
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
  uint64_t failures() const { return failures_; }

  int Open(const char* path, int flags, mode_t mode) override {
    if (op_ == kOpenForWrite && (flags & (O_WRONLY | O_RDWR))) return Failed();
    return SpoolIo::System()->Open(path, flags, mode);
  }
  int Close(int fd) override { return SpoolIo::System()->Close(fd); }
  ssize_t Pwrite(int fd, const void* data, size_t bytes, off_t offset) override {
    if (op_ == kWrite) {
      uint64_t left = write_budget_;
      if (left == 0) return Failed();
      if (bytes > left) bytes = left;
      write_budget_ = left - bytes;
    }
    if (short_ && bytes >= 2 * kPage) bytes = bytes / 2 / kPage * kPage;
    return SpoolIo::System()->Pwrite(fd, data, bytes, offset);
  }
  ssize_t Pread(int fd, void* data, size_t bytes, off_t offset) override {
    if (op_ == kRead) return Failed();
    return SpoolIo::System()->Pread(fd, data, bytes, offset);
  }
  int Fdatasync(int fd) override {
    if (op_ == kSync) return Failed();
    return SpoolIo::System()->Fdatasync(fd);
  }
  int Fsync(int fd) override { return SpoolIo::System()->Fsync(fd); }
  int Rename(const char* from, const char* to) override {
    return SpoolIo::System()->Rename(from, to);
  }
  int Unlink(const char* path) override { return SpoolIo::System()->Unlink(path); }

 private:
  int Failed() {
    ++failures_;
    errno = err_;
    return -1;
  }
  static constexpr size_t kPage = 4096;
  std::atomic<Op> op_{kNone};
  std::atomic<int> err_{0};
  std::atomic<uint64_t> write_budget_{0};
  std::atomic<bool> short_{false};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace snapd::testing
