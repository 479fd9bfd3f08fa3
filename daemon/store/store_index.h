// The store's index: the one mutex and everything it guards. Runs and their snapshots over the
// catalog and the tiers, the counters, and the state of the components the store is made of
// (the checksum owner's queue, the at-ingest compressor's and the tiering policy's). A component
// keeps no guarded member of its own: its methods take the index and are annotated
// ADJSNAP_REQUIRES_INDEX(ix), which clang's thread-safety analysis checks against the argument at
// every call, so one index held by the store is one capability however many components use it.
//
// Record first, then the index: a change to a snapshot's record is written to the catalog
// asynchronously and applied to the index once written, so no thread holds the mutex across
// RocksDB. The mutex plays the catalog's kCatalogCompletionLock role (catalog/catalog.h): it is
// taken with IndexLock, which acquires the role too, so a catalog call that waits, made with the
// mutex held, does not compile under clang. While a copy's record is being written the index
// still shows the one before it: the copy is marked (Recording), and every other update of its
// record waits for the mark to go (AfterRecords, AwaitRecords) and builds on the newest one, so
// no write carries a stale record over another.
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
#include <tuple>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "store/store_types.h"
#include "host_tier/host_tier.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/v1/catalog.pb.h"
#include "adjsnap/v1/control.pb.h"

namespace adjsnap {

// Holds `ix` (the index's mutex) and the catalog's completion-lock role with it.
#define ADJSNAP_REQUIRES_INDEX(ix) ADJSNAP_REQUIRES((ix).mu, kCatalogCompletionLock)

struct StoreCounters {
  uint64_t runs = 0;
  uint64_t host_snapshots = 0;  // whose bytes are in host memory (only copy or read-ahead)
  uint64_t disk_snapshots = 0;
  uint64_t disk_raw_bytes = 0;  // raw size of the disk-tier snapshots (compressed or not)
  uint64_t shared_disk_snapshots = 0;  // of those, on shared spools
  uint64_t shared_disk_raw_bytes = 0;
  uint64_t lost_snapshots = 0;
  uint64_t demotions = 0;
  uint64_t moves_to_shared = 0;  // disk files moved from a local spool to a shared one
  uint64_t disk_reads = 0;
  uint64_t prefetch_hits = 0;
  uint64_t demand_reads = 0;
  uint64_t released = 0;
  uint64_t refused_pushes = 0;           // refused because host and disk together had no room
  uint64_t compactions = 0;              // host blocks moved to merge free room
  uint64_t unavailable_pushes = 0;       // failed because they needed disk and no spool worked
  uint64_t unavailable_pushes_fast = 0;  // of those, failed at once (an earlier one waited)
  uint64_t scrubbed = 0;  // spool files re-verified (recovery, background, on demand)
};

// A compressed copy made at ingest that could not replace the raw block yet (ingest/ingest.h).
struct PendingPack;

struct StoreIndex {
  // The types the store's callers and components share (store_types.h), by their old names.
  using FetchGrant = adjsnap::FetchGrant;
  using FetchDone = adjsnap::FetchDone;
  using PushTicket = adjsnap::PushTicket;
  using PushDone = adjsnap::PushDone;
  using DrainResult = adjsnap::DrainResult;

