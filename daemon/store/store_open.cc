// Opening the store: the catalog's runs and snapshots taken back at start (Load), a kept host tier
// claimed (TakeBack), and the store's own teardown.
#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "log.h"
#include "adjsnap/checksum.h"
#include "adjsnap/layers.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

Store::Store(Catalog* catalog, HostTier* host, DiskTier* disk, const StoreOptions& options)
    : StoreState(catalog, host, disk, options) {}

Result<std::unique_ptr<Store>> Store::Open(Catalog* catalog, HostTier* host, DiskTier* disk,
                                           const StoreOptions& options) {
  std::unique_ptr<Store> store(new Store(catalog, host, disk, options));
  ADJSNAP_RETURN_IF_ERROR(store->Load());
  Store* s = store.get();
  s->compress_ = std::make_unique<compress::CompressPool>(options.compress_threads);
  s->io_ = std::make_unique<IoPool>(std::max(1, options.io_threads));
  s->populate_ = std::make_unique<IoPool>(1, "adjsnap-pages");
  s->checksums_.Start();
  s->tiering_.StartTiering();
  {
    IndexLock lock(s->ix_);
    for (auto& [id, run] : s->ix_.runs) {
      for (auto& [step, snap] : run.snapshots) {
        if (!snap.verified) s->tiering_.StartScrub(s->ix_, id, step);
      }
    }
  }
  return store;
}

Store::~Store() {
  {
    IndexLock lock(ix_);
    ix_.stopping = true;
  }
  StopWaking();
  tiering_.StopTiering();
  checksums_.Stop();
  catalog_->Flush();  // commit and release records written, release file removals queued
  // The pushes whose pages are being populated are answered (UNAVAILABLE: ix_.stopping) once
  // populated; the tiering thread, which submits them too, is joined above.
  populate_.reset();
  io_.reset();  // finishes the I/O already queued; completions still find the index intact
  DetachWaker();  // blocks released from now on wake nobody
  {
    IndexLock lock(ix_);
    if (!unsaved_why_.empty()) {
      // A stop whose drain fell short: what did not reach the disk is named, never silent.
      uint64_t lost = 0;
      for (auto& [id, run] : ix_.runs) {
        for (auto& [step, snap] : run.snapshots) {
          if (snap.record.tier() != v1::TIER_HOST || !snap.block) continue;
          MarkLost(ix_, run, snap, "it was still only in host memory when adjsnapd stopped (" +
                                  unsaved_why_ + ")");
          ++lost;
        }
      }
      if (lost) {
        ADJSNAP_LOG_ERROR("%llu host-tier steps were not written to disk before adjsnapd stopped",
                        static_cast<unsigned long long>(lost));
      }
    }
  }
  // Every record queued is written and applied before the index goes (a completion may queue
  // one more: a compressed step recorded raw again).
  for (;;) {
    catalog_->Flush();
    IndexLock lock(ix_);
    if (ix_.records.empty()) break;
  }
  // Whoever still waits gets an answer.
  Deferred deferred;
  {
    IndexLock lock(ix_);
    Status down = Status::Unavailable("adjsnapd is shutting down");
    tiering_.AnswerWaiting(ix_, down, deferred);
    for (auto& [id, run] : ix_.runs) {
      for (auto& [step, snap] : run.snapshots) {
        for (auto& w : snap.waiters) deferred.push_back([l = std::move(w), down] { l(down); });
        snap.waiters.clear();
      }
    }
  }
  for (auto& f : deferred) f();
}

