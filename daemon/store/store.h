// The store: adjsnapd's front door to its runs and snapshots, and their bookkeeping. It keeps the
// index of runs and snapshots in memory over the catalog (RocksDB) and is the single place
// where every request is validated, tenancy is enforced and quotas are counted; it is the only
// writer of run records, and of a snapshot's record when it is stored or deleted. The jobs
// behind it have owners of their own, components over its index (see store/store_state.h):
// tiering/ (the tiering thread: demotion, reads and read-ahead, compaction, drains), ingest/
// (the checksum owner, which computes and verifies every checksum of a stored step, and
// at-ingest compression); host_tier/ and disk_tier/ are the tiers themselves.
//
// Invariant: a snapshot is visible (Locate, List, Fetch) only once its bytes are where its
// record says: in host memory (TIER_HOST) or in a complete, synced spool file (TIER_DISK); a
// push that fails or is abandoned leaves neither (until then Locate says TIER_IN_FLIGHT, a
// state of the push, not of a snapshot). A disk-tier snapshot may also have a host
// copy (read ahead of a fetch); the record stays TIER_DISK, so a crash loses nothing. A host
// snapshot of a run that compresses at ingest may hold compressed bytes (record.codec set);
// a fetch decodes it first.
//
// Threading: every public method is thread-safe and never blocks on I/O: one mutex guards the
// index, and catalog writes happen under it so the index and the catalog never disagree.
// Disk I/O and compression run on an IoPool (whose jobs share slabs with the compression
// workers); a tiering thread moves snapshots between tiers; a checksum thread records
// checksums; a populate thread populates the fresh pages of pushes' blocks. Requests that must
// wait (a push when the host tier is full or its block's pages are being populated, a fetch of
// a step still on disk) return "later" and get their answer through a callback, run on one of
// those threads without the store's mutex held.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "disk_tier/disk_tier.h"
#include "host_tier/host_tier.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/v1/control.pb.h"
#include "store/store_state.h"
#include "tiering/tiering.h"

namespace adjsnap {

// The most run ids one OpenSession may name to attach again (OpenSessionRequest.run_ids).
inline constexpr size_t kMaxReattachRuns = 4096;

// Who asks. A tenant (a uid, as the kernel reported it for the caller's socket) sees and
// changes only the runs it owns; to it, another tenant's run does not exist. An admin (root,
// adjsnapd's own uid, the admin_group) sees and manages every run. Callers inside the daemon and
// the tests act as Admin().
struct Tenant {
  uint32_t uid = 0;
  bool admin = false;
  // The data-plane session asking (0 on the control plane). A push or fetch attaches it to the
  // run, as OpenRun does: a client that reconnected after a restart of adjsnapd (with a libadjsnap
  // that does not name its runs in OpenSession) opens a new session and does not open its runs
  // again, and its death must still orphan them.
  uint64_t session_id = 0;
  static Tenant Admin() { return {0, true}; }
  static Tenant User(uint32_t uid) { return {uid, false}; }
};

class Store final : private StoreState {
 public:
  using PushTicket = StoreState::PushTicket;
  using PushDone = StoreState::PushDone;
  using FetchGrant = StoreState::FetchGrant;
  using FetchDone = StoreState::FetchDone;
  using DrainResult = StoreState::DrainResult;

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
      ADJSNAP_EXCLUDES(ix_.mu);
  Result<v1::RunInfo> CloseRun(const std::string& name, const Tenant& who = Tenant::Admin())
      ADJSNAP_EXCLUDES(ix_.mu);
  // Returns the tier bytes released.
  Result<uint64_t> DeleteRun(const std::string& name, const Tenant& who = Tenant::Admin())
      ADJSNAP_EXCLUDES(ix_.mu);
  Result<uint64_t> DeleteSnapshot(const std::string& name, uint64_t step,
                                  const Tenant& who = Tenant::Admin()) ADJSNAP_EXCLUDES(ix_.mu);
  // The runs `who` may see.
  std::vector<v1::RunInfo> ListRuns(const Tenant& who = Tenant::Admin()) const
      ADJSNAP_EXCLUDES(ix_.mu);
  Result<std::vector<v1::SnapshotInfo>> ListSnapshots(const std::string& name, v1::RunInfo* run,
                                                      const Tenant& who = Tenant::Admin()) const
      ADJSNAP_EXCLUDES(ix_.mu);
  Result<v1::SnapshotInfo> Locate(const std::string& name, uint64_t step,
                                  const Tenant& who = Tenant::Admin()) const ADJSNAP_EXCLUDES(ix_.mu);
  Result<uint64_t> RunId(const std::string& name, const Tenant& who = Tenant::Admin()) const
      ADJSNAP_EXCLUDES(ix_.mu);
  // A tenant's byte quota (0 = no limit), replacing StoreOptions.tenant_quota for that uid
  // until the daemon restarts; and what the tenant stores now.
  void SetQuota(uint32_t uid, uint64_t bytes) ADJSNAP_EXCLUDES(ix_.mu);
  struct Usage {
    uint64_t quota = 0;
    uint64_t stored_bytes = 0;
    uint64_t in_flight_bytes = 0;  // pushes reserved, not yet stored (they count to the quota)
    uint64_t runs = 0;
  };
  Usage TenantUsage(uint32_t uid) const ADJSNAP_EXCLUDES(ix_.mu);

