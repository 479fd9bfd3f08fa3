// The snapshot files' I/O: writing one durably (WriteFrom, for Write and Copy), reading one back,
// removing one, and what a failed call means for its spool (WriteError, FailSpool,
// ReadUnreachable; docs/architecture.md, "A failing spool").
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "disk_tier/disk_tier.h"
#include "disk_tier/disk_tier_internal.h"
#include "log.h"
#include "adjsnap/units.h"

namespace adjsnap {

using disk_internal::ErrnoText;
using disk_internal::IoError;
using disk_internal::Retry;

int DiskTier::OpenFile(Spool& spool, const std::string& path, int flags) {
  if (spool.direct.load(std::memory_order_relaxed)) {
    int fd = io_->Open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EINVAL) return fd;
    spool.direct.store(false, std::memory_order_relaxed);
    ADJSNAP_LOG_INFO("spool %s does not support O_DIRECT; using buffered I/O there",
                   spool.dir.c_str());
  }
  return io_->Open(path.c_str(), flags | O_CLOEXEC, 0600);
}

Status DiskTier::Write(const Space& space, uint64_t run_id, const std::string& name,
                       const void* data, uint64_t raw) {
  const char* p = static_cast<const char*>(data);
  return WriteFrom(space, run_id, name, raw,
                   [p](uint64_t offset, uint64_t) -> Result<const char*> { return p + offset; });
}

Status DiskTier::Copy(uint32_t from, uint64_t run_id, const std::string& name, uint64_t raw,
                      const Space& to) {
  // Before the write begins, a failure returns the reservation here (WriteFrom does after).
  auto refuse = [&](Status why) {
    Unaccount(to.spool, to.bytes);
    return why;
  };
  if (from >= spools_.size() || !PlainName(name)) {
    return refuse(Status::InvalidArgument("snapshot file '" + name + "' in spool " +
                                          std::to_string(from) +
                                          " is not a file of a configured spool"));
  }
  Spool& source = *spools_[from];
  const std::string path = Path(from, run_id, name);
  // One chunk at a time through a buffer of its own (aligned for O_DIRECT): a move between
  // spools takes no host-tier memory, which the pushes that wait for the room it makes need.
  const uint64_t chunk = std::min(FileBytes(raw), kCopyChunk);
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(std::aligned_alloc(kAlignment, std::max<uint64_t>(chunk, kAlignment))),
      &std::free);
  if (!buffer) {
    return refuse(
        Status::ResourceExhausted("no memory for a copy buffer of " + FormatBytes(chunk)));
  }
  Fd fd(io_, Retry([&] { return OpenFile(source, path, O_RDONLY); }));
  if (fd.Get() < 0) {
    const int err = errno;
    return refuse(Status::Unavailable("opening " + path + " to copy it: " + std::strerror(err) +
                                      " (" + ErrnoName(err) + ")"));
  }
  BeginIo(/*write=*/false, source.spool_class);  // no sample: its time is the whole move
  uint64_t copied = 0;
  // A read error is the source's: it ends the copy without failing the spool written to (and
  // says nothing of the source's health: the step's own reads tell that).
  Status status = WriteFrom(
      to, run_id, name, raw,
      [&](uint64_t offset, uint64_t len) -> Result<const char*> {
        for (uint64_t done = 0; done < len;) {
          ssize_t n = Retry([&] {
            return io_->Pread(fd.Get(), buffer.get() + done, len - done,
                              static_cast<off_t>(offset + done));
          });
          if (n <= 0) {
            int err = n < 0 ? errno : ENODATA;
            return Status::Unavailable(
                "reading " + path + " to copy it: " +
                (n < 0 ? std::string(std::strerror(err)) + " (" + ErrnoName(err) + ")"
                       : "shorter than recorded"));
          }
          done += static_cast<uint64_t>(n);
        }
        copied += len;
        return static_cast<const char*>(buffer.get());
      },
      chunk);
  EndIo(/*write=*/false, source.spool_class, copied, -1);
  return status;
}

