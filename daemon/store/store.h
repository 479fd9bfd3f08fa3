// The store: snapd's index of runs and snapshots, kept in memory over the catalog (RocksDB),
// the host tier and the disk tier; the single place where every request is validated, and
// where placement is applied (store/tiering.cc: demotion, prefetch, read-once release).
//
// Invariant: a snapshot is visible (Locate, List, Fetch) only once its bytes are where its
// record says: in host memory (TIER_HOST) or in a complete, synced spool file (TIER_DISK); a
// push that fails or is abandoned leaves neither. A disk-tier snapshot may also have a host
// copy (read ahead of a fetch); the record stays TIER_DISK, so a crash loses nothing. A host
// snapshot of a run that compresses at ingest may hold compressed bytes (record.codec set);
// a fetch decodes it first.
//
// Threading: every public method is thread-safe and never blocks on I/O: one mutex guards the
// index, and catalog writes happen under it so the index and the catalog never disagree.
// Disk I/O and compression run on an IoPool (whose jobs share slabs with the compression
// workers); a tiering thread moves snapshots between tiers; a checksum thread records
// checksums. Requests that must wait (a push when the host tier is full, a
// fetch of a step still on disk) return "later" and get their answer through a callback, run
// on one of those threads without the store's mutex held.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "disk_tier/disk_tier.h"
#include "snapd/io_pool.h"
#include "host_tier/host_tier.h"
#include "log.h"
#include "snapd/status.h"
#include "snapd/v1/control.pb.h"
#include "store/snapshot_io.h"
#include "snapd/thread_annotations.h"

namespace snapd {

struct StoreCounters {
  uint64_t runs = 0;
  uint64_t host_snapshots = 0;  // whose bytes are in host memory (only copy or read-ahead)
  uint64_t disk_snapshots = 0;
  uint64_t disk_raw_bytes = 0;  // raw size of the disk-tier snapshots (compressed or not)
  uint64_t lost_snapshots = 0;
  uint64_t demotions = 0;
  uint64_t disk_reads = 0;
  uint64_t prefetch_hits = 0;
  uint64_t demand_reads = 0;
  uint64_t released = 0;
  uint64_t refused_pushes = 0;  // refused because host and disk together had no room
  uint64_t compactions = 0;     // host blocks moved to merge free room
};

// Who asks. A tenant (a uid, as the kernel reported it for the caller's socket) sees and
// changes only the runs it owns; to it, another tenant's run does not exist. An admin (root,
// snapd's own uid, the admin_group) sees and manages every run. Callers inside the daemon and
// the tests act as Admin().
struct Tenant {
  uint32_t uid = 0;
  bool admin = false;
  static Tenant Admin() { return {0, true}; }
  static Tenant User(uint32_t uid) { return {uid, false}; }
};

struct StoreOptions {
  uint64_t epoch = 0;         // this daemon start (Catalog::BeginEpoch)
  int io_threads = 2;         // disk I/O threads
  uint64_t max_prefetch = 8;  // upper bound of the adaptive read-ahead depth
  int compress_threads = 1;   // compression workers (slabs of one snapshot in parallel)
  uint64_t tenant_quota = 0;  // bytes a tenant (not an admin) may store; 0 = no limit
  // The most of the host tier one tenant (not an admin) may fill with steps of runs that
  // cannot move to disk (layers without Disk); a tenant above it has its movable steps written
  // out first. 1 = no limit.
  double tenant_host_share = 1.0;
};

class Store {
 public:
  // Loads the catalog. Host-tier snapshots recorded by an earlier start did not survive it and
  // are re-recorded as TIER_LOST; disk-tier ones whose file is present and complete are
  // recovered (their checksums are verified in the background and on every read), others are
  // marked lost. `disk` may be null (no disk tier). Files no record names are deleted.
  static Result<std::unique_ptr<Store>> Open(Catalog* catalog, HostTier* host, DiskTier* disk,
                                             const StoreOptions& options);
  ~Store();

