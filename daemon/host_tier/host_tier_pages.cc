// The host tier's pages: which 2 MiB units of each arena are resident, populating them (at
// start, ahead of a solver's pushes, in stripes for a large range) and giving free ones back
// to the OS once the tier has been idle (host_tier.h, "Pages").
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "host_tier/host_tier.h"
#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/units.h"

namespace adjsnap {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

void HostTier::CountUnits(Arena& a, uint64_t offset, uint64_t size, bool add,
                          uint64_t* fresh_first, uint64_t* fresh_last) {
  const uint64_t end = offset + size;
  for (uint64_t u = offset / kUnit; u < units_ && u * kUnit < end; ++u) {
    uint64_t overlap = std::min(end, (u + 1) * kUnit) - std::max(offset, u * kUnit);
    if (!add) {
      a.unit_used[u] -= static_cast<uint32_t>(overlap);
      continue;
    }
    a.unit_used[u] += static_cast<uint32_t>(overlap);
    // A unit being populated ahead is populated here too: no page of the block may be left to
    // the client's first touch.
    if (!a.resident[u] || a.populating[u] > 0) {
      if (!a.resident[u]) ++resident_units_;
      a.resident[u] = true;
      if (fresh_first != nullptr) {
        if (*fresh_first >= *fresh_last) *fresh_first = u;
        *fresh_last = u + 1;
      }
    }
  }
}

bool HostTier::PunchUnit(Arena& a, uint64_t u) {
  uint64_t at = u * kUnit, n = std::min(kUnit, budget_ - at);
  if (fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at),
                static_cast<off_t>(n)) != 0) {
    return false;
  }
  if (a.resident[u]) --resident_units_;
  a.resident[u] = false;
  return true;
}

void HostTier::MakeResidentRoom(const Arena& keep) {
  // An adopted tier's free ranges may hold kept steps until they are claimed (StartRelease).
  if (resident_units_ <= units_ || !releasing_) return;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& [id, a] : arenas_) {
      if ((a.get() == &keep) != (pass == 1)) continue;
      for (uint64_t u = 0; u < units_; ++u) {
        if (resident_units_ <= units_) return;
        if (a->resident[u] && a->unit_used[u] == 0 && a->populating[u] == 0 &&
            !PunchUnit(*a, u)) {
          return;
        }
      }
    }
  }
}

bool HostTier::Populate(const Arena& a, uint64_t first, uint64_t last) const {
  uint64_t at = first * kUnit, end = std::min(last * kUnit, budget_);
  if (at >= end) return true;
  // A write populate from adjsnapd's own mapping: the pages are charged to adjsnapd, and on shmem
  // with THP advice they are allocated as the mapping's advice says.
  auto populate = [&a](uint64_t from, uint64_t to) {
    char* p = static_cast<char*>(a.base) + from;
    if (madvise(p, to - from, MADV_POPULATE_WRITE) == 0) return true;
    if (errno == EINVAL) {  // a kernel before 5.14: allocate them in the file instead
      return fallocate(a.fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from),
                       static_cast<off_t>(to - from)) == 0;
    }
    return false;
  };
  // The kernel allocates and zeroes each page: a large range goes faster in stripes on a few
  // threads, as a client's copy threads would have touched it.
  constexpr uint64_t kStripeMin = 8 * kUnit;
  const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t stripes = std::min<uint64_t>({4, cores, (end - at) / kStripeMin});
  if (stripes <= 1) return populate(at, end);
  const uint64_t units = (end - at + kUnit - 1) / kUnit, per = (units + stripes - 1) / stripes;
  std::atomic<int> failed{0};  // the errno of a stripe that failed
  std::vector<std::thread> helpers;
  for (uint64_t i = 1; i < stripes; ++i) {
    uint64_t from = at + i * per * kUnit, to = std::min(end, from + per * kUnit);
    if (from >= to) break;
    helpers.push_back(NamedThread("adjsnap-stripe", [&, from, to] {
      if (!populate(from, to)) failed = errno;
    }));
  }
  if (!populate(at, std::min(end, at + per * kUnit))) failed = errno;
  for (auto& t : helpers) t.join();
  errno = failed.load();  // for the caller's message
  return failed.load() == 0;
}


FreshUnits& FreshUnits::operator=(FreshUnits&& o) noexcept {
  if (this != &o) {
    if (tier_ != nullptr) tier_->EndFresh(*this, /*populated=*/false);
    tier_ = std::exchange(o.tier_, nullptr);
    arena_ = o.arena_;
    first_ = o.first_;
    last_ = o.last_;
  }
  return *this;
}

