// Moves of one step between host memory and disk, on the I/O threads: demotion, the read (or
// decode) back into host memory, and read-ahead of the backward pass.
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

SpoolClass Tiering::DemotionClass(StoreIndex&, const Run& run, const Snapshot& snap) const {
  if (!s_.disk_->has_shared()) return SpoolClass::kLocal;
  // Reverse order over the disk classes too: the run's disk range [0, bound) puts its newest
  // steps on the local spools, as many as their room holds, and the older ones on the shared
  // spools. Demotions come oldest first: a step goes local only if the local room holds it and
  // every newer step of the range not on disk yet, pushed or still to come. With N unknown (no
  // range), a step goes local, and the run's oldest local steps move on to the shared spools
  // as the local room runs low (MakeLocalRoom); above the range (a drain), a step goes local
  // while there is room. Reserve fails over to the shared class for the rest.
  const v1::RunSpec& spec = run.record.spec();
  if (spec.spool_class() == "local") return SpoolClass::kLocal;  // the run chose (RunSpec)
  if (spec.spool_class() == "shared") return SpoolClass::kShared;
  const uint64_t step = snap.record.step();
  const uint64_t bound = UsesHost(spec.layers()) ? run.record.host_boundary() : spec.steps();
  if (spec.steps() == 0 || step >= bound) return SpoolClass::kLocal;
  // Kept as tiers change, not walked: O(1) amortized per demotion (Run::DiskSteps).
  const uint64_t on_disk = run.DiskSteps(step, bound);
  const uint64_t to_come = bound - step - on_disk;
  const uint64_t file = DiskTier::FileBytes(FileContentBytes(snap.record));
  return s_.disk_->room(SpoolClass::kLocal) >= to_come * file ? SpoolClass::kLocal
                                                              : SpoolClass::kShared;
}

bool Tiering::MakeLocalRoom(StoreIndex& ix, Run& run, const Snapshot& snap) {
  if (s_.disk_->budget(SpoolClass::kLocal) == 0) return false;  // shared spools only
  const uint64_t file = DiskTier::FileBytes(FileContentBytes(snap.record));
  // Room for a few demotions is kept free ahead of them, so that moves (each a shared
  // filesystem's write, which wants several in flight) overlap the demotions they make room
  // for: a quarter of the local spools, at most one move per I/O thread but one. The local
  // spools end a run that much short of full.
  const uint64_t ahead =
      std::clamp<uint64_t>(s_.disk_->budget(SpoolClass::kLocal) / std::max<uint64_t>(file, 1) / 4,
                           1, std::max<uint64_t>(s_.options_.io_threads, 2) - 1);
  const uint64_t room = s_.disk_->room(SpoolClass::kLocal);
  const uint64_t step = snap.record.step();
  run.move_from = std::min(run.move_from, step);  // `snap` goes local: a rewrite of an old step
  auto it = run.snapshots.lower_bound(run.move_from);
  // Steps on a shared spool (or lost) never move again: the cursor passes them once.
  for (; it != run.snapshots.end() && it->first < step; ++it) {
    const v1::SnapshotRecord& r = it->second.record;
    if (r.tier() != v1::TIER_LOST &&
        (r.tier() != v1::TIER_DISK || s_.disk_->ClassOf(r.spool()) != SpoolClass::kShared)) {
      break;
    }
    run.move_from = it->first + 1;
  }
  while (room + ix.tiering.moving_bytes < ahead * file &&
         ix.tiering.writes_in_flight <= s_.options_.io_threads) {
    // The run's oldest step on a local spool that nothing else is moving or reading.
    for (; it != run.snapshots.end() && it->first < step; ++it) {
      const Snapshot& old = it->second;
      if (old.record.tier() == v1::TIER_DISK && !old.moving && !old.reading && !old.writing &&
          !ix.Recording({run.record.run_id(), it->first, old.generation}) &&
          old.move_failed_at != s_.disk_->changes() + 1 &&
          s_.disk_->ClassOf(old.record.spool()) == SpoolClass::kLocal) {
        break;
      }
    }
    if (it == run.snapshots.end() || it->first >= step || !StartMove(ix, it->second)) break;
    ++it;
  }
  return room < file && ix.tiering.moves_in_flight > 0;
}

