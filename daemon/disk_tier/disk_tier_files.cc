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

namespace snapd {

Status DiskTier::Adopt(uint32_t spool, uint64_t run_id, const std::string& name, uint64_t raw) {
  if (spool >= spools_.size()) {
    return Status::DataLoss("recorded in spool " + std::to_string(spool) + " but only " +
                            std::to_string(spools_.size()) + " spool_dirs are configured");
  }
  if (!PlainName(name)) {
    return Status::DataLoss("recorded file name '" + name + "' in run-" + std::to_string(run_id) +
                            " is not a plain file name (a damaged catalog record)");
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
  // Out of the budget either way: the step is lost, its room is not snapd's to count.
  if (accounted_raw) Unaccount(spool, FileBytes(accounted_raw));
  if (!moved.ok()) return moved;
  return to;
}

std::vector<std::string> DiskTier::RemoveOrphans(const std::set<std::string>& keep) {
  std::vector<std::string> removed;
  for (uint32_t i = 0; i < spools_.size(); ++i) {
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

}  // namespace snapd
