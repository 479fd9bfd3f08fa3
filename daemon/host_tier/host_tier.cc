#include "host_tier/host_tier.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "host_tier/backing.h"
#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/units.h"

namespace adjsnap {

HostBlock::~HostBlock() { tier_->Free(arena_, offset_, size_); }

void HostBlock::ShrinkTo(uint64_t bytes) {
  uint64_t keep = (bytes + HostTier::kAlignment - 1) / HostTier::kAlignment * HostTier::kAlignment;
  if (keep == 0 || keep >= size_) return;
  tier_->Free(arena_, offset_ + keep, size_ - keep);
  size_ = keep;
}

HostTier::HostTier(uint64_t budget, std::string pages, Kind kind, ArenaId own,
                   const HostTierOptions& options)
    : budget_(budget),
      units_((budget + kUnit - 1) / kUnit),
      pages_(std::move(pages)),
      kind_(kind),
      own_(own),
      per_uid_(options.per_uid_arenas),
      options_(options) {
  if (!options.prefault) release_after_ = options.release_after;
}

Result<std::unique_ptr<HostTier>> HostTier::Create(uint64_t budget_bytes,
                                                   const HostTierOptions& options) {
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  if (budget == 0) {
    return Status::InvalidArgument("host-tier budget " + std::to_string(budget_bytes) +
                                   " bytes is below one page; set host_mem or host_mem_perc");
  }
  Backing b;
  Kind kind = Kind::kMemfd;
  std::string not_huge;
  if (options.huge_pages == HugePages::kAuto || options.huge_pages == HugePages::kHugeTlb) {
    auto huge = HugeTlbBacking(budget);
    if (huge.ok()) {
      b = *huge;
      kind = Kind::kHugeTlb;
    } else if (options.huge_pages == HugePages::kHugeTlb) {
      return Status::ResourceExhausted("host_huge_pages = \"hugetlb\": " +
                                       huge.status().message());
    } else {
      not_huge = "no hugetlb: " + huge.status().message();
    }
  }
  if (b.fd < 0 && !options.tmpfs_dir.empty() && options.huge_pages != HugePages::kOff) {
    // The systemd unit mounts it; a daemon started otherwise with the same file goes on to
    // the private mount below, saying why.
    auto dir = TmpfsDirBacking(options.tmpfs_dir, budget);
    if (dir.ok()) {
      b = *dir;
      kind = Kind::kTmpfsDir;
    } else {
      std::string why = dir.status().message();
      if (options.huge_pages == HugePages::kThp) {
        return Status::InvalidArgument("host_huge_pages = \"thp\": " + why);
      }
      ADJSNAP_LOG_WARN("host tier: %s; mounting a tmpfs of its own instead", why.c_str());
      not_huge += "; " + why;
    }
  }
  if (b.fd < 0 &&
      (options.huge_pages == HugePages::kAuto || options.huge_pages == HugePages::kThp)) {
    auto thp = HugeTmpfsBacking(budget);
    if (thp.ok()) {
      b = *thp;
      kind = Kind::kPrivateTmpfs;
    } else if (options.huge_pages == HugePages::kThp) {
      return Status::Unavailable("host_huge_pages = \"thp\": " + thp.status().message());
    } else {
      not_huge += "; " + thp.status().message();
    }
  }
  if (b.fd < 0) {
    // A sparse memfd: the budget is a ceiling, not an up-front commitment.
    b.fd = memfd_create("adjsnap-host-tier", MFD_CLOEXEC);
    if (b.fd < 0) return Status::Internal(std::string("memfd_create: ") + std::strerror(errno));
    b.budget = budget;
    b.pages = "4 KiB pages";
    if (options.huge_pages == HugePages::kAuto) {
      // Shmem THP advice on a memfd: effective when the kernel's shmem_enabled policy allows
      // it. The advice is set on adjsnapd's mapping, which populates every page (Populate).
      std::string policy = ShmemThpPolicy();
      bool thp = policy != "never" && policy != "deny";
      b.pages = thp ? "shmem THP (" + policy + ")"
                    : "4 KiB pages (" + not_huge + "; shmem THP: " + policy + ")";
    }
  }
  ADJSNAP_RETURN_IF_ERROR(SizeArena(b.fd, b.budget));
  std::unique_ptr<HostTier> tier(new HostTier(b.budget, b.pages, kind, geteuid(), options));
  {
    MutexLock lock(tier->mu_);
    ADJSNAP_RETURN_IF_ERROR(tier->AddArena(tier->own_, b.fd, /*adopted=*/false));
  }
  if (options.prefault)
    tier->prefault_ = NamedThread("adjsnap-prefill", [t = tier.get()] { t->Prefault(); });
  if (options.populate_ahead_bytes > 0) {
    tier->ahead_ = NamedThread("adjsnap-ahead", [t = tier.get()] { t->PopulateAhead(); });
    MutexLock lock(tier->mu_);
    tier->WantAhead(tier->own_);
  }
  tier->StartRelease();
  return tier;
}

Result<std::unique_ptr<HostTier>> HostTier::AdoptArenas(std::map<ArenaId, int> fds,
                                                        uint64_t budget_bytes,
                                                        const HostTierOptions& options) {
  auto close_all = [&fds] {
    for (auto& [id, fd] : fds) close(fd);
  };
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  if (budget == 0 || fds.empty()) {
    close_all();
    return Status::InvalidArgument(budget == 0 ? "host-tier budget is below one page"
                                               : "no host-tier arena to take back");
  }
  // What backs them is the previous start's choice: a hugetlb memfd, a file on a tmpfs mounted
  // huge=always (whose st_blksize is the 2 MiB page) or a plain memfd.
  struct stat st{};
  struct statfs fs{};
  const int first = fds.begin()->second;
  std::string pages = "4 KiB pages, kept through the restart";
  Kind kind = Kind::kMemfd;
  if (fstat(first, &st) == 0 && fstatfs(first, &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC) {
    pages = "hugetlb " + FormatBytes(static_cast<uint64_t>(st.st_blksize)) +
            ", kept through the restart";
    kind = Kind::kHugeTlb;
  } else if (fs.f_type == TMPFS_MAGIC && st.st_blksize > static_cast<blksize_t>(kAlignment)) {
    pages = "shmem THP, kept through the restart";
    kind = options.tmpfs_dir.empty() ? Kind::kPrivateTmpfs : Kind::kTmpfsDir;
  }
  std::unique_ptr<HostTier> tier(new HostTier(budget, pages, kind, geteuid(), options));
  MutexLock lock(tier->mu_);
  while (!fds.empty()) {
    auto [id, fd] = *fds.begin();
    fds.erase(fds.begin());  // each step below takes `fd` over, or closes it on error
    Status taken = fstat(fd, &st) == 0
                       ? Status::Ok()
                       : Status::InvalidArgument("fstat of the kept host-tier arena of uid " +
                                                 std::to_string(id) + ": " + std::strerror(errno));
    if (!taken.ok()) close(fd);
    if (taken.ok() && static_cast<uint64_t>(st.st_size) != budget) taken = SizeArena(fd, budget);
    if (taken.ok()) taken = tier->AddArena(id, fd, /*adopted=*/true);
    if (!taken.ok()) {
      close_all();
      return taken;
    }
  }
  if (options.populate_ahead_bytes > 0) {
    tier->ahead_ = NamedThread("adjsnap-ahead", [t = tier.get()] { t->PopulateAhead(); });
  }
  return tier;
}

Result<std::unique_ptr<HostTier>> HostTier::Adopt(int fd, uint64_t budget_bytes,
                                                  const HostTierOptions& options) {
  return AdoptArenas({{geteuid(), fd}}, budget_bytes, options);
}

Result<int> HostTier::NewBacking() const {
  int fd = -1;
  switch (kind_) {
    case Kind::kHugeTlb:
      fd = memfd_create("adjsnap-host-tier", MFD_CLOEXEC | MFD_HUGETLB);
      break;
    case Kind::kTmpfsDir: {
      ADJSNAP_ASSIGN_OR_RETURN(Backing b, TmpfsDirBacking(options_.tmpfs_dir, budget_));
      fd = b.fd;
      break;
    }
    case Kind::kPrivateTmpfs: {
      ADJSNAP_ASSIGN_OR_RETURN(Backing b, HugeTmpfsBacking(budget_));
      fd = b.fd;
      break;
    }
    case Kind::kMemfd:
      fd = memfd_create("adjsnap-host-tier", MFD_CLOEXEC);
      break;
  }
  if (fd < 0) {
    return Status::Unavailable(std::string("a new host-tier arena: ") + std::strerror(errno));
  }
  ADJSNAP_RETURN_IF_ERROR(SizeArena(fd, budget_));
  return fd;
}

Status HostTier::AddArena(ArenaId id, int fd, bool adopted) {
  // hugetlb: no reservation of the whole budget per arena; adjsnapd populates each block's pages
  // before handing it out, and fails the allocation cleanly when the pool has none left.
  int flags = MAP_SHARED | (kind_ == Kind::kHugeTlb ? MAP_NORESERVE : 0);
  void* base = mmap(nullptr, budget_, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("mapping " + FormatBytes(budget_) +
                                     " for the host-tier arena of uid " + std::to_string(id) +
                                     " failed: " + std::strerror(err));
  }
  if (kind_ != Kind::kHugeTlb) (void)madvise(base, budget_, MADV_HUGEPAGE);
  auto a = std::make_unique<Arena>(budget_);
  a->id = id;
  a->fd = fd;
  a->base = base;
  a->unit_used.assign(units_, 0);
  a->resident.assign(units_, false);
  a->populating.assign(units_, 0);
  if (adopted) {
    // The units where the kept memfd holds pages (SEEK_DATA/SEEK_HOLE), counted resident.
    for (off_t at = 0; at < static_cast<off_t>(budget_);) {
      off_t data = lseek(fd, at, SEEK_DATA);
      if (data < 0) break;
      off_t hole = lseek(fd, data, SEEK_HOLE);
      if (hole < 0) hole = static_cast<off_t>(budget_);
      for (uint64_t u = static_cast<uint64_t>(data) / kUnit;
           u < units_ && u * kUnit < static_cast<uint64_t>(hole); ++u) {
        if (!a->resident[u]) ++resident_units_;
        a->resident[u] = true;
      }
      at = hole;
    }
  }
  arenas_.emplace(id, std::move(a));
  return Status::Ok();
}

Result<HostTier::Arena*> HostTier::ArenaLocked(ArenaId id) {
  if (auto it = arenas_.find(id); it != arenas_.end()) return it->second.get();
  if (stopping_) return Status::Unavailable("the host tier is stopping");
  ADJSNAP_ASSIGN_OR_RETURN(int fd, NewBacking());
  ADJSNAP_RETURN_IF_ERROR(AddArena(id, fd, /*adopted=*/false));
  ADJSNAP_LOG_INFO("host tier: a new arena for uid %u (%s)", id, pages_.c_str());
  WantAhead(id);  // its solver connects now and pushes soon
  return arenas_.at(id).get();
}

std::unique_ptr<HostBlock> HostTier::NewBlock(Arena& a, uint64_t offset, uint64_t size) {
  last_allocation_ = std::chrono::steady_clock::now();
  used_ += size;
  peak_used_ = std::max(peak_used_, used_);
  return std::make_unique<HostBlock>(this, a.id, offset, size,
                                     static_cast<char*>(a.base) + offset);
}

Result<std::unique_ptr<HostBlock>> HostTier::Claim(ArenaId arena, uint64_t offset,
                                                   uint64_t bytes) {
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(mu_);
  auto it = arenas_.find(arena);
  if (it == arenas_.end()) {
    return Status::InvalidArgument("no host-tier arena of uid " + std::to_string(arena) +
                                   " was kept");
  }
  Arena& a = *it->second;
  if (offset % kAlignment != 0 || size == 0 || used_ + size > budget_ ||
      !a.ranges.AllocateAt(offset, size)) {
    return Status::InvalidArgument(
        "host-tier range at " + std::to_string(offset) + " of " + std::to_string(size) +
        " bytes is not free in the arena of uid " + std::to_string(arena) + " of a tier of " +
        FormatBytes(budget_));
  }
  CountUnits(a, offset, size, /*add=*/true, nullptr, nullptr);
  return NewBlock(a, offset, size);
}

Result<std::unique_ptr<HostBlock>> HostTier::AllocateIn(ArenaId arena, uint64_t bytes,
                                                        bool from_top) {
  ADJSNAP_ASSIGN_OR_RETURN(PendingBlock pending, AllocateDeferred(arena, bytes, from_top));
  // Outside the lock: the units are in use, so nothing gives them back meanwhile. On failure
  // the block goes back as it goes.
  ADJSNAP_RETURN_IF_ERROR(PopulateUnits(pending.fresh));
  return std::move(pending.block);
}

Result<HostTier::PendingBlock> HostTier::AllocateDeferred(ArenaId arena, uint64_t bytes,
                                                          bool from_top) {
  if (bytes == 0) return Status::InvalidArgument("host-tier allocation of 0 bytes");
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(mu_);
  // No room in the budget: refused before an arena is made for it.
  Arena* found = nullptr;
  if (used_ + size <= budget_) {
    ADJSNAP_ASSIGN_OR_RETURN(found, ArenaLocked(arena));
  }
  std::optional<uint64_t> offset;
  if (found != nullptr) offset = found->ranges.Allocate(size, from_top);
  if (!offset) {
    std::string why = used_ + size > budget_ ? "" : " (free space is fragmented)";
    return Status::ResourceExhausted("host tier full: " + FormatBytes(bytes) + " requested, " +
                                     FormatBytes(used_) + " of " + FormatBytes(budget_) +
                                     " in use" + why +
                                     "; delete finished runs or raise host_mem");
  }
  uint64_t first = 0, last = 0;
  CountUnits(*found, *offset, size, /*add=*/true, &first, &last);
  if (last > first) MakeResidentRoom(*found);
  WantAhead(arena);
  PendingBlock pending{NewBlock(*found, *offset, size), {}};
  if (last > first) {
    for (uint64_t u = first; u < last; ++u) ++found->populating[u];
    pending.fresh = FreshUnits(this, found->id, first, last);
  }
  return pending;
}

void HostTier::Free(ArenaId arena, uint64_t offset, uint64_t size) {
  MutexLock lock(mu_);
  Arena& a = *arenas_.at(arena);
  used_ -= size;
  a.ranges.Free(offset, size);
  CountUnits(a, offset, size, /*add=*/false, nullptr, nullptr);
  freed_since_release_ = true;
  // Its solver reads back now: pages populated ahead would only take a core and the memory bus
  // from the backward pass's copies (1 GiB being zeroed held its first fetches 5x longer). Its
  // next allocation asks again.
  want_ahead_.erase(std::remove(want_ahead_.begin(), want_ahead_.end(), arena), want_ahead_.end());
}

HostTier::~HostTier() {
  StopBackgroundWork();
  MutexLock lock(mu_);
  for (auto& [id, a] : arenas_) {
    munmap(a->base, budget_);
    close(a->fd);
  }
}

uint64_t HostTier::resident_bytes() const {
  MutexLock lock(mu_);
  uint64_t bytes = 0;
  struct stat st{};
  for (auto& [id, a] : arenas_) {
    if (fstat(a->fd, &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

uint64_t HostTier::largest_free(ArenaId arena) const {
  MutexLock lock(mu_);
  uint64_t room = budget_ - used_;
  auto it = arenas_.find(arena);
  // An arena not made yet is one free range of the whole budget.
  return it == arenas_.end() ? room : std::min(room, it->second->ranges.largest_free());
}

uint64_t HostTier::used() const {
  MutexLock lock(mu_);
  return used_;
}

uint64_t HostTier::peak_used() const {
  MutexLock lock(mu_);
  return peak_used_;
}

Result<std::pair<int, uint64_t>> HostTier::ArenaFd(ArenaId arena) {
  MutexLock lock(mu_);
  ADJSNAP_ASSIGN_OR_RETURN(Arena * a, ArenaLocked(arena));
  return std::make_pair(a->fd, budget_);
}

int HostTier::fd() const {
  MutexLock lock(mu_);
  auto it = arenas_.find(own_);
  return it == arenas_.end() ? -1 : it->second->fd;
}

std::map<HostTier::ArenaId, int> HostTier::arena_fds() const {
  MutexLock lock(mu_);
  std::map<ArenaId, int> fds;
  for (auto& [id, a] : arenas_) fds.emplace(id, a->fd);
  return fds;
}

}  // namespace adjsnap
