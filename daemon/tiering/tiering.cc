#include "tiering/tiering.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>

#include "log.h"
#include "snapd/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace snapd {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string StepLabel(uint64_t run_id, uint64_t step) {
  return "step " + std::to_string(step) + " of run id " + std::to_string(run_id);
}

}  // namespace

void Tiering::StartTiering() {
  // A spool that fails or comes back changes what the policy can do.
  if (disk_) disk_->AddStateListener(WakeFromOutside());
  tiering_thread_ = std::thread([this] { TieringLoop(); });
}

void Tiering::StopTiering() {
  if (tiering_thread_.joinable()) tiering_thread_.join();
}

void Tiering::AnswerWaiting(const Status& down, Deferred& deferred) {
  for (auto& p : parked_pushes_) deferred.push_back([l = std::move(p.later), down] { l(down); });
  parked_pushes_.clear();
  for (auto& d : drains_) deferred.push_back([l = std::move(d.done), down] { l(down); });
  drains_.clear();
}

void Tiering::AnswerParkedPushes(const Status& down, Deferred& deferred) {
  for (auto& p : parked_pushes_) {
    if (auto run = ix_.runs.find(p.run_id); run != ix_.runs.end()) run->second.in_flight.erase(p.step);
    deferred.push_back([l = std::move(p.later), down] { l(down); });
  }
  parked_pushes_.clear();
}

void Tiering::AddTieringCounters(StoreCounters& c) const {
  c.refused_pushes = refused_pushes_;
  c.compactions = compactions_;
  c.unavailable_pushes = unavailable_pushes_;
  c.unavailable_pushes_fast = unavailable_pushes_fast_;
  c.scrubbed = scrubbed_;
}

void Tiering::TieringLoop() {
  auto until = std::chrono::steady_clock::time_point::max();
  while (WaitForWake(until)) {
    Deferred deferred;
    {
      MutexLock lock(ix_.mu);
      deadline_ = std::chrono::steady_clock::time_point::max();
      Rebalance(deferred);
      until = deadline_;
      idle_cv_.NotifyAll();
    }
    for (auto& f : deferred) f();
  }
}

Result<std::optional<Tiering::PushTicket>> Tiering::AdmitPush(Run& run, uint64_t step,
                                                              uint64_t bytes, PushDone& later) {
  auto block = parked_pushes_.empty() ? AllocateHost(run, bytes)
                                      : Status::ResourceExhausted("earlier pushes are waiting");
  if (block.ok()) {
    run.in_flight[step] = *block;
    return std::optional<PushTicket>(PushTicket{run.record.run_id(), step, Lease(*block)});
  }
  // Room comes from demotion to disk, from compressions in flight, from compacting the host
  // tier, or (blocking runs) from deletes and consumed steps.
  bool fragmented = host_->budget() - host_->used() >= bytes;  // compaction may make room
  if (!disk_ && !run.record.spec().block_when_full() && ingests_in_flight() == 0 && !fragmented) {
    return block.status();
  }
  // No spool has worked since a push already waited for one in vain: fail now, not again after
  // spool_failure_timeout (a solver that goes on pushing would pay it at every step).
  if (disk_ && !disk_down_.empty() && NeedsDisk(run)) {
    if (!disk_->usable()) return NoDiskForPush(run, step, "and " + disk_down_, /*at_once=*/true);
    disk_down_.clear();  // a spool came back: wait for room as usual
  }
  run.in_flight.emplace(step, nullptr);
  auto now = std::chrono::steady_clock::now();
  parked_pushes_.push_back(ParkedPush{run.record.run_id(), step, bytes, ArenaOf(run),
                                      std::move(later), now,
                                      now + options_.wait_warn_after});
  Wake();
  return std::optional<PushTicket>();
}

std::optional<Tiering::FetchGrant> Tiering::AdmitFetch(Run& run, Snapshot& snap, bool backward,
                                                       FetchDone& later) {
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
  if (RawInHost(snap)) {
    if (snap.record.tier() == v1::TIER_DISK) ++ix_.counters.prefetch_hits;
    grant = FetchGrant{Lease(snap.block), snap.generation};
  } else {
    // On disk only, or compressed in host memory: answer once the read (or decode) lands; it
    // goes before any read-ahead.
    ++ix_.counters.demand_reads;
    if (snap.waiters.empty()) {
      snap.waiting_since = std::chrono::steady_clock::now();
      snap.warn_at = snap.waiting_since + options_.wait_warn_after;
    }
    snap.waiters.push_back(std::move(later));
    if (!snap.reading && !StartRead(run, snap, /*urgent=*/true)) {
      parked_reads_.insert({run.record.run_id(), step});
      Wake();
    }
  }
  if (backward && parked_reads_.empty() && parked_pushes_.empty()) SchedulePrefetch(run);
  return grant;
}

uint64_t Tiering::PrefetchSteps(Run& run, const std::vector<uint64_t>& steps) {
  uint64_t started = 0;
  for (uint64_t step : steps) {
    auto it = run.snapshots.find(step);
    if (it == run.snapshots.end()) continue;
    Snapshot& snap = it->second;
    if (snap.record.tier() != v1::TIER_DISK || snap.block || snap.reading) continue;
    if (!StartRead(run, snap, /*urgent=*/false)) break;  // no host room left
    ++started;
  }
  return started;
}

