// Drain, scrub and spool probes on demand, and the stop: pushes refused, host-only steps drained
// to disk, or the host tier handed to systemd's fd store.
#include "store/store.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "log.h"
#include "adjsnap/checksum.h"
#include "adjsnap/layers.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

void Store::Drain(std::function<void(Result<DrainResult>)> done) { tiering_.StartDrain(std::move(done)); }

void Store::ScrubRun(const std::string& name, std::function<void(Result<ScrubResult>)> done,
                     const Tenant& who) {
  struct Tally {
    std::mutex mu;
    ScrubResult result;
    uint64_t left = 0;
    std::function<void(Result<ScrubResult>)> done;
  };
  auto tally = std::make_shared<Tally>();
  {
    IndexLock lock(ix_);
    auto run = FindByName(name, who);
    if (!run.ok()) {
      lock.Unlock();
      done(run.status());
      return;
    }
    if (!disk_) {
      lock.Unlock();
      done(Status::FailedPrecondition("adjsnapd runs without a disk tier: nothing to scrub"));
      return;
    }
    std::vector<uint64_t> steps;
    for (const auto& [step, snap] : (*run)->snapshots) {
      if (snap.record.tier() == v1::TIER_DISK && !snap.writing) steps.push_back(step);
    }
    tally->left = steps.size();
    tally->done = std::move(done);
    if (steps.empty()) {
      lock.Unlock();
      tally->done(tally->result);
      return;
    }
    uint64_t id = (*run)->record.run_id();
    for (uint64_t step : steps) {
      tiering_.StartScrub(ix_, id, step, [tally, step](Status s) {
        std::unique_lock<std::mutex> l(tally->mu);
        if (s.ok()) {
          ++tally->result.verified;
        } else if (s.code() == Code::kNotFound) {
          // deleted or consumed since the scrub began: neither verified nor lost
        } else if (s.code() == Code::kDataLoss) {
          tally->result.lost.push_back({step, s.message()});
        } else {
          ++tally->result.unreadable;
        }
        if (--tally->left == 0) {
          l.unlock();
          std::sort(tally->result.lost.begin(), tally->result.lost.end());
          tally->done(tally->result);
        }
      });
    }
  }
}

void Store::ProbeSpools(std::function<void(int)> done) {
  if (!disk_) {
    done(0);
    return;
  }
  // A probe writes and syncs: an I/O thread's job, never the caller's (a gRPC reactor).
  io_->Submit([this, done = std::move(done)] { done(disk_->ProbeNow()); }, /*urgent=*/true);
}

void Store::BeginStop() {
  Deferred deferred;
  {
    IndexLock lock(ix_);
    closing_ = true;
    MarkAwaitingClients();
    tiering_.AnswerParkedPushes(ix_, Status::Unavailable("adjsnapd is stopping: a push waiting for room was "
                                           "refused; push it again once adjsnapd is back"),
                       deferred);
  }
  for (auto& f : deferred) f();
}

void Store::MarkAwaitingClients() {
  auto failed = std::make_shared<std::atomic<size_t>>(0);
  for (auto& [id, run] : ix_.runs) {
    const bool awaiting =
        !run.record.spec().keep() && (!run.sessions.empty() || run.orphaned_at.has_value());
    const bool recorded = run.record_writes ? run.queued_record.awaiting_clients()
                                            : run.record.awaiting_clients();
    if (awaiting == recorded) continue;
    // Not waited for: the stop's last catalog write (KeepHostTier's, or the catalog's Flush
    // at the store's end) comes after it in the writer's order.
    RecordRun(
        run, [awaiting](v1::RunRecord& r) { r.set_awaiting_clients(awaiting); },
        [failed, name = run.record.spec().name()](Status s) {
          if (!s.ok() && failed->fetch_add(1) == 0) {
            ADJSNAP_LOG_WARN(
                "run '%s': could not record whether it awaits its clients (%s); the next "
                "start goes by what an earlier stop recorded",
                name.c_str(), s.ToString().c_str());
          }
        });
  }
}

uint64_t Store::PushesInFlight() const {
  IndexLock lock(ix_);
  uint64_t n = 0;
  for (const auto& [id, run] : ix_.runs) n += run.in_flight.size();
  return n;
}