bool Tiering::StartMove(StoreIndex& ix, Snapshot& snap) {
  const v1::SnapshotRecord& r = snap.record;
  auto space = s_.disk_->Reserve(FileContentBytes(r), SpoolClass::kShared, /*fail_over=*/false);
  if (!space.ok()) return false;  // full or failed: the demotion goes where Reserve finds room
  snap.moving = true;
  ++ix.tiering.writes_in_flight;
  ++ix.tiering.moves_in_flight;
  ix.tiering.moving_bytes += DiskTier::FileBytes(FileContentBytes(r));
  s_.io_->Submit(
      [this, record = r, gen = snap.generation, space = *space] {
        Status copied = s_.disk_->Copy(record.spool(), record.run_id(), record.disk_name(),
                                       FileContentBytes(record), space);
        FinishMove(record, gen, space, std::move(copied));
      },
      /*urgent=*/false);
  return true;
}

void Tiering::FinishMove(const v1::SnapshotRecord& from, uint64_t generation,
                         const DiskTier::Space& to, Status copied) {
  StoreIndex& ix = ix_;
  const uint64_t run_id = from.run_id();
  const uint64_t raw = FileContentBytes(from);
  bool moved = false;
  Status recorded = copied;
  {
    IndexLock lock(ix);
    const StoreIndex::CopyKey copy{run_id, from.step(), generation};
    ix.AwaitRecords(copy);  // the record it changes is the newest
    Snapshot* snap = ix.FindSnapshot(copy);
    // The copy replaces the file only if the record still names that file and no read of it
    // is in flight (it would find the file gone); otherwise the copy goes and the step stays.
    const bool same = snap && snap->record.tier() == v1::TIER_DISK &&
                      snap->record.spool() == from.spool() &&
                      snap->record.disk_name() == from.disk_name() && !snap->reading;
    if (copied.ok() && same) {
      v1::SnapshotRecord updated = snap->record;
      updated.set_spool(to.spool);
      // Record first, then the index: no read starts while it is written (StartRead).
      recorded = ix.RecordAndWait(s_.record_, copy, updated);
      // Deleted meanwhile, its delete follows this record and removes the file its last index
      // record named (the local one); lost meanwhile, its file is quarantined: the copy goes.
      snap = ix.FindSnapshot(copy);
      moved = recorded.ok() && snap && snap->record.tier() == v1::TIER_DISK;
      if (moved) ix.runs.at(run_id).SetRecord(*snap, std::move(updated));
      ix.EndRecord(copy);
      s_.Wake();  // a read parked while the record was written may start now (StartRead)
    }
    // Not tried again until a spool fails or comes back: a source that cannot be read (its
    // own fetch will say why) is not copied over and over.
    if (snap && !copied.ok()) snap->move_failed_at = s_.disk_->changes() + 1;
  }
  // The file no record names now, the local one or the copy, removed off the store's mutex (an
  // unlink on a network filesystem waits on its servers). The step stays `moving` until then:
  // a second move must not write the name this one removes.
  if (copied.ok()) s_.disk_->Remove(moved ? from.spool() : to.spool, run_id, from.disk_name(), raw);
  IndexLock lock(ix);
  if (Snapshot* snap = ix.FindSnapshot(run_id, from.step(), generation)) snap->moving = false;
  --ix.tiering.writes_in_flight;
  --ix.tiering.moves_in_flight;
  ix.tiering.moving_bytes -= DiskTier::FileBytes(raw);
  if (moved) {
    ++ix.counters.moves_to_shared;
    DiskRoomFreed(ix);
  }
  if (!recorded.ok()) {
    failed_writes_.Write(
        log::Level::kWarn, "failed moves",
        "moving " + StepLabel(run_id, from.step()) +
            " to a shared spool failed (it stays where it is): " + recorded.message());
  }
  s_.Wake();
}

