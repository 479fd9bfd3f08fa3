// Host room: what frees it (a read-ahead copy dropped, a demotion, compaction of a fragmented
// arena, work in flight settling) and what holds it (leases, reserved pushes).
#include "tiering/tiering.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_set>
#include <vector>

#include "log.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

bool Tiering::CompactHost(StoreIndex& ix, uint64_t bytes, HostTier::ArenaId arena) {
  if (s_.host_->budget() - s_.host_->used() < bytes) return false;  // not fragmentation: too full
  // Enough free bytes, but in pieces: move blocks only the store holds (no send, lease,
  // checksum, compression or disk I/O has them), lowest first, to the highest free piece that
  // fits. Each move merges the room it leaves with its neighbours; a memcpy costs far less
  // than writing a step to disk.
  // Blocks move within their arena only: the one `bytes` is wanted in.
  std::vector<std::pair<Run*, Snapshot*>> movable;
  for (auto& [id, run] : ix.runs) {
    if (s_.ArenaOf(run) != arena) continue;
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
    if (s_.host_->largest_free(arena) >= bytes) return true;
    auto dest = s_.AllocateHost(*run, snap->block->size(), /*from_top=*/true);
    if (!dest.ok()) continue;  // no piece this block fits in; a smaller one may move
    if ((*dest)->offset() < snap->block->offset()) continue;  // would move down: no gain
    std::memcpy((*dest)->data(), snap->block->data(), snap->block->size());
    snap->block = std::move(dest).value();  // the old copy's room merges with its neighbours
    ++ix.tiering.compactions;
  }
  return s_.host_->largest_free(arena) >= bytes;
}

bool Tiering::PushesReserved(StoreIndex& ix) const {
  for (const auto& [id, run] : ix.runs) {
    for (const auto& [step, block] : run.in_flight) {
      if (block) return true;  // null: a push parked for room, not reserved
    }
  }
  return false;
}

uint64_t Tiering::LeasedBytes(StoreIndex& ix) const {
  const std::unordered_set<const HostBlock*> leased = s_.LeasedBlocks();
  if (leased.empty()) return 0;
  uint64_t held = 0;
  for (const auto& [id, run] : ix.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.block && leased.count(snap.block.get())) held += snap.block->size();
    }
  }
  return held;
}

uint64_t Tiering::FreeingBytes(StoreIndex& ix) {
  uint64_t writing = 0;
  for (const auto& [id, run] : ix.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.writing) writing += StoreState::BlockBytes(run);
    }
  }
  return writing + Checksums::HeldBytes(ix);
}

bool Tiering::FreeHostRoom(StoreIndex& ix) {
  // A read-ahead copy costs nothing to drop: prefer the highest step (already passed by the
  // backward pass, or the furthest from it).
  Run* best_run = nullptr;
  Snapshot* best = nullptr;
  for (auto& [id, run] : ix.runs) {
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
  bool settling = Settling(ix);
  bool have_heavy = false;  // a tenant above its share, when several hold host memory
  uint32_t heavy = 0;
  if (s_.options_.tenant_host_share < 1.0) {
    std::map<uint32_t, uint64_t> held;  // host bytes by owner, in one pass over the runs
    for (const auto& [id, run] : ix.runs) {
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
                 most > static_cast<uint64_t>(s_.options_.tenant_host_share * s_.host_->budget());
  }
  for (int pass = have_heavy ? 0 : 1; pass < 2 && !best; ++pass) {
    for (auto& [id, run] : ix.runs) {
      const v1::RunSpec& spec = run.record.spec();
      if (!UsesDisk(spec.layers()) && ix.tiering.drains.empty()) continue;
      if (pass == 0 && run.record.owner_uid() != heavy) continue;
      for (auto& [step, snap] : run.snapshots) {
        if (snap.record.tier() != v1::TIER_HOST || snap.writing || !snap.block) continue;
        if (settling && spec.steps() && step >= run.record.host_boundary()) break;
        if (!best || snap.generation < best->generation) best_run = &run, best = &snap;
        break;  // steps of one run arrive in order; its lowest host step is its oldest
      }
    }
  }
  if (!best || !s_.disk_ || ix.tiering.disk_full || !s_.disk_->usable()) return false;
  StartDemotion(ix, *best_run, *best);
  return best->writing;
}

}  // namespace adjsnap
