#include "host_tier/host_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "log.h"
#include "snapd/units.h"

namespace snapd {

HostBlock::~HostBlock() { tier_->Free(offset_, size_); }

void HostBlock::ShrinkTo(uint64_t bytes) {
  uint64_t keep = (bytes + HostTier::kAlignment - 1) / HostTier::kAlignment * HostTier::kAlignment;
  if (keep == 0 || keep >= size_) return;
  tier_->Free(offset_ + keep, size_ - keep);
  size_ = keep;
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// A number from /proc/meminfo ("HugePages_Free", "Hugepagesize" in kB); 0 if absent.
uint64_t MemInfoNumber(const char* key) {
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t value = 0;
  size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      value = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return value;
}

// The kernel's shmem THP policy, the bracketed word of shmem_enabled ("never" if unknown).
std::string ShmemThpPolicy() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string word;
  while (in >> word) {
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') {
      return word.substr(1, word.size() - 2);
    }
  }
  return "never";
}

struct Backing {
  int fd = -1;
  uint64_t budget = 0;
  std::string pages;
  bool hugetlb = false;
};

// A hugetlb memfd of the budget rounded down to whole huge pages, when the pool has them free;
// else the reason why not.
Result<Backing> HugeTlbBacking(uint64_t budget) {
  uint64_t page = MemInfoNumber("Hugepagesize") * 1024;
  uint64_t free_pages = MemInfoNumber("HugePages_Free") - MemInfoNumber("HugePages_Rsvd");
  if (page == 0) return Status::Unavailable("this kernel has no hugetlb pages");
  uint64_t rounded = budget / page * page;
  if (rounded == 0 || free_pages * page < rounded) {
    return Status::ResourceExhausted(
        "the hugetlb pool has " + FormatBytes(free_pages * page) + " free of the " +
        FormatBytes(rounded) + " the host tier needs (vm.nr_hugepages; docs/operations.md)");
  }
  int fd = memfd_create("snapd-host-tier", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) return Status::Unavailable(std::string("memfd_create(MFD_HUGETLB): ") +
                                         std::strerror(errno));
  return Backing{fd, rounded, "hugetlb " + FormatBytes(page), true};
}

}  // namespace

Result<std::unique_ptr<HostTier>> HostTier::Create(uint64_t budget_bytes,
                                                   const HostTierOptions& options) {
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  if (budget == 0) {
    return Status::InvalidArgument("host-tier budget " + std::to_string(budget_bytes) +
                                   " bytes is below one page; set host_mem or host_mem_perc");
  }
  Backing b;
  std::string not_huge;
  if (options.huge_pages != HugePages::kOff) {
    auto huge = HugeTlbBacking(budget);
    if (huge.ok()) {
      b = *huge;
    } else if (options.huge_pages == HugePages::kHugeTlb) {
      return Status::ResourceExhausted("host_huge_pages = \"hugetlb\": " +
                                       huge.status().message());
    } else {
      not_huge = huge.status().message();
    }
  }
  if (b.fd < 0) {
    // A sparse memfd: without prefault the budget is a ceiling, not an up-front commitment.
    b.fd = memfd_create("snapd-host-tier", MFD_CLOEXEC);
    if (b.fd < 0) return Status::Internal(std::string("memfd_create: ") + std::strerror(errno));
    b.budget = budget;
    b.pages = "4 KiB pages";
  }
  if (ftruncate(b.fd, static_cast<off_t>(b.budget)) != 0) {
    int err = errno;
    close(b.fd);
    return Status::ResourceExhausted("sizing the host tier to " + FormatBytes(b.budget) +
                                     " failed: " + std::strerror(err));
  }
  if (options.huge_pages == HugePages::kAuto && !b.hugetlb) {
    // Shmem THP: effective when the kernel's shmem_enabled policy allows it. The advice is set
    // on this mapping (in Map) and on every client's (the first toucher's mapping decides).
    std::string policy = ShmemThpPolicy();
    bool thp = policy != "never" && policy != "deny";
    b.pages = thp ? "shmem THP (" + policy + ")"
                  : "4 KiB pages (no hugetlb: " + not_huge + "; shmem THP: " + policy + ")";
  }
  return Map(b.fd, b.budget, b.pages, options, /*release=*/true);
}

Result<std::unique_ptr<HostTier>> HostTier::Map(int fd, uint64_t budget, std::string pages,
                                                const HostTierOptions& options, bool release) {
  void* base = mmap(nullptr, budget, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("mapping " + FormatBytes(budget) +
                                     " for the host tier failed: " + std::strerror(err));
  }
  if (pages.rfind("shmem THP", 0) == 0) (void)madvise(base, budget, MADV_HUGEPAGE);
  std::unique_ptr<HostTier> tier(new HostTier(fd, base, budget, std::move(pages)));
  if (options.prefault) tier->prefault_ = std::thread([t = tier.get()] { t->Prefault(); });
  if (!options.prefault) tier->release_after_ = options.release_after;
  if (release) tier->StartRelease();
  return tier;
}

Result<std::unique_ptr<HostTier>> HostTier::Adopt(int fd, uint64_t budget_bytes,
                                                  const HostTierOptions& options) {
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  struct stat st{};
  if (budget == 0 || fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return Status::InvalidArgument(budget == 0 ? "host-tier budget is below one page"
                                               : std::string("fstat of the kept host tier: ") +
                                                     std::strerror(err));
  }
  if (static_cast<uint64_t>(st.st_size) != budget &&
      ftruncate(fd, static_cast<off_t>(budget)) != 0) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("resizing the kept host tier to " + FormatBytes(budget) +
                                     " failed: " + std::strerror(err));
  }
  return Map(fd, budget, "the memfd kept through the restart", options, /*release=*/false);
}

