// The host-RAM tier: `budget` bytes for every tenant together, in per-uid arenas. An arena is a
// memfd of its own, mapped shared, that holds the steps of one uid's runs only, so a same-node
// client given its own uid's fd (see data_plane/arena_socket.h) copies snapshots straight into
// tier memory (the one CPU copy of a push) and can reach no other tenant's bytes. Every arena
// is as large as the budget (sparse), carved into page-aligned blocks by its own allocator;
// the blocks of all arenas together never exceed the budget.
//
// Memory: the daemon populates (fallocate) every page of a block before the block reaches a
// client, so a page is charged to adjsnapd's memory cgroup and never to a client's (a client maps
// pages that exist). AllocateIn populates them itself; AllocateDeferred leaves that to its
// caller (PopulateUnits), who then need not wait for it on the thread that allocates.
// Pages are kept after a block is freed, for the next block of the same arena; they come and go
// in 2 MiB units: when a block needs fresh units and the resident units of all arenas would pass
// the budget, free units of other arenas (then of its own) are given back to the OS first.
// Resident memory may pass the budget only by units that blocks share at their edges.
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
#include <utility>
#include <vector>

#include "adjsnap/range_allocator.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"

namespace adjsnap {

class HostTier;

// One allocation; returns its bytes to the tier when the last reference goes. Holders (the
// store, an in-flight send) share it, so a snapshot deleted mid-fetch stays valid until the
// fetch completes. The tier must outlive every block.
class HostBlock {
 public:
  HostBlock(HostTier* tier, uint32_t arena, uint64_t offset, uint64_t size, void* data)
      : tier_(tier), arena_(arena), offset_(offset), size_(size), data_(data) {}
  ~HostBlock();
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  uint64_t offset() const { return offset_; }  // from the start of the arena
  uint32_t arena() const { return arena_; }    // whose arena: HostTier::ArenaFor

  // Returns the block's tail beyond `bytes` (rounded up to the alignment) to the tier. Only
  // for a block its holder owns alone (nobody else may be reading the tail).
  void ShrinkTo(uint64_t bytes);

 private:
  HostTier* const tier_;
  const uint32_t arena_;
  const uint64_t offset_;
  uint64_t size_;  // changes only in ShrinkTo, under the sole owner
  void* const data_;
};

// The fresh units of a block from AllocateDeferred, not populated yet: HostTier::PopulateUnits
// populates them. Until then they count resident and in use, so no release gives them back,
// and an allocation that shares one populates it itself (no client touches a page before it
// exists). Dropped unpopulated (or if the population fails), they count not resident again,
// and the next block there populates them. Move-only; the tier must outlive it. Empty: the
// block's pages exist already.
class FreshUnits {
 public:
  FreshUnits() = default;
  FreshUnits(FreshUnits&& o) noexcept
      : tier_(std::exchange(o.tier_, nullptr)),
        arena_(o.arena_),
        first_(o.first_),
        last_(o.last_) {}
  FreshUnits& operator=(FreshUnits&& o) noexcept;
  FreshUnits(const FreshUnits&) = delete;
  FreshUnits& operator=(const FreshUnits&) = delete;
  ~FreshUnits();

  bool empty() const { return tier_ == nullptr; }
  uint32_t arena() const { return arena_; }
  // [first, last) in units of HostTier::kUnit from the start of the arena.
  uint64_t first() const { return first_; }
  uint64_t last() const { return last_; }

 private:
  friend class HostTier;
  FreshUnits(HostTier* tier, uint32_t arena, uint64_t first, uint64_t last)
      : tier_(tier), arena_(arena), first_(first), last_(last) {}

