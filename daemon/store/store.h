// The store: snapd's index of runs and snapshots, kept in memory over the catalog (RocksDB)
// and the host tier, and the single place where every request is validated.
//
// Invariant: a snapshot is visible (Locate, List, Fetch) only once its bytes are in its tier
// and its record is in the catalog; a push that fails or is abandoned leaves neither.
//
// Thread-safety: every public method is thread-safe (one mutex guards the index; catalog
// writes happen under it so the index and the catalog never disagree). A background thread
// computes each stored snapshot's checksum and records it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "catalog/catalog.h"
#include "host_tier/host_tier.h"
#include "snapd/status.h"
#include "snapd/v1/control.pb.h"
#include "thread_annotations.h"

namespace snapd {

struct StoreCounters {
  uint64_t runs = 0;
  uint64_t host_snapshots = 0;
  uint64_t lost_snapshots = 0;
};

class Store {
 public:
  // Loads the catalog. Host-tier snapshots recorded by an earlier daemon start (`epoch` is this
  // start's) did not survive it: they are re-recorded as TIER_LOST and reported as lost.
  static Result<std::unique_ptr<Store>> Open(Catalog* catalog, HostTier* host, uint64_t epoch);
  ~Store();

  Result<v1::RunInfo> OpenRun(const v1::RunSpec& spec, uint32_t owner_uid, bool* created)
      SNAPD_EXCLUDES(mu_);
  Result<v1::RunInfo> CloseRun(const std::string& name) SNAPD_EXCLUDES(mu_);
  // Returns the host-tier bytes released.
  Result<uint64_t> DeleteRun(const std::string& name) SNAPD_EXCLUDES(mu_);
  // Removes one snapshot; returns the tier bytes released.
  Result<uint64_t> DeleteSnapshot(const std::string& name, uint64_t step) SNAPD_EXCLUDES(mu_);
  std::vector<v1::RunInfo> ListRuns() const SNAPD_EXCLUDES(mu_);
  Result<std::vector<v1::SnapshotInfo>> ListSnapshots(const std::string& name,
                                                      v1::RunInfo* run) const SNAPD_EXCLUDES(mu_);
  Result<v1::SnapshotInfo> Locate(const std::string& name, uint64_t step) const SNAPD_EXCLUDES(mu_);

  // A push between BeginPush and CommitPush/AbortPush: the step is reserved and `block` holds
  // the tier memory its bytes go to.
  struct PushTicket {
    uint64_t run_id = 0;
    uint64_t step = 0;
    std::shared_ptr<HostBlock> block;
  };
  Result<PushTicket> BeginPush(uint64_t run_id, uint64_t step, uint64_t bytes) SNAPD_EXCLUDES(mu_);
  Status CommitPush(const PushTicket& ticket) SNAPD_EXCLUDES(mu_);
  void AbortPush(const PushTicket& ticket) SNAPD_EXCLUDES(mu_);

  // The block holding the step's bytes; shared so a concurrent DeleteRun cannot free it under
  // an in-flight send.
  Result<std::shared_ptr<HostBlock>> BeginFetch(uint64_t run_id, uint64_t step, uint64_t bytes)
      SNAPD_EXCLUDES(mu_);

  StoreCounters Counters() const SNAPD_EXCLUDES(mu_);
  uint64_t host_budget() const { return host_->budget(); }
  uint64_t host_used() const { return host_->used(); }

  // Blocks until every checksum queued so far is recorded (tests, orderly shutdown).
  void WaitChecksumsIdle() SNAPD_EXCLUDES(mu_);

 private:
  struct Snapshot {
    v1::SnapshotRecord record;
    std::shared_ptr<HostBlock> block;  // null unless record.tier() == TIER_HOST
  };
  struct Run {
    v1::RunRecord record;
    std::map<uint64_t, Snapshot> snapshots;
    std::set<uint64_t> in_flight;
    uint64_t stored_bytes = 0;
  };
  struct ChecksumJob {
    uint64_t run_id;
    uint64_t step;
    uint64_t bytes;
    std::shared_ptr<HostBlock> block;
  };

  Store(Catalog* catalog, HostTier* host, uint64_t epoch);
  Status Load();
  void ChecksumLoop() SNAPD_EXCLUDES(mu_);
  Result<const Run*> FindByName(const std::string& name) const SNAPD_REQUIRES(mu_);
  Result<Run*> FindByName(const std::string& name) SNAPD_REQUIRES(mu_);
  Result<Run*> FindById(uint64_t run_id) SNAPD_REQUIRES(mu_);
  static v1::RunInfo Info(const Run& run);
  static v1::SnapshotInfo Info(const v1::SnapshotRecord& rec);

  Catalog* const catalog_;
  HostTier* const host_;
  const uint64_t epoch_;

  mutable Mutex mu_;
  std::map<uint64_t, Run> runs_ SNAPD_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> by_name_ SNAPD_GUARDED_BY(mu_);
  uint64_t lost_snapshots_ SNAPD_GUARDED_BY(mu_) = 0;
  std::deque<ChecksumJob> checksum_queue_ SNAPD_GUARDED_BY(mu_);
  bool checksum_busy_ SNAPD_GUARDED_BY(mu_) = false;
  bool stopping_ SNAPD_GUARDED_BY(mu_) = false;
  CondVar checksum_cv_;
  std::thread checksum_thread_;  // declared last: started once everything above exists
};

// Validates a spec on its own (name, sizes, dtype and shape agree).
Status ValidateRunSpec(const v1::RunSpec& spec);
// Bytes of one element of `dtype`; 1 for DTYPE_UNSPECIFIED (opaque bytes).
uint64_t DtypeBytes(v1::Dtype dtype);

}  // namespace snapd