  struct Snapshot {
    // Durable truth: TIER_HOST, TIER_DISK or TIER_LOST. Replaced only through Run::SetRecord,
    // and its tier changes only there (Run::DiskSteps counts by it).
    v1::SnapshotRecord record;
    std::shared_ptr<HostBlock> block;  // host bytes: the only copy (HOST) or a read-ahead (DISK)
    uint64_t generation = 0;           // unique per stored copy; also arrival order
    bool writing = false;              // a demotion is writing `block` to disk
    bool reading = false;              // a disk read into host memory is in flight
    bool moving = false;  // its file is being copied to a shared spool (Tiering::StartMove)
    uint64_t move_failed_at = 0;  // DiskTier::changes() + 1 when such a copy last failed; 0: none
    // Its last disk read was UNAVAILABLE (its spool cannot be reached): DiskTier::changes() + 1
    // then, and a second later. Read-ahead skips it until a spool's state changes again or that
    // second has passed (a spool back before the read ended changes nothing after); 0: none.
    uint64_t unreachable_at = 0;
    std::chrono::steady_clock::time_point unreachable_until{};
    bool verified = true;              // false for a recovered file not yet checksummed
    std::vector<FetchDone> waiters;    // fetches waiting for that read
    // Since when the first of `waiters` waits, and when the wait is next logged (Tiering).
    std::chrono::steady_clock::time_point waiting_since{};
    std::chrono::steady_clock::time_point warn_at{};
    // A compressed copy made at ingest that could not replace the raw block yet.
    std::shared_ptr<PendingPack> pending_pack;
  };
  // How many of a run's snapshots in [step, bound) are on disk (TIER_DISK), for the placement
  // of each demotion (Tiering::DemotionClass), without walking the range each time: a cursor
  // over the run's snapshots holds the count from where it stands up to the bound, and moves
  // entry by entry to where the next count starts; a change of tier (Run::SetRecord) and an
  // erasure (Run::EraseSnapshot) at or after it adjust the count, O(1) each. Demotions come
  // oldest first within a pass (Rebalance walks each run's steps in order, FreeHostRoom takes
  // the oldest), so the cursor crosses a run once per pass: O(1) amortized per count. A count
  // out of that order pays for the entries the cursor passes. (A Fenwick tree would bound
  // every order at O(log n), over positions mapped from the steps, sparse keys up to 2^64;
  // the order demotions come in does not need it.)
  class DiskCursor {
   public:
    using Steps = std::map<uint64_t, Snapshot>;
    DiskCursor() = default;
    // A run copied or moved counts afresh: the cursor pointed into the other run's snapshots.
    DiskCursor(const DiskCursor&) {}
    DiskCursor& operator=(const DiskCursor&) {
      steps_ = nullptr;
      return *this;
    }
    // Snapshots of `steps` in [step, bound) on disk. The first count (and one with another
    // bound) walks the range.
    uint64_t Count(const Steps& steps, uint64_t step, uint64_t bound);
    // The snapshot at `step` went onto disk (`on_disk`) or off it.
    void TierChanged(uint64_t step, bool on_disk);
    // The snapshot at `it` is about to be erased.
    void Erasing(Steps::const_iterator it);

   private:
    bool Counted(const Steps::value_type& entry) const {
      return entry.first < bound_ && entry.second.record.tier() == v1::TIER_DISK;
    }
    bool AtOrAfterCursor(uint64_t step) const {
      return steps_ != nullptr && cursor_ != steps_->end() && step >= cursor_->first;
    }

    const Steps* steps_ = nullptr;  // the run's snapshots; null until the first count
    Steps::const_iterator cursor_;
    uint64_t bound_ = 0;
    uint64_t count_ = 0;  // snapshots from cursor_ on, below bound_, on disk
  };
  struct DeviceStep {
    uint64_t session_id = 0;  // whose GPU memory holds it
    bool lost = false;        // that session ended
  };
  struct Run {
    v1::RunRecord record;
    // Writes of `record` queued and not yet applied (Store::RecordRun), and the newest of them:
    // the next change builds on it.
    int record_writes = 0;
    v1::RunRecord queued_record;
    std::map<uint64_t, Snapshot> snapshots;  // erased only through EraseSnapshot
    std::map<uint64_t, DeviceStep> device;  // the device tier: recorded, held by clients
    // Pushes reserved (the store's reference to the block their bytes go to) or waiting for
    // room (null).
    std::map<uint64_t, std::shared_ptr<HostBlock>> in_flight;
    std::set<uint64_t> released;  // read-once steps already consumed (this daemon start)
    uint64_t stored_bytes = 0;
    // Backward pace: time between consecutive fetches of descending steps (EWMA).
    int64_t last_fetch_ns = 0;
    uint64_t last_fetch_step = 0;
    double pace_ns = 0;
    uint64_t prefetch_from = 0;   // read ahead below this step (the last backward fetch); 0 = none
    // Disk reads of its steps on shared spools in flight (Tiering::SchedulePrefetch keeps the
    // read-ahead there to kSharedReads at a time, nearest step first).
    int shared_reads = 0;
    // Where Tiering::MakeLocalRoom looks for the run's oldest local step: every step below it is
    // on a shared spool, lost, or not on disk yet (a run of unknown N's moved steps are not
    // walked again at each demotion).
    uint64_t move_from = 0;
    std::set<uint64_t> sessions;  // live sessions that opened or attached to it
    // When the last of them died (its client went away without closing); none: not an orphan.
    std::optional<std::chrono::steady_clock::time_point> orphaned_at;
    // Why the run is no longer whole (RunInfo.failure): the first refused push or lost step
    // since adjsnapd started; empty while it is whole.
    std::string failure;
    // DiskSteps' count, kept as tiers change.
    mutable DiskCursor disk_cursor;