  // Run names are unique per owner: another tenant's run of the same name is another run. The
  // run belongs to `owner_uid`. Calls that take a name accept "UID:name" (see FindByName).
  // `device_steps`: device layers only, how many of the newest steps the creating client keeps
  // in its GPU pool (they are left out of the host/disk split).
  // `session_id` (0: none): the session opening or attaching; see RemoveOrphans.
  Result<v1::RunInfo> OpenRun(const v1::RunSpec& spec, uint32_t owner_uid, bool* created,
                              uint64_t device_steps = 0, uint64_t session_id = 0)
      SNAPD_EXCLUDES(mu_);
  Result<v1::RunInfo> CloseRun(const std::string& name, const Tenant& who = Tenant::Admin())
      SNAPD_EXCLUDES(mu_);
  // Returns the tier bytes released.
  Result<uint64_t> DeleteRun(const std::string& name, const Tenant& who = Tenant::Admin())
      SNAPD_EXCLUDES(mu_);
  Result<uint64_t> DeleteSnapshot(const std::string& name, uint64_t step,
                                  const Tenant& who = Tenant::Admin()) SNAPD_EXCLUDES(mu_);
  // The runs `who` may see.
  std::vector<v1::RunInfo> ListRuns(const Tenant& who = Tenant::Admin()) const
      SNAPD_EXCLUDES(mu_);
  Result<std::vector<v1::SnapshotInfo>> ListSnapshots(const std::string& name, v1::RunInfo* run,
                                                      const Tenant& who = Tenant::Admin()) const
      SNAPD_EXCLUDES(mu_);
  Result<v1::SnapshotInfo> Locate(const std::string& name, uint64_t step,
                                  const Tenant& who = Tenant::Admin()) const SNAPD_EXCLUDES(mu_);
  Result<uint64_t> RunId(const std::string& name, const Tenant& who = Tenant::Admin()) const
      SNAPD_EXCLUDES(mu_);
  // A tenant's byte quota (0 = no limit), replacing StoreOptions.tenant_quota for that uid
  // until the daemon restarts; and what the tenant stores now.
  void SetQuota(uint32_t uid, uint64_t bytes) SNAPD_EXCLUDES(mu_);
  struct Usage {
    uint64_t quota = 0;
    uint64_t stored_bytes = 0;
    uint64_t in_flight_bytes = 0;  // pushes reserved, not yet stored (they count to the quota)
    uint64_t runs = 0;
  };
  Usage TenantUsage(uint32_t uid) const SNAPD_EXCLUDES(mu_);

  // The device tier: steps a client keeps in its own GPU memory (device layers). The store
  // only records them, for Locate and List and so that nobody pushes the step again; the
  // bytes never reach the daemon. The records are kept in memory, not in the catalog: when
  // `session_id` ends (EndSession) they become TIER_LOST. held = false forgets one.
  Status HoldDeviceStep(uint64_t run_id, uint64_t step, uint64_t bytes, uint64_t session_id,
                        bool held, const Tenant& who = Tenant::Admin()) SNAPD_EXCLUDES(mu_);
  // The session ended: the device steps it held are lost. `died`: its client went away without
  // closing it; a run that is not kept and that no live session opened becomes an orphan.
  void EndSession(uint64_t session_id, bool died = false) SNAPD_EXCLUDES(mu_);
  // Removes the orphans (see EndSession) older than `grace`, logging each.
  void RemoveOrphans(std::chrono::seconds grace) SNAPD_EXCLUDES(mu_);

  // A push between BeginPush and CommitPush/AbortPush: the step is reserved and `block` holds
  // the host memory its bytes go to (also the staging buffer of a step bound for disk).
  struct PushTicket {
    uint64_t run_id = 0;
    uint64_t step = 0;
    std::shared_ptr<HostBlock> block;
  };
  using PushDone = std::function<void(Result<PushTicket>)>;
  // Validates and reserves host memory. `done` gets the ticket or the error, exactly once: on
  // the caller's thread before BeginPush returns when the answer is known at once, or later
  // (from the tiering thread) when the host tier is full but room is coming (demotion to
  // disk). Returns true in that second case: the push waits. Never calls `done` under the
  // store's lock.
  // `who`: the pushing session's tenant; the run must be its own, and the push must fit the
  // tenant's quota.
  bool BeginPush(uint64_t run_id, uint64_t step, uint64_t bytes, PushDone done,
                 const Tenant& who = Tenant::Admin()) SNAPD_EXCLUDES(mu_);
  Status CommitPush(const PushTicket& ticket) SNAPD_EXCLUDES(mu_);
  void AbortPush(const PushTicket& ticket) SNAPD_EXCLUDES(mu_);