void Tiering::StartDrain(std::function<void(Result<DrainResult>)> done) {
  {
    MutexLock lock(ix_.mu);
    if (disk_) {
      uint64_t upto = 0;
      for (const auto& [id, run] : ix_.runs) {
        for (const auto& [step, snap] : run.snapshots) upto = std::max(upto, snap.generation);
      }
      drains_.push_back(DrainWaiter{std::move(done), {}, upto});
      Wake();
      return;
    }
  }
  done(Status::FailedPrecondition(
      "snapd runs without a disk tier (spool_dirs = none): there is nowhere to drain to"));
}

void Tiering::WaitTieringIdle() {
  MutexLock lock(ix_.mu);
  idle_cv_.Wait(ix_.mu, [&]() SNAPD_REQUIRES(ix_.mu) {
    if (writes_in_flight_ || reads_in_flight_ || ingests_in_flight() || !parked_pushes_.empty()) {
      return false;
    }
    for (const auto& [id, run] : ix_.runs) {
      for (const auto& [step, snap] : run.snapshots) {
        if (DemotionWanted(run, snap)) return false;
      }
    }
    return true;
  });
}

bool Tiering::Settling() {
  // A queued checksum frees nothing: only one holding the block of a step deleted meanwhile
  // does (queued ones of deleted steps are pruned at each Rebalance).
  return writes_in_flight_ || reads_in_flight_ || ingests_in_flight() || packs_pending() ||
         Checksums::HeldBytes(ix_) > 0;
}

bool Tiering::DemotionWanted(const Run& run, const Snapshot& snap) const {
  // With every spool failed nothing can be demoted until a probe brings one back.
  if (!disk_ || !disk_->usable() || snap.writing || snap.record.tier() != v1::TIER_HOST || !snap.block) return false;
  if (!drains_.empty()) return true;
  const v1::RunSpec& spec = run.record.spec();
  if (!UsesDisk(spec.layers())) return false;
  if (!UsesHost(spec.layers())) return true;
  return spec.steps() != 0 && snap.record.step() < run.record.host_boundary();
}

