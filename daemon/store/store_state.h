// What the store's owners share: the index of runs and snapshots over the catalog and the
// tiers with the one mutex that guards it (store/store_index.h), the components made over that
// index, the signal that wakes the tiering thread, and the I/O and compression pools their
// jobs run on.
//
// The store is components over one index:
//   StoreIndex (store/store_index.h)  the mutex and everything it guards, every component's
//                                     state included
//   Checksums  (ingest/checksums.h)   every checksum of a stored step, computed and verified
//                                     (tests/daemon/ingest/checksums_test.cc)
//   Ingest     (ingest/ingest.h)      at-ingest compression (ingest_test.cc)
//   Tiering    (tiering/tiering.h)    the tiering thread and the placement policy as applied
//                                     (tiering_test.cc)
// over the plumbing here (StoreState: the tiers, the catalog, the pools, the waker), and one
// object built on that plumbing:
//   Store      (store/store.h)        the front door and the catalog bookkeeping; it holds the
//                                     Tiering component as a member, StoreState the others
// A component keeps no guarded member: its methods take the index and are annotated
// ADJSNAP_REQUIRES_INDEX(ix), which clang checks against the argument, so every ADJSNAP_REQUIRES of
// the store is checked at every call. Each component is tested alone, without a Store.
//
// Threading: ix_.mu guards the index and every owner's state; wake_mu_ is taken after ix_.mu
// when both are held, never the other way round.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "config/config.h"
#include "disk_tier/disk_tier.h"
#include "host_tier/host_tier.h"
#include "ingest/checksums.h"
#include "ingest/ingest.h"
#include "ingest/packing.h"
#include "adjsnap/io_pool.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/v1/control.pb.h"
#include "adjsnap/zfp_codec.h"
#include "store/store_index.h"

namespace adjsnap {

// What a Store is told at Open. The settings an operator chooses come from adjsnapd's
// configuration through From(), so their defaults are the option table's (config/config.h):
// a Store made for a test starts from StoreOptions::From(DefaultConfig()).
struct StoreOptions {
  static StoreOptions From(const Config& config);

  uint64_t epoch = 0;         // this daemon start (Catalog::BeginEpoch)
  int io_threads = 0;         // disk I/O threads (io_threads)
  uint64_t max_prefetch = 0;  // upper bound of the adaptive read-ahead depth (prefetch_depth)
  int compress_threads = 0;   // compression workers (slabs of one snapshot in parallel)
  uint64_t tenant_quota = 0;  // bytes a tenant (not an admin) may store; 0 = no limit
  // The most of the host tier one tenant (not an admin) may fill with steps of runs that
  // cannot move to disk (layers without Disk); a tenant above it has its movable steps written
  // out first. 1 = no limit.
  double tenant_host_share = 0;
  // The last stop handed the host tier to systemd's fd store (Catalog::TakeHostTierKept), and
  // whether this start took it back (HostTier::Adopt): its steps are then claimed where the
  // catalog says, checked and served again; otherwise they are lost, and the log says why.
  std::optional<v1::HostTierKept> kept_host_tier;
  bool host_tier_adopted = false;
  // Tests: called on the hashing thread just before each checksum of stored bytes is computed
  // (Checksums::Hash); it may block.
  std::function<void(const void* data, uint64_t bytes)> on_hash;
  // How long a push that needs the disk tier waits while no spool works (each failed spool is
  // re-probed meanwhile) before it fails with UNAVAILABLE.
  std::chrono::milliseconds spool_failure_timeout{0};
  // Background re-verification of spool files, bytes read per second; 0 = off.
  uint64_t scrub_bytes_per_second = 0;
  // A push or fetch that has waited this long is logged, with what it waits for (and again
  // every kWaitWarnRepeat times as long while it still waits).
  std::chrono::milliseconds wait_warn_after{0};
};

class StoreState {
 public:
  using PushTicket = StoreIndex::PushTicket;
  using PushDone = StoreIndex::PushDone;
  using FetchGrant = StoreIndex::FetchGrant;
  using FetchDone = StoreIndex::FetchDone;
  using DrainResult = StoreIndex::DrainResult;

 protected:
  friend class Tiering;  // a component made over this plumbing (tiering/tiering.h)
  using Snapshot = StoreIndex::Snapshot;
  using DeviceStep = StoreIndex::DeviceStep;
  using Run = StoreIndex::Run;
  using Key = StoreIndex::Key;
  // Callbacks collected under the mutex, run after it is released.
  using Deferred = std::vector<std::function<void()>>;

  StoreState(Catalog* catalog, HostTier* host, DiskTier* disk, const StoreOptions& options);
  ~StoreState();