  // The device tier: steps a client keeps in its own GPU memory (device layers). The store
  // only records them, for Locate and List and so that nobody pushes the step again; the
  // bytes never reach the daemon. The records are kept in memory, not in the catalog: when
  // `session_id` ends (EndSession) they become TIER_LOST. held = false forgets one.
  Status HoldDeviceStep(uint64_t run_id, uint64_t step, uint64_t bytes, uint64_t session_id,
                        bool held, const Tenant& who = Tenant::Admin()) ADJSNAP_EXCLUDES(ix_.mu);
  // The session ended: the device steps it held are lost. `died`: its client went away without
  // closing it; a run that is not kept and that no live session opened becomes an orphan.
  void EndSession(uint64_t session_id, bool died = false) ADJSNAP_EXCLUDES(ix_.mu);
  // A client that reconnected after a restart names the runs it opened before it (at most
  // kMaxReattachRuns): who.session_id, its new session, counts among their clients, and a run
  // waiting for its clients since the start (awaiting_clients) is no longer an orphan. Ids of
  // runs that are gone or that `who` may not see are skipped. Returns how many it attached.
  size_t AttachSession(const std::vector<uint64_t>& run_ids, const Tenant& who)
      ADJSNAP_EXCLUDES(ix_.mu);
  // Removes the orphans (see EndSession) older than `grace`, logging each.
  void RemoveOrphans(std::chrono::seconds grace) ADJSNAP_EXCLUDES(ix_.mu);

  // A push between BeginPush and CommitPush/AbortPush: see PushTicket (store/store_state.h).
  // Validates and reserves host memory. `done` gets the ticket or the error, exactly once: on
  // the caller's thread before BeginPush returns when the answer is known at once, or later
  // (from the tiering thread) when the host tier is full but room is coming (demotion to
  // disk). Returns true in that second case: the push waits. Never calls `done` under the
  // store's lock.
  // `who`: the pushing session's tenant; the run must be its own, and the push must fit the
  // tenant's quota.
  bool BeginPush(uint64_t run_id, uint64_t step, uint64_t bytes, PushDone done,
                 const Tenant& who = Tenant::Admin()) ADJSNAP_EXCLUDES(ix_.mu);
  // The pushed bytes are in the ticket's block. A commit has two halves, so that no thread
  // waits for the catalog under the store's lock: CommitPush queues the step's record for the
  // catalog's writer and returns; once it is written, `recorded` gets the second half (on the
  // writer thread, where it must only hand it off; on the caller's thread, before CommitPush
  // returns, when the commit is refused at once). The caller runs that half on a thread of its
  // own (the data plane: its loop, which did the whole commit before): it makes the step
  // stored and returns Ok, or abandons the push, frees its memory and returns the error (the
  // reservation or the run went, the record could not be written). Until it runs the step
  // stays reserved (TIER_IN_FLIGHT).
  using Install = std::function<Status()>;
  void CommitPush(const PushTicket& ticket, std::function<void(Install)> recorded)
      ADJSNAP_EXCLUDES(ix_.mu);
  // Both halves, waiting for the record on this thread (tests and tools).
  Status CommitPush(const PushTicket& ticket) ADJSNAP_EXCLUDES(ix_.mu);
  void AbortPush(const PushTicket& ticket) ADJSNAP_EXCLUDES(ix_.mu);