void Tiering::Rebalance(Deferred& deferred) {
  if (ix_.stopping) return;
  if (disk_ && disk_->changes() != disk_changes_) {
    disk_changes_ = disk_->changes();
    disk_full_ = false;  // a spool came back (or another failed): the room is new
  }
  checksums_.Prune(ix_);
  RetryPendingPacks();
  GrantParkedPushes(deferred);
  const int max_writes = options_.io_threads + 1;

  ServeParkedReads();

  // Steps whose place is disk: below the host boundary, Disk-only runs, a drain.
  uint64_t reserve = 0;
  for (auto& [id, run] : ix_.runs) {
    if (UsesDisk(run.record.spec().layers())) {
      reserve = std::max(reserve, kStagingBlocks * BlockBytes(run));
    }
    for (auto& [step, snap] : run.snapshots) {
      if (writes_in_flight_ >= max_writes || disk_full_) break;
      if (DemotionWanted(run, snap)) StartDemotion(run, snap);
    }
  }

  // Room for whoever waits, and a few blocks kept free so a push that fits never waits:
  // drop read-ahead copies, then demote the oldest host-only steps (N unknown, or a host
  // tier shared with other runs).
  uint64_t waiting = 0;
  for (const auto& p : parked_pushes_) waiting += p.bytes;
  for (const auto& key : parked_reads_) {
    auto run = ix_.runs.find(key.first);
    if (run != ix_.runs.end()) waiting += BlockBytes(run->second);
  }
  uint64_t need = std::max(reserve, waiting);
  uint64_t writing = FreeingBytes();
  // The block the first waiting read needs (ServeParkedReads serves them in order).
  uint64_t first_read = 0;
  HostTier::ArenaId first_read_arena = host_->own_arena();
  for (const auto& key : parked_reads_) {
    auto [run, snap] = ix_.FindSnapshot(key);
    if (snap && !RawInHost(*snap) && !snap->reading && !snap->waiters.empty()) {
      first_read = snap->record.raw_bytes();
      first_read_arena = ArenaOf(*run);
      break;
    }
  }
  // Short of room: fewer free bytes than needed, or (with mixed step sizes) enough free bytes
  // but no piece the first waiting push or read fits in, even after compacting
  // (GrantParkedPushes and ServeParkedReads tried): then write out more, counting what is being
  // written as if it joined that piece.
  auto short_of_room = [&]() SNAPD_REQUIRES(ix_.mu) {
    if (host_->budget() - host_->used() + writing < need) return true;
    if (!parked_pushes_.empty() &&
        host_->largest_free(parked_pushes_.front().arena) + writing <
            parked_pushes_.front().bytes) {
      return true;
    }
    return first_read != 0 && host_->largest_free(first_read_arena) + writing < first_read;
  };
  while (short_of_room() && writes_in_flight_ < max_writes) {
    uint64_t before = host_->used();
    int writes_before = writes_in_flight_;
    if (!FreeHostRoom()) break;
    if (writes_in_flight_ > writes_before) {
      writing = FreeingBytes();
    } else if (host_->used() == before) {
      break;  // dropped a copy whose memory a lease still holds
    }
  }
  GrantParkedPushes(deferred);
  ServeParkedReads();

  // Read-ahead only uses room nobody waits for.
  if (parked_pushes_.empty() && parked_reads_.empty()) {
    for (auto& [id, run] : ix_.runs) {
      if (run.prefetch_from) SchedulePrefetch(run);
    }
  }

  // Stuck: waiting pushes, nothing in flight that will free host memory, and nothing left to
  // demote (the loop above found nothing).
  // (Parked pushes left here could not be granted even after compacting the host tier.)
  // A stored block a transfer still holds (a lease) is in flight too: its release wakes this
  // thread, and may let a read-ahead copy go or a compressed copy in.
  bool stuck = !Settling() && LeasedBytes() == 0;
  if (disk_ && !disk_->usable()) {
    FailPushesWithoutDisk(deferred);
  } else {
    disk_down_.clear();  // a spool works (again)
  }
  const bool no_spool = disk_ && !disk_->usable();
  if (!parked_pushes_.empty() && stuck) {
    std::string why = !disk_       ? "snapd runs without a disk tier"
                      : no_spool   ? "no spool of the disk tier works (" +
                                       disk_->FailedSpools() + ")"
                      : disk_full_ ? "the disk tier is full too (" + FormatBytes(disk_->used()) +
                                         " of " + FormatBytes(disk_->budget()) + " in use)"
                                   : "every snapshot left in host memory belongs to a run "
                                     "whose layers keep it there, or is in use";
    for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
      auto run = ix_.runs.find(it->run_id);
      if (run != ix_.runs.end() && (run->second.record.spec().block_when_full() ||
                                 (no_spool && UsesDisk(run->second.record.spec().layers())))) {
        ++it;  // waits for room; a run that may use disk waits for a spool (above)
        continue;
      }
      Status full = Status::ResourceExhausted(
          "no room for " + FormatBytes(it->bytes) + ": host tier " + FormatBytes(host_->used()) +
          " of " + FormatBytes(host_->budget()) + " in use (largest free piece " +
          FormatBytes(host_->largest_free(it->arena)) + ") and " + why +
          "; delete finished runs, raise host_mem/disk_mem, or open the run with "
          "block_when_full");
      ++refused_pushes_;
      refusals_.Reject("push refused",
                       (run != ix_.runs.end() ? StepName(run->second.record, it->step)
                                           : "run id " + std::to_string(it->run_id)) +
                           ": " + full.message());
      if (run != ix_.runs.end()) {
        run->second.in_flight.erase(it->step);
        NoteFailure(run->second, StepName(run->second.record, it->step) +
                                     " was refused: " + full.message());
      }
      deferred.push_back([l = std::move(it->later), full] { l(full); });
      it = parked_pushes_.erase(it);
    }
  }
  if (!parked_reads_.empty() && stuck) {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = parked_reads_.begin(); it != parked_reads_.end();) {
      auto [run, snap] = ix_.FindSnapshot(*it);
      if (!snap) {
        it = parked_reads_.erase(it);
        continue;
      }
      Status full;
      if (no_spool) {
        // No step can leave host memory while no spool works, so none makes room: the read
        // waits as a push that needs the disk does (spool_failure_timeout), for a spool to come
        // back or a step to go, then fails UNAVAILABLE.
        const auto deadline = snap->waiting_since + options_.spool_failure_timeout;
        if (now < deadline) {
          WakeBy(deadline);
          ++it;
          continue;
        }
        full = Status::Unavailable(
            "no host memory free to read " + StepName(run->record, it->second) +
            " back from disk (" + FormatBytes(host_->used()) + " of " +
            FormatBytes(host_->budget()) + " in use), and none can be made while no spool of "
            "the disk tier works (" + disk_->FailedSpools() + ")");
      } else {
        full = Status::ResourceExhausted(
            "no host memory free to read " + StepName(run->record, it->second) +
            " back from disk (" + FormatBytes(host_->used()) + " of " +
            FormatBytes(host_->budget()) + " in use)");
      }
      for (auto& w : snap->waiters) deferred.push_back([w = std::move(w), full] { w(full); });
      snap->waiters.clear();
      it = parked_reads_.erase(it);
    }
  }
  FinishDrainsIfDone(deferred);
  if (options_.scrub_bytes_per_second && disk_) ScrubNext();
  WarnLongWaits();
}

