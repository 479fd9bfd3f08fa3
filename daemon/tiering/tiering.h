// Tiering: the store's moves between host memory and disk, the placement policy
// (tiering/placement.h) as applied. One thread runs Rebalance whenever something changed (a
// commit, a freed host block, a finished I/O): it grants pushes parked for want of host room,
// starts the disk reads parked fetches wait on, demotes steps whose place is disk or whose room
// is needed, compacts fragmented host memory and reads ahead of the backward pass. The I/O
// runs on the IoPool; its completions update the index under the store's mutex. Checksums of
// the steps it writes are asked of the checksum owner (ingest/checksums.h), never hashed here.
//
// Threading: everything runs under the store's mutex (store/store_state.h) except the tiering
// thread's wait for a wake-up and the I/O jobs.
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

namespace snapd {

class Tiering : protected StoreState {
 protected:
  using StoreState::StoreState;

  void StartTiering();
  // Stops and joins the tiering thread; ix_.stopping is set and StopWaking called already.
  void StopTiering();
  // Answers the pushes and drains still waiting at shutdown with `down`.
  void AnswerWaiting(const Status& down, Deferred& deferred) SNAPD_REQUIRES(ix_.mu);
  // Answers only the pushes waiting for room (a stop refuses them).
  void AnswerParkedPushes(const Status& down, Deferred& deferred) SNAPD_REQUIRES(ix_.mu);
  // No disk write or read, and no compression, is in flight: nothing will move a host block.
  bool IoIdle() const SNAPD_REQUIRES(ix_.mu) {
    return writes_in_flight_ == 0 && reads_in_flight_ == 0 && Ingest::InFlight(ix_) == 0;
  }

  // Host memory for a validated push of `step`: a ticket now; or nullopt after parking `later`
  // until room comes (demotion to disk, a compression in flight, compacting the host tier, or
  // for a blocking run deletes and consumed steps); or the allocation's error when nothing can
  // make room. Either way but the error, the step is in run.in_flight.
  Result<std::optional<PushTicket>> AdmitPush(Run& run, uint64_t step, uint64_t bytes,
                                              PushDone& later) SNAPD_REQUIRES(ix_.mu);
  // The bytes of a stored (not lost) step: now if they are raw in host memory, else nullopt
  // after queueing `later` for a disk read or decode. `backward` paces the backward pass and
  // reads ahead of it.
  std::optional<FetchGrant> AdmitFetch(Run& run, Snapshot& snap, bool backward, FetchDone& later)
      SNAPD_REQUIRES(ix_.mu);
  // Starts disk reads of these steps into host memory; returns how many started.
  uint64_t PrefetchSteps(Run& run, const std::vector<uint64_t>& steps) SNAPD_REQUIRES(ix_.mu);
  // Writes every host-only snapshot to disk; `done` runs once all that were stored when it
  // began are (or one failed).
  void StartDrain(std::function<void(Result<DrainResult>)> done) SNAPD_EXCLUDES(ix_.mu);
  // For a stop that keeps the host tier (fd store): from now on a demotion leaves the step's
  // raw block in place as a host copy of the disk step, for the next start to take back.
  void KeepHostCopies() SNAPD_REQUIRES(ix_.mu) { keep_host_copies_ = true; }
  // A file was deleted: a demotion may find room again.
  void DiskRoomFreed() SNAPD_REQUIRES(ix_.mu) { disk_full_ = false; }
  bool DemotionWanted(const Run& run, const Snapshot& snap) const SNAPD_REQUIRES(ix_.mu);
  // Verifies a disk-tier file (a recovered one, the background scrub, `snapctl scrub`) on an
  // I/O thread; a damaged one is marked lost and its file quarantined. `done`, if any, gets
  // the verdict (OK, DATA_LOSS or another error) without the store's mutex held.
  void StartScrub(uint64_t run_id, uint64_t step, std::function<void(Status)> done = nullptr)
      SNAPD_REQUIRES(ix_.mu);
  // A step read back from disk is lost (DATA_LOSS): marks it lost, logging `why` once, and
  // moves its file aside (DiskTier::Quarantine) from an I/O thread.
  void LoseDiskStep(Run& run, Snapshot& snap, const std::string& why) SNAPD_REQUIRES(ix_.mu);
  // Every request that waits now, oldest first: pushes parked for host room and fetches
  // waiting for a disk read or decode, each with what it waits for.
  struct WaitingRequest {
    v1::Wait wait;
    uint32_t owner_uid = 0;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<WaitingRequest> Waiting() SNAPD_REQUIRES(ix_.mu);
  // How many of one run's requests wait, cheaply (no reasons).
  struct WaitCounts {
    uint64_t pushes = 0;
    uint64_t fetches = 0;
    double oldest_seconds = 0;
  };
  WaitCounts WaitsOf(const Run& run) const SNAPD_REQUIRES(ix_.mu);
  // Adds the refused pushes and compactions.
  void AddTieringCounters(StoreCounters& c) const SNAPD_REQUIRES(ix_.mu);
  void WaitTieringIdle() SNAPD_EXCLUDES(ix_.mu);