  HostTier* tier_ = nullptr;  // null once populated, dropped or moved from
  uint32_t arena_ = 0;
  uint64_t first_ = 0;
  uint64_t last_ = 0;
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
  // Populate every page of adjsnapd's own arena in the background after start, so no push pays
  // the kernel's allocate-and-zero of a page first touched. Commits the whole budget of RAM.
  bool prefault = false;
  // Populate ahead (config host_prefault = "background"): a background thread populates the
  // next `populate_ahead_bytes` of an arena as soon as it is made (a solver's session asks for
  // it before its first push) and whenever its blocks reach fresh units, 2 MiB at a time,
  // while the units resident in all arenas stay within the budget. So a new solver's pushes
  // mostly find their pages ready, and the service is up at once. An arena that frees a block
  // (its solver reads back: read-once fetches) is not populated ahead until it allocates again.
  uint64_t populate_ahead_bytes = 0;
  // Tests: called by the populate-ahead thread, outside the lock, after each unit it populated.
  std::function<void(uint32_t arena, uint64_t unit)> on_populated_ahead{};
  // Tests: called before the fresh units [first, last) of a block are populated, on the thread
  // that populates them (AllocateIn's caller, or PopulateUnits'), outside the lock; it may
  // block. false fails the population as the kernel would (ENOMEM).
  std::function<bool(uint32_t arena, uint64_t first, uint64_t last)> on_populate{};
  // Free memory goes back to the OS once no block has been allocated for this long (a job
  // ended; see ReleaseFree); 0 = keep it. Not with `prefault`, which commits the tier for good.
  // An adopted tier starts releasing only when told (StartRelease): until its kept steps are
  // claimed, its free ranges hold them.
  std::chrono::seconds release_after{0};
  // A tmpfs mounted huge=always for the tier's file (config `host_tmpfs`); "" = mount one in a
  // private namespace (needs user or mount namespaces: systemd's RestrictNamespaces= denies
  // them, hence the unit's TemporaryFileSystem= and this).
  std::string tmpfs_dir{};
  // One arena per uid (the default), or one arena for every tenant (config host_arenas =
  // "shared"), which only root and adjsnapd's own uid may map; the others then use the copied path.
  bool per_uid_arenas = true;
};

// Thread-safe: Allocate and block release may run on any thread.
// Once the tier has been idle for `release_after`, a background thread gives the free units of
// every arena back to the OS (ReleaseFree).
class HostTier {
 public:
  static constexpr uint64_t kAlignment = 4096;
  // Pages are populated, counted and given back per arena in units of this size.
  static constexpr uint64_t kUnit = 2ull << 20;
  using ArenaId = uint32_t;

  // The tier, with the arena of adjsnapd's own uid (whose creation checks the huge-page options).
  static Result<std::unique_ptr<HostTier>> Create(uint64_t budget_bytes,
                                                  const HostTierOptions& options = {});
  // The tier over memfds kept through a restart (systemd's fd store), one per arena, each
  // sized to the budget: grown if smaller; if larger, what lies beyond is cut off (Claim
  // refuses blocks there). Takes ownership of every fd, also on error. Adopt(fd) keeps one
  // arena, adjsnapd's own.
  static Result<std::unique_ptr<HostTier>> AdoptArenas(std::map<ArenaId, int> fds,
                                                       uint64_t budget_bytes,
                                                       const HostTierOptions& options = {});
  static Result<std::unique_ptr<HostTier>> Adopt(int fd, uint64_t budget_bytes,
                                                 const HostTierOptions& options = {});
  ~HostTier();

  // The arena that holds the steps of `uid`'s runs: its own with per-uid arenas, else adjsnapd's.
  ArenaId ArenaFor(uint32_t uid) const { return per_uid_ ? uid : own_; }
  // adjsnapd's own arena (its uid's): Allocate, Claim and fd without an arena use it.
  ArenaId own_arena() const { return own_; }
  bool per_uid_arenas() const { return per_uid_; }

  // The block at [offset, offset + bytes) of an adopted arena, holding a step kept through the
  // restart; INVALID_ARGUMENT if that range is not free and inside the budget.
  Result<std::unique_ptr<HostBlock>> Claim(ArenaId arena, uint64_t offset, uint64_t bytes)
      ADJSNAP_EXCLUDES(mu_);
  Result<std::unique_ptr<HostBlock>> Claim(uint64_t offset, uint64_t bytes) {
    return Claim(own_, offset, bytes);
  }

  // What backs the tier: "hugetlb 2 MiB", "shmem THP (private tmpfs, huge=always)", "shmem THP
  // (advise)" or "4 KiB pages"; with the reason when huge pages were asked for and not had.
  const std::string& pages() const { return pages_; }
  // Bytes the background prefault, and the populate-ahead, have populated so far.
  uint64_t prefaulted() const { return prefaulted_.load(std::memory_order_relaxed); }

