// The host-RAM tier: one region of exactly `budget` bytes, reserved at start, carved into
// page-aligned blocks. Because every block lives inside the region, the tier cannot hand out
// more than its budget, whatever the allocation pattern. The region is a memfd mapped shared,
// so a same-node client given the fd (see data_plane/arena_socket.h) copies snapshots straight
// into tier memory: the one CPU copy of a push.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "snapd/range_allocator.h"
#include "snapd/status.h"
#include "snapd/thread_annotations.h"

namespace snapd {

class HostTier;

// One allocation; returns its bytes to the tier when the last reference goes. Holders (the
// store, an in-flight send) share it, so a snapshot deleted mid-fetch stays valid until the
// fetch completes. The tier must outlive every block.
class HostBlock {
 public:
  HostBlock(HostTier* tier, uint64_t offset, uint64_t size, void* data)
      : tier_(tier), offset_(offset), size_(size), data_(data) {}
  ~HostBlock();
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }  // from the start of the arena

  // Returns the block's tail beyond `bytes` (rounded up to the alignment) to the tier. Only
  // for a block its holder owns alone (nobody else may be reading the tail).
  void ShrinkTo(uint64_t bytes);

 private:
  HostTier* const tier_;
  const uint64_t offset_;
  uint64_t size_;  // changes only in ShrinkTo, under the sole owner
  void* const data_;
};

// How the tier's memory is backed (config `host_huge_pages`, docs/architecture.md "First
// touch"). Huge pages cut the page faults of a process that touches the tier for the first
// time 512-fold (one per 2 MiB instead of one per 4 KiB).
enum class HugePages {
  kAuto,     // hugetlb when the node's pool has the whole budget free, else shmem THP on a
             // tmpfs with huge=always (tmpfs_dir, else one mounted privately), else shmem THP
             // advice on a memfd
  kHugeTlb,  // hugetlb or refuse to start
  kThp,      // shmem THP on a tmpfs with huge=always, or refuse to start
  kOff,      // 4 KiB pages
};

struct HostTierOptions {
  HugePages huge_pages = HugePages::kOff;
  // Populate every page of the tier in the background after start, so no push pays the
  // kernel's allocate-and-zero of a page first touched. Commits the whole budget of RAM.
  bool prefault = false;
  // Free memory goes back to the OS once no block has been allocated for this long (a job
  // ended; see ReleaseFree); 0 = keep it. Not with `prefault`, which commits the tier for good.
  // An adopted tier starts releasing only when told (StartRelease): until its kept steps are
  // claimed, its free ranges hold them.
  std::chrono::seconds release_after{0};
  // A tmpfs mounted huge=always for the tier's file (config `host_tmpfs`); "" = mount one in a
  // private namespace (needs user or mount namespaces: systemd's RestrictNamespaces= denies
  // them, hence the unit's TemporaryFileSystem= and this).
  std::string tmpfs_dir{};
};

// Thread-safe: Allocate and block release may run on any thread.
// Pages are populated on first touch (or by the prefault at start) and kept after a block is
// freed, so a steady stream of same-sized snapshots (the common case) reuses warm pages
// instead of faulting fresh ones. Once the tier has been idle for `release_after`, a
// background thread gives the free ones back to the OS (ReleaseFree).
class HostTier {
 public:
  static constexpr uint64_t kAlignment = 4096;

  static Result<std::unique_ptr<HostTier>> Create(uint64_t budget_bytes,
                                                  const HostTierOptions& options = {});
  // The tier over `fd`, a memfd kept through a restart (systemd's fd store), sized to the
  // budget: grown if it is smaller; if larger, what lies beyond the budget is cut off (Claim
  // refuses blocks there). Takes ownership of `fd`, also on error.
  static Result<std::unique_ptr<HostTier>> Adopt(int fd, uint64_t budget_bytes,
                                                 const HostTierOptions& options = {});
  ~HostTier();