 private:
  struct ParkedPush {
    uint64_t run_id;
    uint64_t step;
    uint64_t bytes;
    HostTier::ArenaId arena;  // where its block goes: its run owner's
    PushDone later;
    std::chrono::steady_clock::time_point parked_at;
    std::chrono::steady_clock::time_point warn_at;  // when the wait is next logged
  };
  struct DrainWaiter {
    std::function<void(Result<DrainResult>)> done;
    DrainResult result;
    // The newest copy stored when the drain began: it ends once every copy up to this one
    // is on disk (copies pushed meanwhile move too, but a job that keeps pushing would
    // otherwise keep the drain from ever ending).
    uint64_t upto = 0;
  };

  void TieringLoop() SNAPD_EXCLUDES(ix_.mu);
  // One pass of the policy; returns callbacks to run unlocked.
  void Rebalance(Deferred& deferred) SNAPD_REQUIRES(ix_.mu);
  void GrantParkedPushes(Deferred& deferred) SNAPD_REQUIRES(ix_.mu);
  // Starts the disk reads that fetches wait on, as far as host room allows.
  void ServeParkedReads() SNAPD_REQUIRES(ix_.mu);
  void StartDemotion(Run& run, Snapshot& snap) SNAPD_REQUIRES(ix_.mu);
  void FinishDemotion(uint64_t run_id, uint64_t step, uint64_t generation,
                      const DiskTier::Space& space, const std::string& name, uint64_t checksum,
                      Result<WrittenSnapshot> written) SNAPD_EXCLUDES(ix_.mu);
  // Starts a disk read of `snap` into host memory if there is room; false if not.
  // A step compressed at ingest and still only in host memory is decoded instead of read.
  bool StartRead(Run& run, Snapshot& snap, bool urgent) SNAPD_REQUIRES(ix_.mu);
  void FinishRead(uint64_t run_id, uint64_t step, uint64_t generation,
                  std::shared_ptr<HostBlock> block, Status read, int64_t started_ns)
      SNAPD_EXCLUDES(ix_.mu);
  void SchedulePrefetch(Run& run) SNAPD_REQUIRES(ix_.mu);
  // Moves compressed host copies up the arena until a block of `bytes` fits (variable-size
  // copies fragment it); false if the free room is too small or cannot be merged.
  bool CompactHost(uint64_t bytes, HostTier::ArenaId arena) SNAPD_REQUIRES(ix_.mu);
  // Drops one read-ahead copy or starts one demotion to make host room; false if neither.
  bool FreeHostRoom() SNAPD_REQUIRES(ix_.mu);
  // Host bytes that work in flight will free without another demotion: demotions being
  // written, and a checksum still hashing a block the store has let go of.
  uint64_t FreeingBytes() SNAPD_REQUIRES(ix_.mu);
  // Bytes of stored steps' host blocks leased out now (StoreState::Lease): held by a transfer
  // (a send, a mapped-path read, a dump) whose release wakes the tiering thread.
  uint64_t LeasedBytes() const SNAPD_REQUIRES(ix_.mu);
  // A push holds host memory it reserved and has not committed or aborted yet: its end will
  // wake the tiering thread.
  bool PushesReserved() const SNAPD_REQUIRES(ix_.mu);
  // Something in flight (a disk write or read, a compression, a checksum holding a block) will
  // free host memory or change what can be demoted soon.
  bool Settling() SNAPD_REQUIRES(ix_.mu);
  void FinishDrainsIfDone(Deferred& deferred) SNAPD_REQUIRES(ix_.mu);
  // With no spool working: fails the pushes that waited spool_failure_timeout with
  // UNAVAILABLE; sets the tiering thread's next deadline for the others.
  void FailPushesWithoutDisk(Deferred& deferred) SNAPD_REQUIRES(ix_.mu);
  // A push of `run` that finds no host room waits for the disk tier (it does not block until
  // steps are consumed).
  static bool NeedsDisk(const Run& run);
  // A push that needs the disk tier and cannot have it: counted (`at_once`: failed without
  // waiting, as unavailable_pushes_fast too), logged rate-limited and noted on its run; the
  // UNAVAILABLE, "STEP needs the disk tier " + why, to answer it with.
  Status NoDiskForPush(Run& run, uint64_t step, const std::string& why, bool at_once)
      SNAPD_REQUIRES(ix_.mu);
  // The background scrub: verifies the next disk-tier file when its turn (the rate) comes.
  void ScrubNext() SNAPD_REQUIRES(ix_.mu);
  // Logs each wait older than options_.wait_warn_after, with what it waits for, and wakes the
  // tiering thread when the next one comes due.
  void WarnLongWaits() SNAPD_REQUIRES(ix_.mu);
  // What host room for `bytes` waits for: the tier's use and what in flight will make room.
  std::string WhatRoomWaitsFor(uint64_t bytes, HostTier::ArenaId arena) SNAPD_REQUIRES(ix_.mu);
  // What a fetch of `snap` waits for: its disk read or decode, or host room to start one.
  std::string WhatFetchWaitsFor(const Run& run, const Snapshot& snap) SNAPD_REQUIRES(ix_.mu);
  void WakeBy(std::chrono::steady_clock::time_point when) SNAPD_REQUIRES(ix_.mu) {
    deadline_ = std::min(deadline_, when);
  }
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static std::string StepLabel(uint64_t run_id, uint64_t step) {
    return "step " + std::to_string(step) + " of run id " + std::to_string(run_id);
  }