Status Store::Load() {
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snapshots;
  ADJSNAP_RETURN_IF_ERROR(catalog_->LoadAll(&runs, &snapshots));
  IndexLock lock(ix_);
  const auto started = std::chrono::steady_clock::now();
  size_t awaiting = 0;
  for (auto& r : runs) {
    uint64_t id = r.run_id();
    by_name_[{r.owner_uid(), r.spec().name()}] = id;
    Run& run = ix_.runs[id];
    // Its clients at the last stop have orphan_grace from now to come back (AttachSession);
    // none does, it goes as an orphan (RemoveOrphans).
    if (r.awaiting_clients() && !r.spec().keep()) {
      run.orphaned_at = started;
      ++awaiting;
    }
    run.record = std::move(r);
  }
  if (awaiting > 0) {
    ADJSNAP_LOG_INFO("%zu run%s had clients at the last stop and await them (orphan_grace)", awaiting,
                   awaiting == 1 ? "" : "s");
  }
  if (disk_) {
    std::vector<DiskTier::RecordedFile> recorded;
    for (const auto& rec : snapshots) {
      if (rec.tier() == v1::TIER_DISK && ix_.runs.count(rec.run_id())) {
        recorded.push_back({rec.spool(), rec.run_id(), rec.disk_name()});
      }
    }
    disk_->Claim(recorded);
  }
  std::set<std::string> keep;
  // Files of steps found damaged now or lost before: moved aside, never deleted.
  struct Damaged {
    std::string step;
    v1::SnapshotRecord record;
    std::string why;
  };
  std::vector<Damaged> damaged;
  uint64_t lost_host = 0, recovered = 0, taken_back = 0;
  // Records changed here that must be written before the store serves (TakeBack's, a host copy
  // dropped): written once the index's mutex is released, which no catalog wait is made under.
  std::vector<v1::SnapshotRecord> rewrites;
  for (auto& rec : snapshots) {
    auto it = ix_.runs.find(rec.run_id());
    if (it == ix_.runs.end()) continue;  // unreachable: DeleteRun removes both in one batch
    Run& run = it->second;
    Snapshot& snap = run.snapshots[rec.step()];
    run.SetRecord(snap, std::move(rec));
    snap.generation = next_generation_++;
    run.stored_bytes += snap.record.stored_bytes();  // before MarkLost takes it off again
    v1::SnapshotRecord& r = snap.record;
    // A file a record names is never an interrupted write, whatever became of the step.
    if (disk_ && !r.disk_name().empty()) {
      keep.insert(DiskTier::Key(r.spool(), r.run_id(), r.disk_name()));
    }
    if (r.tier() == v1::TIER_LOST && disk_ && !r.disk_name().empty()) {
      damaged.push_back({StepName(run.record, r.step()), r, "lost before this start"});
    }
    if (r.tier() == v1::TIER_HOST && r.daemon_epoch() != options_.epoch) {
      if (Status kept = TakeBack(run, snap); kept.ok()) {
        rewrites.push_back(r);
        ++taken_back;
      } else {
        ++lost_host;
        if (kept.message().empty()) {
          NoteFailure(run, StepName(run.record, r.step()) +
                               " is lost: it was in host memory when adjsnapd last stopped "
                               "without writing it to disk (kill -9 or a crash)");
        }
        MarkLost(ix_, run, snap, kept.message());
      }
    } else if (r.tier() == v1::TIER_DISK) {
      Status adopted = disk_ ? disk_->Adopt(r.spool(), r.run_id(), r.disk_name(),
                                            FileContentBytes(r))
                             : Status::FailedPrecondition("adjsnapd now runs without a disk tier");
      if (adopted.ok()) {
        keep.insert(DiskTier::Key(r.spool(), r.run_id(), r.disk_name()));
        snap.verified = false;  // checked by a background scrub (StartScrub) and on every read
        ++recovered;
        if (r.has_host_copy()) {
          // A host copy kept through the restart: served from memory if it checks out, else
          // the file serves, which is the durable copy either way.
          if (Status kept = TakeBack(run, snap); kept.ok()) {
            rewrites.push_back(r);
            ++taken_back;
          } else {
            ADJSNAP_LOG_INFO("%s is served from its spool file, not from its host copy (%s)",
                           StepName(run.record, r.step()).c_str(),
                           kept.message().empty() ? "not kept" : kept.message().c_str());
            r.clear_host_copy();
            rewrites.push_back(r);
          }
        }
      } else {
        ADJSNAP_LOG_WARN("%s is lost: %s", StepName(run.record, r.step()).c_str(),
                       adopted.message().c_str());
        if (disk_) damaged.push_back({StepName(run.record, r.step()), r, adopted.message()});
        MarkLost(ix_, run, snap, "");
      }
    }
  }
  if (disk_) {
    for (const Damaged& d : damaged) {
      auto moved = disk_->Quarantine(d.record.spool(), d.record.run_id(), d.record.disk_name(),
                                     /*accounted_raw=*/0);
      if (moved.ok()) {
        ADJSNAP_LOG_WARN("quarantined the spool file of lost %s (%s, %s recorded) as %s: %s",
                       d.step.c_str(), d.record.disk_name().c_str(),
                       FormatBytes(FileContentBytes(d.record)).c_str(), moved->c_str(),
                       d.why.c_str());
      } else if (moved.status().code() != Code::kNotFound) {
        ADJSNAP_LOG_WARN("quarantining the spool file of lost %s: %s", d.step.c_str(),
                       moved.status().message().c_str());
      }
    }
    // Until files of recorded steps were kept (above), a file cut short behind adjsnapd's back
    // (Adopt refused it) was counted here too and deleted as an "interrupted write"; now only
    // `.tmp` files and files renamed into place whose record was never written are.
    std::vector<std::string> orphans = disk_->RemoveOrphans(keep);
    if (!orphans.empty()) {
      std::string some;
      for (size_t i = 0; i < orphans.size() && i < 3; ++i) some += (i ? ", " : "") + orphans[i];
      ADJSNAP_LOG_INFO("removed %zu spool file%s that no snapshot record names (writes a stop "
                     "interrupted): %s%s",
                     orphans.size(), orphans.size() == 1 ? "" : "s", some.c_str(),
                     orphans.size() > 3 ? ", ..." : "");
    }
  }
  if (lost_host) {
    ADJSNAP_LOG_WARN("%llu host-tier snapshots from an earlier start are lost",
                   static_cast<unsigned long long>(lost_host));
  }
  if (taken_back) {
    ADJSNAP_LOG_INFO("took back %llu host-tier snapshots kept through the restart (checksums "
                   "verified)",
                   static_cast<unsigned long long>(taken_back));
  }
  if (recovered) {
    ADJSNAP_LOG_INFO("recovered %llu disk-tier snapshots; verifying their checksums",
                   static_cast<unsigned long long>(recovered));
  }
  lock.Unlock();
  for (const v1::SnapshotRecord& r : rewrites) ADJSNAP_RETURN_IF_ERROR(catalog_->PutSnapshot(r));
  return Status::Ok();
}

