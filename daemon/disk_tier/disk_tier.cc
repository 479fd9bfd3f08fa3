// Opening the disk tier (each spool made, checked writable and given its budget), and the
// budget's accounting: reservations, what each spool uses, the room left.
#include "disk_tier/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "disk_tier/disk_tier_internal.h"
#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/units.h"

namespace adjsnap {

using disk_internal::ErrnoText;
using disk_internal::IoError;

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
// Bytes the files under `dir` occupy on disk (allocated blocks), through the seam. What cannot
// be listed or looked at is left out, with a warning: the budget then counts less than the
// spool holds.
uint64_t BytesUnder(SpoolIo& io, const std::string& dir, int depth = 0) {
  std::vector<SpoolIo::DirEntry> entries;
  if (io.ReadDir(dir.c_str(), &entries) != 0) {
    const int err = errno;
    if (err != EACCES) {
      ADJSNAP_LOG_WARN("listing %s for the files adjsnapd keeps there: %s; they are left out of "
                       "a percent budget",
                       dir.c_str(), ErrnoText(err).c_str());
    }
    return 0;
  }
  uint64_t total = 0;
  for (const SpoolIo::DirEntry& e : entries) {
    const std::string path = dir + "/" + e.name;
    struct stat st {};
    if (io.Lstat(path.c_str(), &st) != 0) continue;
    if (S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_blocks) * 512;
    // Two levels are adjsnapd's (run-<id>/<file>, quarantine/run-<id>/<file>); a bound all the
    // same, as a directory tree can be anything.
    if (S_ISDIR(st.st_mode) && depth < 8) total += BytesUnder(io, path, depth + 1);
  }
  return total;
}

// A spool adjsnapd cannot write (read-only filesystem, wrong owner, failing device) is refused at
// start, naming it, instead of failing every demotion later: one small file is written,
// synced and removed.
Status ProbeWritable(SpoolIo& io, const std::string& dir) {
  std::string probe = dir + "/.adjsnap-probe";
  auto refuse = [&](const char* what) {
    int err = errno;
    io.Unlink(probe.c_str());
    return Status::FailedPrecondition("spool_dirs entry " + dir + " is not writable (" + what +
                                      ": " + std::strerror(err) +
                                      "); fix it, or leave it out of spool_dirs");
  };
  int fd = io.Open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return refuse("creating a file");
  char block[4096] = {};
  errno = 0;  // a short write sets none: it is a full filesystem's
  bool ok = io.Pwrite(fd, block, sizeof block, 0) == static_cast<ssize_t>(sizeof block);
  if (!ok) {
    if (errno == 0) errno = ENOSPC;
    int err = errno;
    io.Close(fd);
    errno = err;
    return refuse("writing");
  }
  if (io.Fdatasync(fd) != 0) {
    int err = errno;
    io.Close(fd);
    errno = err;
    return refuse("syncing");
  }
  io.Close(fd);
  io.Unlink(probe.c_str());
  return Status::Ok();
}
}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (options.spools.empty() && options.shared_spools.empty()) {
    return Status::InvalidArgument("disk tier without spool_dirs");
  }
  SpoolIo& io = options.io ? *options.io : *SpoolIo::System();
  std::vector<std::unique_ptr<Spool>> spools;
  uint64_t total = 0;
  // One class's spools, numbered after those already opened: local first, then shared, so a
  // local spool's number (which the catalog records) does not move when shared ones are added.
  auto open_class = [&](const std::vector<std::string>& dirs, uint64_t budget_bytes, SpoolClass cls,
                        const char* budget_key) -> Status {
    for (const std::string& dir : dirs) {
      // Snapshot files of every tenant, and run ids in their names: adjsnapd's alone.
      struct stat st {};
      const bool made = disk_internal::MakeDirs(io, dir, 0700) == 0 &&
                        io.Stat(dir.c_str(), &st) == 0 &&
                        ((st.st_mode & 07777) == 0700 || io.Chmod(dir.c_str(), 0700) == 0);
      if (!made) {
        return Status::PermissionDenied("creating spool directory " + dir + ": " +
                                        ErrnoText(errno));
      }
      ADJSNAP_RETURN_IF_ERROR(ProbeWritable(io, dir));
      struct statvfs vfs {};
      if (io.Statvfs(dir.c_str(), &vfs) != 0) return IoError("statvfs", dir, errno);
      auto spool = std::make_unique<Spool>();
      spool->dir = dir;
      spool->spool_class = cls;
      if (io.Stat(dir.c_str(), &st) != 0) return IoError("stat", dir, errno);
      spool->dev = st.st_dev;
      // What the spool's filesystem can give adjsnapd: its free space plus the files adjsnapd
      // already keeps there (recovered snapshots), so a restart computes the same budget as
      // the start before it, not a smaller one each time.
      double free_bytes = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
      double room = free_bytes + static_cast<double>(BytesUnder(io, dir));
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

}  // namespace adjsnap