  // The step's bytes in host memory: see FetchGrant (store/store_state.h).
  // `done` gets the bytes or an error, exactly once: before BeginFetch returns when they are
  // in host memory (or the fetch is refused), or later, from an I/O thread, once they are
  // read from disk; true in that second case. `backward`: the fetch is the backward pass (it
  // paces and triggers prefetch); false for a dump.
  bool BeginFetch(uint64_t run_id, uint64_t step, uint64_t bytes, bool backward, FetchDone done,
                  const Tenant& who = Tenant::Admin()) ADJSNAP_EXCLUDES(ix_.mu);
  // The solver has the bytes of a fetched step: unless the run keeps steps, the step is
  // released (read-once).
  void Consumed(uint64_t run_id, uint64_t step, uint64_t generation) ADJSNAP_EXCLUDES(ix_.mu);

  // Starts disk reads of these steps into host memory; returns how many started.
  Result<uint64_t> Prefetch(const std::string& name, const std::vector<uint64_t>& steps,
                            const Tenant& who = Tenant::Admin()) ADJSNAP_EXCLUDES(ix_.mu);
  // Writes every host-only snapshot to disk; `done` runs once they all are (or one failed).
  void Drain(std::function<void(Result<DrainResult>)> done) ADJSNAP_EXCLUDES(ix_.mu);

  // Re-verifies every disk-tier file of the run now (`adjsnap scrub`): each is read and checked
  // against its checksums; a damaged one is marked lost and its file quarantined. `done` gets
  // the tally once all are checked, on an I/O thread, never under the store's lock.
  struct ScrubResult {
    uint64_t verified = 0;
    uint64_t unreadable = 0;  // could not be read now (a transient error): not a verdict
    std::vector<std::pair<uint64_t, std::string>> lost;  // step, why
  };
  void ScrubRun(const std::string& name, std::function<void(Result<ScrubResult>)> done,
                const Tenant& who = Tenant::Admin()) ADJSNAP_EXCLUDES(ix_.mu);
  // Probes every failed spool now (`adjsnap spool probe`) on an I/O thread; `done` gets how
  // many came back.
  void ProbeSpools(std::function<void(int)> done);
  // A stop (SIGTERM, `adjsnap shutdown`), in the order main calls these; see
  // docs/operations.md, "Restart, upgrade and drain".
  // From now on pushes are refused with UNAVAILABLE ("adjsnapd is stopping"), those waiting for
  // room too; fetches, and commits of pushes already reserved, go on.
  void BeginStop() ADJSNAP_EXCLUDES(ix_.mu);
  // Pushes reserved (or waiting for room), not yet committed or aborted.
  uint64_t PushesInFlight() const ADJSNAP_EXCLUDES(ix_.mu);
  struct StopResult {
    uint64_t steps = 0;      // host-only steps written to disk, or host blocks in the kept tier
    uint64_t host_only = 0;  // KeepHostTier: of `steps`, those with no disk copy
    uint64_t bytes = 0;
    Status status;  // why it stopped short; the steps left are then lost
  };
  // Writes every host-only step to disk, waiting until `deadline`. What is still only in host
  // memory when the store is destroyed (after the writes in flight end) is named in the log
  // and marked lost: the drain ran out of time, the disk filled up, or there is no disk tier.
  // `keep_host_copies`: KeepHostTier follows, so each step written keeps its raw block as a host
  // copy of the disk step.
  StopResult DrainForStop(std::chrono::steady_clock::time_point deadline,
                          bool keep_host_copies = false) ADJSNAP_EXCLUDES(ix_.mu);
  // The host tier is handed to systemd's fd store (after a drain, or instead of one): once the
  // checksums, compressions and disk I/O in flight are done (by `deadline`), records where each
  // step with a host block lies in it and its checksum (Catalog::PutHostTierKept), for the next
  // start to take it back (StoreOptions.kept_host_tier); a disk step's host copy is taken back
  // as a read-ahead copy, its file staying the durable one. Nothing may move blocks any more:
  // the data plane is stopped. On success nothing is marked lost at destruction (also after a
  // drain that fell short); on error nothing is recorded, and host-only steps are marked lost.
  StopResult KeepHostTier(std::chrono::steady_clock::time_point deadline) ADJSNAP_EXCLUDES(ix_.mu);