FreshUnits::~FreshUnits() {
  if (tier_ != nullptr) tier_->EndFresh(*this, /*populated=*/false);
}

Status HostTier::PopulateUnits(FreshUnits& fresh) {
  if (fresh.empty()) return Status::Ok();
  const Arena* a = nullptr;
  {
    MutexLock lock(mu_);
    a = arenas_.at(fresh.arena_).get();  // arenas live as long as the tier
  }
  bool ok = true;
  if (options_.on_populate && !options_.on_populate(fresh.arena_, fresh.first_, fresh.last_)) {
    ok = false;
    errno = ENOMEM;
  }
  ok = ok && Populate(*a, fresh.first_, fresh.last_);
  const int err = errno;
  const uint64_t bytes = std::min(fresh.last_ * kUnit, budget_) - fresh.first_ * kUnit;
  const uint32_t uid = fresh.arena_;
  EndFresh(fresh, ok);
  if (ok) return Status::Ok();
  return Status::ResourceExhausted("host tier: populating " + FormatBytes(bytes) + " for uid " +
                                   std::to_string(uid) + " failed: " + std::strerror(err));
}

void HostTier::EndFresh(FreshUnits& fresh, bool populated) {
  MutexLock lock(mu_);
  Arena& a = *arenas_.at(fresh.arena_);
  for (uint64_t u = fresh.first_; u < fresh.last_; ++u) {
    --a.populating[u];
    // Its pages may not exist: the next block there populates them (a block that took it
    // meanwhile saw it marked and populates it itself).
    if (!populated && a.populating[u] == 0 && a.resident[u]) {
      a.resident[u] = false;
      --resident_units_;
    }
  }
  fresh.tier_ = nullptr;
}


// Populates adjsnapd's own arena unit by unit, as AllocateIn would, up to the budget's worth of
// resident units: a unit not yet populated is allocated and zeroed now instead of in a push.
// Each unit is populated outside the lock, as the populate-ahead does (ClaimUnit, FillUnit).
void HostTier::Prefault() {
  for (uint64_t u = 0; u < units_ && !stopping_; ++u) {
    Arena* own = nullptr;
    bool claimed = false;
    {
      MutexLock lock(mu_);
      own = arenas_.at(own_).get();
      if (!own->resident[u] && resident_units_ >= units_) break;  // the budget's worth is
      claimed = ClaimUnit(*own, u);
    }
    if (claimed && !FillUnit(*own, u)) {
      ADJSNAP_LOG_WARN("host-tier prefault stopped at %s of %s: %s (pages will be populated as "
                     "blocks are handed out)",
                     FormatBytes(u * kUnit).c_str(), FormatBytes(budget_).c_str(),
                     std::strerror(errno));
      return;
    }
    prefaulted_.store(std::min(budget_, (u + 1) * kUnit), std::memory_order_relaxed);
  }
  if (!stopping_) {
    ADJSNAP_LOG_INFO("host tier prefaulted: %s of %s", FormatBytes(prefaulted()).c_str(),
                   pages_.c_str());
  }
}

bool HostTier::ClaimUnit(Arena& a, uint64_t u) {
  if (a.resident[u] || resident_units_ >= units_) return false;
  a.resident[u] = true;
  ++a.populating[u];
  ++resident_units_;
  return true;
}

bool HostTier::FillUnit(Arena& a, uint64_t u) {
  bool ok = Populate(a, u, u + 1);
  int err = errno;
  MutexLock lock(mu_);
  --a.populating[u];
  if (ok) {
    // Pages nobody takes go back once the tier has been idle for release_after, as freed ones
    // do: a node no solver comes to holds no more than its runs store.
    freed_since_release_ = true;
  } else if (a.unit_used[u] == 0 && a.populating[u] == 0) {
    // nobody took it meanwhile: not resident after all
    a.resident[u] = false;
    --resident_units_;
  }
  errno = err;
  return ok;
}

void HostTier::WantAhead(ArenaId arena) {
  if (options_.populate_ahead_bytes == 0 || stopping_) return;
  if (std::find(want_ahead_.begin(), want_ahead_.end(), arena) == want_ahead_.end()) {
    want_ahead_.push_back(arena);
  }
  ahead_cv_.NotifyAll();
}