Result<std::unique_ptr<HostBlock>> HostTier::Claim(uint64_t offset, uint64_t bytes) {
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(mu_);
  if (offset % kAlignment != 0 || size == 0 || !ranges_.AllocateAt(offset, size)) {
    return Status::InvalidArgument("host-tier range at " + std::to_string(offset) + " of " +
                                   std::to_string(size) + " bytes is not free in a tier of " +
                                   FormatBytes(budget_));
  }
  last_allocation_ = std::chrono::steady_clock::now();
  used_ += size;
  peak_used_ = std::max(peak_used_, used_);
  return std::make_unique<HostBlock>(this, offset, size, static_cast<char*>(base_) + offset);
}

HostTier::HostTier(int fd, void* base, uint64_t budget, std::string pages)
    : fd_(fd), base_(base), budget_(budget), pages_(std::move(pages)), ranges_(budget) {}

HostTier::~HostTier() {
  StopBackgroundWork();
  munmap(base_, budget_);
  close(fd_);
}

// Populates the tier 64 MiB at a time: a page in use is left as it is (populating maps it, it
// never writes it), a page not yet touched is allocated and zeroed now instead of in a push.
void HostTier::Prefault() {
  constexpr uint64_t kChunk = 64ull << 20;
  for (uint64_t off = 0; off < budget_ && !stopping_; off += kChunk) {
    uint64_t n = std::min(kChunk, budget_ - off);
    if (madvise(static_cast<char*>(base_) + off, n, MADV_POPULATE_WRITE) != 0) {
      SNAPD_LOG_WARN("host-tier prefault stopped at %s of %s: %s (pages will be populated on "
                     "first touch)",
                     FormatBytes(off).c_str(), FormatBytes(budget_).c_str(),
                     std::strerror(errno));
      return;
    }
    prefaulted_.fetch_add(n, std::memory_order_relaxed);
  }
  if (!stopping_) {
    SNAPD_LOG_INFO("host tier prefaulted: %s of %s", FormatBytes(budget_).c_str(), pages_.c_str());
  }
}

uint64_t HostTier::ReleaseFree() {
  // Holes are punched in whole pages of the memfd (huge pages on hugetlbfs: st_blksize).
  struct stat st{};
  const uint64_t page = fstat(fd_, &st) == 0 && st.st_blksize > 0 ? st.st_blksize : kAlignment;
  constexpr uint64_t kPiece = 64ull << 20;  // the lock is held for one piece at a time
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  {
    MutexLock lock(mu_);
    ranges = ranges_.FreeRanges();
    freed_since_release_ = false;
  }
  uint64_t released = 0;
  for (auto [offset, length] : ranges) {
    uint64_t begin = (offset + page - 1) / page * page, end = (offset + length) / page * page;
    for (uint64_t at = begin; at < end && !stopping_; at += kPiece) {
      uint64_t n = std::min(kPiece, end - at);
      MutexLock lock(mu_);
      if (!ranges_.IsFree(at, n)) continue;  // allocated since: its pages are in use
      if (fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at),
                    static_cast<off_t>(n)) != 0) {
        SNAPD_LOG_WARN("giving free host-tier memory back to the OS failed: %s (it stays "
                       "resident, and is reused)",
                       std::strerror(errno));
        return released;
      }
      released += n;
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
      SNAPD_LOG_INFO("host tier idle for %lld s: gave %s of free memory back to the OS (%s "
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
  if (prefault_.joinable()) prefault_.join();
  if (releaser_.joinable()) releaser_.join();
}

void HostTier::StartRelease() {
  if (release_after_.count() <= 0 || releaser_.joinable() || stopping_) return;
  {
    MutexLock lock(mu_);
    last_allocation_ = std::chrono::steady_clock::now();  // idle time counts from now
  }
  releaser_ = std::thread([this] { ReleaseWhenIdle(release_after_); });
}

uint64_t HostTier::resident_bytes() const {
  struct stat st{};
  return fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

uint64_t HostTier::largest_free() const {
  MutexLock lock(mu_);
  return ranges_.largest_free();
}

uint64_t HostTier::used() const {
  MutexLock lock(mu_);
  return used_;
}

uint64_t HostTier::peak_used() const {
  MutexLock lock(mu_);
  return peak_used_;
}

Result<std::unique_ptr<HostBlock>> HostTier::Allocate(uint64_t bytes, bool from_top) {
  if (bytes == 0) return Status::InvalidArgument("host-tier allocation of 0 bytes");
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(mu_);
  if (std::optional<uint64_t> offset = ranges_.Allocate(size, from_top)) {
    last_allocation_ = std::chrono::steady_clock::now();
    used_ += size;
    peak_used_ = std::max(peak_used_, used_);
    return std::make_unique<HostBlock>(this, *offset, size, static_cast<char*>(base_) + *offset);
  }
  std::string why = used_ + size > budget_ ? "" : " (free space is fragmented)";
  return Status::ResourceExhausted("host tier full: " + FormatBytes(bytes) + " requested, " +
                                   FormatBytes(used_) + " of " + FormatBytes(budget_) +
                                   " in use" + why +
                                   "; delete finished runs or raise host_mem");
}

void HostTier::Free(uint64_t offset, uint64_t size) {
  MutexLock lock(mu_);
  used_ -= size;
  ranges_.Free(offset, size);
  freed_since_release_ = true;
}

}  // namespace snapd
