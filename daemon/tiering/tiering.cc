// The tiering thread and one pass of the policy (Rebalance): host room made by demotion or
// compaction, the pushes and reads that wait in vain refused, and drains. Admission (pushes and
// fetches admitted or parked, the parked ones granted, the pushes that need a spool while none
// works) lives in tiering_admit.cc, moves in tiering_moves.cc, waits in tiering_waits.cc, the
// scrub in tiering_scrub.cc.
#include "tiering/tiering.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

void Tiering::StartTiering() {
  // A spool that fails or comes back changes what the policy can do.
  if (s_.disk_) s_.disk_->AddStateListener(s_.WakeFromOutside());
  tiering_thread_ = NamedThread("adjsnap-tiering", [this] { TieringLoop(); });
}

void Tiering::StopTiering() {
  if (tiering_thread_.joinable()) tiering_thread_.join();
}

void Tiering::AnswerWaiting(StoreIndex& ix, const Status& down, Deferred& deferred) {
  for (auto& p : ix.tiering.parked_pushes)
    deferred.push_back([l = std::move(p.later), down] { l(down); });
  ix.tiering.parked_pushes.clear();
  for (auto& d : ix.tiering.drains) deferred.push_back([l = std::move(d.done), down] { l(down); });
  ix.tiering.drains.clear();
}

void Tiering::AnswerParkedPushes(StoreIndex& ix, const Status& down, Deferred& deferred) {
  for (auto& p : ix.tiering.parked_pushes) {
    if (auto run = ix.runs.find(p.run_id); run != ix.runs.end())
      run->second.in_flight.erase(p.step);
    deferred.push_back([l = std::move(p.later), down] { l(down); });
  }
  ix.tiering.parked_pushes.clear();
}

void Tiering::AddTieringCounters(const StoreIndex& ix, StoreCounters& c) const {
  c.refused_pushes = ix.tiering.refused_pushes;
  c.compactions = ix.tiering.compactions;
  c.unavailable_pushes = ix.tiering.unavailable_pushes;
  c.unavailable_pushes_fast = ix.tiering.unavailable_pushes_fast;
  c.scrubbed = ix.tiering.scrubbed;
}

void Tiering::TieringLoop() {
  StoreIndex& ix = ix_;
  auto until = std::chrono::steady_clock::time_point::max();
  while (s_.WaitForWake(until)) {
    Deferred deferred;
    {
      IndexLock lock(ix);
      ix.tiering.deadline = std::chrono::steady_clock::time_point::max();
      Rebalance(ix, deferred);
      until = ix.tiering.deadline;
      idle_cv_.NotifyAll();
    }
    for (auto& f : deferred) f();
  }
}

uint64_t Tiering::PrefetchSteps(StoreIndex& ix, Run& run, const std::vector<uint64_t>& steps) {
  uint64_t started = 0;
  for (uint64_t step : steps) {
    auto it = run.snapshots.find(step);
    if (it == run.snapshots.end()) continue;
    Snapshot& snap = it->second;
    if (snap.record.tier() != v1::TIER_DISK || snap.block || snap.reading) continue;
    if (!StartRead(ix, run, snap, /*urgent=*/false)) break;  // no host room left
    ++started;
  }
  return started;
}

void Tiering::StartDrain(std::function<void(Result<DrainResult>)> done) {
  StoreIndex& ix = ix_;
  {
    IndexLock lock(ix);
    if (s_.disk_) {
      uint64_t upto = 0;
      for (const auto& [id, run] : ix.runs) {
        for (const auto& [step, snap] : run.snapshots) upto = std::max(upto, snap.generation);
      }
      ix.tiering.drains.push_back(DrainWaiter{std::move(done), {}, upto});
      s_.Wake();
      return;
    }
  }
  done(Status::FailedPrecondition(
      "adjsnapd runs without a disk tier (spool_dirs = none): there is nowhere to drain to"));
}

std::string Tiering::DiskFullWhy() const {
  // Full, or what is left working is full: a failed spool (a shared filesystem gone) is named,
  // since its room is what the push lacks.
  // Short, errno first: a data-plane reply carries 232 bytes of message (the log has the
  // whole reason, the file and the call).
  std::string failed;
  for (const SpoolStatus& st : s_.disk_->SpoolStates()) {
    if (st.failed) failed += (failed.empty() ? "" : ", ") + ErrnoName(st.error) + " on " + st.dir;
  }
  if (!failed.empty()) {
    return "the working spools are full and the others failed (" + failed + ")";
  }
  return "the disk tier is full too (" + FormatBytes(s_.disk_->used()) + " of " +
         FormatBytes(s_.disk_->budget()) + " in use)";
}