    // Replaces the record of `snap`, one of `snapshots` (or one just added to them): the one
    // way a record's tier changes, so that DiskSteps stays true.
    void SetRecord(Snapshot& snap, v1::SnapshotRecord rec);
    // Erases one of `snapshots`.
    void EraseSnapshot(std::map<uint64_t, Snapshot>::iterator it);
    // How many of its snapshots in [step, bound) are on disk: O(1) amortized (DiskCursor).
    uint64_t DiskSteps(uint64_t step, uint64_t bound) const {
      return disk_cursor.Count(snapshots, step, bound);
    }
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (run_id, step)

  // The at-ingest compressor's state (ingest/ingest.h): compressions running, and the
  // snapshots whose compressed copy waits to replace the raw block (Snapshot::pending_pack).
  struct IngestState {
    int in_flight = 0;
    std::set<Key> pending_packs;
  };

  // The checksum owner's state (ingest/checksums.h): the checksums of stored copies still to
  // compute, and the hashes in progress that other threads may wait for.
  struct ChecksumJob {
    uint64_t run_id = 0;
    uint64_t step = 0;
    uint64_t generation = 0;
    uint64_t bytes = 0;
    std::shared_ptr<HostBlock> block;
    std::chrono::steady_clock::time_point queued;
  };
  using CopyKey = std::tuple<uint64_t, uint64_t, uint64_t>;  // (run_id, step, generation)
  struct Hashing {
    bool done = false;
    uint64_t sum = 0;
  };
  struct ChecksumQueue {
    std::deque<ChecksumJob> jobs;
    bool busy = false;
    ChecksumJob current;  // while busy; its block is not held
    std::map<CopyKey, std::shared_ptr<Hashing>> hashing;
    std::chrono::steady_clock::time_point last_data_activity;
    int idle_waiters = 0;  // threads in Checksums::WaitIdle
  };

  // This copy of the step (its generation), or null if it is gone.
  Snapshot* FindSnapshot(uint64_t run_id, uint64_t step, uint64_t generation) ADJSNAP_REQUIRES(mu);
  Snapshot* FindSnapshot(const CopyKey& copy) ADJSNAP_REQUIRES(mu) {
    return FindSnapshot(std::get<0>(copy), std::get<1>(copy), std::get<2>(copy));
  }
  // The snapshot at `key` (any generation), with its run; both null if gone.
  std::pair<Run*, Snapshot*> FindSnapshot(const Key& key) ADJSNAP_REQUIRES(mu);

  // Writes a snapshot record to the catalog and calls `done` with the result on the catalog's
  // writer thread (Catalog::PutSnapshotThen): it never waits.
  using RecordWriter =
      std::function<void(const v1::SnapshotRecord&, std::function<void(Status)> done)>;
  // A record of this copy is being written: the index does not show it yet.
  bool Recording(const CopyKey& copy) const ADJSNAP_REQUIRES(mu) { return records.count(copy); }
  // Marks the copy as recording until as many EndRecord.
  void BeginRecord(const CopyKey& copy) ADJSNAP_REQUIRES(mu) { ++records[copy].writes; }
  // The write begun with BeginRecord is applied to the index (or failed, leaving it as it was):
  // the updates waiting for the copy's records run, in order, until one begins another record.
  void EndRecord(const CopyKey& copy) ADJSNAP_REQUIRES_INDEX(*this);
  // Runs `update` now if no record of the copy is being written, else once none is (in the
  // completion of the last, under the mutex). It finds the copy again (it may be gone).
  void AfterRecords(const CopyKey& copy, std::function<void()> update) ADJSNAP_REQUIRES(mu);
  // Writes `rec`, the copy's next record, built on its newest; the copy is Recording until
  // `applied` has run with the write's result, under the mutex, on the catalog's writer thread.
  void RecordThen(const RecordWriter& write, const CopyKey& copy, const v1::SnapshotRecord& rec,
                  std::function<void(Status)> applied) ADJSNAP_REQUIRES_INDEX(*this);
  // For a thread that may wait (an I/O job, the checksum thread): waits until no record of the
  // copy is being written, the mutex released meanwhile.
  void AwaitRecords(const CopyKey& copy) ADJSNAP_REQUIRES_INDEX(*this);
  // The same thread's write: writes `rec` (the copy Recording meanwhile) and waits for it with
  // the mutex released. The caller applies the change and then calls EndRecord(copy).
  Status RecordAndWait(const RecordWriter& write, const CopyKey& copy,
                       const v1::SnapshotRecord& rec) ADJSNAP_REQUIRES_INDEX(*this);

