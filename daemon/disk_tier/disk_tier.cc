#include "disk_tier/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/units.h"

namespace adjsnap {
namespace {

Status IoError(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    return Status::ResourceExhausted("disk tier full: " + msg);
  }
  return Status::Internal(msg);
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

}  // namespace

DiskTier::DiskTier(std::vector<std::unique_ptr<Spool>> spools, uint64_t budget,
                   const DiskTierOptions& options)
    : spools_(std::move(spools)),
      budget_(budget),
      has_shared_(std::any_of(spools_.begin(), spools_.end(),
                              [](const auto& s) { return s->spool_class == SpoolClass::kShared; })),
      io_(options.io ? options.io : SpoolIo::System()),
      probe_min_(std::max(options.probe_min, std::chrono::milliseconds(1))),
      probe_max_(std::max(options.probe_max, options.probe_min)) {
  prober_ = NamedThread("adjsnap-prober", [this] { ProbeLoop(); });
}

DiskTier::~DiskTier() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  probe_cv_.NotifyAll();
  prober_.join();
}

namespace {
// Bytes the files under `dir` occupy on disk (allocated blocks); 0 for what cannot be read.
uint64_t BytesUnder(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

// A spool adjsnapd cannot write (read-only filesystem, wrong owner, failing device) is refused at
// start, naming it, instead of failing every demotion later: one small file is written,
// synced and removed.
Status ProbeWritable(const std::string& dir) {
  std::string probe = dir + "/.adjsnap-probe";
  auto refuse = [&](const char* what) {
    int err = errno;
    ::unlink(probe.c_str());
    return Status::FailedPrecondition("spool_dirs entry " + dir + " is not writable (" + what +
                                      ": " + std::strerror(err) +
                                      "); fix it, or leave it out of spool_dirs");
  };
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return refuse("creating a file");
  char block[4096] = {};
  bool ok = ::write(fd, block, sizeof block) == static_cast<ssize_t>(sizeof block);
  if (!ok) {
    ::close(fd);
    return refuse("writing");
  }
  if (::fdatasync(fd) != 0) {
    ::close(fd);
    return refuse("syncing");
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}
}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (options.spools.empty() && options.shared_spools.empty()) {
    return Status::InvalidArgument("disk tier without spool_dirs");
  }
  std::vector<std::unique_ptr<Spool>> spools;
  uint64_t total = 0;
  // One class's spools, numbered after those already opened: local first, then shared, so a
  // local spool's number (which the catalog records) does not move when shared ones are added.
  auto open_class = [&](const std::vector<std::string>& dirs, uint64_t budget_bytes, SpoolClass cls,
                        const char* budget_key) -> Status {
    for (const std::string& dir : dirs) {
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      // Snapshot files of every tenant, and run ids in their names: adjsnapd's alone.
      struct stat st {};
      if (!ec && (stat(dir.c_str(), &st) != 0 || (st.st_mode & 07777) != 0700) &&
          chmod(dir.c_str(), 0700) != 0) {
        ec = std::error_code(errno, std::generic_category());
      }
      if (ec) {
        return Status::PermissionDenied("creating spool directory " + dir + ": " + ec.message());
      }
      ADJSNAP_RETURN_IF_ERROR(ProbeWritable(dir));
      struct statvfs vfs {};
      if (statvfs(dir.c_str(), &vfs) != 0) return IoError("statvfs", dir, errno);
      auto spool = std::make_unique<Spool>();
      spool->dir = dir;
      spool->spool_class = cls;
      if (stat(dir.c_str(), &st) != 0) return IoError("stat", dir, errno);
      spool->dev = st.st_dev;
      // What the spool's filesystem can give adjsnapd: its free space plus the files adjsnapd
      // already keeps there (recovered snapshots), so a restart computes the same budget as
      // the start before it, not a smaller one each time.
      double free_bytes = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
      double room = free_bytes + static_cast<double>(BytesUnder(dir));
      if (budget_bytes) {
        spool->budget = budget_bytes / dirs.size();
        if (static_cast<double>(spool->budget) > room) {
          ADJSNAP_LOG_WARN(
              "%s gives spool %s %s, but its filesystem has only %s for adjsnapd "
              "(free space and adjsnapd's own files): pushes will find the disk full "
              "before the budget is used",
              budget_key, dir.c_str(), FormatBytes(spool->budget).c_str(),
              FormatBytes(static_cast<uint64_t>(room)).c_str());
        }
      } else {
        spool->budget = static_cast<uint64_t>(room * options.budget_perc);
      }
      spool->budget = spool->budget / kAlignment * kAlignment;
      total += spool->budget;
      spools.push_back(std::move(spool));
    }
    return Status::Ok();
  };
  ADJSNAP_RETURN_IF_ERROR(
      open_class(options.spools, options.budget_bytes, SpoolClass::kLocal, "disk_mem"));
  ADJSNAP_RETURN_IF_ERROR(open_class(options.shared_spools, options.shared_budget_bytes,
                                   SpoolClass::kShared, "shared_disk_mem"));
  if (total == 0) {
    return Status::InvalidArgument("disk tier budget is 0 bytes; set disk_mem or disk_mem_perc, "
                                   "or spool_dirs = none to run without a disk tier");
  }
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(spools), total, options));
}