void Tiering::StartDemotion(StoreIndex& ix, Run& run, Snapshot& snap) {
  const v1::SnapshotRecord& r = snap.record;
  const SpoolClass cls = DemotionClass(ix, run, snap);
  // A run that chose the local class keeps its steps there: none is moved on to make room.
  if (cls == SpoolClass::kLocal && s_.disk_->has_shared() && run.record.spec().steps() == 0 &&
      run.record.spec().spool_class().empty() && MakeLocalRoom(ix, run, snap)) {
    return;  // the moves under way make its room
  }
  auto space = s_.disk_->Reserve(FileContentBytes(r), cls);
  if (!space.ok()) {
    // No spool works (UNAVAILABLE): said once when each failed, and re-tried when one comes
    // back (DiskTier's state listener wakes this thread).
    if (space.status().code() != Code::kResourceExhausted) return;
    if (!ix.tiering.disk_full) ADJSNAP_LOG_WARN("%s", space.status().message().c_str());
    ix.tiering.disk_full = true;
    return;
  }
  snap.writing = true;
  ++ix.tiering.writes_in_flight;
  std::string name = "step-" + std::to_string(r.step()) + "-e" + std::to_string(s_.options_.epoch) +
                     "-g" + std::to_string(snap.generation);
  s_.io_->Submit(
      [this, run_id = run.record.run_id(), step = r.step(), gen = snap.generation, space = *space,
       name, record = r, codec = CodecOf(run.record.spec()), field = FieldOf(run.record.spec()),
       block = snap.block]() mutable {
        // A step compressed at ingest has its checksum recorded already; any other is hashed
        // once, by whichever job gets to it first (Checksums::ChecksumOf).
        uint64_t sum =
            s_.checksums_.ChecksumOf(ix_, run_id, step, gen, *block, FileContentBytes(record));
        if (IsFramed(record)) record.set_stored_checksum(sum);  // the frame's, as hashed
        auto written = WriteSnapshot(*s_.disk_, space, run_id, name, record, codec, field,
                                     block->data(), s_.compress_.get(), s_.checksums_);
        block.reset();  // before FinishDemotion: the host memory is free once it says so
        FinishDemotion(run_id, step, gen, space, name, sum, std::move(written));
      },
      /*urgent=*/false);
}

void Tiering::FinishDemotion(uint64_t run_id, uint64_t step, uint64_t generation,
                             const DiskTier::Space& space, const std::string& name,
                             uint64_t checksum, Result<WrittenSnapshot> written) {
  StoreIndex& ix = ix_;
  Deferred deferred;
  {
    IndexLock lock(ix);
    const StoreIndex::CopyKey copy{run_id, step, generation};
    ix.AwaitRecords(copy);  // the record it changes is the newest (a checksum, say)
    Snapshot* snap = ix.FindSnapshot(copy);
    Status s = written.status();
    const bool record = snap && s.ok();
    if (record) {
      v1::SnapshotRecord updated = snap->record;
      updated.set_tier(v1::TIER_DISK);
      updated.set_spool(space.spool);
      updated.set_disk_name(name);
      updated.set_checksum(checksum);
      updated.set_checksum_state(v1::CHECKSUM_RECORDED);
      updated.set_stored_bytes(written->stored_bytes);
      updated.set_codec(written->codec);
      updated.set_codec_param(
          written->codec == v1::CODEC_NONE ? 0 : ix.runs.at(run_id).record.spec().codec_param());
      updated.set_stored_checksum(written->stored_checksum);
      // Record first, then the index; deleted meanwhile, the step is found gone below.
      s = ix.RecordAndWait(s_.record_, copy, updated);
      snap = ix.FindSnapshot(copy);
      const bool keep_copy =
          snap && ix.tiering.keep_host_copies && StoreState::ServableFromHost(*snap);
      if (s.ok() && snap) {
        Run& run = ix.runs.at(run_id);
        run.stored_bytes -= snap->record.stored_bytes();
        run.stored_bytes += updated.stored_bytes();
        run.SetRecord(*snap, std::move(updated));
        // The host memory is free now (the record points at the file), unless a stop keeps it.
        if (!keep_copy) snap->block.reset();
        ++ix.counters.demotions;
        for (auto& d : ix.tiering.drains) {
          ++d.result.moved;
          d.result.moved_bytes += snap->record.raw_bytes();
        }
      }
    }
    if (snap) snap->writing = false;
    if (written.ok() && (!snap || !s.ok())) {
      // Deleted or released while being written, or not recorded: the file must not stay.
      deferred.push_back([this, spool = space.spool, run_id, name, bytes = written->stored_bytes] {
        s_.disk_->Remove(spool, run_id, name, bytes);
      });
    }
    if (!s.ok()) {
      // The step stays in host memory. A failed spool left the rotation (the next demotion
      // goes to another, or waits for a probe); a full one stops demotions until room comes.
      // Either way the next try is not the same write again at once.
      failed_writes_.Write(log::Level::kWarn, "failed demotions",
                           "moving " + StepLabel(run_id, step) + " to disk failed: " + s.message());
      if (s.code() == Code::kResourceExhausted) ix.tiering.disk_full = true;
      for (auto& d : ix.tiering.drains) deferred.push_back([l = std::move(d.done), s] { l(s); });
      ix.tiering.drains.clear();
    }
    // Counted until recorded: a wait for idle tiering finds the step where its record says.
    --ix.tiering.writes_in_flight;
    if (record) ix.EndRecord(copy);  // last: what waited for the record builds on it
    s_.Wake();
  }
  for (auto& f : deferred) f();
}

