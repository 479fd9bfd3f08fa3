// Tiering: the store's moves between host memory and disk, the placement policy
// (tiering/placement.h) as applied. One thread runs Rebalance whenever something changed (a
// commit, a freed host block, a finished I/O): it grants pushes parked for want of host room,
// starts the disk reads parked fetches wait on, demotes steps whose place is disk or whose room
// is needed, compacts fragmented host memory and reads ahead of the backward pass. The I/O
// runs on the IoPool; its completions update the index under the store's mutex. Checksums of
// the steps it writes are asked of the checksum owner (ingest/checksums.h), never hashed here.
//
// A component of the store (store/store_state.h): its state lives in the store's index
// (StoreIndex::tiering, under the index's mutex), and each method that touches it takes the
// index, `ix`, which must be the one it was made with (StoreState::ix_). It uses the store's
// shared plumbing (the tiers, the catalog, the pools, the waker) through the StoreState it is
// made over.
//
// Threading: everything runs under the index's mutex except the tiering thread's wait for a
// wake-up, the I/O jobs and the population of pushes' fresh pages (the populate thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "log.h"
#include "store/store_state.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

class Tiering {
 public:
  using Run = StoreIndex::Run;
  using Snapshot = StoreIndex::Snapshot;
  using Key = StoreIndex::Key;
  using PushTicket = StoreIndex::PushTicket;
  using PushDone = StoreIndex::PushDone;
  using FetchGrant = StoreIndex::FetchGrant;
  using FetchDone = StoreIndex::FetchDone;
  using DrainResult = StoreIndex::DrainResult;
  using Deferred = StoreState::Deferred;

  explicit Tiering(StoreState& s) : s_(s), ix_(s.ix_) {}
  Tiering(const Tiering&) = delete;
  Tiering& operator=(const Tiering&) = delete;