std::string DiskTier::Key(uint32_t spool, uint64_t run_id, const std::string& name) {
  return std::to_string(spool) + "/run-" + std::to_string(run_id) + "/" + name;
}

bool DiskTier::PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string DiskTier::Path(uint32_t spool, uint64_t run_id, const std::string& name) const {
  return spools_[spool]->dir + "/run-" + std::to_string(run_id) + "/" + name;
}

const char* SpoolClassName(SpoolClass c) { return c == SpoolClass::kShared ? "shared" : "local"; }

uint64_t DiskTier::room(SpoolClass c) const {
  MutexLock lock(mu_);
  uint64_t room = 0;
  for (const auto& s : spools_) {
    if (s->spool_class == c && !s->failed) room += s->budget - s->used;
  }
  return room;
}

Result<DiskTier::Space> DiskTier::Reserve(uint64_t raw, SpoolClass want, bool fail_over) {
  uint64_t bytes = FileBytes(raw);
  MutexLock lock(mu_);
  uint32_t best = 0;
  uint64_t best_room = 0;
  uint64_t used = 0;
  bool any = false;
  bool fits_wanted = false;  // a spool of class `want` has room: the others are not asked
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    const Spool& s = *spools_[i];
    used += s.used;
    if (s.failed || (!fail_over && s.spool_class != want)) continue;  // failed: until probed
    any = true;
    uint64_t room = s.budget - s.used;
    bool wanted = s.spool_class == want && room >= bytes;
    if (fits_wanted && !wanted) continue;
    if ((wanted && !fits_wanted) || room > best_room) best = i, best_room = room;
    fits_wanted = fits_wanted || wanted;
  }
  if (!any) {
    return Status::Unavailable("no spool of the disk tier works (" + FailedSpoolsLocked() +
                               "); adjsnapd re-probes them with backoff, `adjsnap spool probe` "
                               "tries now");
  }
  if (best_room < bytes) {
    // The spools out of the rotation are named: their room is what is missing.
    std::string failed = FailedSpoolsLocked();
    return Status::ResourceExhausted(
        "disk tier full: " + FormatBytes(bytes) + " requested, " + FormatBytes(used) + " of " +
        FormatBytes(budget_) + " in use" +
        (failed.empty() ? "" : " (out of the rotation: " + failed + ")") +
        "; delete finished runs or raise disk_mem");
  }
  spools_[best]->used += bytes;
  return Space{best, bytes};
}

void DiskTier::Unaccount(uint32_t spool, uint64_t bytes) {
  MutexLock lock(mu_);
  spools_[spool]->used -= bytes;
}

std::vector<std::string> DiskTier::spool_dirs() const {
  std::vector<std::string> dirs;
  for (const auto& s : spools_) dirs.push_back(s->dir);
  return dirs;
}

uint64_t DiskTier::used() const {
  MutexLock lock(mu_);
  uint64_t used = 0;
  for (const auto& s : spools_) used += s->used;
  return used;
}

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
    if (struct stat st{}; fstat(fd.Get(), &st) == 0 && st.st_dev != spool.dev) {
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

std::shared_ptr<DiskTier::Fd> DiskTier::RunDir(uint32_t index, uint64_t run_id,
                                               const std::string& dir) {
  Spool& spool = *spools_[index];
  {
    MutexLock lock(mu_);
    if (auto it = spool.run_dirs.find(run_id); it != spool.run_dirs.end()) return it->second;
  }
  if (Retry([&] { return mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST ? -1 : 0; }) != 0) {
    return nullptr;
  }
  // Kept open for the directory syncs of the files created in it. Not opened: no sync, as
  // before a directory could be opened for one (what the file's own write says stands).
  auto dfd =
      std::make_shared<Fd>(io_, io_->Open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
  // Kept for shared spools only: on a local disk the two calls cost microseconds, and a kept
  // descriptor per run is one more open file for nothing.
  if (dfd->Get() < 0 || spool.spool_class != SpoolClass::kShared) return dfd;
  std::shared_ptr<Fd> evicted;  // closed after the lock (a close on a network mount may wait)
  MutexLock lock(mu_);
  if (spool.run_dirs.size() >= kRunDirsKept) {
    evicted = std::move(spool.run_dirs.begin()->second);  // the oldest run's
    spool.run_dirs.erase(spool.run_dirs.begin());
  }
  return spool.run_dirs.emplace(run_id, dfd).first->second;
}

void DiskTier::ForgetRunDirs(uint64_t run_id) {
  for (uint32_t i = 0; i < spools_.size(); ++i) ForgetRunDir(i, run_id);
}

void DiskTier::ForgetRunDir(uint32_t index, uint64_t run_id) {
  std::shared_ptr<Fd> gone;
  MutexLock lock(mu_);
  auto& dirs = spools_[index]->run_dirs;
  if (auto it = dirs.find(run_id); it != dirs.end()) {
    gone = std::move(it->second);
    dirs.erase(it);
  }
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
      spool.failed_unix_ms = UnixMs();
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