  // A block of `arena` (created on first use), its pages populated by adjsnapd.
  // RESOURCE_EXHAUSTED, naming the request, the use and the budget, when it does not fit.
  // `from_top`: take the highest free range that fits instead of the lowest. Compressed copies
  // are placed from the top so the raw blocks they replace leave whole holes at the bottom,
  // where the next raw push fits.
  Result<std::unique_ptr<HostBlock>> AllocateIn(ArenaId arena, uint64_t bytes,
                                                bool from_top = false) ADJSNAP_EXCLUDES(mu_);
  Result<std::unique_ptr<HostBlock>> Allocate(uint64_t bytes, bool from_top = false) {
    return AllocateIn(own_, bytes, from_top);
  }
  // AllocateIn without the population: the block, and the fresh units it reached, which the
  // caller populates (PopulateUnits) before the block's bytes are written or handed to a client.
  // For a caller that must not wait on the kernel's allocate-and-zero (5-10 ms for 64 MiB):
  // the data-plane loop, a thread holding the store's mutex.
  struct PendingBlock {
    std::unique_ptr<HostBlock> block;
    FreshUnits fresh;  // empty: the block's pages exist already
  };
  Result<PendingBlock> AllocateDeferred(ArenaId arena, uint64_t bytes, bool from_top = false)
      ADJSNAP_EXCLUDES(mu_);
  // Populates `fresh` (any thread; the tier's lock is not held meanwhile) and empties it.
  // RESOURCE_EXHAUSTED, naming the bytes and the uid, when the kernel cannot.
  Status PopulateUnits(FreshUnits& fresh) ADJSNAP_EXCLUDES(mu_);

  uint64_t budget() const { return budget_; }
  // Bytes in blocks, of every arena.
  uint64_t used() const ADJSNAP_EXCLUDES(mu_);
  // The most `used()` has been since start.
  uint64_t peak_used() const ADJSNAP_EXCLUDES(mu_);
  // The largest block AllocateIn(arena) could hand out now (no larger than the budget's room).
  uint64_t largest_free(ArenaId arena) const ADJSNAP_EXCLUDES(mu_);
  uint64_t largest_free() const { return largest_free(own_); }

  // `uid`'s arena's memfd (created on first use; owned by the tier) and its size in bytes, for
  // the arena socket.
  Result<std::pair<int, uint64_t>> ArenaFd(ArenaId arena) ADJSNAP_EXCLUDES(mu_);
  int fd() const;  // adjsnapd's own arena's memfd
  // Every arena and its memfd, for systemd's fd store at a stop.
  std::map<ArenaId, int> arena_fds() const ADJSNAP_EXCLUDES(mu_);

  // Gives the pages of every free unit of every arena back to the OS (punches holes in the
  // memfds: clients' mappings of them read zeros after) and returns the bytes released.
  // Allocation goes on meanwhile: the tier's lock is held for one piece at a time, and a unit
  // allocated in between is left alone.
  uint64_t ReleaseFree() ADJSNAP_EXCLUDES(mu_);
  // Bytes of RAM the memfds hold now (their allocated pages, whoever touched them).
  uint64_t resident_bytes() const ADJSNAP_EXCLUDES(mu_);
  // Starts giving idle free memory back (options.release_after) on an adopted tier, once every
  // kept step it holds was claimed; a created tier starts at once. Call once.
  void StartRelease() ADJSNAP_EXCLUDES(mu_);
  // Stops the prefault and the release for good (a stop: freed blocks may still hold steps
  // kept for the next start). The destructor calls it too.
  void StopBackgroundWork() ADJSNAP_EXCLUDES(mu_);