  StoreCounters Counters() const ADJSNAP_EXCLUDES(ix_.mu);
  // Every request that waits now, oldest first, with what it waits for: `who`'s own unless an
  // admin asks (StatsResponse.waits).
  struct Waits {
    std::vector<v1::Wait> waits;  // at most `limit`
    uint64_t pushes = 0;          // all that wait, by kind (every tenant's)
    uint64_t fetches = 0;
    double oldest_seconds = 0;
  };
  Waits Waiting(const Tenant& who, size_t limit) ADJSNAP_EXCLUDES(ix_.mu);
  uint64_t host_budget() const { return host_->budget(); }
  // The host-tier arena a client of `uid` maps, which holds the steps of its runs.
  HostTier::ArenaId HostArenaFor(uint32_t uid) const { return host_->ArenaFor(uid); }
  bool host_per_uid_arenas() const { return host_->per_uid_arenas(); }
  uint64_t host_used() const { return host_->used(); }
  uint64_t host_peak_used() const { return host_->peak_used(); }
  const std::string& host_pages() const { return host_->pages(); }
  uint64_t host_prefaulted() const { return host_->prefaulted(); }
  uint64_t host_resident() const { return host_->resident_bytes(); }
  const DiskTier* disk() const { return disk_; }

  // Blocks until every checksum queued so far is recorded and the tiering thread has nothing
  // in flight (tests, orderly shutdown).
  void WaitChecksumsIdle() ADJSNAP_EXCLUDES(ix_.mu) { checksums_.WaitIdle(ix_); }
  void WaitTieringIdle() ADJSNAP_EXCLUDES(ix_.mu) { tiering_.WaitTieringIdle(); }
  // Checksums of stored bytes computed since the store opened (tests: each block is hashed
  // once, see Checksums).
  uint64_t hashes() const { return checksums_.hashes(); }

 private:
  Store(Catalog* catalog, HostTier* host, DiskTier* disk, const StoreOptions& options);
  Status Load();
  // A host-tier record of the start whose stop kept the host tier (options_.kept_host_tier):
  // its block claimed at the recorded offset and its checksum checked; DATA_LOSS saying why
  // not (an empty message: it was not kept). The caller writes the record it changed.
  Status TakeBack(const Run& run, Snapshot& snap) ADJSNAP_REQUIRES_INDEX(ix_);
  // BeginPush and BeginFetch under the lock: the answer now, or nullopt after parking `done`.
  Result<std::optional<PushTicket>> TryBeginPush(uint64_t run_id, uint64_t step, uint64_t bytes,
                                                 PushDone& done, const Tenant& who)
      ADJSNAP_EXCLUDES(ix_.mu);
  Result<std::optional<FetchGrant>> TryBeginFetch(uint64_t run_id, uint64_t step, uint64_t bytes,
                                                  bool backward, FetchDone& done, const Tenant& who)
      ADJSNAP_EXCLUDES(ix_.mu);
  Result<const Run*> FindByName(const std::string& name, const Tenant& who) const
      ADJSNAP_REQUIRES_INDEX(ix_);
  Result<Run*> FindByName(const std::string& name, const Tenant& who) ADJSNAP_REQUIRES_INDEX(ix_);
  Result<Run*> FindById(uint64_t run_id, const Tenant& who) ADJSNAP_REQUIRES_INDEX(ix_);
  uint64_t QuotaOf(uint32_t uid) const ADJSNAP_REQUIRES_INDEX(ix_);
  Usage UsageOf(uint32_t uid) const ADJSNAP_REQUIRES_INDEX(ix_);
  // NOT_FOUND for a step the run does not hold, saying whether it was read once and released.
  static Status StepNotFound(const Run& run, uint64_t step);
  // Counts who.session_id (if any) among the run's clients, as OpenRun does (Tenant).
  static void Attach(Run& run, const Tenant& who);
  // At the stop: records in each run's catalog record whether it awaits clients at the next
  // start (RunRecord.awaiting_clients).
  void MarkAwaitingClients() ADJSNAP_REQUIRES_INDEX(ix_);
  v1::RunInfo Info(const Run& run) const ADJSNAP_REQUIRES_INDEX(ix_);
  static Status Refused(Run& run, Status why);
  static v1::SnapshotInfo Info(const Snapshot& snap);
  static v1::SnapshotInfo Info(const Run& run, uint64_t step, const DeviceStep& held);
  // FAILED_PRECONDITION (held) or DATA_LOSS (its session ended) for a device step the daemon
  // is asked to serve.
  static Status DeviceStepHere(const Run& run, uint64_t step, const DeviceStep& held);
  // INVALID_ARGUMENT when a push or fetch moves another size than the run's steps;
  // "push of step 3 of run 'r' carries N bytes ...". With `frame_ok` (a push), a run of an
  // nvCOMP codec also takes fewer bytes, a chunk frame (checked at commit).
  static Status CheckSize(const Run& run, uint64_t step, uint64_t bytes, const char* what,
                          const char* moves, bool frame_ok = false);
  // A push (or device copy) of a new step: the run is open, the step in range and not stored,
  // held on a device or being pushed, and the size right (CheckSize's `frame_ok`).
  static Status CheckNewStep(const Run& run, uint64_t step, uint64_t bytes, const char* what,
                             const char* moves, bool frame_ok = false);
  // Removes a step with no wait on the catalog: the step leaves the index now (its waiters
  // are answered, its blocks freed once no fetch holds them), its record's delete is queued
  // behind every record write made before it, and its file goes once that delete is written
  // (a failed delete leaves both, and the next start finds the step again). `deleted`, when
  // given, is called on the catalog's writer thread with the delete's outcome: it must not
  // block nor take ix_.mu (a caller waits on it outside the lock). A delete is safe to show
  // in the index first: nothing leaves the disk before its record has.
  void Erase(Run& run, std::map<uint64_t, Snapshot>::iterator it, Catalog::Done deleted = nullptr)
      ADJSNAP_REQUIRES_INDEX(ix_);
  // Writes the run's record with `change` made to it, without waiting; the index takes it in
  // the write's completion, where `done` (if any) gets the result, under ix_.mu.
  void RecordRun(Run& run, const std::function<void(v1::RunRecord&)>& change,
                 std::function<void(Status)> done) ADJSNAP_REQUIRES_INDEX(ix_);
  // The second half of CommitPush, once the record is written (or failed).
  Status InstallCommitted(const PushTicket& ticket, v1::SnapshotRecord rec, Status recorded)
      ADJSNAP_EXCLUDES(ix_.mu);
  // The host memory a new declared run may plan its resident steps in: the budget less what
  // every other run holds there or has planned to keep there (an open declared run's range
  // [host_boundary, N)), so runs sharing the tier get boundaries computed against each other.
  uint64_t HostRoomForNewRun() const ADJSNAP_REQUIRES_INDEX(ix_);
  // Host-tier bytes of `uid`'s steps in runs that cannot move them to disk.
  uint64_t PinnedHostBytesOf(uint32_t uid) const ADJSNAP_REQUIRES_INDEX(ix_);
  // Removes a run as Erase removes a step: from the index now, its records through the
  // catalog's writer (`deleted` as in Erase), its files and directories once they are gone.
  // Returns the bytes it held.
  uint64_t DeleteRunLocked(Run* run, Catalog::Done deleted = nullptr) ADJSNAP_REQUIRES_INDEX(ix_);
  // A run whose declared steps cannot fit in the tiers it may use (host and disk budgets
  // together) is refused when it opens, naming the node's limit, unless it compresses (its
  // stored size is unknown) or waits for room (block_when_full: the backward pass frees it).
  Status CheckFitsTheNode(const v1::RunSpec& spec, uint64_t device_steps) const;

