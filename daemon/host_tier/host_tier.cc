#include "host_tier/host_tier.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "snapd/units.h"

namespace snapd {

HostBlock::~HostBlock() { tier_->Free(offset_, size_); }

void HostBlock::ShrinkTo(uint64_t bytes) {
  uint64_t keep = (bytes + HostTier::kAlignment - 1) / HostTier::kAlignment * HostTier::kAlignment;
  if (keep == 0 || keep >= size_) return;
  tier_->Free(offset_ + keep, size_ - keep);
  size_ = keep;
}

Result<std::unique_ptr<HostTier>> HostTier::Create(uint64_t budget_bytes) {
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  if (budget == 0) {
    return Status::InvalidArgument("host-tier budget " + std::to_string(budget_bytes) +
                                   " bytes is below one page; set host_mem or host_mem_perc");
  }
  // A sparse memfd: the budget is a ceiling, not an up-front commitment of RAM.
  int fd = memfd_create("snapd-host-tier", MFD_CLOEXEC);
  if (fd < 0) return Status::Internal(std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(budget)) != 0) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("sizing the host tier to " + FormatBytes(budget) +
                                     " failed: " + std::strerror(err));
  }
  return Map(fd, budget);
}

Result<std::unique_ptr<HostTier>> HostTier::Map(int fd, uint64_t budget) {
  void* base = mmap(nullptr, budget, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("mapping " + FormatBytes(budget) +
                                     " for the host tier failed: " + std::strerror(err));
  }
  return std::unique_ptr<HostTier>(new HostTier(fd, base, budget));
}

Result<std::unique_ptr<HostTier>> HostTier::Adopt(int fd, uint64_t budget_bytes) {
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
  return Map(fd, budget);
}

Result<std::unique_ptr<HostBlock>> HostTier::Claim(uint64_t offset, uint64_t bytes) {
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(mu_);
  if (offset % kAlignment != 0 || size == 0 || !ranges_.AllocateAt(offset, size)) {
    return Status::InvalidArgument("host-tier range at " + std::to_string(offset) + " of " +
                                   std::to_string(size) + " bytes is not free in a tier of " +
                                   FormatBytes(budget_));
  }
  used_ += size;
  peak_used_ = std::max(peak_used_, used_);
  return std::make_unique<HostBlock>(this, offset, size, static_cast<char*>(base_) + offset);
}

HostTier::HostTier(int fd, void* base, uint64_t budget)
    : fd_(fd), base_(base), budget_(budget), ranges_(budget) {}

HostTier::~HostTier() {
  munmap(base_, budget_);
  close(fd_);
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
}

}  // namespace snapd
