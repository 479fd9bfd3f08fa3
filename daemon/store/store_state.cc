#include "store/store_state.h"

#include "log.h"
#include "adjsnap/compress_pool.h"

namespace adjsnap {

StoreOptions StoreOptions::From(const Config& config) {
  StoreOptions o;
  // A network filesystem's writes wait on round trips to its servers: more of them in flight
  // keep it busy (GlusterFS: the spill at 0.92-0.94x of the reference write with 8, 0.85-0.91x with
  // 4; docs/benchmarks.md, "A shared filesystem tier").
  o.io_threads = config.io_threads                  ? static_cast<int>(config.io_threads)
                 : config.shared_spool_dirs.empty() ? 4
                                                    : 8;
  o.max_prefetch = config.prefetch_depth;
  o.compress_threads = config.compress_threads ? static_cast<int>(config.compress_threads)
                                               : compress::DefaultCompressThreads();
  o.tenant_quota = config.tenant_quota;
  o.tenant_host_share = config.tenant_host_share;
  o.spool_failure_timeout = std::chrono::seconds(config.spool_failure_timeout);
  o.scrub_bytes_per_second = config.scrub_rate;
  o.wait_warn_after = std::chrono::seconds(config.wait_warn_after);
  return o;
}

StoreIndex::RecordWriter StoreState::RecordTo(Catalog* catalog) {
  return [catalog](const v1::SnapshotRecord& r, std::function<void(Status)> done) {
    catalog->PutSnapshotThen(r, std::move(done));
  };
}

std::string StepName(const v1::RunRecord& run, uint64_t step) {
  return "step " + std::to_string(step) + " of run '" + run.spec().name() + "'";
}

StoreState::StoreState(Catalog* catalog, HostTier* host, DiskTier* disk,
                       const StoreOptions& options)
    : catalog_(catalog),
      host_(host),
      disk_(disk),
      options_(options),
      record_(RecordTo(catalog)),
      checksums_(ix_, RecordTo(catalog), options.on_hash, [this] { Wake(); }),
      ingest_(
          ix_, checksums_,
          Ingest::Deps{
              .allocate = [this](const Run& run,
                                 uint64_t bytes) { return AllocateHost(run, bytes, true); },
              .record = RecordTo(catalog),
              .submit =
                  [this](std::function<void()> job) {
                    io_->Submit(std::move(job), /*urgent=*/false);
                  },
              .pack =
                  [this](const compress::CodecSpec& codec, const compress::FieldSpec& field,
                         const void* data) {
                    return PackSnapshot(codec, field, data, compress_.get(), checksums_);
                  },
              .wake = [this] { Wake(); }}) {
  MutexLock lock(waker_->mu);
  waker_->state = this;
}

StoreState::~StoreState() { DetachWaker(); }

Result<std::shared_ptr<HostBlock>> StoreState::AllocateHost(const Run& run, uint64_t bytes,
                                                            bool from_top) {
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<HostBlock> block,
                         host_->AllocateIn(ArenaOf(run), bytes, from_top));
  return Wrap(std::move(block));
}

Result<StoreState::PendingHost> StoreState::AllocateHostDeferred(const Run& run, uint64_t bytes) {
  ADJSNAP_ASSIGN_OR_RETURN(HostTier::PendingBlock pending,
                         host_->AllocateDeferred(ArenaOf(run), bytes));
  return PendingHost{Wrap(std::move(pending.block)), std::move(pending.fresh)};
}

Result<std::shared_ptr<HostBlock>> StoreState::ClaimHost(const Run& run, uint64_t offset,
                                                         uint64_t bytes) {
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<HostBlock> block,
                         host_->Claim(ArenaOf(run), offset, bytes));
  return Wrap(std::move(block));
}

std::shared_ptr<HostBlock> StoreState::Wrap(std::unique_ptr<HostBlock> block) {
  return std::shared_ptr<HostBlock>(block.release(), [waker = waker_](HostBlock* b) {
    delete b;  // the room is the tier's again
    waker->Wake();
  });
}

std::shared_ptr<HostBlock> StoreState::Lease(std::shared_ptr<HostBlock> block) const {
  HostBlock* raw = block.get();
  {
    MutexLock lock(waker_->mu);
    ++waker_->leases[raw];
  }
  return std::shared_ptr<HostBlock>(
      raw, [block = std::move(block), waker = waker_](HostBlock* leased) mutable {
        {
          MutexLock lock(waker->mu);
          if (--waker->leases[leased] == 0) waker->leases.erase(leased);
        }
        // Before the wake-up: the tiering thread must find the store's reference the only
        // one. Without the waker's lock: the last reference's deleter takes it.
        block.reset();
        waker->Wake();
      });
}

std::unordered_set<const HostBlock*> StoreState::LeasedBlocks() const {
  MutexLock lock(waker_->mu);
  std::unordered_set<const HostBlock*> out;
  for (const auto& [block, count] : waker_->leases) out.insert(block);
  return out;
}

void StoreState::Waker::Wake() {
  MutexLock lock(mu);
  if (state) state->Wake();
}

void StoreState::DetachWaker() {
  MutexLock lock(waker_->mu);
  waker_->state = nullptr;
}

void StoreState::Wake() {
  {
    MutexLock lock(wake_mu_);
    wake_ = true;
  }
  wake_cv_.NotifyOne();
}

bool StoreState::WaitForWake(std::chrono::steady_clock::time_point until) {
  MutexLock lock(wake_mu_);
  auto woken = [&]() ADJSNAP_REQUIRES(wake_mu_) { return wake_ || wake_stop_; };
  if (until == std::chrono::steady_clock::time_point::max()) {
    wake_cv_.Wait(wake_mu_, woken);
  } else {
    wake_cv_.WaitUntil(wake_mu_, until, woken);
  }
  if (wake_stop_) return false;
  wake_ = false;
  return true;
}

void StoreState::StopWaking() {
  {
    MutexLock lock(wake_mu_);
    wake_stop_ = true;
  }
  wake_cv_.NotifyAll();
}

void StoreState::MarkLost(StoreIndex& ix, Run& run, Snapshot& snap, const std::string& why) {
  v1::SnapshotRecord& r = snap.record;
  if (!why.empty()) {
    ADJSNAP_LOG_ERROR("%s is lost: %s", StepName(run.record, r.step()).c_str(), why.c_str());
  }
  NoteFailure(run, StepName(run.record, r.step()) + " is lost" + (why.empty() ? "" : ": " + why));
  run.stored_bytes -= r.stored_bytes();
  v1::SnapshotRecord lost = r;
  lost.set_tier(v1::TIER_LOST);
  lost.set_stored_bytes(0);
  run.SetRecord(snap, std::move(lost));  // `r` is snap.record: lost now
  snap.block.reset();
  // The index says lost at once (the bytes are gone whatever the catalog says), and the record
  // goes after any write of this copy in flight: the catalog's order ends it lost. Those
  // writes' completions leave a lost step lost, and nothing builds on a lost record.
  ix.RecordThen(record_, {r.run_id(), r.step(), snap.generation}, r, [](Status s) {
    if (!s.ok()) ADJSNAP_LOG_ERROR("recording a lost snapshot: %s", s.ToString().c_str());
  });
}

void StoreState::NoteFailure(Run& run, const std::string& why) {
  if (run.failure.empty()) run.failure = why;
}

uint64_t StoreState::BlockBytes(const Run& run) {
  uint64_t b = run.record.spec().bytes_per_step();
  return (b + HostTier::kAlignment - 1) / HostTier::kAlignment * HostTier::kAlignment;
}

}  // namespace adjsnap