  // Run names are per owner uid: two users may each have "shot-17".
  std::map<std::pair<uint32_t, std::string>, uint64_t> by_name_ ADJSNAP_GUARDED_BY(ix_.mu);
  std::map<uint32_t, uint64_t> quotas_ ADJSNAP_GUARDED_BY(ix_.mu);  // per-uid, from SetQuota
  bool closing_ ADJSNAP_GUARDED_BY(ix_.mu) = false;                 // BeginStop: pushes are refused
  // Set by a stop whose drain fell short: why; the destructor marks what is left lost.
  std::string unsaved_why_ ADJSNAP_GUARDED_BY(ix_.mu);
  uint64_t next_generation_ ADJSNAP_GUARDED_BY(ix_.mu) = 1;
  // Held by OpenRun while it creates a run (its id and record written without ix_.mu); taken
  // before ix_.mu, never after.
  Mutex create_mu_;

  // The tiering policy and its thread, a component over this store's plumbing and index; a
  // member, so it is destroyed before them (its thread is joined by then: StopTiering).
  Tiering tiering_{*this};
};

// Validates a spec on its own (name, sizes, dtype and shape agree).
Status ValidateRunSpec(const v1::RunSpec& spec);
// A spool class named by a spec whose layers are resolved: it needs a Disk layer, and spools of
// that class on this adjsnapd (`disk`, null without a disk tier).
Status CheckSpoolClass(const v1::RunSpec& spec, const DiskTier* disk);
// Bytes of one element of `dtype`; 1 for DTYPE_UNSPECIFIED (opaque bytes).
uint64_t DtypeBytes(v1::Dtype dtype);

}  // namespace adjsnap