  // The block at [offset, offset + bytes) of an adopted tier, holding a step kept through the
  // restart; INVALID_ARGUMENT if that range is not free and inside the budget.
  Result<std::unique_ptr<HostBlock>> Claim(uint64_t offset, uint64_t bytes) SNAPD_EXCLUDES(mu_);

  // What backs the tier: "hugetlb 2 MiB", "shmem THP (private tmpfs, huge=always)", "shmem THP
  // (advise)" or "4 KiB pages"; with the reason when huge pages were asked for and not had.
  const std::string& pages() const { return pages_; }
  // Bytes the background prefault has populated so far (budget() once it is done).
  uint64_t prefaulted() const { return prefaulted_.load(std::memory_order_relaxed); }

  // RESOURCE_EXHAUSTED, naming the request, the use and the budget, when it does not fit.
  // `from_top`: take the highest free range that fits instead of the lowest. Compressed copies
  // are placed from the top so the raw blocks they replace leave whole holes at the bottom,
  // where the next raw push fits.
  Result<std::unique_ptr<HostBlock>> Allocate(uint64_t bytes, bool from_top = false)
      SNAPD_EXCLUDES(mu_);

  uint64_t budget() const { return budget_; }
  uint64_t used() const SNAPD_EXCLUDES(mu_);
  // The most `used()` has been since start.
  uint64_t peak_used() const SNAPD_EXCLUDES(mu_);
  // The largest block Allocate could hand out now.
  uint64_t largest_free() const SNAPD_EXCLUDES(mu_);
  int fd() const { return fd_; }  // the arena memfd; owned by the tier
  // Gives the pages of every free range back to the OS (punches holes in the memfd: clients'
  // mappings of them read zeros after) and returns the bytes released. Allocation goes on
  // meanwhile: the tier's lock is held for one piece of a range at a time, and a piece that
  // was allocated in between is left alone.
  uint64_t ReleaseFree() SNAPD_EXCLUDES(mu_);
  // Bytes of RAM the memfd holds now (its allocated pages, whoever touched them).
  uint64_t resident_bytes() const;
  // Starts giving idle free memory back (options.release_after) on an adopted tier, once every
  // kept step it holds was claimed; a created tier starts at once. Call once.
  void StartRelease() SNAPD_EXCLUDES(mu_);
  // Stops the prefault and the release for good (a stop: freed blocks may still hold steps
  // kept for the next start). The destructor calls it too.
  void StopBackgroundWork() SNAPD_EXCLUDES(mu_);

 private:
  friend class HostBlock;
  HostTier(int fd, void* base, uint64_t budget, std::string pages);
  // Maps `fd` (closing it on error), advises THP where `pages` says so and starts the prefault.
  static Result<std::unique_ptr<HostTier>> Map(int fd, uint64_t budget, std::string pages,
                                               const HostTierOptions& options, bool release);
  void Free(uint64_t offset, uint64_t size) SNAPD_EXCLUDES(mu_);
  void Prefault();
  // The release thread: ReleaseFree once no allocation happened for `release_after`.
  void ReleaseWhenIdle(std::chrono::seconds release_after) SNAPD_EXCLUDES(mu_);

  const int fd_;
  void* const base_;
  const uint64_t budget_;
  const std::string pages_;
  std::atomic<uint64_t> prefaulted_{0};
  std::atomic<bool> stopping_{false};
  std::thread prefault_;
  std::thread releaser_;
  std::chrono::seconds release_after_{0};
  mutable Mutex mu_;
  CondVar stop_cv_;  // wakes the release thread at destruction
  RangeAllocator ranges_ SNAPD_GUARDED_BY(mu_);
  // Since the last release: whether a block was freed (its pages may be resident), and when
  // the last allocation was.
  bool freed_since_release_ SNAPD_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_allocation_ SNAPD_GUARDED_BY(mu_);
  uint64_t used_ SNAPD_GUARDED_BY(mu_) = 0;
  uint64_t peak_used_ SNAPD_GUARDED_BY(mu_) = 0;
};

}  // namespace snapd