  // The step's bytes in host memory. `generation` identifies this copy of the step for
  // Consumed (a step deleted and pushed again is another generation).
  struct FetchGrant {
    std::shared_ptr<HostBlock> block;  // shared: a concurrent delete cannot free it under a send
    uint64_t generation = 0;
  };
  using FetchDone = std::function<void(Result<FetchGrant>)>;
  // `done` gets the bytes or an error, exactly once: before BeginFetch returns when they are
  // in host memory (or the fetch is refused), or later, from an I/O thread, once they are
  // read from disk; true in that second case. `backward`: the fetch is the backward pass (it
  // paces and triggers prefetch); false for a dump.
  bool BeginFetch(uint64_t run_id, uint64_t step, uint64_t bytes, bool backward,
                  FetchDone done, const Tenant& who = Tenant::Admin()) SNAPD_EXCLUDES(mu_);
  // The solver has the bytes of a fetched step: unless the run keeps steps, the step is
  // released (read-once).
  void Consumed(uint64_t run_id, uint64_t step, uint64_t generation) SNAPD_EXCLUDES(mu_);

  // Starts disk reads of these steps into host memory; returns how many started.
  Result<uint64_t> Prefetch(const std::string& name, const std::vector<uint64_t>& steps,
                            const Tenant& who = Tenant::Admin()) SNAPD_EXCLUDES(mu_);
  struct DrainResult {
    uint64_t moved = 0;
    uint64_t moved_bytes = 0;
  };
  // Writes every host-only snapshot to disk; `done` runs once they all are (or one failed).
  void Drain(std::function<void(Result<DrainResult>)> done) SNAPD_EXCLUDES(mu_);

  StoreCounters Counters() const SNAPD_EXCLUDES(mu_);
  uint64_t host_budget() const { return host_->budget(); }
  uint64_t host_used() const { return host_->used(); }
  uint64_t host_peak_used() const { return host_->peak_used(); }
  const DiskTier* disk() const { return disk_; }

  // Blocks until every checksum queued so far is recorded and the tiering thread has nothing
  // in flight (tests, orderly shutdown).
  void WaitChecksumsIdle() SNAPD_EXCLUDES(mu_);
  void WaitTieringIdle() SNAPD_EXCLUDES(mu_);

 private:
  // A host-tier block whose release, by whoever drops the last reference (a lease, an I/O job,
  // the checksum thread), wakes the tiering thread to hand the room to what waits for it.
  Result<std::shared_ptr<HostBlock>> AllocateHost(uint64_t bytes, bool from_top = false);
  // What a released block's deleter calls: the store, until it is destroyed (blocks may
  // outlive it in a lease the data plane still holds), then nothing.
  struct Waker {
    Mutex mu;
    Store* store SNAPD_GUARDED_BY(mu) = nullptr;
    void Wake() SNAPD_EXCLUDES(mu);
  };
  const std::shared_ptr<Waker> waker_ = std::make_shared<Waker>();
  // BeginPush and BeginFetch under the lock: the answer now, or nullopt after parking `done`.
  Result<std::optional<PushTicket>> TryBeginPush(uint64_t run_id, uint64_t step, uint64_t bytes,
                                                 PushDone& done, const Tenant& who)
      SNAPD_EXCLUDES(mu_);
  Result<std::optional<FetchGrant>> TryBeginFetch(uint64_t run_id, uint64_t step, uint64_t bytes,
                                                  bool backward, FetchDone& done,
                                                  const Tenant& who) SNAPD_EXCLUDES(mu_);
  struct PendingPack {
    PackedSnapshot packed;
    uint64_t checksum;  // of the raw bytes, taken before compressing
  };
  struct Snapshot {
    v1::SnapshotRecord record;         // durable truth: TIER_HOST, TIER_DISK or TIER_LOST
    std::shared_ptr<HostBlock> block;  // host bytes: the only copy (HOST) or a read-ahead (DISK)
    uint64_t generation = 0;           // unique per stored copy; also arrival order
    bool writing = false;              // a demotion is writing `block` to disk
    bool reading = false;              // a disk read into host memory is in flight
    bool verified = true;              // false for a recovered file not yet checksummed
    std::vector<FetchDone> waiters;   // fetches waiting for that read
    // A compressed copy made at ingest that could not replace the raw block yet.
    std::shared_ptr<PendingPack> pending_pack;
  };
  struct DeviceStep {
    uint64_t session_id = 0;  // whose GPU memory holds it
    bool lost = false;        // that session ended
  };
  struct Run {
    v1::RunRecord record;
    std::map<uint64_t, Snapshot> snapshots;
    std::map<uint64_t, DeviceStep> device;  // the device tier: recorded, held by clients
    std::set<uint64_t> in_flight;  // pushes reserved or waiting for room
    std::set<uint64_t> released;   // read-once steps already consumed (this daemon start)
    uint64_t stored_bytes = 0;
    // Backward pace: time between consecutive fetches of descending steps (EWMA).
    int64_t last_fetch_ns = 0;
    uint64_t last_fetch_step = 0;
    double pace_ns = 0;
    uint64_t prefetch_from = 0;  // read ahead below this step (the last backward fetch); 0 = none
    std::set<uint64_t> sessions;  // live sessions that opened or attached to it
    // When the last of them died (its client went away without closing); none: not an orphan.
    std::optional<std::chrono::steady_clock::time_point> orphaned_at;
  };
  struct ChecksumJob {
    uint64_t run_id;
    uint64_t step;
    uint64_t generation;
    uint64_t bytes;
    std::shared_ptr<HostBlock> block;
  };
  struct ParkedPush {
    uint64_t run_id;
    uint64_t step;
    uint64_t bytes;
    PushDone later;
  };
  struct DrainWaiter {
    std::function<void(Result<DrainResult>)> done;
    DrainResult result;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (run_id, step)
  // Callbacks collected under the mutex, run after it is released.
  using Deferred = std::vector<std::function<void()>>;