std::string Tiering::WhatRoomWaitsFor(uint64_t bytes, HostTier::ArenaId arena) {
  std::vector<std::string> coming;
  auto count = [](uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  if (writes_in_flight_) {
    coming.push_back(count(writes_in_flight_, "demotion to disk", "demotions to disk") +
                     " being written");
  }
  if (reads_in_flight_) {
    coming.push_back(count(reads_in_flight_, "disk read or decode", "disk reads or decodes") +
                     " in flight");
  }
  if (ingests_in_flight()) {
    coming.push_back(count(ingests_in_flight(), "at-ingest compression", "at-ingest compressions") +
                     " in flight");
  }
  if (packs_pending()) {
    coming.push_back(count(pending_pack_count(), "compressed copy", "compressed copies") +
                     " waiting for the raw bytes to be let go");
  }
  if (Checksums::HeldBytes(ix_)) coming.push_back("the checksum of a deleted step");
  if (uint64_t held = LeasedBytes()) {
    coming.push_back(FormatBytes(held) + " of stored steps held by transfers in flight");
  }
  if (disk_ && !disk_->usable()) {
    coming.push_back("a spool to work again (" + disk_->FailedSpools() + ")");
  } else if (disk_full_) {
    coming.push_back("room on the disk tier (" + FormatBytes(disk_->used()) + " of " +
                     FormatBytes(disk_->budget()) + " in use)");
  }
  std::string what;
  for (const std::string& c : coming) what += (what.empty() ? "" : ", ") + c;
  if (what.empty()) what = "steps to be deleted or consumed (nothing in flight will make room)";
  return "host room for " + FormatBytes(bytes) + " (host tier " + FormatBytes(host_->used()) +
         " of " + FormatBytes(host_->budget()) + " in use, largest free piece " +
         FormatBytes(host_->largest_free(arena)) + "); waiting for " + what;
}

std::string Tiering::WhatFetchWaitsFor(const Run& run, const Snapshot& snap) {
  std::string how = HoldsCompressed(snap) ? "its decode in host memory" : "its read from disk";
  if (snap.reading) return how + ", in flight";
  return how + ", which waits for " + WhatRoomWaitsFor(snap.record.raw_bytes(), ArenaOf(run));
}

Tiering::WaitCounts Tiering::WaitsOf(const Run& run) const {
  WaitCounts c;
  auto now = std::chrono::steady_clock::now();
  auto oldest = [&](std::chrono::steady_clock::time_point since) {
    c.oldest_seconds = std::max(c.oldest_seconds,
                                std::chrono::duration<double>(now - since).count());
  };
  for (const ParkedPush& p : parked_pushes_) {
    if (p.run_id != run.record.run_id()) continue;
    ++c.pushes;
    oldest(p.parked_at);
  }
  for (const auto& [step, snap] : run.snapshots) {
    if (snap.waiters.empty()) continue;
    ++c.fetches;
    oldest(snap.waiting_since);
  }
  return c;
}

std::vector<Tiering::WaitingRequest> Tiering::Waiting() {
  auto now = std::chrono::steady_clock::now();
  std::vector<WaitingRequest> out;
  auto add = [&](const char* kind, const Run* run, uint64_t run_id, uint64_t step,
                 std::chrono::steady_clock::time_point since, std::string what) {
    WaitingRequest& w = out.emplace_back();
    w.since = since;
    w.owner_uid = run ? run->record.owner_uid() : 0;
    w.wait.set_kind(kind);
    w.wait.set_run_id(run_id);
    if (run) w.wait.set_run(run->record.spec().name());
    w.wait.set_step(step);
    w.wait.set_seconds(std::chrono::duration<double>(now - since).count());
    w.wait.set_waiting_for(std::move(what));
  };
  for (const ParkedPush& p : parked_pushes_) {
    auto run = ix_.runs.find(p.run_id);
    add("push", run != ix_.runs.end() ? &run->second : nullptr, p.run_id, p.step, p.parked_at,
        WhatRoomWaitsFor(p.bytes, p.arena));
  }
  for (const auto& [id, run] : ix_.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (!snap.waiters.empty()) {
        add("fetch", &run, id, step, snap.waiting_since, WhatFetchWaitsFor(run, snap));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const WaitingRequest& a, const WaitingRequest& b) {
    return a.since < b.since;
  });
  return out;
}

void Tiering::WarnLongWaits() {
  const auto bound = options_.wait_warn_after;
  if (bound.count() <= 0) return;
  auto now = std::chrono::steady_clock::now();
  auto due = [&](std::chrono::steady_clock::time_point since,
                 std::chrono::steady_clock::time_point& warn_at,
                 const std::function<std::string()>& what) SNAPD_REQUIRES(ix_.mu) {
    if (now >= warn_at) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f s",
                    std::chrono::duration<double>(now - since).count());
      long_waits_.Write(log::Level::kWarn, "long waits", what() + " has waited " + waited);
      warn_at = now + bound * kWaitWarnRepeat;
    }
    WakeBy(warn_at);
  };
  for (ParkedPush& p : parked_pushes_) {
    due(p.parked_at, p.warn_at, [&]() SNAPD_REQUIRES(ix_.mu) {
      auto run = ix_.runs.find(p.run_id);
      return "push of " +
             (run != ix_.runs.end() ? StepName(run->second.record, p.step)
                                 : StepLabel(p.run_id, p.step)) +
             ", waiting for " + WhatRoomWaitsFor(p.bytes, p.arena) + ",";
    });
  }
  for (auto& entry : ix_.runs) {
    Run& run = entry.second;
    for (auto& [step, snapshot] : run.snapshots) {
      Snapshot& snap = snapshot;  // a lambda may not capture a structured binding (C++20)
      if (snap.waiters.empty()) continue;
      due(snap.waiting_since, snap.warn_at, [&]() SNAPD_REQUIRES(ix_.mu) {
        return "fetch of " + StepName(run.record, snap.record.step()) + ", waiting for " +
               WhatFetchWaitsFor(run, snap) + ",";
      });
    }
  }
}

bool Tiering::NeedsDisk(const Run& run) {
  return !run.record.spec().block_when_full() && UsesDisk(run.record.spec().layers());
}

Status Tiering::NoDiskForPush(Run& run, uint64_t step, const std::string& why, bool at_once) {
  ++unavailable_pushes_;
  if (at_once) ++unavailable_pushes_fast_;
  std::string name = StepName(run.record, step);
  Status down = Status::Unavailable(name + " needs the disk tier " + why);
  refusals_.Reject(at_once ? "push failed at once, no spool works" : "push failed, no spool works",
                   down.message());
  NoteFailure(run, name + " was refused: no spool works");
  return down;
}