  void StartTiering();
  // Stops and joins the tiering thread; ix.stopping is set and StopWaking called already.
  void StopTiering();
  // Answers the pushes and drains still waiting at shutdown with `down`.
  void AnswerWaiting(StoreIndex& ix, const Status& down, Deferred& deferred)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Answers only the pushes waiting for room (a stop refuses them).
  void AnswerParkedPushes(StoreIndex& ix, const Status& down, Deferred& deferred)
      ADJSNAP_REQUIRES_INDEX(ix);
  // No disk write or read, and no compression, is in flight: nothing will move a host block.
  static bool IoIdle(const StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix) {
    return ix.tiering.writes_in_flight == 0 && ix.tiering.reads_in_flight == 0 &&
           Ingest::InFlight(ix) == 0;
  }
  // Host memory for a validated push of `step`: a ticket now; or nullopt after parking `later`
  // until room comes (demotion to disk, a compression in flight, compacting the host tier, or
  // for a blocking run deletes and consumed steps), or until the block's fresh pages are
  // populated on the populate thread (PopulateForPush); or the allocation's error when nothing
  // can make room. Either way but the error, the step is in run.in_flight. The room is a raw
  // step's, whatever the push carries (`pushed`: PushTicket::bytes). Never waits for the
  // kernel: this is the data-plane loop's call, under the mutex.
  Result<std::optional<PushTicket>> AdmitPush(StoreIndex& ix, Run& run, uint64_t step,
                                              uint64_t pushed, PushDone& later)
      ADJSNAP_REQUIRES_INDEX(ix);
  // The bytes of a stored (not lost) step: now if they are in host memory as a fetch serves
  // them (raw, or a framed step's frame), else nullopt
  // after queueing `later` for a disk read or decode. `backward` paces the backward pass and
  // reads ahead of it.
  std::optional<FetchGrant> AdmitFetch(StoreIndex& ix, Run& run, Snapshot& snap, bool backward,
                                       FetchDone& later) ADJSNAP_REQUIRES_INDEX(ix);
  // Starts disk reads of these steps into host memory; returns how many started.
  uint64_t PrefetchSteps(StoreIndex& ix, Run& run, const std::vector<uint64_t>& steps)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Writes every host-only snapshot to disk; `done` runs once all that were stored when it
  // began are (or one failed).
  void StartDrain(std::function<void(Result<DrainResult>)> done) ADJSNAP_EXCLUDES(ix_.mu);
  // For a stop that keeps the host tier (fd store): from now on a demotion leaves the step's
  // raw block in place as a host copy of the disk step, for the next start to take back.
  void KeepHostCopies(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix) {
    ix.tiering.keep_host_copies = true;
  }
  // A file was deleted: a demotion may find room again.
  void DiskRoomFreed(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix) { ix.tiering.disk_full = false; }
  bool DemotionWanted(StoreIndex& ix, const Run& run, const Snapshot& snap) const
      ADJSNAP_REQUIRES_INDEX(ix);
  // Verifies a disk-tier file (a recovered one, the background scrub, `adjsnap scrub`) on an
  // I/O thread; a damaged one is marked lost and its file quarantined. `done`, if any, gets
  // the verdict (OK, DATA_LOSS or another error) without the store's mutex held; NOT_FOUND
  // when the step went (deleted, consumed) while it was being verified.
  void StartScrub(StoreIndex& ix, uint64_t run_id, uint64_t step,
                  std::function<void(Status)> done = nullptr) ADJSNAP_REQUIRES_INDEX(ix);
  // A step read back from disk is lost (DATA_LOSS): marks it lost, logging `why` once, and
  // moves its file aside (DiskTier::Quarantine) from an I/O thread.
  void LoseDiskStep(StoreIndex& ix, Run& run, Snapshot& snap, const std::string& why)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Every request that waits now, oldest first: pushes parked for host room and fetches
  // waiting for a disk read or decode, each with what it waits for.
  struct WaitingRequest {
    v1::Wait wait;
    uint32_t owner_uid = 0;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<WaitingRequest> Waiting(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // How many of one run's requests wait, cheaply (no reasons).
  struct WaitCounts {
    uint64_t pushes = 0;
    uint64_t fetches = 0;
    double oldest_seconds = 0;
  };
  WaitCounts WaitsOf(const StoreIndex& ix, const Run& run) const ADJSNAP_REQUIRES_INDEX(ix);
  // Adds the refused pushes and compactions.
  void AddTieringCounters(const StoreIndex& ix, StoreCounters& c) const ADJSNAP_REQUIRES_INDEX(ix);
  void WaitTieringIdle() ADJSNAP_EXCLUDES(ix_.mu);

 private:
  using ParkedPush = StoreIndex::TieringState::ParkedPush;
  using DrainWaiter = StoreIndex::TieringState::DrainWaiter;

  void TieringLoop() ADJSNAP_EXCLUDES(ix_.mu);
  // One pass of the policy; returns callbacks to run unlocked.
  void Rebalance(StoreIndex& ix, Deferred& deferred) ADJSNAP_REQUIRES_INDEX(ix);
  void GrantParkedPushes(StoreIndex& ix, Deferred& deferred) ADJSNAP_REQUIRES_INDEX(ix);
  // A push reserved in `host`'s block (in run.in_flight) whose fresh pages are not populated:
  // the populate thread (StoreState::populate_) populates them, then FinishPopulate answers
  // `later` with the ticket.
  void PopulateForPush(StoreIndex& ix, Run& run, uint64_t step, uint64_t pushed,
                       StoreState::PendingHost host, PushDone later) ADJSNAP_REQUIRES_INDEX(ix);
  // On the populate thread: the ticket, if the run and the step's reservation are still there;
  // NOT_FOUND if either went meanwhile (as for a parked push), the population's
  // RESOURCE_EXHAUSTED (a refusal, counted and noted on the run) if it failed, UNAVAILABLE if
  // the store is stopping. `later` runs without the mutex.
  void FinishPopulate(uint64_t run_id, uint64_t step, uint64_t pushed,
                      std::shared_ptr<HostBlock> block, Status populated, PushDone later)
      ADJSNAP_EXCLUDES(ix_.mu);
  // Starts the disk reads that fetches wait on, as far as host room allows.
  void ServeParkedReads(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // "the disk tier is full too (...)", naming the failed spools whose room is missing.
  std::string DiskFullWhy() const;
  // The spool class a step demoted now belongs in (local or shared: three-level placement).
  SpoolClass DemotionClass(StoreIndex& ix, const Run& run, const Snapshot& snap) const
      ADJSNAP_REQUIRES_INDEX(ix);
  void StartDemotion(StoreIndex& ix, Run& run, Snapshot& snap) ADJSNAP_REQUIRES_INDEX(ix);
  // A run of unknown N: its steps go to the local spools while they have room, and as that
  // runs low its oldest local steps move on to the shared spools, so that the newest stay local
  // as with N declared. Starts the moves that keep room for a few demotions ahead of `snap`'s;
  // true when `snap`'s demotion waits for the room those under way will make.
  bool MakeLocalRoom(StoreIndex& ix, Run& run, const Snapshot& snap) ADJSNAP_REQUIRES_INDEX(ix);
  // Copies a local-spool step's file to a shared spool (DiskTier::Copy); false if no shared
  // spool has room. FinishMove points the record at the copy and removes the local file, or
  // drops the copy when the step was read, deleted or rewritten meanwhile.
  bool StartMove(StoreIndex& ix, Snapshot& snap) ADJSNAP_REQUIRES_INDEX(ix);
  // The Finish calls run on the I/O thread that did the work: each writes the step's new record
  // after any in flight (StoreIndex::AwaitRecords), waits for it with the mutex released
  // (RecordAndWait) and applies it to the index after; a step deleted or lost meanwhile is left
  // as it is, and what its file was is cleaned up.
  void FinishMove(const v1::SnapshotRecord& from, uint64_t generation, const DiskTier::Space& to,
                  Status copied) ADJSNAP_EXCLUDES(ix_.mu);
  void FinishDemotion(uint64_t run_id, uint64_t step, uint64_t generation,
                      const DiskTier::Space& space, const std::string& name, uint64_t checksum,
                      Result<WrittenSnapshot> written) ADJSNAP_EXCLUDES(ix_.mu);
  // Starts a disk read of `snap` into host memory if there is room; false if not, or while a
  // record of the step is being written (a move's names another file).
  // A step compressed at ingest and still only in host memory is decoded instead of read.
  // `compact`: the room may be made by compacting the host tier (CompactHost memcpys blocks
  // under the mutex), which only the tiering thread does: a fetch on the data plane's thread
  // that finds no room parks its read for that thread instead (AdmitFetch).
  bool StartRead(StoreIndex& ix, Run& run, Snapshot& snap, bool urgent, bool compact = false)
      ADJSNAP_REQUIRES_INDEX(ix);
  void FinishRead(uint64_t run_id, uint64_t step, uint64_t generation,
                  std::shared_ptr<HostBlock> block, Status read, int64_t started_ns, bool shared)
      ADJSNAP_EXCLUDES(ix_.mu);
  void SchedulePrefetch(StoreIndex& ix, Run& run) ADJSNAP_REQUIRES_INDEX(ix);
  // Moves compressed host copies up the arena until a block of `bytes` fits (variable-size
  // copies fragment it); false if the free room is too small or cannot be merged. On the
  // tiering thread only (Rebalance's grants and parked reads).
  bool CompactHost(StoreIndex& ix, uint64_t bytes, HostTier::ArenaId arena)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Drops one read-ahead copy or starts one demotion to make host room; false if neither.
  bool FreeHostRoom(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // Host bytes that work in flight will free without another demotion: demotions being
  // written, and a checksum still hashing a block the store has let go of.
  uint64_t FreeingBytes(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // Bytes of stored steps' host blocks leased out now (StoreState::Lease): held by a transfer
  // (a send, a mapped-path read, a dump) whose release wakes the tiering thread.
  uint64_t LeasedBytes(StoreIndex& ix) const ADJSNAP_REQUIRES_INDEX(ix);
  // A push holds host memory it reserved and has not committed or aborted yet: its end will
  // wake the tiering thread.
  bool PushesReserved(StoreIndex& ix) const ADJSNAP_REQUIRES_INDEX(ix);
  // Something in flight (a disk write or read, a compression, a checksum holding a block) will
  // free host memory or change what can be demoted soon.
  bool Settling(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  void FinishDrainsIfDone(StoreIndex& ix, Deferred& deferred) ADJSNAP_REQUIRES_INDEX(ix);
  // With no spool working: fails the pushes that waited spool_failure_timeout with
  // UNAVAILABLE; sets the tiering thread's next deadline for the others.
  void FailPushesWithoutDisk(StoreIndex& ix, Deferred& deferred) ADJSNAP_REQUIRES_INDEX(ix);
  // A push of `run` that finds no host room waits for the disk tier (it does not block until
  // steps are consumed).
  static bool NeedsDisk(const Run& run);
  // A push that needs the disk tier and cannot have it: counted (`at_once`: failed without
  // waiting, as unavailable_pushes_fast too), logged rate-limited and noted on its run; the
  // UNAVAILABLE, "STEP needs the disk tier " + why, to answer it with.
  Status NoDiskForPush(StoreIndex& ix, Run& run, uint64_t step, const std::string& why,
                       bool at_once) ADJSNAP_REQUIRES_INDEX(ix);
  // The background scrub: verifies the next disk-tier file when its turn (the rate) comes.
  void ScrubNext(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // Logs each wait older than options_.wait_warn_after, with what it waits for, and wakes the
  // tiering thread when the next one comes due.
  void WarnLongWaits(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // What host room for `bytes` waits for: the tier's use and what in flight will make room.
  std::string WhatRoomWaitsFor(StoreIndex& ix, uint64_t bytes, HostTier::ArenaId arena)
      ADJSNAP_REQUIRES_INDEX(ix);
  // What a fetch of `snap` waits for: its disk read or decode, or host room to start one.
  std::string WhatFetchWaitsFor(StoreIndex& ix, const Run& run, const Snapshot& snap)
      ADJSNAP_REQUIRES_INDEX(ix);
  void WakeBy(StoreIndex& ix, std::chrono::steady_clock::time_point when)
      ADJSNAP_REQUIRES_INDEX(ix) {
    ix.tiering.deadline = std::min(ix.tiering.deadline, when);
  }
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static std::string StepLabel(uint64_t run_id, uint64_t step) {
    return "step " + std::to_string(step) + " of run id " + std::to_string(run_id);
  }

  StoreState& s_;
  StoreIndex& ix_;  // the tiering thread's and the I/O completions'
  log::RejectionLog refusals_{"store"};
  // Demotions that fail, one line per kind per 10 s, then a count: a spool that fails fails
  // every write to it.
  log::RateLimitedLog failed_writes_{"store", 3, std::chrono::seconds(10)};
  // Waits past the bound, a few lines per 10 s however many wait: each wait is logged once it
  // passes the bound and then every kWaitWarnRepeat bounds.
  log::RateLimitedLog long_waits_{"store", 5, std::chrono::seconds(10)};
  static constexpr int kWaitWarnRepeat = 6;
  CondVar idle_cv_;  // tiering quiescence (WaitTieringIdle)
  std::thread tiering_thread_;
};

}  // namespace adjsnap
