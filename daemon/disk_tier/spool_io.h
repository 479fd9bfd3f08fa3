// The disk tier's one door to the kernel: every open, write, read, sync, rename and unlink of a
// snapshot file goes through SpoolIo, so tests can inject the faults real disks produce (EIO,
// ENOSPC part-way through a write, a short write, a failed fdatasync) behind this seam.
// Calls have the system calls' contract: -1 with errno set on failure.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace adjsnap {

class SpoolIo {
 public:
  virtual ~SpoolIo() = default;
  virtual int Open(const char* path, int flags, mode_t mode) = 0;
  virtual int Close(int fd) = 0;
  virtual ssize_t Pwrite(int fd, const void* data, size_t bytes, off_t offset) = 0;
  virtual ssize_t Pread(int fd, void* data, size_t bytes, off_t offset) = 0;
  virtual int Fdatasync(int fd) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Rename(const char* from, const char* to) = 0;
  virtual int Unlink(const char* path) = 0;

  // The kernel's, used unless a test passes its own.
  static SpoolIo* System();
};

}  // namespace adjsnap