  Store(Catalog* catalog, HostTier* host, DiskTier* disk, const StoreOptions& options);
  Status Load();
  void ChecksumLoop() SNAPD_EXCLUDES(mu_);
  Result<const Run*> FindByName(const std::string& name, const Tenant& who) const
      SNAPD_REQUIRES(mu_);
  Result<Run*> FindByName(const std::string& name, const Tenant& who) SNAPD_REQUIRES(mu_);
  Result<Run*> FindById(uint64_t run_id, const Tenant& who) SNAPD_REQUIRES(mu_);
  uint64_t QuotaOf(uint32_t uid) const SNAPD_REQUIRES(mu_);
  Usage UsageOf(uint32_t uid) const SNAPD_REQUIRES(mu_);
  Snapshot* FindSnapshot(uint64_t run_id, uint64_t step, uint64_t generation) SNAPD_REQUIRES(mu_);
  // The snapshot at `key` (any generation), with its run; both null if gone.
  std::pair<Run*, Snapshot*> FindSnapshot(const std::pair<uint64_t, uint64_t>& key)
      SNAPD_REQUIRES(mu_);  // (run_id, step)
  // NOT_FOUND for a step the run does not hold, saying whether it was read once and released.
  static Status StepNotFound(const Run& run, uint64_t step);
  static v1::RunInfo Info(const Run& run);
  static v1::SnapshotInfo Info(const Snapshot& snap);
  static v1::SnapshotInfo Info(const Run& run, uint64_t step, const DeviceStep& held);
  // FAILED_PRECONDITION (held) or DATA_LOSS (its session ended) for a device step the daemon
  // is asked to serve.
  static Status DeviceStepHere(const Run& run, uint64_t step, const DeviceStep& held);
  // INVALID_ARGUMENT when a push or fetch moves another size than the run's steps;
  // "push of step 3 of run 'r' carries N bytes ...".
  static Status CheckSize(const Run& run, uint64_t step, uint64_t bytes, const char* what,
                          const char* moves);
  // A push (or device copy) of a new step: the run is open, the step in range and not stored,
  // held on a device or being pushed, and the size right.
  static Status CheckNewStep(const Run& run, uint64_t step, uint64_t bytes, const char* what,
                             const char* moves);
  // Removes a snapshot from the index and the catalog, freeing its tiers.
  Status Erase(Run& run, std::map<uint64_t, Snapshot>::iterator it) SNAPD_REQUIRES(mu_);
  void MarkLost(Run& run, Snapshot& snap, const std::string& why) SNAPD_REQUIRES(mu_);