void HostTier::PopulateAhead() {
  const uint64_t ahead = std::max<uint64_t>(1, options_.populate_ahead_bytes / kUnit);
  for (;;) {
    Arena* a = nullptr;
    uint64_t unit = 0;
    {
      MutexLock lock(mu_);
      // The next unit to populate: above the highest unit in use of an arena that asked, up
      // to `ahead` units, while all arenas' resident units stay within the budget.
      while (a == nullptr) {
        ahead_cv_.Wait(mu_, [this]() ADJSNAP_REQUIRES(mu_) {
          return stopping_ || !want_ahead_.empty();
        });
        if (stopping_) return;
        Arena& candidate = *arenas_.at(want_ahead_.front());
        uint64_t top = units_;
        while (top > 0 && candidate.unit_used[top - 1] == 0) --top;
        for (uint64_t u = top; u < std::min(units_, top + ahead); ++u) {
          if (!candidate.resident[u]) {
            a = &candidate;
            unit = u;
            break;
          }
        }
        if (a == nullptr || !ClaimUnit(*a, unit)) {
          a = nullptr;
          want_ahead_.erase(want_ahead_.begin());  // ahead enough (or the budget is)
        }
      }
    }
    // Outside the lock, so pushes never wait for it.
    if (FillUnit(*a, unit)) {
      prefaulted_.fetch_add(std::min(kUnit, budget_ - unit * kUnit), std::memory_order_relaxed);
      if (options_.on_populated_ahead) options_.on_populated_ahead(a->id, unit);
      continue;
    }
    int err = errno;
    MutexLock lock(mu_);
    want_ahead_.clear();
    ADJSNAP_LOG_WARN("host tier: populating ahead in the arena of uid %u failed: %s (pages are "
                   "populated as blocks are handed out)",
                   a->id, std::strerror(err));
  }
}

uint64_t HostTier::ReleaseFree() {
  constexpr uint64_t kPiece = (64ull << 20) / kUnit;  // the lock is held for one piece at a time
  std::vector<ArenaId> ids;
  {
    MutexLock lock(mu_);
    for (auto& [id, a] : arenas_) ids.push_back(id);
    freed_since_release_ = false;
  }
  uint64_t released = 0;
  for (ArenaId id : ids) {
    for (uint64_t u = 0; u < units_ && !stopping_; u += kPiece) {
      MutexLock lock(mu_);
      Arena& a = *arenas_.at(id);
      for (uint64_t i = u; i < std::min(units_, u + kPiece); ++i) {
        if (a.unit_used[i] != 0 || a.populating[i] > 0) continue;  // in use: its pages stay
        if (!PunchUnit(a, i)) {
          ADJSNAP_LOG_WARN("giving free host-tier memory back to the OS failed: %s (it stays "
                         "resident, and is reused)",
                         std::strerror(errno));
          return released;
        }
        released += std::min(kUnit, budget_ - i * kUnit);
      }
    }
  }
  return released;
}

void HostTier::ReleaseWhenIdle(std::chrono::seconds release_after) {
  for (;;) {
    {
      MutexLock lock(mu_);
      for (;;) {
        if (stopping_) return;
        auto now = std::chrono::steady_clock::now();
        auto due = last_allocation_ + release_after;
        if (freed_since_release_ && now >= due) break;
        // Woken by the destructor, or to look again when the idle time may be up (nothing
        // freed yet: one interval from now).
        stop_cv_.WaitUntil(mu_, freed_since_release_ ? due : now + release_after,
                           [this] { return stopping_.load(); });
      }
    }
    uint64_t before = resident_bytes();
    ReleaseFree();
    uint64_t after = resident_bytes();
    if (before > after) {
      ADJSNAP_LOG_INFO("host tier idle for %lld s: gave %s of free memory back to the OS (%s "
                     "resident, %s in use)",
                     static_cast<long long>(release_after.count()),
                     FormatBytes(before - after).c_str(), FormatBytes(after).c_str(),
                     FormatBytes(used()).c_str());
    }
  }
}

void HostTier::StopBackgroundWork() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  ahead_cv_.NotifyAll();
  if (prefault_.joinable()) prefault_.join();
  if (ahead_.joinable()) ahead_.join();
  if (releaser_.joinable()) releaser_.join();
}

void HostTier::StartRelease() {
  {
    MutexLock lock(mu_);
    if (releasing_ || stopping_) return;
    releasing_ = true;  // kept steps are claimed: free units may be given back
    last_allocation_ = std::chrono::steady_clock::now();  // idle time counts from now
  }
  if (release_after_.count() > 0) {
    releaser_ = NamedThread("adjsnap-release", [this] { ReleaseWhenIdle(release_after_); });
  }
}

}  // namespace adjsnap