void Tiering::FailPushesWithoutDisk(Deferred& deferred) {
  auto now = std::chrono::steady_clock::now();
  const auto timeout = options_.spool_failure_timeout;
  std::string failed;
  for (auto it = parked_pushes_.begin(); it != parked_pushes_.end();) {
    auto run = ix_.runs.find(it->run_id);
    if (run == ix_.runs.end() || !NeedsDisk(run->second)) {
      ++it;  // waits for room as with a full disk, or needs no disk (Rebalance answers it)
      continue;
    }
    if (now - it->parked_at < timeout) {
      WakeBy(it->parked_at + timeout);
      ++it;
      continue;
    }
    if (failed.empty()) failed = disk_->FailedSpools();
    Status down = NoDiskForPush(
        run->second, it->step,
        "(host tier " + FormatBytes(host_->used()) + " of " + FormatBytes(host_->budget()) +
            " in use) and no spool works: " + failed + ". Waited " +
            std::to_string(timeout.count()) +
            " ms (spool_failure_timeout); snapd re-probes failed spools with backoff and "
            "`snapctl spool probe` tries now; steps already stored can still be fetched",
        /*at_once=*/false);
    // What the pushes after it are told at once, until a spool works again.
    disk_down_ = "no spool works: " + failed + ". Failed at once: a push already waited " +
                 std::to_string(timeout.count()) +
                 " ms (spool_failure_timeout) and no spool has worked since; `snapctl spool "
                 "probe` tries now; steps already stored can still be fetched";
    run->second.in_flight.erase(it->step);
    deferred.push_back([l = std::move(it->later), down] { l(down); });
    it = parked_pushes_.erase(it);
  }
}

void Tiering::ScrubNext() {
  auto now = std::chrono::steady_clock::now();
  if (scrubbing_) return;  // its completion wakes the thread
  if (now < next_scrub_) {
    WakeBy(next_scrub_);
    return;
  }
  // The next disk-tier step after the cursor, in (run id, step) order, wrapping once.
  auto next_after = [&](const Key& from) SNAPD_REQUIRES(ix_.mu) -> std::pair<Run*, Snapshot*> {
    for (auto r = ix_.runs.lower_bound(from.first); r != ix_.runs.end(); ++r) {
      auto it = r->first == from.first ? r->second.snapshots.upper_bound(from.second)
                                       : r->second.snapshots.begin();
      for (; it != r->second.snapshots.end(); ++it) {
        const Snapshot& snap = it->second;
        if (snap.record.tier() == v1::TIER_DISK && !snap.writing &&
            snap.record.checksum_state() == v1::CHECKSUM_RECORDED) {
          return {&r->second, &it->second};
        }
      }
    }
    return {nullptr, nullptr};
  };
  auto [run, snap] = next_after(scrub_cursor_);
  if (!snap) std::tie(run, snap) = next_after({0, 0});
  if (!snap) return;  // nothing on disk; a demotion wakes the thread
  scrub_cursor_ = {run->record.run_id(), snap->record.step()};
  scrubbing_ = true;
  uint64_t bytes = FileContentBytes(snap->record);
  next_scrub_ = now + std::chrono::nanoseconds(static_cast<int64_t>(
                          1e9 * static_cast<double>(bytes) /
                          static_cast<double>(options_.scrub_bytes_per_second)));
  StartScrub(run->record.run_id(), snap->record.step(), [this](Status) {
    MutexLock lock(ix_.mu);
    scrubbing_ = false;
    Wake();
  });
}

void Tiering::ServeParkedReads() {
  for (auto it = parked_reads_.begin(); it != parked_reads_.end();) {
    auto [run, snap] = ix_.FindSnapshot(*it);
    if (!snap || RawInHost(*snap) || snap->reading || snap->waiters.empty()) {
      it = parked_reads_.erase(it);
    } else if (StartRead(*run, *snap, /*urgent=*/true)) {
      it = parked_reads_.erase(it);
    } else {
      return;  // no room yet
    }
  }
}

void Tiering::GrantParkedPushes(Deferred& deferred) {
  while (!parked_pushes_.empty()) {
    ParkedPush& p = parked_pushes_.front();
    auto run = ix_.runs.find(p.run_id);
    if (run == ix_.runs.end()) {
      Status gone = Status::NotFound("run id " + std::to_string(p.run_id) +
                                     " was deleted while a push waited for room");
      deferred.push_back([l = std::move(p.later), gone] { l(gone); });
      parked_pushes_.pop_front();
      continue;
    }
    auto block = AllocateHost(run->second, p.bytes);
    if (!block.ok() && CompactHost(p.bytes, p.arena)) block = AllocateHost(run->second, p.bytes);
    if (!block.ok()) return;  // first come, first served
    run->second.in_flight[p.step] = *block;
    PushTicket ticket{p.run_id, p.step, Lease(*block)};
    deferred.push_back([l = std::move(p.later), t = std::move(ticket)] { l(t); });
    parked_pushes_.pop_front();
  }
}

bool Tiering::CompactHost(uint64_t bytes, HostTier::ArenaId arena) {
  if (host_->budget() - host_->used() < bytes) return false;  // not fragmentation: too full
  // Enough free bytes, but in pieces: move blocks only the store holds (no send, lease,
  // checksum, compression or disk I/O has them), lowest first, to the highest free piece that
  // fits. Each move merges the room it leaves with its neighbours; a memcpy costs far less
  // than writing a step to disk.
  // Blocks move within their arena only: the one `bytes` is wanted in.
  std::vector<std::pair<Run*, Snapshot*>> movable;
  for (auto& [id, run] : ix_.runs) {
    if (ArenaOf(run) != arena) continue;
    for (auto& [step, snap] : run.snapshots) {
      if (snap.block && snap.block.use_count() == 1 && !snap.writing && !snap.reading) {
        movable.emplace_back(&run, &snap);
      }
    }
  }
  std::sort(movable.begin(), movable.end(), [](const auto& a, const auto& b) {
    return a.second->block->offset() < b.second->block->offset();
  });
  for (auto [run, snap] : movable) {
    if (host_->largest_free(arena) >= bytes) return true;
    auto dest = AllocateHost(*run, snap->block->size(), /*from_top=*/true);
    if (!dest.ok()) continue;  // no piece this block fits in; a smaller one may move
    if ((*dest)->offset() < snap->block->offset()) continue;  // would move down: no gain
    std::memcpy((*dest)->data(), snap->block->data(), snap->block->size());
    snap->block = std::move(dest).value();  // the old copy's room merges with its neighbours
    ++compactions_;
  }
  return host_->largest_free(arena) >= bytes;
}