  // Tiering (store/tiering.cc).
  void TieringLoop() SNAPD_EXCLUDES(mu_);
  void Wake();
  // One pass of the policy; returns callbacks to run unlocked.
  void Rebalance(Deferred& deferred) SNAPD_REQUIRES(mu_);
  void GrantParkedPushes(Deferred& deferred) SNAPD_REQUIRES(mu_);
  // Starts the disk reads that fetches wait on, as far as host room allows.
  void ServeParkedReads() SNAPD_REQUIRES(mu_);
  void StartDemotion(Run& run, Snapshot& snap) SNAPD_REQUIRES(mu_);
  void FinishDemotion(uint64_t run_id, uint64_t step, uint64_t generation, uint32_t spool,
                      const std::string& name, uint64_t checksum,
                      Result<WrittenSnapshot> written) SNAPD_EXCLUDES(mu_);
  // Starts a disk read of `snap` into host memory if there is room; false if not.
  // A step compressed at ingest and still only in host memory is decoded instead of read.
  bool StartRead(Run& run, Snapshot& snap, bool urgent) SNAPD_REQUIRES(mu_);
  // At-ingest compression (store/tiering.cc): compress the committed step on an I/O thread,
  // then swap its host block for the smaller one.
  void StartIngestCompression(Run& run, Snapshot& snap) SNAPD_REQUIRES(mu_);
  void FinishIngestCompression(uint64_t run_id, uint64_t step, uint64_t generation,
                               uint64_t checksum, Result<PackedSnapshot> packed)
      SNAPD_EXCLUDES(mu_);
  static bool PackStillApplies(const Snapshot& snap);
  // Swaps the snapshot's raw host block for its compressed copy; false if that must wait (no
  // room beside, and someone still holds the raw block).
  bool ApplyPack(Run& run, Snapshot& snap, const PendingPack& pending) SNAPD_REQUIRES(mu_);
  void RetryPendingPacks() SNAPD_REQUIRES(mu_);
  // Moves compressed host copies up the arena until a block of `bytes` fits (variable-size
  // copies fragment it); false if the free room is too small or cannot be merged.
  bool CompactHost(uint64_t bytes) SNAPD_REQUIRES(mu_);
  // The snapshot's host block holds compressed bytes (compressed at ingest, not yet decoded).
  static bool HoldsCompressed(const Snapshot& snap) {
    return snap.record.tier() == v1::TIER_HOST && snap.record.codec() != v1::CODEC_NONE;
  }
  void FinishRead(uint64_t run_id, uint64_t step, uint64_t generation,
                  std::shared_ptr<HostBlock> block, Status read, int64_t started_ns)
      SNAPD_EXCLUDES(mu_);
  void StartScrub(uint64_t run_id, uint64_t step) SNAPD_REQUIRES(mu_);
  void SchedulePrefetch(Run& run) SNAPD_REQUIRES(mu_);
  // Drops one read-ahead copy or starts one demotion to make host room; false if neither.
  bool FreeHostRoom() SNAPD_REQUIRES(mu_);
  // Host bytes that work in flight will free without another demotion: demotions being
  // written, and a checksum still hashing a block the store has let go of.
  uint64_t FreeingBytes() SNAPD_REQUIRES(mu_);
  // The job's step was deleted, or a demotion recorded its checksum: nothing to hash.
  bool Moot(const ChecksumJob& job) SNAPD_REQUIRES(mu_);
  // Drops queued checksums of steps that were deleted or whose checksum a demotion recorded,
  // so their blocks go back to the host tier now instead of when the checksum thread gets
  // to them.
  void PruneChecksumQueue() SNAPD_REQUIRES(mu_);
  bool DemotionWanted(const Run& run, const Snapshot& snap) const SNAPD_REQUIRES(mu_);
  // Something in flight (a disk write or read, a checksum holding a block) will free host
  // memory or change what can be demoted soon.
  bool Settling() const SNAPD_REQUIRES(mu_);
  void FinishDrainsIfDone(Deferred& deferred) SNAPD_REQUIRES(mu_);
  uint64_t BlockBytes(const Run& run) const;
  // The host memory a new declared run may plan its resident steps in: the budget less what
  // every other run holds there or has planned to keep there (an open declared run's range
  // [host_boundary, N)), so runs sharing the tier get boundaries computed against each other.
  uint64_t HostRoomForNewRun() const SNAPD_REQUIRES(mu_);
  // Host-tier bytes of `uid`'s steps in runs that cannot move them to disk.
  uint64_t PinnedHostBytesOf(uint32_t uid) const SNAPD_REQUIRES(mu_);
  Result<uint64_t> DeleteRunLocked(Run* run) SNAPD_REQUIRES(mu_);
  // A run whose declared steps cannot fit in the tiers it may use (host and disk budgets
  // together) is refused when it opens, naming the node's limit, unless it compresses (its
  // stored size is unknown) or waits for room (block_when_full: the backward pass frees it).
  Status CheckFitsTheNode(const v1::RunSpec& spec, uint64_t device_steps) const;