Status Store::TakeBack(const Run& run, Snapshot& snap) {
  v1::SnapshotRecord& r = snap.record;
  const auto& kept = options_.kept_host_tier;
  if (!kept || r.daemon_epoch() != kept->epoch() || !r.has_host_copy()) {
    return Status::DataLoss("");  // in host memory at a stop that did not keep the tier
  }
  if (!options_.host_tier_adopted) {
    return Status::DataLoss(
        "it was in the host tier handed to systemd's fd store, which did not pass it back at "
        "this start");
  }
  const v1::HostCopy& copy = r.host_copy();
  auto block = ClaimHost(run, copy.offset(), copy.bytes());
  if (!block.ok()) {
    return Status::DataLoss("its place in the kept host tier: " + block.status().message());
  }
  // A disk step's host copy holds its raw bytes; a host step's block what it stores.
  const uint64_t held = r.tier() == v1::TIER_DISK ? r.raw_bytes() : r.stored_bytes();
  if (held > (*block)->size() || Checksum((*block)->data(), held) != copy.checksum()) {
    return Status::DataLoss("its bytes in the kept host tier fail their checksum");
  }
  snap.block = std::move(block).value();
  r.set_daemon_epoch(options_.epoch);  // in this start's host tier now
  r.clear_host_copy();
  return Status::Ok();  // the caller writes the record (Load)
}

}  // namespace adjsnap