uint64_t Tiering::LeasedBytes() const {
  const std::unordered_set<const HostBlock*> leased = LeasedBlocks();
  if (leased.empty()) return 0;
  uint64_t held = 0;
  for (const auto& [id, run] : ix_.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.block && leased.count(snap.block.get())) held += snap.block->size();
    }
  }
  return held;
}

uint64_t Tiering::FreeingBytes() {
  uint64_t writing = 0;
  for (const auto& [id, run] : ix_.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.writing) writing += BlockBytes(run);
    }
  }
  return writing + Checksums::HeldBytes(ix_);
}

bool Tiering::FreeHostRoom() {
  // A read-ahead copy costs nothing to drop: prefer the highest step (already passed by the
  // backward pass, or the furthest from it).
  Run* best_run = nullptr;
  Snapshot* best = nullptr;
  for (auto& [id, run] : ix_.runs) {
    for (auto it = run.snapshots.rbegin(); it != run.snapshots.rend(); ++it) {
      Snapshot& snap = it->second;
      if (snap.record.tier() == v1::TIER_DISK && snap.block && snap.block.use_count() == 1 &&
          snap.waiters.empty()) {
        if (!best || snap.record.step() > best->record.step()) best_run = &run, best = &snap;
        break;
      }
    }
  }
  if (best) {
    best->block.reset();
    return true;
  }
  // Otherwise write out the oldest host-only step of a run that may use disk. A declared
  // run's host-resident range [host_boundary, N) is left alone while anything in flight (a
  // write, a read, a checksum holding a block) is about to free memory anyway.
  // A tenant holding more than its share of the host tier gives up its own oldest step first.
  bool settling = Settling();
  bool have_heavy = false;  // a tenant above its share, when several hold host memory
  uint32_t heavy = 0;
  if (options_.tenant_host_share < 1.0) {
    std::map<uint32_t, uint64_t> held;  // host bytes by owner, in one pass over the runs
    for (const auto& [id, run] : ix_.runs) {
      uint64_t& bytes = held[run.record.owner_uid()];
      for (const auto& [step, snap] : run.snapshots) {
        if (snap.block) bytes += snap.block->size();
      }
    }
    uint64_t most = 0;
    for (const auto& [uid, bytes] : held) {
      if (bytes > most) most = bytes, heavy = uid;
    }
    have_heavy = held.size() >= 2 &&
                 most > static_cast<uint64_t>(options_.tenant_host_share * host_->budget());
  }
  for (int pass = have_heavy ? 0 : 1; pass < 2 && !best; ++pass) {
    for (auto& [id, run] : ix_.runs) {
      const v1::RunSpec& spec = run.record.spec();
      if (!UsesDisk(spec.layers()) && drains_.empty()) continue;
      if (pass == 0 && run.record.owner_uid() != heavy) continue;
      for (auto& [step, snap] : run.snapshots) {
        if (snap.record.tier() != v1::TIER_HOST || snap.writing || !snap.block) continue;
        if (settling && spec.steps() && step >= run.record.host_boundary()) break;
        if (!best || snap.generation < best->generation) best_run = &run, best = &snap;
        break;  // steps of one run arrive in order; its lowest host step is its oldest
      }
    }
  }
  if (!best || !disk_ || disk_full_ || !disk_->usable()) return false;
  StartDemotion(*best_run, *best);
  return best->writing;
}

void Tiering::StartDemotion(Run& run, Snapshot& snap) {
  const v1::SnapshotRecord& r = snap.record;
  auto space = disk_->Reserve(FileContentBytes(r));
  if (!space.ok()) {
    // No spool works (UNAVAILABLE): said once when each failed, and re-tried when one comes
    // back (DiskTier's state listener wakes this thread).
    if (space.status().code() != Code::kResourceExhausted) return;
    if (!disk_full_) SNAPD_LOG_WARN("%s", space.status().message().c_str());
    disk_full_ = true;
    return;
  }
  snap.writing = true;
  ++writes_in_flight_;
  std::string name = "step-" + std::to_string(r.step()) + "-e" + std::to_string(options_.epoch) +
                     "-g" + std::to_string(snap.generation);
  io_->Submit(
      [this, run_id = run.record.run_id(), step = r.step(), gen = snap.generation, space = *space,
       name, record = r, codec = CodecOf(run.record.spec()), field = FieldOf(run.record.spec()),
       block = snap.block]() mutable {
        // A step compressed at ingest has its checksum recorded already; any other is hashed
        // once, by whichever job gets to it first (Checksums::ChecksumOf).
        uint64_t sum = checksums_.ChecksumOf(ix_, run_id, step, gen, *block, field.bytes);
        auto written = WriteSnapshot(*disk_, space, run_id, name, record, codec, field,
                                     block->data(), compress_.get(), checksums_);
        block.reset();  // before FinishDemotion: the host memory is free once it says so
        FinishDemotion(run_id, step, gen, space, name, sum, std::move(written));
      },
      /*urgent=*/false);
}

