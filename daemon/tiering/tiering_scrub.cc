// Re-verifying disk-tier files: the background scrub at scrub_rate, a scrub of one step (also
// on demand and after recovery), and a step found lost on disk.
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

void Tiering::ScrubNext(StoreIndex& ix) {
  auto now = std::chrono::steady_clock::now();
  if (ix.tiering.scrubbing) return;  // its completion wakes the thread
  if (now < ix.tiering.next_scrub) {
    WakeBy(ix, ix.tiering.next_scrub);
    return;
  }
  // The next disk-tier step after the cursor, in (run id, step) order, wrapping once.
  auto next_after = [&](const Key& from) ADJSNAP_REQUIRES_INDEX(ix) -> std::pair<Run*, Snapshot*> {
    for (auto r = ix.runs.lower_bound(from.first); r != ix.runs.end(); ++r) {
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
  auto [run, snap] = next_after(ix.tiering.scrub_cursor);
  if (!snap) std::tie(run, snap) = next_after({0, 0});
  if (!snap) return;  // nothing on disk; a demotion wakes the thread
  ix.tiering.scrub_cursor = {run->record.run_id(), snap->record.step()};
  ix.tiering.scrubbing = true;
  uint64_t bytes = FileContentBytes(snap->record);
  ix.tiering.next_scrub = now + std::chrono::nanoseconds(static_cast<int64_t>(
                                    1e9 * static_cast<double>(bytes) /
                                    static_cast<double>(s_.options_.scrub_bytes_per_second)));
  StartScrub(ix, run->record.run_id(), snap->record.step(), [this](Status) {
    StoreIndex& ix = ix_;  // later, on an I/O thread
    IndexLock lock(ix);
    ix.tiering.scrubbing = false;
    s_.Wake();
  });
}

void Tiering::StartScrub(StoreIndex& ix, uint64_t run_id, uint64_t step,
                         std::function<void(Status)> done) {
  const Snapshot& snap = ix.runs.at(run_id).snapshots.at(step);
  if (snap.record.checksum_state() != v1::CHECKSUM_RECORDED) {
    if (done) {
      s_.io_->Submit([done] { done(Status::FailedPrecondition("no checksum recorded")); },
                     /*urgent=*/false);
    }
    return;
  }
  // Outside the host tier (VerifySnapshot has its own buffers): scrubbing must not take room
  // from solvers.
  s_.io_->Submit(
      [this, record = snap.record, gen = snap.generation,
       field = FieldOf(ix.runs.at(run_id).record.spec()),
       name = StepName(ix.runs.at(run_id).record, snap.record.step()), done = std::move(done)] {
        StoreIndex& ix = ix_;  // later, on an I/O thread
        Status s =
            VerifySnapshot(*s_.disk_, record, field, s_.compress_.get(), s_.checksums_, name);
        {
          IndexLock lock(ix);
          ++ix.tiering.scrubbed;
          Snapshot* current = ix.FindSnapshot(record.run_id(), record.step(), gen);
          if (current && current->record.tier() == v1::TIER_DISK &&
              current->record.spool() == record.spool()) {
            if (s.ok()) {
              current->verified = true;
            } else if (s.code() == Code::kDataLoss) {
              LoseDiskStep(ix, ix.runs.at(record.run_id()), *current,
                           "found by a scrub of its spool file: " + s.message());
            } else if (s.code() != Code::kUnavailable) {  // its spool's failure said it once
              ADJSNAP_LOG_WARN("verifying %s: %s", StepLabel(record.run_id(), record.step()).c_str(),
                             s.message().c_str());
            }
          } else {
            // Deleted, consumed, rewritten or moved to another spool while it was being
            // verified (its file may be gone with it): nothing was lost, whatever the read found.
            s = Status::NotFound(StepLabel(record.run_id(), record.step()) +
                                 " went or moved while it was being verified");
          }
        }
        if (done) done(s);
      },
      /*urgent=*/false);
}

void Tiering::LoseDiskStep(StoreIndex& ix, Run& run, Snapshot& snap, const std::string& why) {
  const v1::SnapshotRecord r = snap.record;
  if (r.tier() != v1::TIER_DISK) return;  // lost already: said once
  s_.MarkLost(ix, run, snap,
              why + "; its file goes to " +
                  s_.disk_->spool_dirs()[std::min<size_t>(r.spool(), s_.disk_->spools() - 1)] +
                  "/quarantine/");
  DiskRoomFreed(ix);
  s_.io_->Submit(
      [this, r] {
        auto moved =
            s_.disk_->Quarantine(r.spool(), r.run_id(), r.disk_name(), FileContentBytes(r));
        if (!moved.ok() && moved.status().code() != Code::kNotFound) {
          ADJSNAP_LOG_WARN("quarantining the file of lost %s: %s",
                         StepLabel(r.run_id(), r.step()).c_str(), moved.status().message().c_str());
        }
      },
      /*urgent=*/false);
}

}  // namespace adjsnap