  std::deque<ParkedPush> parked_pushes_ SNAPD_GUARDED_BY(ix_.mu);
  std::set<Key> parked_reads_ SNAPD_GUARDED_BY(ix_.mu);  // fetches waiting for host room
  std::vector<DrainWaiter> drains_ SNAPD_GUARDED_BY(ix_.mu);
  int writes_in_flight_ SNAPD_GUARDED_BY(ix_.mu) = 0;
  int reads_in_flight_ SNAPD_GUARDED_BY(ix_.mu) = 0;
  bool keep_host_copies_ SNAPD_GUARDED_BY(ix_.mu) = false;
  bool disk_full_ SNAPD_GUARDED_BY(ix_.mu) = false;       // the last demotion found no room
  uint64_t refused_pushes_ SNAPD_GUARDED_BY(ix_.mu) = 0;  // refused for want of room
  uint64_t compactions_ SNAPD_GUARDED_BY(ix_.mu) = 0;     // blocks moved to merge free room
  log::RejectionLog refusals_{"store"};
  double read_ns_per_byte_ SNAPD_GUARDED_BY(ix_.mu) = 0;  // EWMA of disk reads
  uint64_t unavailable_pushes_ SNAPD_GUARDED_BY(ix_.mu) = 0;
  uint64_t unavailable_pushes_fast_ SNAPD_GUARDED_BY(ix_.mu) = 0;  // of those, failed at once
  // A push that needed the disk waited spool_failure_timeout and failed, and no spool has
  // worked since: the next ones that need the disk fail at once (FailFastWithoutDisk), with
  // the failure that push got, until a spool comes back.
  std::string disk_down_ SNAPD_GUARDED_BY(ix_.mu);
  uint64_t scrubbed_ SNAPD_GUARDED_BY(ix_.mu) = 0;
  uint64_t disk_changes_ SNAPD_GUARDED_BY(ix_.mu) = 0;  // DiskTier::changes() last seen
  // When the tiering thread must run again without a wake-up (a push's deadline, the scrub).
  std::chrono::steady_clock::time_point deadline_ SNAPD_GUARDED_BY(ix_.mu) =
      std::chrono::steady_clock::time_point::max();
  bool scrubbing_ SNAPD_GUARDED_BY(ix_.mu) = false;  // a background scrub read is in flight
  Key scrub_cursor_ SNAPD_GUARDED_BY(ix_.mu){0, 0};  // the last step the background scrub read
  std::chrono::steady_clock::time_point next_scrub_ SNAPD_GUARDED_BY(ix_.mu);
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

}  // namespace snapd