void Tiering::FinishDemotion(uint64_t run_id, uint64_t step, uint64_t generation,
                             const DiskTier::Space& space, const std::string& name,
                             uint64_t checksum, Result<WrittenSnapshot> written) {
  Deferred deferred;
  {
    MutexLock lock(ix_.mu);
    --writes_in_flight_;
    Snapshot* snap = ix_.FindSnapshot(run_id, step, generation);
    Status s = written.status();
    const bool keep_copy = snap && keep_host_copies_ && RawInHost(*snap);
    if (snap && s.ok()) {
      v1::SnapshotRecord updated = snap->record;
      updated.set_tier(v1::TIER_DISK);
      updated.set_spool(space.spool);
      updated.set_disk_name(name);
      updated.set_checksum(checksum);
      updated.set_checksum_state(v1::CHECKSUM_RECORDED);
      updated.set_stored_bytes(written->stored_bytes);
      updated.set_codec(written->codec);
      updated.set_codec_param(written->codec == v1::CODEC_NONE
                                  ? 0
                                  : ix_.runs.at(run_id).record.spec().codec_param());
      updated.set_stored_checksum(written->stored_checksum);
      s = catalog_->PutSnapshot(updated);
      if (s.ok()) {
        Run& run = ix_.runs.at(run_id);
        run.stored_bytes -= snap->record.stored_bytes();
        run.stored_bytes += updated.stored_bytes();
        snap->record = std::move(updated);
        // The host memory is free now (the record points at the file), unless a stop keeps it.
        if (!keep_copy) snap->block.reset();
        ++ix_.counters.demotions;
        for (auto& d : drains_) {
          ++d.result.moved;
          d.result.moved_bytes += snap->record.raw_bytes();
        }
      }
    }
    if (snap) snap->writing = false;
    if (written.ok() && (!snap || !s.ok())) {
      // Deleted or released while being written, or not recorded: the file must not stay.
      deferred.push_back([this, spool = space.spool, run_id, name, bytes = written->stored_bytes] {
        disk_->Remove(spool, run_id, name, bytes);
      });
    }
    if (!s.ok()) {
      // The step stays in host memory. A failed spool left the rotation (the next demotion
      // goes to another, or waits for a probe); a full one stops demotions until room comes.
      // Either way the next try is not the same write again at once.
      failed_writes_.Write(log::Level::kWarn, "failed demotions",
                           "moving " + StepLabel(run_id, step) + " to disk failed: " +
                               s.message());
      if (s.code() == Code::kResourceExhausted) disk_full_ = true;
      for (auto& d : drains_) deferred.push_back([l = std::move(d.done), s] { l(s); });
      drains_.clear();
    }
    Wake();
  }
  for (auto& f : deferred) f();
}

bool Tiering::StartRead(Run& run, Snapshot& snap, bool urgent) {
  const v1::SnapshotRecord& r = snap.record;
  auto block = AllocateHost(run, r.raw_bytes());
  if (!block.ok() && urgent && CompactHost(r.raw_bytes(), ArenaOf(run))) {
    block = AllocateHost(run, r.raw_bytes());
  }
  if (!block.ok()) return false;
  snap.reading = true;
  ++reads_in_flight_;
  std::shared_ptr<HostBlock> stored = HoldsCompressed(snap) ? snap.block : nullptr;
  io_->Submit(
      [this, record = r, gen = snap.generation, field = FieldOf(run.record.spec()),
       block = std::move(block).value(), stored = std::move(stored)]() mutable {
        int64_t started = NowNs();
        Status s = stored
                       ? DecodeSnapshot(record, field, stored->data(), block->data(),
                                        compress_.get(), checksums_)
                       : ReadSnapshot(*disk_, record, field, block->data(), compress_.get(), checksums_);
        stored.reset();
        FinishRead(record.run_id(), record.step(), gen, std::move(block), s, started);
      },
      urgent);
  return true;
}

void Tiering::FinishRead(uint64_t run_id, uint64_t step, uint64_t generation,
                         std::shared_ptr<HostBlock> block, Status read, int64_t started_ns) {
  Deferred deferred;
  {
    MutexLock lock(ix_.mu);
    --reads_in_flight_;
    Snapshot* snap = ix_.FindSnapshot(run_id, step, generation);
    if (snap) {
      snap->reading = false;
      Run& run = ix_.runs.at(run_id);
      std::vector<FetchDone> waiters = std::move(snap->waiters);
      snap->waiters.clear();
      if (read.ok() && HoldsCompressed(*snap)) {
        // Decoded in host memory: the step is raw again there.
        v1::SnapshotRecord updated = snap->record;
        updated.set_codec(v1::CODEC_NONE);
        updated.set_codec_param(0);
        updated.set_stored_checksum(0);
        updated.set_stored_bytes(updated.raw_bytes());
        read = catalog_->PutSnapshot(updated);
        if (read.ok()) {
          run.stored_bytes += updated.raw_bytes() - snap->record.stored_bytes();
          snap->record = std::move(updated);
        }
      } else if (read.ok()) {
        ++ix_.counters.disk_reads;
        double per_byte = static_cast<double>(NowNs() - started_ns) /
                          static_cast<double>(std::max<uint64_t>(snap->record.raw_bytes(), 1));
        read_ns_per_byte_ = read_ns_per_byte_ > 0 ? 0.7 * read_ns_per_byte_ + 0.3 * per_byte
                                                  : per_byte;
      }
      if (read.ok()) {
        snap->block = std::move(block);
        snap->verified = true;
        FetchGrant grant{Lease(snap->block), snap->generation};
        for (auto& w : waiters) deferred.push_back([w = std::move(w), grant] { w(grant); });
      } else {
        Status answer = read;
        if (read.code() == Code::kDataLoss) {
          answer = Status::DataLoss(StepName(run.record, step) + " is lost: " + read.message());
          LoseDiskStep(run, *snap, read.message());
        }
        for (auto& w : waiters) deferred.push_back([w = std::move(w), answer] { w(answer); });
      }
    }
    block.reset();  // unless it went to the snapshot
    Wake();
  }
  for (auto& f : deferred) f();
}

