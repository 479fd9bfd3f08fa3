// Spool files after a restart and after damage: adopting the catalog's files, moving a damaged
// one aside (quarantine), and removing files no snapshot names.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "disk_tier/disk_tier.h"
#include "disk_tier/disk_tier_internal.h"
#include "log.h"

namespace adjsnap {

using disk_internal::ErrnoText;

Status DiskTier::Adopt(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw) {
  if (spool >= spools_.size()) {
    return Status::DataLoss("recorded in spool " + std::to_string(spool) + " but only " +
                            std::to_string(spools_.size()) + " spool_dirs are configured");
  }
  if (!PlainName(name)) {
    return Status::DataLoss("recorded file name '" + name + "' in run-" + std::to_string(run_id) +
                            " is not a plain file name (a damaged catalog record)");
  }
  if (spools_[spool]->unmounted) {  // not there to look at (Claim): served once it is back
    MutexLock lock(mu_);
    spools_[spool]->used += FileBytes(raw);
    return Status::Ok();
  }
  std::string path = Path(spool, run_id, name);
  struct stat st{};
  if (io_->Stat(path.c_str(), &st) != 0) {
    const int err = errno;
    // Out of reach, not gone (a server or brick down, ENOTCONN, ESTALE, ...; or missing from a
    // shared spool a probe finds failing): accounted unread, as in a spool not mounted at start,
    // and served once a probe brings the spool back. Lost only when the file is.
    if (auto unreachable = ReadUnreachable(spool, "looking for", path, err)) {
      ADJSNAP_LOG_WARN("recovering %s: %s", path.c_str(), unreachable->message().c_str());
      MutexLock lock(mu_);
      spools_[spool]->used += FileBytes(raw);
      return Status::Ok();
    }
    return Status::DataLoss("snapshot file " + path + ": " + std::strerror(err));
  }
  if (static_cast<uint64_t>(st.st_size) < raw) {
    return Status::DataLoss("snapshot file " + path + " holds " + std::to_string(st.st_size) +
                            " bytes, " + std::to_string(raw) + " recorded");
  }
  MutexLock lock(mu_);
  spools_[spool]->used += FileBytes(raw);
  return Status::Ok();
}

Result<std::string> DiskTier::Quarantine(uint32_t spool, uint64_t run_id,
                                          const std::string& name, uint64_t accounted_raw) {
  if (spool >= spools_.size()) return Status::NotFound("no spool " + std::to_string(spool));
  // A name that leaves the run's directory names no spool file: nothing is moved.
  if (!PlainName(name)) return Status::NotFound("'" + name + "' is not a spool file name");
  std::string from = Path(spool, run_id, name);
  std::string dir = spools_[spool]->dir + "/quarantine/run-" + std::to_string(run_id);
  std::string to = dir + "/" + name;
  Status moved = disk_internal::MakeDirs(*io_, dir, 0700) != 0
                     ? Status::Unavailable("creating " + dir + ": " + ErrnoText(errno))
                     : Status::Ok();
  if (moved.ok() && io_->Rename(from.c_str(), to.c_str()) != 0) {
    int err = errno;
    moved = err == ENOENT ? Status::NotFound(from + " is gone")
                          : Status::Unavailable("moving " + from + " to " + to + ": " +
                                                std::strerror(err) + " (" + ErrnoName(err) + ")");
  }
  // Out of the budget either way: the step is lost, its room is not adjsnapd's to count.
  if (accounted_raw) Unaccount(spool, FileBytes(accounted_raw));
  if (!moved.ok()) return moved;
  return to;
}

void DiskTier::Claim(const std::vector<RecordedFile>& recorded) {
  std::vector<bool> marked(spools_.size());
  std::vector<int> unreachable(spools_.size(), 0);  // the errno that says so
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    struct stat st {};
    marked[i] = io_->Stat(MarkerPath(*spools_[i]).c_str(), &st) == 0;
    if (!marked[i] && ClassifySpoolError(errno) == SpoolError::kUnreachable) unreachable[i] = errno;
  }
  // Of the spools without a marker: how many files are recorded in each, and whether one is
  // there (the first found ends the search).
  std::vector<uint64_t> count(spools_.size(), 0), present(spools_.size(), 0);
  for (const RecordedFile& f : recorded) {
    if (f.spool >= spools_.size() || marked[f.spool] || unreachable[f.spool] ||
        !PlainName(f.name)) {
      continue;
    }
    ++count[f.spool];
    struct stat st {};
    if (present[f.spool] == 0 && io_->Stat(Path(f.spool, f.run_id, f.name).c_str(), &st) == 0) {
      ++present[f.spool];
    }
  }
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    Spool& spool = *spools_[i];
    const std::string marker = MarkerPath(spool);
    if (marked[i]) {
      spool.claimed = true;
      continue;
    }
    if (unreachable[i]) {
      // Its servers went since Open: what it holds cannot be looked at, so it is treated as a
      // spool not mounted (its steps accounted unread, nothing removed), without a marker
      // wanted: a probe that writes brings it back.
      spool.unmounted = true;
      (void)FailSpool(i, "looking for " + marker + ": " + ErrnoText(unreachable[i]),
                      unreachable[i]);
      continue;
    }
    if (count[i] > 0 && present[i] == 0) {
      spool.claimed = true;
      spool.unmounted = true;
      (void)FailSpool(
          i,
          "it holds no " + std::string(kMarker) + " and none of the " + std::to_string(count[i]) +
              " snapshot files recorded in it: it is not the "
              "filesystem adjsnapd wrote them to (not mounted?); they stay recorded and are "
              "served once a probe finds the marker",
          ENOENT);
      continue;
    }
    // A new spool, or one from before markers whose files are there.
    int fd = io_->Open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    static constexpr char kText[] = "adjsnapd spool directory: snapshot files, see adjsnap's docs\n";
    bool ok =
        fd >= 0 &&
        io_->Pwrite(fd, kText, sizeof kText - 1, 0) == static_cast<ssize_t>(sizeof kText - 1) &&
        io_->Fdatasync(fd) == 0;
    int err = errno;
    if (fd >= 0) io_->Close(fd);
    if (!ok) {
      ADJSNAP_LOG_WARN("writing %s: %s; the spool is used without its marker", marker.c_str(),
                     std::strerror(err));
      continue;
    }
    if (int dfd = io_->Open(spool.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0); dfd >= 0) {
      io_->Fsync(dfd);
      io_->Close(dfd);
    }
    spool.claimed = true;
  }
}

