// What waits and for what: the requests parked for host room or a disk read, counted per run,
// listed for Stats, and logged once they wait past wait_warn_after.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "log.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"
#include "tiering/tiering.h"

namespace adjsnap {

std::string Tiering::WhatRoomWaitsFor(StoreIndex& ix, uint64_t bytes, HostTier::ArenaId arena) {
  std::vector<std::string> coming;
  auto count = [](uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  if (int demotions = ix.tiering.writes_in_flight - ix.tiering.moves_in_flight) {
    coming.push_back(count(demotions, "demotion to disk", "demotions to disk") + " being written");
  }
  if (ix.tiering.moves_in_flight) {
    coming.push_back(count(ix.tiering.moves_in_flight, "older step", "older steps") +
                     " moving from the local spools to a shared one to make room there");
  }
  if (ix.tiering.reads_in_flight) {
    coming.push_back(
        count(ix.tiering.reads_in_flight, "disk read or decode", "disk reads or decodes") +
        " in flight");
  }
  if (Ingest::InFlight(ix)) {
    coming.push_back(
        count(Ingest::InFlight(ix), "at-ingest compression", "at-ingest compressions") +
        " in flight");
  }
  if (Ingest::Pending(ix) > 0) {
    coming.push_back(count(Ingest::Pending(ix), "compressed copy", "compressed copies") +
                     " waiting for the raw bytes to be let go");
  }
  if (Checksums::HeldBytes(ix)) coming.push_back("the checksum of a deleted step");
  if (uint64_t held = LeasedBytes(ix)) {
    coming.push_back(FormatBytes(held) + " of stored steps held by transfers in flight");
  }
  if (s_.disk_ && !s_.disk_->usable()) {
    coming.push_back("a spool to work again (" + s_.disk_->FailedSpools() + ")");
  } else if (ix.tiering.disk_full) {
    coming.push_back("room on the disk tier (" + FormatBytes(s_.disk_->used()) + " of " +
                     FormatBytes(s_.disk_->budget()) + " in use)");
  }
  std::string what;
  for (const std::string& c : coming) what += (what.empty() ? "" : ", ") + c;
  if (what.empty()) what = "steps to be deleted or consumed (nothing in flight will make room)";
  return "host room for " + FormatBytes(bytes) + " (host tier " + FormatBytes(s_.host_->used()) +
         " of " + FormatBytes(s_.host_->budget()) + " in use, largest free piece " +
         FormatBytes(s_.host_->largest_free(arena)) + "); waiting for " + what;
}

std::string Tiering::WhatFetchWaitsFor(StoreIndex& ix, const Run& run, const Snapshot& snap) {
  std::string how =
      StoreState::HoldsCompressed(snap) ? "its decode in host memory" : "its read from disk";
  if (snap.reading) return how + ", in flight";
  return how + ", which waits for " +
         WhatRoomWaitsFor(ix, snap.record.raw_bytes(), s_.ArenaOf(run));
}

Tiering::WaitCounts Tiering::WaitsOf(const StoreIndex& ix, const Run& run) const {
  WaitCounts c;
  auto now = std::chrono::steady_clock::now();
  auto oldest = [&](std::chrono::steady_clock::time_point since) {
    c.oldest_seconds =
        std::max(c.oldest_seconds, std::chrono::duration<double>(now - since).count());
  };
  for (const ParkedPush& p : ix.tiering.parked_pushes) {
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

std::vector<Tiering::WaitingRequest> Tiering::Waiting(StoreIndex& ix) {
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
  for (const ParkedPush& p : ix.tiering.parked_pushes) {
    auto run = ix.runs.find(p.run_id);
    add("push", run != ix.runs.end() ? &run->second : nullptr, p.run_id, p.step, p.parked_at,
        WhatRoomWaitsFor(ix, p.bytes, p.arena));
  }
  for (const auto& [id, run] : ix.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (!snap.waiters.empty()) {
        add("fetch", &run, id, step, snap.waiting_since, WhatFetchWaitsFor(ix, run, snap));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const WaitingRequest& a, const WaitingRequest& b) {
    return a.since < b.since;
  });
  return out;
}

void Tiering::WarnLongWaits(StoreIndex& ix) {
  const auto bound = s_.options_.wait_warn_after;
  if (bound.count() <= 0) return;
  auto now = std::chrono::steady_clock::now();
  auto due = [&](std::chrono::steady_clock::time_point since,
                 std::chrono::steady_clock::time_point& warn_at,
                 const std::function<std::string()>& what) ADJSNAP_REQUIRES_INDEX(ix) {
    if (now >= warn_at) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f s",
                    std::chrono::duration<double>(now - since).count());
      long_waits_.Write(log::Level::kWarn, "long waits", what() + " has waited " + waited);
      warn_at = now + bound * kWaitWarnRepeat;
    }
    WakeBy(ix, warn_at);
  };
  for (ParkedPush& p : ix.tiering.parked_pushes) {
    due(p.parked_at, p.warn_at, [&]() ADJSNAP_REQUIRES_INDEX(ix) {
      auto run = ix.runs.find(p.run_id);
      return "push of " +
             (run != ix.runs.end() ? StepName(run->second.record, p.step)
                                   : StepLabel(p.run_id, p.step)) +
             ", waiting for " + WhatRoomWaitsFor(ix, p.bytes, p.arena) + ",";
    });
  }
  for (auto& entry : ix.runs) {
    Run& run = entry.second;
    for (auto& [step, snapshot] : run.snapshots) {
      Snapshot& snap = snapshot;  // a lambda may not capture a structured binding (C++20)
      if (snap.waiters.empty()) continue;
      due(snap.waiting_since, snap.warn_at, [&]() ADJSNAP_REQUIRES_INDEX(ix) {
        return "fetch of " + StepName(run.record, snap.record.step()) + ", waiting for " +
               WhatFetchWaitsFor(ix, run, snap) + ",";
      });
    }
  }
}

}  // namespace adjsnap