void Tiering::StartScrub(uint64_t run_id, uint64_t step, std::function<void(Status)> done) {
  const Snapshot& snap = ix_.runs.at(run_id).snapshots.at(step);
  if (snap.record.checksum_state() != v1::CHECKSUM_RECORDED) {
    if (done) {
      io_->Submit([done] { done(Status::FailedPrecondition("no checksum recorded")); },
                  /*urgent=*/false);
    }
    return;
  }
  // Outside the host tier (VerifySnapshot has its own buffers): scrubbing must not take room
  // from solvers.
  io_->Submit(
      [this, record = snap.record, gen = snap.generation,
       field = FieldOf(ix_.runs.at(run_id).record.spec()), done = std::move(done)] {
        Status s = VerifySnapshot(*disk_, record, field, compress_.get(), checksums_);
        {
          MutexLock lock(ix_.mu);
          ++scrubbed_;
          Snapshot* current = ix_.FindSnapshot(record.run_id(), record.step(), gen);
          if (current && current->record.tier() == v1::TIER_DISK) {
            if (s.ok()) {
              current->verified = true;
            } else if (s.code() == Code::kDataLoss) {
              LoseDiskStep(ix_.runs.at(record.run_id()), *current,
                           "found by a scrub of its spool file: " + s.message());
            } else {
              SNAPD_LOG_WARN("verifying %s: %s",
                             StepLabel(record.run_id(), record.step()).c_str(),
                             s.message().c_str());
            }
          }
        }
        if (done) done(s);
      },
      /*urgent=*/false);
}

void Tiering::LoseDiskStep(Run& run, Snapshot& snap, const std::string& why) {
  const v1::SnapshotRecord r = snap.record;
  if (r.tier() != v1::TIER_DISK) return;  // lost already: said once
  MarkLost(run, snap, why + "; its file goes to " +
                          disk_->spool_dirs()[std::min<size_t>(r.spool(), disk_->spools() - 1)] +
                          "/quarantine/");
  DiskRoomFreed();
  io_->Submit(
      [this, r] {
        auto moved = disk_->Quarantine(r.spool(), r.run_id(), r.disk_name(), FileContentBytes(r));
        if (!moved.ok() && moved.status().code() != Code::kNotFound) {
          SNAPD_LOG_WARN("quarantining the file of lost %s: %s",
                         StepLabel(r.run_id(), r.step()).c_str(),
                         moved.status().message().c_str());
        }
      },
      /*urgent=*/false);
}

void Tiering::SchedulePrefetch(Run& run) {
  if (!disk_ || run.prefetch_from == 0) return;
  double read_ns = read_ns_per_byte_ * static_cast<double>(run.record.spec().bytes_per_step());
  uint64_t depth = PrefetchDepth(run.pace_ns, read_ns, options_.max_prefetch);
  uint64_t lowest = run.prefetch_from > depth ? run.prefetch_from - depth : 0;
  auto it = run.snapshots.lower_bound(run.prefetch_from);
  while (it != run.snapshots.begin()) {
    --it;
    if (it->first < lowest) break;
    Snapshot& snap = it->second;
    if (snap.record.tier() != v1::TIER_DISK || snap.block || snap.reading) continue;
    if (!StartRead(run, snap, /*urgent=*/false)) break;  // no host room; retried on a free
  }
}

void Tiering::FinishDrainsIfDone(Deferred& deferred) {
  if (drains_.empty()) return;
  if (!disk_->usable()) {
    if (writes_in_flight_) return;
    Status down = Status::Unavailable(
        "no spool works (" + disk_->FailedSpools() +
        "); what was moved stays on disk and the rest is still in host memory");
    for (auto& d : drains_) deferred.push_back([l = std::move(d.done), down] { l(down); });
    drains_.clear();
    return;
  }
  // The oldest copy still only in host memory (one being written still is): a drain that
  // began after it was stored waits for it.
  uint64_t oldest_host = UINT64_MAX;
  for (const auto& [id, run] : ix_.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.record.tier() == v1::TIER_HOST && snap.block) {
        oldest_host = std::min(oldest_host, snap.generation);
      }
    }
  }
  const Status full = Status::ResourceExhausted(
      "the disk tier filled up while draining; what was moved stays on disk and the rest is "
      "still in host memory");
  std::erase_if(drains_, [&](DrainWaiter& d) SNAPD_REQUIRES(ix_.mu) {
    if (oldest_host > d.upto) {
      deferred.push_back([l = std::move(d.done), r = d.result] { l(r); });
      return true;
    }
    if (disk_full_ && !writes_in_flight_) {
      deferred.push_back([l = std::move(d.done), full] { l(full); });
      return true;
    }
    return false;  // still to be written
  });
}

}  // namespace snapd