void Tiering::WaitTieringIdle() {
  StoreIndex& ix = ix_;
  IndexLock lock(ix);
  idle_cv_.Wait(ix.mu, [&]() ADJSNAP_REQUIRES_INDEX(ix) {
    if (ix.tiering.writes_in_flight || ix.tiering.reads_in_flight || Ingest::InFlight(ix) ||
        !ix.tiering.parked_pushes.empty()) {
      return false;
    }
    for (const auto& [id, run] : ix.runs) {
      for (const auto& [step, snap] : run.snapshots) {
        if (DemotionWanted(ix, run, snap)) return false;
      }
    }
    return true;
  });
}

bool Tiering::Settling(StoreIndex& ix) {
  // A queued checksum frees nothing: only one holding the block of a step deleted meanwhile
  // does (queued ones of deleted steps are pruned at each Rebalance).
  return ix.tiering.writes_in_flight || ix.tiering.reads_in_flight || Ingest::InFlight(ix) ||
         Ingest::Pending(ix) > 0 || Checksums::HeldBytes(ix) > 0;
}

bool Tiering::DemotionWanted(StoreIndex& ix, const Run& run, const Snapshot& snap) const {
  // With every spool failed nothing can be demoted until a probe brings one back.
  if (!s_.disk_ || !s_.disk_->usable() || snap.writing || snap.record.tier() != v1::TIER_HOST ||
      !snap.block)
    return false;
  if (!ix.tiering.drains.empty()) return true;
  const v1::RunSpec& spec = run.record.spec();
  if (!UsesDisk(spec.layers())) return false;
  if (!UsesHost(spec.layers())) return true;
  return spec.steps() != 0 && snap.record.step() < run.record.host_boundary();
}