Status DiskTier::WriteFrom(const Space& space, uint64_t run_id, const std::string& name,
                           uint64_t raw, const Source& source, uint64_t chunk) {
  Spool& spool = *spools_[space.spool];
  uint64_t bytes = FileBytes(raw);
  // The file keeps what it takes of the reservation; the rest returns now, and all of it if
  // the write fails.
  if (space.bytes > bytes) Unaccount(space.spool, space.bytes - bytes);
  const uint64_t kept = std::min(space.bytes, bytes);
  std::string dir = spool.dir + "/run-" + std::to_string(run_id);
  std::shared_ptr<Fd> dfd = RunDir(space.spool, run_id, dir);
  if (!dfd) {
    Status failed = WriteError(space.spool, "creating directory", dir, errno);
    Unaccount(space.spool, kept);
    return failed;
  }
  // The file is written under its final name: the catalog record that names it is the commit
  // (Tiering::FinishDemotion writes it after this returns), so a file a crash interrupted is
  // one no record names, removed at the next start (RemoveOrphans). No rename: on a shared
  // filesystem each one is a metadata round trip to its servers (on GlusterFS, 2 ms of the
  // 15 ms an 8 MiB step takes).
  std::string path = dir + "/" + name;
  const int64_t began = BeginIo(/*write=*/true, spool.spool_class);
  Status status = [&]() -> Status {
    auto create = [&] { return OpenFile(spool, path, O_WRONLY | O_CREAT | O_TRUNC); };
    int created = Retry(create);
    if (created < 0 && errno == ENOENT) {
      // The run's directory went since adjsnapd made it (removed by hand, a fresh filesystem
      // mounted there): made again, once.
      ForgetRunDir(space.spool, run_id);
      dfd = RunDir(space.spool, run_id, dir);
      if (!dfd) return WriteError(space.spool, "creating directory", dir, errno);
      created = Retry(create);
    }
    Fd fd(io_, created);
    if (fd.Get() < 0) return WriteError(space.spool, "creating", path, errno);
    // A mount gone from under the spool (unmounted, a mount namespace without it) leaves a
    // directory of the same name on another filesystem: writes there would fill it and vanish
    // when the mount returns. The file's device tells (fstat of a file just created costs no
    // round trip, even on a network filesystem).
    if (struct stat st{}; io_->Fstat(fd.Get(), &st) == 0 && st.st_dev != spool.dev) {
      return FailSpool(space.spool, MovedMessage(spool, path, st.st_dev), ENODEV);
    }
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t len = std::min(bytes - done, chunk);
      Result<const char*> p = source(done, len);
      if (!p.ok()) return p.status();
      for (uint64_t off = 0; off < len;) {
        ssize_t n = Retry([&] {
          return io_->Pwrite(fd.Get(), *p + off, len - off, static_cast<off_t>(done + off));
        });
        if (n < 0) return WriteError(space.spool, "writing", path, errno);
        if (n == 0) return WriteError(space.spool, "writing", path, ENOSPC);
        off += static_cast<uint64_t>(n);
      }
      done += len;
    }
    // A failed fdatasync is never retried: the kernel may have dropped the dirty pages and
    // cleared the error, so a second call could succeed without the bytes being on disk.
    if (io_->Fdatasync(fd.Get()) != 0) return WriteError(space.spool, "syncing", path, errno);
    if (dfd->Get() >= 0) io_->Fsync(dfd->Get());  // the new name survives a power loss
    return Status::Ok();
  }();
  EndIo(/*write=*/true, spool.spool_class, status.ok() ? bytes : 0, began);
  if (!status.ok()) {
    io_->Unlink(path.c_str());
    Unaccount(space.spool, kept);
  }
  return status;
}

std::string DiskTier::MovedMessage(const Spool& spool, const std::string& path, dev_t now) {
  return path + " is on device " + std::to_string(major(now)) + ":" + std::to_string(minor(now)) +
         ", not on the filesystem of " + spool.dir + " at start (" +
         std::to_string(major(spool.dev)) + ":" + std::to_string(minor(spool.dev)) +
         "): its mount is gone";
}

Status DiskTier::WriteError(uint32_t index, const char* what, const std::string& path, int err) {
  SpoolError kind = ClassifySpoolError(err);
  if (kind == SpoolError::kFull) return IoError(what, path, err);
  return FailSpool(index,
                   std::string(what) + " " + path + ": " + std::strerror(err) + " (" +
                       ErrnoName(err) + (kind == SpoolError::kTransient ? ", persistent" : "") +
                       ")",
                   err);
}

Status DiskTier::FailSpool(uint32_t index, const std::string& reason, int err) {
  Spool& spool = *spools_[index];
  bool first = false;
  std::map<uint64_t, std::shared_ptr<Fd>> dirs;  // closed after the lock
  {
    MutexLock lock(mu_);
    // What comes back may be another filesystem: its run directories are made and opened anew.
    dirs.swap(spool.run_dirs);
    if (!spool.failed) {
      first = true;
      spool.failed = true;
      spool.error = err;
      spool.reason = reason;
      spool.failed_unix_ms = disk_internal::UnixMs();
      spool.backoff = probe_min_;
      spool.next_probe = std::chrono::steady_clock::now() + probe_min_;
      ++spool.failures;
      UpdateUsable();
    }
  }
  if (first) {
    // Once per failure: the writes that fail after it, on a spool already out of the rotation,
    // say nothing more (their callers count them).
    ADJSNAP_LOG_ERROR("spool %s failed and is out of the rotation: %s; adjsnapd re-probes it with "
                    "backoff (first in %lld ms), `adjsnap spool probe` tries now",
                    spool.dir.c_str(), reason.c_str(),
                    static_cast<long long>(probe_min_.count()));
    probe_cv_.NotifyAll();
    NotifyListener();
  }
  return Status::Unavailable("spool " + spool.dir + " failed: " + reason);
}