  Catalog* const catalog_;
  HostTier* const host_;
  DiskTier* const disk_;  // null: no disk tier
  const StoreOptions options_;

  mutable Mutex mu_;
  std::map<uint64_t, Run> runs_ SNAPD_GUARDED_BY(mu_);
  // Run names are per owner uid: two users may each have "shot-17".
  std::map<std::pair<uint32_t, std::string>, uint64_t> by_name_ SNAPD_GUARDED_BY(mu_);
  std::map<uint32_t, uint64_t> quotas_ SNAPD_GUARDED_BY(mu_);  // per-uid, from SetQuota
  uint64_t next_generation_ SNAPD_GUARDED_BY(mu_) = 1;
  StoreCounters counters_ SNAPD_GUARDED_BY(mu_);  // demotions, reads, hits, releases
  std::deque<ChecksumJob> checksum_queue_ SNAPD_GUARDED_BY(mu_);
  bool checksum_busy_ SNAPD_GUARDED_BY(mu_) = false;
  ChecksumJob checksum_current_ SNAPD_GUARDED_BY(mu_);  // while busy; its block is not held
  std::deque<ParkedPush> parked_pushes_ SNAPD_GUARDED_BY(mu_);
  std::set<Key> parked_reads_ SNAPD_GUARDED_BY(mu_);  // fetches waiting for host room
  std::set<Key> pending_packs_ SNAPD_GUARDED_BY(mu_);  // snapshots with a pending_pack
  std::vector<DrainWaiter> drains_ SNAPD_GUARDED_BY(mu_);
  int writes_in_flight_ SNAPD_GUARDED_BY(mu_) = 0;
  int reads_in_flight_ SNAPD_GUARDED_BY(mu_) = 0;
  int ingests_in_flight_ SNAPD_GUARDED_BY(mu_) = 0;  // at-ingest compressions
  bool disk_full_ SNAPD_GUARDED_BY(mu_) = false;  // the last demotion found no room
  uint64_t refused_pushes_ SNAPD_GUARDED_BY(mu_) = 0;  // refused for want of room
  uint64_t compactions_ SNAPD_GUARDED_BY(mu_) = 0;     // blocks moved to merge free room
  log::RejectionLog refusals_{"store"};
  double read_ns_per_byte_ SNAPD_GUARDED_BY(mu_) = 0;  // EWMA of disk reads
  bool stopping_ SNAPD_GUARDED_BY(mu_) = false;
  CondVar checksum_cv_;
  CondVar idle_cv_;  // tiering quiescence (WaitTieringIdle)

  Mutex wake_mu_;  // taken after mu_ when both are held; never the other way round
  bool wake_ SNAPD_GUARDED_BY(wake_mu_) = false;
  bool wake_stop_ SNAPD_GUARDED_BY(wake_mu_) = false;
  CondVar wake_cv_;

  // Declared last, in start order: destroyed first, so no thread outlives what it uses.
  std::unique_ptr<compress::CompressPool> compress_;  // used by I/O jobs: outlives io_
  std::unique_ptr<IoPool> io_;
  std::thread checksum_thread_;
  std::thread tiering_thread_;
};

// Validates a spec on its own (name, sizes, dtype and shape agree).
Status ValidateRunSpec(const v1::RunSpec& spec);
// "step S of run 'NAME'", for messages.
std::string StepName(const v1::RunRecord& run, uint64_t step);
// Bytes of one element of `dtype`; 1 for DTYPE_UNSPECIFIED (opaque bytes).
uint64_t DtypeBytes(v1::Dtype dtype);

}  // namespace snapd
