// What the disk tier's source files share and nothing else includes: the retry of a transient
// error, the messages of a failed call.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "disk_tier/disk_tier.h"

namespace adjsnap::disk_internal {

// A transient error is retried this many times, pausing 1, 2, 4, ... ms: 63 ms at most.
constexpr int kTransientRetries = 6;

// Runs `call` (a system call through the seam: negative with errno on failure) until it
// succeeds, fails with an error that is not transient, or a transient one persists.
template <typename Call>
auto Retry(Call call) -> decltype(call()) {
  for (int attempt = 0;; ++attempt) {
    auto r = call();
    if (r >= 0 || ClassifySpoolError(errno) != SpoolError::kTransient ||
        attempt == kTransientRetries) {
      return r;
    }
    int err = errno;
    if (err != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
    errno = err;
  }
}

// "Input/output error (EIO)".
inline std::string ErrnoText(int err) {
  return std::string(std::strerror(err)) + " (" + ErrnoName(err) + ")";
}

// A failed call's status: RESOURCE_EXHAUSTED when the filesystem is full, else INTERNAL.
inline Status IoError(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted("disk tier full: " + msg);
  return Status::Internal(msg);
}

inline int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Makes directory `dir` and those above it that are missing through `io` (the last with
// `mode`, the others as the umask allows); -1 with errno when one cannot be made or `dir` is
// not a directory.
int MakeDirs(SpoolIo& io, const std::string& dir, mode_t mode);

// Whether `entry` of directory `dir` is a directory (Lstat where readdir does not say).
bool IsDirectory(SpoolIo& io, const std::string& dir, const SpoolIo::DirEntry& entry);

}  // namespace adjsnap::disk_internal