  // A host-tier block whose release, by whoever drops the last reference (a lease, an I/O job,
  // the checksum thread), wakes the tiering thread to hand the room to what waits for it.
  // It lies in the arena of the run's owner (ArenaOf).
  Result<std::shared_ptr<HostBlock>> AllocateHost(const Run& run, uint64_t bytes,
                                                  bool from_top = false);
  // The same with the population of its fresh pages left to the caller
  // (HostTier::AllocateDeferred): a push admitted on the data-plane loop, whose pages are
  // populated on the populate thread (populate_) instead.
  struct PendingHost {
    std::shared_ptr<HostBlock> block;
    FreshUnits fresh;  // empty: its pages exist already
  };
  Result<PendingHost> AllocateHostDeferred(const Run& run, uint64_t bytes);
  // The same for a block of an adopted host tier at a known place (HostTier::Claim).
  Result<std::shared_ptr<HostBlock>> ClaimHost(const Run& run, uint64_t offset, uint64_t bytes);
  // The host-tier arena that holds the run's steps: its owner's (HostTier::ArenaFor).
  HostTier::ArenaId ArenaOf(const Run& run) const {
    return host_->ArenaFor(run.record.owner_uid());
  }
  // A reference to `block` for a holder outside the store (the data plane's push or fetch, a
  // dump): dropping its last copy wakes the tiering thread. The policy waits for blocks that
  // only the store holds (a compressed copy swapped in for the raw bytes, a read-ahead copy
  // dropped, a block moved to compact the tier), and the release of the last such holder,
  // which frees no memory by itself, is what makes them so.
  std::shared_ptr<HostBlock> Lease(std::shared_ptr<HostBlock> block) const;
  // The blocks leased out now (each once, however many leases it has).
  std::unordered_set<const HostBlock*> LeasedBlocks() const;
  // Something changed that the tiering policy may act on: wakes the tiering thread.
  void Wake() ADJSNAP_EXCLUDES(wake_mu_);
  // The tiering thread's wait for Wake, or for `until` to pass; false once StopWaking was
  // called.
  bool WaitForWake(std::chrono::steady_clock::time_point until =
                       std::chrono::steady_clock::time_point::max()) ADJSNAP_EXCLUDES(wake_mu_);
  // Wake, as a callable that is safe to call from outside the store even after it is gone
  // (the disk tier's state listener).
  std::function<void()> WakeFromOutside() const {
    return [w = waker_] { w->Wake(); };
  }
  void StopWaking() ADJSNAP_EXCLUDES(wake_mu_);
  // Blocks released from now on wake nobody (the store is being destroyed).
  void DetachWaker();

  // Marks the step lost (the catalog is told, without waiting), logging `why` unless it is
  // empty. `ix` is ix_ (named so that a component's caller, holding the index it was given, is
  // checked too).
  void MarkLost(StoreIndex& ix, Run& run, Snapshot& snap, const std::string& why)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Records the first thing that broke `run` (a push refused after it was accepted for
  // checking, or a step lost); later ones leave it as it is.
  static void NoteFailure(Run& run, const std::string& why);
  static uint64_t BlockBytes(const Run& run);
  // The snapshot's host block holds bytes adjsnapd must decode before serving them (compressed
  // at ingest by zfp); a framed step's (IsFramed) are served as they are.
  static bool HoldsCompressed(const Snapshot& snap) {
    return snap.record.tier() == v1::TIER_HOST && snap.record.codec() != v1::CODEC_NONE &&
           !IsFramed(snap.record);
  }
  // The bytes a fetch returns (raw, or a framed step's frame) are in host memory: a fetch can
  // be answered from there, with no disk read and no decode.
  static bool ServableFromHost(const Snapshot& snap) {
    return snap.block && !HoldsCompressed(snap);
  }

  // Snapshot records go to the catalog through this (StoreIndex::RecordWriter): never waiting.
  static StoreIndex::RecordWriter RecordTo(Catalog* catalog);

  Catalog* const catalog_;
  HostTier* const host_;
  DiskTier* const disk_;  // null: no disk tier
  const StoreOptions options_;
  const StoreIndex::RecordWriter record_;  // RecordTo(catalog_)

  // Before the components: they use it, and are destroyed first.
  StoreIndex ix_;
  Checksums checksums_;
  Ingest ingest_;

  // Used by the I/O jobs of every owner; started by Store::Open, io_ stopped first at shutdown
  // (compress_ outlives it: its jobs use the workers).
  std::unique_ptr<compress::CompressPool> compress_;
  std::unique_ptr<IoPool> io_;
  // One thread that populates the fresh pages of pushes' blocks (Tiering::PopulateForPush), in
  // the order they were admitted: neither the data-plane loop nor a holder of the index's
  // mutex waits for the kernel to allocate and zero them, and a disk I/O that hangs cannot
  // hold a push up. Started by Store::Open; stopped after the tiering thread (which submits to
  // it), running what is queued, while the index is intact.
  std::unique_ptr<IoPool> populate_;

 private:
  // What a released block's deleter calls: the store, until it is destroyed (blocks may
  // outlive it in a lease the data plane still holds), then nothing.
  struct Waker {
    Mutex mu;
    StoreState* state ADJSNAP_GUARDED_BY(mu) = nullptr;
    // Leases out per block (Lease); a block in it is alive, held by its leases.
    std::unordered_map<const HostBlock*, int> leases ADJSNAP_GUARDED_BY(mu);
    void Wake() ADJSNAP_EXCLUDES(mu);
  };
  const std::shared_ptr<Waker> waker_ = std::make_shared<Waker>();
  std::shared_ptr<HostBlock> Wrap(std::unique_ptr<HostBlock> block);

  Mutex wake_mu_;  // taken after ix_.mu when both are held; never the other way round
  bool wake_ ADJSNAP_GUARDED_BY(wake_mu_) = false;
  bool wake_stop_ ADJSNAP_GUARDED_BY(wake_mu_) = false;
  CondVar wake_cv_;
};

// "step S of run 'NAME'", for messages.
std::string StepName(const v1::RunRecord& run, uint64_t step);

}  // namespace adjsnap
