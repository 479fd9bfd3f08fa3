// Spool files after a restart and after damage: adopting the catalog's files, moving a damaged
// one aside (quarantine), and removing files no snapshot names.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "disk_tier/disk_tier.h"
#include "log.h"

namespace adjsnap {

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
  if (stat(path.c_str(), &st) != 0) {
    return Status::DataLoss("snapshot file " + path + ": " + std::strerror(errno));
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
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string to = dir + "/" + name;
  Status moved = ec ? Status::Unavailable("creating " + dir + ": " + ec.message())
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
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    struct stat st {};
    marked[i] = stat(MarkerPath(*spools_[i]).c_str(), &st) == 0;
  }
  // Of the spools without a marker: how many files are recorded in each, and whether one is
  // there (the first found ends the search).
  std::vector<uint64_t> count(spools_.size(), 0), present(spools_.size(), 0);
  for (const RecordedFile& f : recorded) {
    if (f.spool >= spools_.size() || marked[f.spool] || !PlainName(f.name)) continue;
    ++count[f.spool];
    struct stat st {};
    if (present[f.spool] == 0 && stat(Path(f.spool, f.run_id, f.name).c_str(), &st) == 0) {
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
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    if (spools_[i]->unmounted) continue;  // not the spool's filesystem (Claim)
    std::error_code ec;
    for (const auto& run_dir : std::filesystem::directory_iterator(spools_[i]->dir, ec)) {
      std::string run = run_dir.path().filename().string();
      if (!run_dir.is_directory() || run.rfind("run-", 0) != 0) continue;
      uint64_t run_id = std::strtoull(run.c_str() + 4, nullptr, 10);
      std::error_code ec2;
      for (const auto& file : std::filesystem::directory_iterator(run_dir.path(), ec2)) {
        if (keep.count(Key(i, run_id, file.path().filename().string()))) continue;
        std::error_code ec3;
        if (std::filesystem::remove(file.path(), ec3)) removed.push_back(file.path().string());
      }
      std::filesystem::remove(run_dir.path(), ec2);  // only succeeds when empty
    }
  }
  return removed;
}

}  // namespace adjsnap