Status DiskTier::Read(uint32_t spool_index, uint64_t run_id, const std::string& name, void* data,
                      uint64_t raw) {
  if (spool_index >= spools_.size() || !PlainName(name)) {
    return Status::DataLoss("snapshot file '" + name + "' in spool " +
                            std::to_string(spool_index) + " is not a file of a configured spool");
  }
  Spool& spool = *spools_[spool_index];
  std::string path = Path(spool_index, run_id, name);
  uint64_t bytes = FileBytes(raw);
  // A read error is the loss of this file, not of the spool: DATA_LOSS naming the path and the
  // errno. A transient error that persists is no verdict on the file: UNAVAILABLE; nor is one
  // that says the filesystem cannot be reached (ReadUnreachable).
  auto lost = [&](const char* what, int err) {
    if (ClassifySpoolError(err) == SpoolError::kTransient) {
      return Status::Unavailable(std::string(what) + " " + path + ": " + std::strerror(err) +
                                 " (" + ErrnoName(err) + ", persistent)");
    }
    if (auto unreachable = ReadUnreachable(spool_index, what, path, err)) return *unreachable;
    {
      MutexLock lock(mu_);
      ++spool.read_errors;
    }
    return Status::DataLoss(std::string(what) + " snapshot file " + path + ": " +
                            std::strerror(err) + " (" + ErrnoName(err) + ")");
  };
  const int64_t began = BeginIo(/*write=*/false, spool.spool_class);
  Status status = [&]() -> Status {
    Fd fd(io_, Retry([&] { return OpenFile(spool, path, O_RDONLY); }));
    if (fd.Get() < 0) {
      int err = errno;
      if (err != ENOENT) return lost("opening", err);
      if (auto unreachable = ReadUnreachable(spool_index, "opening", path, err)) {
        return *unreachable;
      }
      return Status::DataLoss("snapshot file " + path + " is missing");
    }
    char* p = static_cast<char*>(data);
    for (uint64_t done = 0; done < bytes;) {
      ssize_t n = Retry([&] {
        return io_->Pread(fd.Get(), p + done, std::min(bytes - done, kMaxIo),
                          static_cast<off_t>(done));
      });
      if (n < 0) return lost("reading", errno);
      if (n == 0) {
        MutexLock lock(mu_);
        ++spool.read_errors;
        return Status::DataLoss("snapshot file " + path + " is truncated: " +
                                std::to_string(done) + " of " + std::to_string(bytes) +
                                " bytes");
      }
      done += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }();
  EndIo(/*write=*/false, spool.spool_class, status.ok() ? bytes : 0, began);
  return status;
}

std::optional<Status> DiskTier::ReadUnreachable(uint32_t index, const char* what,
                                                const std::string& path, int err) {
  Spool& spool = *spools_[index];
  const char* kept =
      "; the step stays recorded and is served once a probe brings the spool "
      "back (`adjsnap spool probe` tries now)";
  if (ClassifySpoolError(err) == SpoolError::kUnreachable) {
    Status failed = FailSpool(
        index,
        std::string(what) + " " + path + ": " + std::strerror(err) + " (" + ErrnoName(err) + ")",
        err);
    return Status::Unavailable(failed.message() + ": its filesystem cannot be reached" + kept);
  }
  if (err != ENOENT) return std::nullopt;
  std::string reason;
  {
    MutexLock lock(mu_);
    reason = spool.failed ? spool.reason : "";
  }
  if (reason.empty() && spool.spool_class == SpoolClass::kShared) {
    // A shared filesystem may report the files of an unreachable server as missing: a probe
    // that writes files of several names over it tells a lost file from a part gone.
    int probe_err = 0;
    Status probe = Probe(index, &probe_err);
    if (probe.ok()) return std::nullopt;
    reason = "a probe after " + path + " was found missing failed: " + probe.message();
    (void)FailSpool(index, reason, probe_err ? probe_err : EIO);
  }
  if (reason.empty()) return std::nullopt;
  return Status::Unavailable("snapshot file " + path + " is missing while spool " + spool.dir +
                             " is out of the rotation (" + reason + ")" + kept);
}

void DiskTier::Remove(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw) {
  if (spool >= spools_.size() || !PlainName(name)) return;  // Adopt refused it: not accounted
  std::string path = Path(spool, run_id, name);
  if (io_->Unlink(path.c_str()) != 0 && errno != ENOENT) {
    ADJSNAP_LOG_WARN("removing %s: %s", path.c_str(), std::strerror(errno));
  }
  Unaccount(spool, FileBytes(raw));
}

}  // namespace adjsnap
