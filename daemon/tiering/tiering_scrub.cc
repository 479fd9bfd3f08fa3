// Re-verifying disk-tier files: the background scrub at scrub_rate, a scrub of one step (also
// on demand and after recovery), and a step found lost on disk.
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

}  // namespace snapd
