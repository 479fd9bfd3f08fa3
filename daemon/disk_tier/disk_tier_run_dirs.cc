// The run directories: made in a spool on a run's first file, and in a shared spool kept open for
// the directory syncs of the run's later files (the newest kRunDirsKept runs'); directories made
// through the seam wherever the tier makes one.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <string>

#include "disk_tier/disk_tier.h"
#include "disk_tier/disk_tier_internal.h"

namespace adjsnap {

using disk_internal::Retry;

namespace disk_internal {

int MakeDirs(SpoolIo& io, const std::string& dir, mode_t mode) {
  // Each directory from the top down; one that is there already answers EEXIST (also where it
  // could not be made: mkdir looks the name up before it checks the right to write).
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    const mode_t m = end == std::string::npos ? mode : 0777;
    if (!part.empty() && io.Mkdir(part.c_str(), m) != 0 && errno != EEXIST) return -1;
    if (end == std::string::npos) break;
  }
  struct stat st {};
  if (io.Stat(dir.c_str(), &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

bool IsDirectory(SpoolIo& io, const std::string& dir, const SpoolIo::DirEntry& entry) {
  if (entry.type != DT_UNKNOWN) return entry.type == DT_DIR;
  struct stat st {};
  return io.Lstat((dir + "/" + entry.name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace disk_internal

std::shared_ptr<DiskTier::Fd> DiskTier::RunDir(uint32_t index, uint64_t run_id,
                                               const std::string& dir) {
  Spool& spool = *spools_[index];
  {
    MutexLock lock(mu_);
    if (auto it = spool.run_dirs.find(run_id); it != spool.run_dirs.end()) return it->second;
  }
  if (Retry([&] { return io_->Mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST ? -1 : 0; }) != 0) {
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

}  // namespace adjsnap
