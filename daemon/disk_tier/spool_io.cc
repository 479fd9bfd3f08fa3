#include "disk_tier/spool_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

namespace adjsnap {

namespace {

class SystemSpoolIo final : public SpoolIo {
 public:
  int Open(const char* path, int flags, mode_t mode) override { return ::open(path, flags, mode); }
  int Close(int fd) override { return ::close(fd); }
  ssize_t Pwrite(int fd, const void* data, size_t bytes, off_t offset) override {
    return ::pwrite(fd, data, bytes, offset);
  }
  ssize_t Pread(int fd, void* data, size_t bytes, off_t offset) override {
    return ::pread(fd, data, bytes, offset);
  }
  int Fdatasync(int fd) override { return ::fdatasync(fd); }
  int Fsync(int fd) override { return ::fsync(fd); }
  int Rename(const char* from, const char* to) override { return ::rename(from, to); }
  int Unlink(const char* path) override { return ::unlink(path); }
};

}  // namespace

SpoolIo* SpoolIo::System() {
  static SystemSpoolIo io;
  return &io;
}

}  // namespace adjsnap
