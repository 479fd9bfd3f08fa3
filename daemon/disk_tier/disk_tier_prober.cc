// The spools' health: which are usable, the listener told when that changes, and the prober
// thread that re-tests a failed spool until it works again (docs/operations.md, "A failing
// disk").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "disk_tier/disk_tier.h"
#include "log.h"

namespace adjsnap {

void DiskTier::UpdateUsable() {
  bool any = false, all = true;
  for (const auto& s : spools_) {
    any |= !s->failed;
    all &= !s->failed;
  }
  usable_.store(any, std::memory_order_release);
  all_working_.store(all, std::memory_order_release);
}

void DiskTier::NotifyListener() {
  std::vector<std::function<void()>> listeners;
  {
    MutexLock lock(mu_);
    listeners = listeners_;
  }
  changes_.fetch_add(1, std::memory_order_acq_rel);
  for (auto& f : listeners) f();
}

void DiskTier::AddStateListener(std::function<void()> listener) {
  MutexLock lock(mu_);
  listeners_.push_back(std::move(listener));
}

Status DiskTier::Probe(uint32_t index, int* error) {
  Spool& spool = *spools_[index];
  // A shared filesystem may place files by name (GlusterFS hashes names over its bricks): one
  // name that lands on a live brick says nothing of a dead one, and a spool brought back on it
  // fails again at the next file. Several names must all work.
  const int files = spool.spool_class == SpoolClass::kShared ? kSharedProbeFiles : 1;
  if (spool.claimed) {
    // The marker says it is the spool's filesystem, on whatever device it is mounted now.
    struct stat st {};
    if (const std::string marker = MarkerPath(spool); io_->Stat(marker.c_str(), &st) != 0) {
      int err = errno;
      if (error) *error = err;
      return Status::Unavailable(marker + ": " + std::strerror(err) + " (" + ErrnoName(err) +
                                 "): not the filesystem adjsnapd spooled to (not mounted?)");
    }
    if (io_->Stat(spool.dir.c_str(), &st) == 0) spool.dev = st.st_dev;
  } else if (struct stat st{}; io_->Stat(spool.dir.c_str(), &st) == 0 && st.st_dev != spool.dev) {
    if (error) *error = ENODEV;
    return Status::Unavailable(MovedMessage(spool, spool.dir, st.st_dev));
  }
  void* block = std::aligned_alloc(kAlignment, kAlignment);
  if (!block) return Status::ResourceExhausted("no memory for a probe");
  std::memset(block, 0, kAlignment);
  int err = 0;
  const char* what = "creating";
  std::string probe;
  for (int i = 0; i < files && err == 0; ++i) {
    probe = spool.dir + "/.adjsnap-probe" + (files > 1 ? "-" + std::to_string(i) : "");
    int fd = OpenFile(spool, probe, O_WRONLY | O_CREAT | O_TRUNC);
    if (fd < 0) {
      err = errno;
      what = "creating";
    } else {
      if (io_->Pwrite(fd, block, kAlignment, 0) != static_cast<ssize_t>(kAlignment)) {
        err = errno ? errno : ENOSPC;
        what = "writing";
      } else if (io_->Fdatasync(fd) != 0) {
        err = errno;
        what = "syncing";
      }
      io_->Close(fd);
      io_->Unlink(probe.c_str());
    }
  }
  std::free(block);
  if (error) *error = err;
  if (err == 0) return Status::Ok();
  return Status::Unavailable(std::string(what) + " " + probe + ": " + std::strerror(err) + " (" +
                             ErrnoName(err) + ")");
}

void DiskTier::Recovered(uint32_t index) {
  Spool& spool = *spools_[index];
  {
    MutexLock lock(mu_);
    if (!spool.failed) return;
    spool.unmounted = false;
    spool.failed = false;
    spool.reason.clear();
    spool.error = 0;
    UpdateUsable();
  }
  ADJSNAP_LOG_INFO("spool %s is writable again (a probe wrote, synced and removed a file): back "
                 "in the rotation",
                 spool.dir.c_str());
  NotifyListener();
}

int DiskTier::ProbeNow() {
  int back = 0;
  for (uint32_t i = 0; i < spools_.size(); ++i) {
    {
      MutexLock lock(mu_);
      if (!spools_[i]->failed) continue;
    }
    Status s = Probe(i);
    if (s.ok()) {
      Recovered(i);
      ++back;
    } else {
      ADJSNAP_LOG_WARN("spool %s still fails: %s", spools_[i]->dir.c_str(), s.message().c_str());
    }
  }
  return back;
}

void DiskTier::ProbeLoop() {
  // Each failed spool is probed when its next_probe comes; a failed probe doubles its pause up
  // to probe_max_. Repeated failures log one line per probe_max_ at most, counting the rest.
  log::RateLimitedLog still_failing("disk tier", 1, probe_max_);
  MutexLock lock(mu_);
  while (!stop_) {
    auto now = std::chrono::steady_clock::now();
    auto next = std::chrono::steady_clock::time_point::max();
    std::vector<uint32_t> due;
    for (uint32_t i = 0; i < spools_.size(); ++i) {
      const Spool& s = *spools_[i];
      if (!s.failed) continue;
      if (s.next_probe <= now) {
        due.push_back(i);
      } else {
        next = std::min(next, s.next_probe);
      }
    }
    if (due.empty()) {
      auto woken = [&]() ADJSNAP_REQUIRES(mu_) {
        if (stop_) return true;
        for (const auto& s : spools_) {
          if (s->failed && s->next_probe < next) return true;  // newly failed
        }
        return false;
      };
      if (next == std::chrono::steady_clock::time_point::max()) {
        probe_cv_.Wait(mu_, woken);
      } else {
        probe_cv_.WaitUntil(mu_, next, woken);
      }
      continue;
    }
    lock.Unlock();
    for (uint32_t i : due) {
      Status s = Probe(i);
      if (s.ok()) {
        Recovered(i);
        continue;
      }
      MutexLock relock(mu_);
      Spool& spool = *spools_[i];
      spool.backoff = std::min(spool.backoff * 2, probe_max_);
      spool.next_probe = std::chrono::steady_clock::now() + spool.backoff;
      still_failing.Write(log::Level::kWarn, "failed probes of " + spool.dir,
                          "spool " + spool.dir + " still fails: " + s.message() +
                              "; next probe in " + std::to_string(spool.backoff.count()) + " ms");
    }
    lock.Lock();
  }
}

std::vector<SpoolStatus> DiskTier::SpoolStates() const {
  MutexLock lock(mu_);
  auto now = std::chrono::steady_clock::now();
  std::vector<SpoolStatus> out;
  for (const auto& s : spools_) {
    SpoolStatus& st = out.emplace_back();
    st.dir = s->dir;
    st.spool_class = s->spool_class;
    st.failed = s->failed;
    st.error = s->error;
    st.reason = s->reason;
    st.failed_unix_ms = s->failed ? s->failed_unix_ms : 0;
    if (s->failed) {
      st.next_probe_ms = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(s->next_probe - now).count());
    }
    st.budget = s->budget;
    st.used = s->used;
    st.failures = s->failures;
    st.read_errors = s->read_errors;
  }
  return out;
}

std::string DiskTier::FailedSpools() const {
  MutexLock lock(mu_);
  return FailedSpoolsLocked();
}

std::string DiskTier::FailedSpoolsLocked() const {
  std::string failed;
  for (const auto& s : spools_) {
    if (s->failed) failed += (failed.empty() ? "" : "; ") + s->dir + ": " + s->reason;
  }
  return failed;
}

}  // namespace adjsnap