 private:
  friend class HostBlock;
  friend class FreshUnits;
  // How every arena is backed: the kind the first arena got.
  enum class Kind { kHugeTlb, kTmpfsDir, kPrivateTmpfs, kMemfd };
  struct Arena {
    ArenaId id = 0;
    int fd = -1;
    void* base = nullptr;
    RangeAllocator ranges;
    // Per 2 MiB unit: bytes of blocks in it, and whether adjsnapd populated its pages (or, for an
    // adopted arena, whether the memfd held pages there).
    std::vector<uint32_t> unit_used;
    std::vector<bool> resident;
    // Per unit: how many populations of it are pending or under way outside the lock (the
    // populate-ahead thread's, or a block's FreshUnits): an allocation that takes one populates
    // it itself (all are adjsnapd's threads: the pages are adjsnapd's either way), so no client
    // touches a page before it exists; no release gives it back meanwhile.
    std::vector<uint32_t> populating;
    explicit Arena(uint64_t bytes) : ranges(bytes) {}
  };
  HostTier(uint64_t budget, std::string pages, Kind kind, ArenaId own,
           const HostTierOptions& options);
  // A new memfd of `kind_`, sized to the budget.
  Result<int> NewBacking() const;
  // Maps `fd` as arena `id` (closing it on error); `adopted`: count the pages it holds.
  Status AddArena(ArenaId id, int fd, bool adopted) ADJSNAP_REQUIRES(mu_);
  Result<Arena*> ArenaLocked(ArenaId id) ADJSNAP_REQUIRES(mu_);
  // Counts the bytes of [offset, offset + size) in (add) or out of its units; on add, widens
  // [fresh_first, fresh_last) over the units that were not resident (now counted resident).
  void CountUnits(Arena& a, uint64_t offset, uint64_t size, bool add, uint64_t* fresh_first,
                  uint64_t* fresh_last) ADJSNAP_REQUIRES(mu_);
  // Gives back free resident units, other arenas' first, until the resident units fit in the
  // budget again (nothing before StartRelease).
  void MakeResidentRoom(const Arena& keep) ADJSNAP_REQUIRES(mu_);
  bool PunchUnit(Arena& a, uint64_t unit) ADJSNAP_REQUIRES(mu_);
  // Populates [first, last) units of `a` from adjsnapd (outside the lock: the units are in use).
  bool Populate(const Arena& a, uint64_t first, uint64_t last) const;
  // Ends `fresh`'s marks; units it leaves unpopulated (`populated` false) and nobody else is
  // populating count not resident again.
  void EndFresh(FreshUnits& fresh, bool populated) ADJSNAP_EXCLUDES(mu_);
  std::unique_ptr<HostBlock> NewBlock(Arena& a, uint64_t offset, uint64_t size)
      ADJSNAP_REQUIRES(mu_);
  void Free(ArenaId arena, uint64_t offset, uint64_t size) ADJSNAP_EXCLUDES(mu_);
  // Takes unit `u` of `a` to be populated outside the lock (FillUnit): counted resident and
  // marked populating, so an allocation that takes it meanwhile populates it itself and no
  // release gives it back. False if it is resident already or the budget's worth of units is.
  bool ClaimUnit(Arena& a, uint64_t u) ADJSNAP_REQUIRES(mu_);
  // Populates a unit ClaimUnit took, then ends the claim. False (errno set) if the kernel could
  // not; the unit is then not resident, unless a block took it meanwhile.
  bool FillUnit(Arena& a, uint64_t u) ADJSNAP_EXCLUDES(mu_);
  void Prefault();
  // Asks the populate-ahead thread to look at `arena` (made, or grown into fresh units).
  void WantAhead(ArenaId arena) ADJSNAP_REQUIRES(mu_);
  // The populate-ahead thread (options_.populate_ahead_bytes).
  void PopulateAhead() ADJSNAP_EXCLUDES(mu_);
  // The release thread: ReleaseFree once no allocation happened for `release_after`.
  void ReleaseWhenIdle(std::chrono::seconds release_after) ADJSNAP_EXCLUDES(mu_);

  const uint64_t budget_;
  const uint64_t units_;  // per arena: the budget in units, rounded up
  const std::string pages_;
  const Kind kind_;
  const ArenaId own_;
  const bool per_uid_;
  const HostTierOptions options_;
  std::atomic<uint64_t> prefaulted_{0};
  std::atomic<bool> stopping_{false};
  std::thread prefault_;
  std::thread ahead_;
  std::vector<ArenaId> want_ahead_ ADJSNAP_GUARDED_BY(mu_);  // arenas to populate ahead in
  CondVar ahead_cv_;
  std::thread releaser_;
  std::chrono::seconds release_after_{0};
  mutable Mutex mu_;
  CondVar stop_cv_;  // wakes the release thread at destruction
  // Arenas live as long as the tier: a client's mapping of one must stay the arena.
  std::map<ArenaId, std::unique_ptr<Arena>> arenas_ ADJSNAP_GUARDED_BY(mu_);
  uint64_t resident_units_ ADJSNAP_GUARDED_BY(mu_) = 0;
  // Since the last release: whether a block was freed (its pages may be resident), and when
  // the last allocation was.
  bool freed_since_release_ ADJSNAP_GUARDED_BY(mu_) = false;
  // StartRelease was called: free units may be given back (an adopted tier's kept steps are
  // claimed by then).
  bool releasing_ ADJSNAP_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_allocation_ ADJSNAP_GUARDED_BY(mu_);
  uint64_t used_ ADJSNAP_GUARDED_BY(mu_) = 0;
  uint64_t peak_used_ ADJSNAP_GUARDED_BY(mu_) = 0;
};

}  // namespace adjsnap