void Tiering::Rebalance(StoreIndex& ix, Deferred& deferred) {
  if (ix.stopping) return;
  // A spool can come back (or fail) while this pass runs: the prober flips usable() first and
  // wakes this thread after. A pass that found nothing to demote because no spool worked must
  // not then fail a read as if the disk tier were merely full (the soak found a fetch refused
  // 1 ms after its spool came back); it waits, and the pass the prober wakes decides.
  const bool usable_at_start = s_.disk_ && s_.disk_->usable();
  if (s_.disk_ && s_.disk_->changes() != ix.tiering.disk_changes) {
    ix.tiering.disk_changes = s_.disk_->changes();
    ix.tiering.disk_full = false;  // a spool came back (or another failed): the room is new
  }
  s_.checksums_.Prune(ix);
  s_.ingest_.RetryPending(ix);
  GrantParkedPushes(ix, deferred);
  const int max_writes = s_.options_.io_threads + 1;

  ServeParkedReads(ix);

  // Steps whose place is disk: below the host boundary, Disk-only runs, a drain.
  uint64_t reserve = 0;
  for (auto& [id, run] : ix.runs) {
    if (UsesDisk(run.record.spec().layers())) {
      reserve = std::max(reserve, kStagingBlocks * StoreState::BlockBytes(run));
    }
    for (auto& [step, snap] : run.snapshots) {
      if (ix.tiering.writes_in_flight >= max_writes || ix.tiering.disk_full) break;
      if (DemotionWanted(ix, run, snap)) StartDemotion(ix, run, snap);
    }
  }

  // Room for whoever waits, and a few blocks kept free so a push that fits never waits:
  // drop read-ahead copies, then demote the oldest host-only steps (N unknown, or a host
  // tier shared with other runs).
  uint64_t waiting = 0;
  for (const auto& p : ix.tiering.parked_pushes) waiting += p.bytes;
  for (const auto& key : ix.tiering.parked_reads) {
    auto run = ix.runs.find(key.first);
    if (run != ix.runs.end()) waiting += StoreState::BlockBytes(run->second);
  }
  uint64_t need = std::max(reserve, waiting);
  uint64_t writing = FreeingBytes(ix);
  // The block the first waiting read needs (ServeParkedReads serves them in order).
  uint64_t first_read = 0;
  HostTier::ArenaId first_read_arena = s_.host_->own_arena();
  for (const auto& key : ix.tiering.parked_reads) {
    auto [run, snap] = ix.FindSnapshot(key);
    if (snap && !StoreState::ServableFromHost(*snap) && !snap->reading && !snap->waiters.empty()) {
      first_read = snap->record.raw_bytes();
      first_read_arena = s_.ArenaOf(*run);
      break;
    }
  }
  // Short of room: fewer free bytes than needed, or (with mixed step sizes) enough free bytes
  // but no piece the first waiting push or read fits in, even after compacting
  // (GrantParkedPushes and ServeParkedReads tried): then write out more, counting what is being
  // written as if it joined that piece.
  auto short_of_room = [&]() ADJSNAP_REQUIRES_INDEX(ix) {
    if (s_.host_->budget() - s_.host_->used() + writing < need) return true;
    if (!ix.tiering.parked_pushes.empty() &&
        s_.host_->largest_free(ix.tiering.parked_pushes.front().arena) + writing <
            ix.tiering.parked_pushes.front().bytes) {
      return true;
    }
    return first_read != 0 && s_.host_->largest_free(first_read_arena) + writing < first_read;
  };
  while (short_of_room() && ix.tiering.writes_in_flight < max_writes) {
    uint64_t before = s_.host_->used();
    int writes_before = ix.tiering.writes_in_flight;
    if (!FreeHostRoom(ix)) break;
    if (ix.tiering.writes_in_flight > writes_before) {
      writing = FreeingBytes(ix);
    } else if (s_.host_->used() == before) {
      break;  // dropped a copy whose memory a lease still holds
    }
  }
  GrantParkedPushes(ix, deferred);
  ServeParkedReads(ix);

  // Read-ahead only uses room nobody waits for.
  if (ix.tiering.parked_pushes.empty() && ix.tiering.parked_reads.empty()) {
    for (auto& [id, run] : ix.runs) {
      if (run.prefetch_from) SchedulePrefetch(ix, run);
    }
  }

  // Stuck: waiting pushes, nothing in flight that will free host memory, and nothing left to
  // demote (the loop above found nothing).
  // (Parked pushes left here could not be granted even after compacting the host tier.)
  // A stored block a transfer still holds (a lease) is in flight too: its release wakes this
  // thread, and may let a read-ahead copy go or a compressed copy in. So is a push reserved and
  // being copied: its commit wakes this thread with one more step that may move to disk (16
  // solvers each copying a 16 MiB push hold a quarter of a 1 GiB tier; a read refused then
  // failed for want of room that was on its way; the soak found it).
  // Only when something waits: LeasedBytes walks every stored step, and this runs on every
  // pass of the tiering thread (a wake-up per push and per release).
  const bool parked = !ix.tiering.parked_pushes.empty() || !ix.tiering.parked_reads.empty();
  bool stuck = parked && !Settling(ix) && LeasedBytes(ix) == 0 && !PushesReserved(ix);
  if (s_.disk_ && !s_.disk_->usable()) {
    FailPushesWithoutDisk(ix, deferred);
  } else {
    ix.tiering.disk_down.clear();  // a spool works (again)
  }
  const bool no_spool = s_.disk_ && (!usable_at_start || !s_.disk_->usable());
  // Full where it works, and a failed spool's room is what is missing (a shared filesystem
  // gone): reads wait for it as they do when no spool works.
  const bool spool_down = s_.disk_ && ix.tiering.disk_full && !s_.disk_->all_working();
  if (!ix.tiering.parked_pushes.empty() && stuck) {
    std::string why =
        !s_.disk_  ? "adjsnapd runs without a disk tier"
        : no_spool ? "no spool of the disk tier works (" + s_.disk_->FailedSpools() + ")"
        : ix.tiering.disk_full ? DiskFullWhy()
                               : "every snapshot left in host memory belongs to a run "
                                 "whose layers keep it there, or is in use";
    for (auto it = ix.tiering.parked_pushes.begin(); it != ix.tiering.parked_pushes.end();) {
      auto run = ix.runs.find(it->run_id);
      if (run != ix.runs.end() && (run->second.record.spec().block_when_full() ||
                                   (no_spool && UsesDisk(run->second.record.spec().layers())))) {
        ++it;  // waits for room; a run that may use disk waits for a spool (above)
        continue;
      }
      Status full = Status::ResourceExhausted(
          "no room for " + FormatBytes(it->bytes) + ": host tier " + FormatBytes(s_.host_->used()) +
          " of " + FormatBytes(s_.host_->budget()) + " in use (largest free piece " +
          FormatBytes(s_.host_->largest_free(it->arena)) + ") and " + why +
          "; delete finished runs, raise host_mem/disk_mem, or open the run with "
          "block_when_full");
      ++ix.tiering.refused_pushes;
      refusals_.Reject("push refused",
                       (run != ix.runs.end() ? StepName(run->second.record, it->step)
                                             : "run id " + std::to_string(it->run_id)) +
                           ": " + full.message());
      if (run != ix.runs.end()) {
        run->second.in_flight.erase(it->step);
        StoreState::NoteFailure(run->second, StepName(run->second.record, it->step) +
                                                 " was refused: " + full.message());
      }
      deferred.push_back([l = std::move(it->later), full] { l(full); });
      it = ix.tiering.parked_pushes.erase(it);
    }
  }
  if (!ix.tiering.parked_reads.empty() && stuck) {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = ix.tiering.parked_reads.begin(); it != ix.tiering.parked_reads.end();) {
      auto [run, snap] = ix.FindSnapshot(*it);
      if (!snap) {
        it = ix.tiering.parked_reads.erase(it);
        continue;
      }
      Status full;
      if (no_spool || spool_down) {
        // No step can leave host memory while no spool works (or the working ones are full and
        // the others failed), so none makes room: the read waits as a push that needs the disk
        // does (spool_failure_timeout), for a spool to come back or a step to go, then fails
        // UNAVAILABLE.
        const auto deadline = snap->waiting_since + s_.options_.spool_failure_timeout;
        // Back during this pass: the prober's wake brings the next.
        if (no_spool ? s_.disk_->usable() : s_.disk_->all_working()) {
          ++it;
          continue;
        }
        if (now < deadline) {
          WakeBy(ix, deadline);
          ++it;
          continue;
        }
        // The cause before the figures: a data-plane reply keeps 232 bytes of it.
        full = Status::Unavailable(
            "no host memory free to read " + StepName(run->record, it->second) +
            " back from disk, and none can be made while " +
            (no_spool ? "no spool of the disk tier works (" + s_.disk_->FailedSpools() + ")"
                      : DiskFullWhy()) +
            " (host tier " + FormatBytes(s_.host_->used()) + " of " +
            FormatBytes(s_.host_->budget()) + " in use)");
      } else {
        full = Status::ResourceExhausted("no host memory free to read " +
                                         StepName(run->record, it->second) + " back from disk (" +
                                         FormatBytes(s_.host_->used()) + " of " +
                                         FormatBytes(s_.host_->budget()) + " in use)");
      }
      for (auto& w : snap->waiters) deferred.push_back([w = std::move(w), full] { w(full); });
      snap->waiters.clear();
      it = ix.tiering.parked_reads.erase(it);
    }
  }
  FinishDrainsIfDone(ix, deferred);
  if (s_.options_.scrub_bytes_per_second && s_.disk_) ScrubNext(ix);
  WarnLongWaits(ix);
}