bool Tiering::StartRead(StoreIndex& ix, Run& run, Snapshot& snap, bool urgent, bool compact) {
  const v1::SnapshotRecord& r = snap.record;
  // Its record is being written (a move names another file): the read waits for the index to
  // show the new one, and is tried again at the wake-up that follows (a parked read).
  if (ix.Recording({run.record.run_id(), r.step(), snap.generation})) return false;
  // The block's fresh pages, if it reaches any, are populated by the I/O job before it reads:
  // not here, on the data-plane loop (a demand read) or the tiering thread, with the mutex held.
  auto block = s_.AllocateHostDeferred(run, r.raw_bytes());
  if (!block.ok() && compact && CompactHost(ix, r.raw_bytes(), s_.ArenaOf(run))) {
    block = s_.AllocateHostDeferred(run, r.raw_bytes());
  }
  if (!block.ok()) return false;
  snap.reading = true;
  ++ix.tiering.reads_in_flight;
  std::shared_ptr<HostBlock> stored = StoreState::HoldsCompressed(snap) ? snap.block : nullptr;
  const bool shared = !stored && s_.disk_ && s_.disk_->has_shared() &&
                      s_.disk_->ClassOf(r.spool()) == SpoolClass::kShared;
  run.shared_reads += shared;
  // std::function copies what it holds: the fresh units, move-only, go in a shared_ptr.
  auto fresh = std::make_shared<FreshUnits>(std::move(block->fresh));
  s_.io_->Submit(
      [this, record = r, gen = snap.generation, field = FieldOf(run.record.spec()),
       block = std::move(block->block), fresh = std::move(fresh), stored = std::move(stored),
       shared, name = StepName(run.record, r.step())]() mutable {
        int64_t started = NowNs();
        // A population that fails answers the fetches that wait RESOURCE_EXHAUSTED; the step
        // stays where it is (FinishRead loses a step only on DATA_LOSS).
        Status s = s_.host_->PopulateUnits(*fresh);
        if (s.ok()) {
          s = stored ? DecodeSnapshot(record, field, stored->data(), block->data(),
                                      s_.compress_.get(), s_.checksums_)
                     : ReadSnapshot(*s_.disk_, record, field, block->data(), s_.compress_.get(),
                                    s_.checksums_, name);
        }
        stored.reset();
        FinishRead(record.run_id(), record.step(), gen, std::move(block), s, started, shared);
      },
      urgent);
  return true;
}