  mutable Mutex mu;
  std::map<uint64_t, Run> runs ADJSNAP_GUARDED_BY(mu);
  StoreCounters counters ADJSNAP_GUARDED_BY(mu);  // demotions, reads, hits, releases
  bool stopping ADJSNAP_GUARDED_BY(mu) = false;
  ChecksumQueue checksums ADJSNAP_GUARDED_BY(mu);
  IngestState ingest ADJSNAP_GUARDED_BY(mu);
  // The copies whose records are being written, and what waits for them (Recording).
  struct RecordWrites {
    int writes = 0;
    std::deque<std::function<void()>> after;
  };
  std::map<CopyKey, RecordWrites> records ADJSNAP_GUARDED_BY(mu);

  // The tiering policy's state (tiering/tiering.h): what waits for host room or for the disk,
  // the moves in flight, and the policy's counters and clocks.
  struct TieringState {
    struct ParkedPush {
      uint64_t run_id;
      uint64_t step;
      uint64_t bytes;
      HostTier::ArenaId arena;  // where its block goes: its run owner's
      PushDone later;
      std::chrono::steady_clock::time_point parked_at;
      std::chrono::steady_clock::time_point warn_at;  // when the wait is next logged
      uint64_t pushed = 0;  // PushTicket::bytes; `bytes` is the room it waits for
    };
    struct DrainWaiter {
      std::function<void(Result<DrainResult>)> done;
      DrainResult result;
      // The newest copy stored when the drain began: it ends once every copy up to this one
      // is on disk (copies pushed meanwhile move too, but a job that keeps pushing would
      // otherwise keep the drain from ever ending).
      uint64_t upto = 0;
    };
    std::deque<ParkedPush> parked_pushes;
    std::set<Key> parked_reads;  // fetches waiting for host room
    std::vector<DrainWaiter> drains;
    int writes_in_flight = 0;  // demotions and moves
    // Moves under way from a local spool to a shared one (Tiering::StartMove), and the local
    // bytes they will free.
    int moves_in_flight = 0;
    uint64_t moving_bytes = 0;
    int reads_in_flight = 0;
    bool keep_host_copies = false;
    bool disk_full = false;       // the last demotion found no room
    uint64_t refused_pushes = 0;  // refused for want of room
    uint64_t compactions = 0;     // blocks moved to merge free room
    double read_ns_per_byte = 0;  // EWMA of disk reads from local spools
    double shared_read_ns_per_byte = 0;  // and from shared ones
    uint64_t unavailable_pushes = 0;
    uint64_t unavailable_pushes_fast = 0;  // of those, failed at once
    // A push that needed the disk waited spool_failure_timeout and failed, and no spool has
    // worked since: the next ones that need the disk fail at once, with the failure that push
    // got, until a spool comes back.
    std::string disk_down;
    uint64_t scrubbed = 0;
    uint64_t disk_changes = 0;  // DiskTier::changes() last seen
    // When the tiering thread must run again without a wake-up (a push's deadline, the scrub).
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    bool scrubbing = false;  // a background scrub read is in flight
    Key scrub_cursor{0, 0};  // the last step the background scrub read
    std::chrono::steady_clock::time_point next_scrub;
  };
  TieringState tiering ADJSNAP_GUARDED_BY(mu);
};

// Holds an index's mutex, and with it the catalog's completion-lock role (catalog/catalog.h).
class ADJSNAP_SCOPED_CAPABILITY IndexLock {
 public:
  explicit IndexLock(const StoreIndex& ix) ADJSNAP_ACQUIRE(ix.mu, kCatalogCompletionLock)
      : lock_(ix.mu) {}
  ~IndexLock() ADJSNAP_RELEASE() {}
  IndexLock(const IndexLock&) = delete;
  IndexLock& operator=(const IndexLock&) = delete;
  void Unlock() ADJSNAP_RELEASE() { lock_.Unlock(); }
  void Lock() ADJSNAP_ACQUIRE() { lock_.Lock(); }

 private:
  MutexLock lock_;
};

}  // namespace adjsnap