void Tiering::FinishDrainsIfDone(StoreIndex& ix, Deferred& deferred) {
  if (ix.tiering.drains.empty()) return;
  if (!s_.disk_->usable()) {
    if (ix.tiering.writes_in_flight) return;
    Status down =
        Status::Unavailable("no spool works (" + s_.disk_->FailedSpools() +
                            "); what was moved stays on disk and the rest is still in host memory");
    for (auto& d : ix.tiering.drains)
      deferred.push_back([l = std::move(d.done), down] { l(down); });
    ix.tiering.drains.clear();
    return;
  }
  // The oldest copy still only in host memory (one being written still is): a drain that
  // began after it was stored waits for it.
  uint64_t oldest_host = UINT64_MAX;
  for (const auto& [id, run] : ix.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.record.tier() == v1::TIER_HOST && snap.block) {
        oldest_host = std::min(oldest_host, snap.generation);
      }
    }
  }
  const Status full = Status::ResourceExhausted(
      "the disk tier filled up while draining; what was moved stays on disk and the rest is "
      "still in host memory");
  std::erase_if(ix.tiering.drains, [&](DrainWaiter& d) ADJSNAP_REQUIRES_INDEX(ix) {
    if (oldest_host > d.upto) {
      deferred.push_back([l = std::move(d.done), r = d.result] { l(r); });
      return true;
    }
    if (ix.tiering.disk_full && !ix.tiering.writes_in_flight) {
      deferred.push_back([l = std::move(d.done), full] { l(full); });
      return true;
    }
    return false;  // still to be written
  });
}

}  // namespace adjsnap