std::vector<std::string> DiskTier::RemoveOrphans(const std::set<std::string>& keep) {
  std::vector<std::string> removed;
  // A directory that cannot be listed whole (EIO from a damaged block, a server gone) has
  // nothing removed: what was listed may be all that is left of it, or a part, and the next
  // start tries again. One warning names it and the errno.
  auto list = [&](const std::string& dir, std::vector<SpoolIo::DirEntry>* entries) {
    if (io_->ReadDir(dir.c_str(), entries) == 0) return true;
    ADJSNAP_LOG_WARN("listing %s to remove the files of interrupted writes: %s; nothing is removed "
                     "there until a later start lists it",
                     dir.c_str(), ErrnoText(errno).c_str());
    return false;
  };
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    const Spool& spool = *spools_[i];
    if (spool.unmounted) continue;  // not the spool's filesystem, or out of reach (Claim)
    {
      MutexLock lock(mu_);
      if (spool.failed) continue;  // out of reach since (Adopt): its listing may be a part
    }
    std::vector<SpoolIo::DirEntry> runs;
    if (!list(spool.dir, &runs)) continue;
    for (const SpoolIo::DirEntry& entry : runs) {
      if (entry.name.rfind("run-", 0) != 0 ||
          !disk_internal::IsDirectory(*io_, spool.dir, entry)) {
        continue;
      }
      const std::string run_dir = spool.dir + "/" + entry.name;
      const uint64_t run_id = std::strtoull(entry.name.c_str() + 4, nullptr, 10);
      std::vector<SpoolIo::DirEntry> files;
      if (!list(run_dir, &files)) continue;
      for (const SpoolIo::DirEntry& file : files) {
        if (keep.count(Key(i, run_id, file.name))) continue;
        const std::string path = run_dir + "/" + file.name;
        if (io_->Unlink(path.c_str()) == 0) removed.push_back(path);
      }
      io_->Rmdir(run_dir.c_str());  // only succeeds when empty
    }
  }
  return removed;
}

}  // namespace adjsnap