void Tiering::FinishRead(uint64_t run_id, uint64_t step, uint64_t generation,
                         std::shared_ptr<HostBlock> block, Status read, int64_t started_ns,
                         bool shared) {
  StoreIndex& ix = ix_;
  Deferred deferred;
  {
    IndexLock lock(ix);
    const StoreIndex::CopyKey copy{run_id, step, generation};
    Snapshot* snap = ix.FindSnapshot(copy);
    bool decoded = false;
    if (snap && read.ok() && StoreState::HoldsCompressed(*snap)) {
      // Decoded in host memory: the step is raw again there. Record first, then the index; the
      // step stays `reading` meanwhile, so fetches that come wait for this read's answer.
      ix.AwaitRecords(copy);
      snap = ix.FindSnapshot(copy);
      if (snap && StoreState::HoldsCompressed(*snap)) {
        v1::SnapshotRecord updated = snap->record;
        updated.set_codec(v1::CODEC_NONE);
        updated.set_codec_param(0);
        updated.set_stored_checksum(0);
        updated.set_stored_bytes(updated.raw_bytes());
        read = ix.RecordAndWait(s_.record_, copy, updated);
        decoded = true;
        snap = ix.FindSnapshot(copy);
        if (read.ok() && snap) {
          Run& run = ix.runs.at(run_id);
          run.stored_bytes += updated.raw_bytes() - snap->record.stored_bytes();
          run.SetRecord(*snap, std::move(updated));
        }
      }
    }
    if (snap) {
      snap->reading = false;
      Run& run = ix.runs.at(run_id);
      std::vector<FetchDone> waiters = std::move(snap->waiters);
      snap->waiters.clear();
      if (decoded) {
        // Recorded above.
      } else if (read.ok()) {
        const double took_ns = static_cast<double>(NowNs() - started_ns);
        ADJSNAP_LOG_DEBUG("step %llu of run %llu read from disk in %.2f ms (%zu fetches waited)",
                        (unsigned long long)step, (unsigned long long)run_id, took_ns / 1e6,
                        waiters.size());
        ++ix.counters.disk_reads;
        double per_byte =
            took_ns / static_cast<double>(std::max<uint64_t>(snap->record.raw_bytes(), 1));
        // Each class its own pace: the shared spools' reads are the slow ones to hide.
        double& pace = s_.disk_->ClassOf(snap->record.spool()) == SpoolClass::kShared
                           ? ix.tiering.shared_read_ns_per_byte
                           : ix.tiering.read_ns_per_byte;
        pace = pace > 0 ? 0.7 * pace + 0.3 * per_byte : per_byte;
      }
      snap->unreachable_at = 0;
      if (read.code() == Code::kUnavailable && s_.disk_) {
        snap->unreachable_at = s_.disk_->changes() + 1;
        snap->unreachable_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      }
      if (read.ok()) {
        snap->block = std::move(block);
        snap->verified = true;
        FetchGrant grant{s_.Lease(snap->block), snap->generation, ServedBytes(snap->record)};
        for (auto& w : waiters) deferred.push_back([w = std::move(w), grant] { w(grant); });
      } else {
        Status answer = read;
        if (read.code() == Code::kDataLoss) {
          answer = Status::DataLoss(StepName(run.record, step) + " is lost: " + read.message());
          LoseDiskStep(ix, run, *snap, read.message());
        }
        for (auto& w : waiters) deferred.push_back([w = std::move(w), answer] { w(answer); });
      }
    }
    // Counted until recorded (a decode's record), as a demotion is.
    --ix.tiering.reads_in_flight;
    if (auto run = ix.runs.find(run_id); shared && run != ix.runs.end()) --run->second.shared_reads;
    if (decoded) ix.EndRecord(copy);
    block.reset();  // unless it went to the snapshot
    s_.Wake();
  }
  for (auto& f : deferred) f();
}

void Tiering::SchedulePrefetch(StoreIndex& ix, Run& run) {
  if (!s_.disk_ || run.prefetch_from == 0) return;
  // How far ahead each class is read: its own measured read time (unmeasured yet: as far as
  // prefetch_depth allows). Shared steps are started first: theirs are the slow reads, and they
  // vary most (GlusterFS: 8 to 55 ms for the same 8 MiB), so they get one step more of margin.
  const double bytes = static_cast<double>(run.record.spec().bytes_per_step());
  for (SpoolClass cls : {SpoolClass::kShared, SpoolClass::kLocal}) {
    const bool shared = cls == SpoolClass::kShared;
    if (shared && !s_.disk_->has_shared()) continue;
    // A shared spool's read-ahead keeps kSharedReads reads in flight, nearest step first:
    // more at once through a network filesystem's client share its bandwidth and finish in
    // no useful order (on GlusterFS, three at once took 25-55 ms each, the nearest often last,
    // against 8-15 ms one by one), so the step the backward pass wants next waited behind
    // farther ones. One alone cannot keep up: each file's open and checksum add to the read.
    if (shared && run.shared_reads >= kSharedReads) continue;
    const double read_ns =
        (shared ? ix.tiering.shared_read_ns_per_byte : ix.tiering.read_ns_per_byte) * bytes;
    uint64_t depth =
        PrefetchDepth(run.pace_ns, read_ns, s_.options_.max_prefetch, /*margin=*/shared ? 2 : 1);
    uint64_t lowest = run.prefetch_from > depth ? run.prefetch_from - depth : 0;
    auto it = run.snapshots.lower_bound(run.prefetch_from);
    while (it != run.snapshots.begin()) {
      --it;
      if (it->first < lowest) break;
      Snapshot& snap = it->second;
      if (snap.record.tier() != v1::TIER_DISK || snap.block || snap.reading) continue;
      if (snap.unreachable_at == s_.disk_->changes() + 1 &&
          std::chrono::steady_clock::now() < snap.unreachable_until) {
        continue;  // its spool could not be reached a moment ago, and nothing changed since
      }
      if (s_.disk_->has_shared() && s_.disk_->ClassOf(snap.record.spool()) != cls) continue;
      if (!StartRead(ix, run, snap, /*urgent=*/false)) return;  // no host room; retried on a free
      if (shared && run.shared_reads >= kSharedReads) break;
    }
  }
}

}  // namespace adjsnap