Store::StopResult Store::DrainForStop(std::chrono::steady_clock::time_point deadline,
                                      bool keep_host_copies) {
  if (keep_host_copies) {
    IndexLock lock(ix_);
    tiering_.KeepHostCopies(ix_);
  }
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<DrainResult>> result;
  };
  auto outcome = std::make_shared<Outcome>();
  Drain([outcome](Result<DrainResult> r) {
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->result = std::move(r);
    outcome->cv.notify_all();
  });
  StopResult result;
  {
    std::unique_lock<std::mutex> lock(outcome->mu);
    outcome->cv.wait_until(lock, deadline, [&] { return outcome->result.has_value(); });
    if (!outcome->result) {
      result.status = Status(Code::kDeadlineExceeded, "the drain did not finish within "
                                                      "stop_timeout");
    } else if (!outcome->result->ok()) {
      result.status = outcome->result->status();
    } else {
      result.steps = (*outcome->result)->moved;
      result.bytes = (*outcome->result)->moved_bytes;
    }
  }
  IndexLock lock(ix_);
  if (!result.status.ok()) unsaved_why_ = result.status.message();
  return result;
}

Store::StopResult Store::KeepHostTier(std::chrono::steady_clock::time_point deadline) {
  StopResult result;
  checksums_.WaitIdle(ix_);  // every step's checksum recorded (the checksum thread stops below)
  {
    IndexLock lock(ix_);
    ix_.stopping = true;  // the tiering thread starts nothing more
  }
  for (;;) {
    {
      IndexLock lock(ix_);
      if (Tiering::IoIdle(ix_)) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      result.status = Status(Code::kDeadlineExceeded,
                             "disk I/O in flight did not end within stop_timeout");
      IndexLock lock(ix_);
      unsaved_why_ = result.status.message();
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Every record queued is applied first: what is kept is the index's newest.
  for (;;) {
    catalog_->Flush();
    IndexLock lock(ix_);
    if (ix_.records.empty()) break;
  }
  IndexLock lock(ix_);
  std::vector<v1::SnapshotRecord> records;
  uint64_t host_only = 0;
  for (auto& [id, run] : ix_.runs) {
    for (auto& [step, snap] : run.snapshots) {
      v1::SnapshotRecord& r = snap.record;
      if (!snap.block || (r.tier() != v1::TIER_HOST && r.tier() != v1::TIER_DISK)) continue;
      // The checksum of what the block holds: the recorded one, or (never expected after
      // WaitChecksumsIdle) computed now. A disk step's block holds its raw bytes.
      uint64_t sum = r.tier() == v1::TIER_DISK ? r.checksum()
                     : r.codec() != v1::CODEC_NONE ? r.stored_checksum()
                     : r.checksum_state() == v1::CHECKSUM_RECORDED
                         ? r.checksum()
                         : Checksum(snap.block->data(), r.stored_bytes());
      host_only += r.tier() == v1::TIER_HOST;
      v1::SnapshotRecord kept = r;
      kept.set_daemon_epoch(options_.epoch);  // in this start's host tier
      kept.mutable_host_copy()->set_offset(snap.block->offset());
      kept.mutable_host_copy()->set_bytes(snap.block->size());
      kept.mutable_host_copy()->set_checksum(sum);
      records.push_back(std::move(kept));
      result.bytes += r.tier() == v1::TIER_DISK ? r.raw_bytes() : r.stored_bytes();
    }
  }
  v1::HostTierKept marker;
  marker.set_epoch(options_.epoch);
  marker.set_arena_bytes(host_->budget());
  marker.set_steps(records.size());
  // Written with the mutex released (no catalog wait is made under it); nothing changes the
  // steps meanwhile: the store is stopping and its I/O idle.
  lock.Unlock();
  result.status = catalog_->PutHostTierKept(marker, records);
  lock.Lock();
  if (result.status.ok()) {
    result.steps = records.size();
    result.host_only = host_only;
    unsaved_why_.clear();  // what a drain left in host memory is in the kept tier
  } else {
    unsaved_why_ = "recording the host tier for systemd's fd store failed: " +
                   result.status.message();
  }
  return result;
}

}  // namespace adjsnap
