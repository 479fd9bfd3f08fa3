// The disk tier's one door to the kernel: every filesystem call it makes (the snapshot files'
// open, write, read, sync, rename and unlink; the spools' mkdir, rmdir, chmod, stat, statvfs and
// directory listing; the O_DIRECT probe, which is an Open with O_DIRECT that may fail EINVAL)
// goes through SpoolIo, as leveldb's Env does for leveldb. Tests put a fault-injecting one in its
// place and produce what real disks and network filesystems do (EIO, ENOSPC part-way through a
// write, a short write, a failed fdatasync, ENOTCONN or ESTALE from a server gone, a mount lost,
// a call that hangs) without them.
// Calls have the system calls' contract: -1 with errno set on failure. Every implementation is
// called from several threads at once.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace adjsnap {

class SpoolIo {
 public:
  // One name in a directory: `type` is readdir's d_type (DT_DIR, DT_REG, ...), DT_UNKNOWN where
  // the filesystem does not say (then Lstat tells).
  struct DirEntry {
    std::string name;
    unsigned char type = 0;
  };

  virtual ~SpoolIo() = default;
  virtual int Open(const char* path, int flags, mode_t mode) = 0;
  virtual int Close(int fd) = 0;
  virtual ssize_t Pwrite(int fd, const void* data, size_t bytes, off_t offset) = 0;
  virtual ssize_t Pread(int fd, void* data, size_t bytes, off_t offset) = 0;
  virtual int Fdatasync(int fd) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Rename(const char* from, const char* to) = 0;
  virtual int Unlink(const char* path) = 0;
  virtual int Mkdir(const char* path, mode_t mode) = 0;
  virtual int Rmdir(const char* path) = 0;
  virtual int Chmod(const char* path, mode_t mode) = 0;
  virtual int Stat(const char* path, struct stat* st) = 0;
  virtual int Lstat(const char* path, struct stat* st) = 0;
  virtual int Fstat(int fd, struct stat* st) = 0;
  virtual int Statvfs(const char* path, struct statvfs* st) = 0;
  // Appends the names in directory `path` ("." and ".." left out), in readdir's order. -1 with
  // errno when it cannot be opened or a readdir fails part-way (EIO, ENOTCONN); `entries` then
  // holds the names read before the failure.
  virtual int ReadDir(const char* path, std::vector<DirEntry>* entries) = 0;

  // The kernel's, used unless a test passes its own.
  static SpoolIo* System();
};

}  // namespace adjsnap
