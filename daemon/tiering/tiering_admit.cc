// Admission: a push given host room or parked until room comes, a fetch answered from host
// memory or waiting for its disk read; the parked ones granted and served as room comes, and
// the pushes that need a spool failed when none works (at once, or after
// spool_failure_timeout).
#include <chrono>
#include <string>

#include "log.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/tiering.h"

namespace adjsnap {

Result<std::optional<Tiering::PushTicket>> Tiering::AdmitPush(StoreIndex& ix, Run& run,
                                                              uint64_t step, uint64_t pushed,
                                                              PushDone& later) {
  // A raw step's room even for a frame (PushTicket::bytes).
  const uint64_t bytes = run.record.spec().bytes_per_step();
  auto block = ix.tiering.parked_pushes.empty()
                   ? s_.AllocateHostDeferred(run, bytes)
                   : Status::ResourceExhausted("earlier pushes are waiting");
  if (block.ok()) {
    run.in_flight[step] = block->block;
    if (block->fresh.empty()) {
      return std::optional<PushTicket>(
          PushTicket{run.record.run_id(), step, s_.Lease(block->block), pushed, std::nullopt});
    }
    // Its fresh pages are populated off this thread (the data-plane loop, holding the mutex):
    // the push waits for them as a parked push waits for room.
    PopulateForPush(ix, run, step, pushed, std::move(block).value(), std::move(later));
    return std::optional<PushTicket>();
  }
  // Room comes from demotion to disk, from compressions in flight, from compacting the host
  // tier, or (blocking runs) from deletes and consumed steps.
  bool fragmented = s_.host_->budget() - s_.host_->used() >= bytes;  // compaction may make room
  if (!s_.disk_ && !run.record.spec().block_when_full() && Ingest::InFlight(ix) == 0 &&
      !fragmented) {
    return block.status();
  }
  // No spool has worked since a push already waited for one in vain: fail now, not again after
  // spool_failure_timeout (a solver that goes on pushing would pay it at every step).
  if (s_.disk_ && !ix.tiering.disk_down.empty() && NeedsDisk(run)) {
    if (!s_.disk_->usable())
      return NoDiskForPush(ix, run, step, "and " + ix.tiering.disk_down, /*at_once=*/true);
    ix.tiering.disk_down.clear();  // a spool came back: wait for room as usual
  }
  run.in_flight.emplace(step, nullptr);
  auto now = std::chrono::steady_clock::now();
  ix.tiering.parked_pushes.push_back(ParkedPush{run.record.run_id(), step, bytes, s_.ArenaOf(run),
                                                std::move(later), now,
                                                now + s_.options_.wait_warn_after, pushed});
  s_.Wake();
  return std::optional<PushTicket>();
}

std::optional<Tiering::FetchGrant> Tiering::AdmitFetch(StoreIndex& ix, Run& run, Snapshot& snap,
                                                       bool backward, FetchDone& later) {
  const uint64_t step = snap.record.step();
  if (backward) {
    int64_t now = NowNs();
    if (run.last_fetch_ns && step < run.last_fetch_step) {
      double dt = static_cast<double>(now - run.last_fetch_ns) /
                  static_cast<double>(run.last_fetch_step - step);
      run.pace_ns = run.pace_ns > 0 ? 0.7 * run.pace_ns + 0.3 * dt : dt;
    }
    run.last_fetch_ns = now;
    run.last_fetch_step = step;
    run.prefetch_from = step;
  }
  std::optional<FetchGrant> grant;
  if (StoreState::ServableFromHost(snap)) {
    if (snap.record.tier() == v1::TIER_DISK) ++ix.counters.prefetch_hits;
    grant = FetchGrant{s_.Lease(snap.block), snap.generation, ServedBytes(snap.record)};
  } else {
    // On disk only, or compressed in host memory: answer once the read (or decode) lands; it
    // goes before any read-ahead.
    ++ix.counters.demand_reads;
    if (snap.waiters.empty()) {
      snap.waiting_since = std::chrono::steady_clock::now();
      snap.warn_at = snap.waiting_since + s_.options_.wait_warn_after;
    }
    snap.waiters.push_back(std::move(later));
    // No compaction here (this is the data plane's thread): with no room as it is, the read
    // waits for the tiering thread, which compacts or demotes to make it.
    ADJSNAP_LOG_DEBUG("fetch of step %llu of run %llu waits for its read from disk (%s)",
                    (unsigned long long)step, (unsigned long long)run.record.run_id(),
                    snap.reading ? "under way" : "starting now");
    if (!snap.reading && !StartRead(ix, run, snap, /*urgent=*/true)) {
      ix.tiering.parked_reads.insert({run.record.run_id(), step});
      s_.Wake();
    }
  }
  if (backward && ix.tiering.parked_reads.empty() && ix.tiering.parked_pushes.empty())
    SchedulePrefetch(ix, run);
  return grant;
}

bool Tiering::NeedsDisk(const Run& run) {
  return !run.record.spec().block_when_full() && UsesDisk(run.record.spec().layers());
}

Status Tiering::NoDiskForPush(StoreIndex& ix, Run& run, uint64_t step, const std::string& why,
                              bool at_once) {
  ++ix.tiering.unavailable_pushes;
  if (at_once) ++ix.tiering.unavailable_pushes_fast;
  std::string name = StepName(run.record, step);
  Status down = Status::Unavailable(name + " needs the disk tier " + why);
  refusals_.Reject(at_once ? "push failed at once, no spool works" : "push failed, no spool works",
                   down.message());
  StoreState::NoteFailure(run, name + " was refused: no spool works");
  return down;
}

void Tiering::FailPushesWithoutDisk(StoreIndex& ix, Deferred& deferred) {
  auto now = std::chrono::steady_clock::now();
  const auto timeout = s_.options_.spool_failure_timeout;
  std::string failed;
  for (auto it = ix.tiering.parked_pushes.begin(); it != ix.tiering.parked_pushes.end();) {
    auto run = ix.runs.find(it->run_id);
    if (run == ix.runs.end() || !NeedsDisk(run->second)) {
      ++it;  // waits for room as with a full disk, or needs no disk (Rebalance answers it)
      continue;
    }
    if (now - it->parked_at < timeout) {
      WakeBy(ix, it->parked_at + timeout);
      ++it;
      continue;
    }
    if (failed.empty()) failed = s_.disk_->FailedSpools();
    Status down = NoDiskForPush(
        ix, run->second, it->step,
        "(host tier " + FormatBytes(s_.host_->used()) + " of " + FormatBytes(s_.host_->budget()) +
            " in use) and no spool works: " + failed + ". Waited " +
            std::to_string(timeout.count()) +
            " ms (spool_failure_timeout); adjsnapd re-probes failed spools with backoff and "
            "`adjsnap spool probe` tries now; steps already stored can still be fetched",
        /*at_once=*/false);
    // What the pushes after it are told at once, until a spool works again.
    ix.tiering.disk_down =
        "no spool works: " + failed + ". Failed at once: a push already waited " +
        std::to_string(timeout.count()) +
        " ms (spool_failure_timeout) and no spool has worked since; `adjsnap spool "
        "probe` tries now; steps already stored can still be fetched";
    run->second.in_flight.erase(it->step);
    deferred.push_back([l = std::move(it->later), down] { l(down); });
    it = ix.tiering.parked_pushes.erase(it);
  }
}

void Tiering::ServeParkedReads(StoreIndex& ix) {
  for (auto it = ix.tiering.parked_reads.begin(); it != ix.tiering.parked_reads.end();) {
    auto [run, snap] = ix.FindSnapshot(*it);
    if (!snap || StoreState::ServableFromHost(*snap) || snap->reading || snap->waiters.empty()) {
      it = ix.tiering.parked_reads.erase(it);
    } else if (StartRead(ix, *run, *snap, /*urgent=*/true, /*compact=*/true)) {
      it = ix.tiering.parked_reads.erase(it);
    } else {
      return;  // no room yet
    }
  }
}

void Tiering::GrantParkedPushes(StoreIndex& ix, Deferred& deferred) {
  while (!ix.tiering.parked_pushes.empty()) {
    ParkedPush& p = ix.tiering.parked_pushes.front();
    auto run = ix.runs.find(p.run_id);
    if (run == ix.runs.end()) {
      Status gone = Status::NotFound("run id " + std::to_string(p.run_id) +
                                     " was deleted while a push waited for room");
      deferred.push_back([l = std::move(p.later), gone] { l(gone); });
      ix.tiering.parked_pushes.pop_front();
      continue;
    }
    auto block = s_.AllocateHostDeferred(run->second, p.bytes);
    if (!block.ok() && CompactHost(ix, p.bytes, p.arena))
      block = s_.AllocateHostDeferred(run->second, p.bytes);
    if (!block.ok()) return;  // first come, first served
    run->second.in_flight[p.step] = block->block;
    if (block->fresh.empty()) {
      PushTicket ticket{p.run_id, p.step, s_.Lease(block->block), p.pushed, std::nullopt};
      deferred.push_back([l = std::move(p.later), t = std::move(ticket)] { l(t); });
    } else {  // as AdmitPush: not populated under the mutex
      PopulateForPush(ix, run->second, p.step, p.pushed, std::move(block).value(),
                      std::move(p.later));
    }
    ix.tiering.parked_pushes.pop_front();
  }
}

void Tiering::PopulateForPush([[maybe_unused]] StoreIndex& ix, Run& run, uint64_t step,
                              uint64_t pushed, StoreState::PendingHost host, PushDone later) {
  // std::function copies what it holds: the fresh units, move-only, go in a shared_ptr.
  auto fresh = std::make_shared<FreshUnits>(std::move(host.fresh));
  s_.populate_->Submit(
      [this, run_id = run.record.run_id(), step, pushed, block = std::move(host.block), fresh,
       later = std::move(later)]() mutable {
        Status populated = s_.host_->PopulateUnits(*fresh);
        FinishPopulate(run_id, step, pushed, std::move(block), std::move(populated),
                       std::move(later));
      },
      /*urgent=*/true);
}

void Tiering::FinishPopulate(uint64_t run_id, uint64_t step, uint64_t pushed,
                             std::shared_ptr<HostBlock> block, Status populated, PushDone later) {
  StoreIndex& ix = ix_;
  Result<PushTicket> answer = [&]() -> Result<PushTicket> {
    IndexLock lock(ix);
    auto run = ix.runs.find(run_id);
    if (run == ix.runs.end()) {
      return Status::NotFound("run id " + std::to_string(run_id) +
                              " was deleted while a push waited for room");
    }
    auto reserved = run->second.in_flight.find(step);
    if (reserved == run->second.in_flight.end() || reserved->second != block) {
      return Status::NotFound(StepName(run->second.record, step) +
                              " lost its reservation while its push waited for room");
    }
    if (!populated.ok()) {
      // The tier's room was there, its pages were not: a refusal for room like any other.
      run->second.in_flight.erase(reserved);
      ++ix.tiering.refused_pushes;
      std::string name = StepName(run->second.record, step);
      refusals_.Reject("push refused", name + ": " + populated.message());
      StoreState::NoteFailure(run->second, name + " was refused: " + populated.message());
      return populated;
    }
    if (ix.stopping) {
      run->second.in_flight.erase(reserved);
      return Status::Unavailable("adjsnapd is shutting down");
    }
    return PushTicket{run_id, step, s_.Lease(block), pushed, std::nullopt};
  }();
  block.reset();  // an abandoned push's room goes back (and wakes the tiering thread)
  later(std::move(answer));
}

}  // namespace adjsnap
