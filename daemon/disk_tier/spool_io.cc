#include "disk_tier/spool_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  int Mkdir(const char* path, mode_t mode) override { return ::mkdir(path, mode); }
  int Rmdir(const char* path) override { return ::rmdir(path); }
  int Chmod(const char* path, mode_t mode) override { return ::chmod(path, mode); }
  int Stat(const char* path, struct stat* st) override { return ::stat(path, st); }
  int Lstat(const char* path, struct stat* st) override { return ::lstat(path, st); }
  int Fstat(int fd, struct stat* st) override { return ::fstat(fd, st); }
  int Statvfs(const char* path, struct statvfs* st) override { return ::statvfs(path, st); }
  int ReadDir(const char* path, std::vector<DirEntry>* entries) override {
    DIR* dir = ::opendir(path);
    if (!dir) return -1;
    int err = 0;
    for (;;) {
      errno = 0;  // readdir's end and its failure differ only in errno
      const dirent* e = ::readdir(dir);
      if (!e) {
        err = errno;
        break;
      }
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      entries->push_back({e->d_name, e->d_type});
    }
    ::closedir(dir);
    errno = err;
    return err == 0 ? 0 : -1;
  }
};

}  // namespace

SpoolIo* SpoolIo::System() {
  static SystemSpoolIo io;
  return &io;
}

}  // namespace adjsnap
