// What the store reports: a run's and a step's info (adjsnap ls, Locate), the requests that
// wait and for what, and the counters behind Stats.
#include "store/store.h"

#include <algorithm>

namespace adjsnap {

v1::RunInfo Store::Info(const Run& run) const {
  v1::RunInfo info;
  info.set_run_id(run.record.run_id());
  *info.mutable_spec() = run.record.spec();
  info.set_state(run.record.state());
  info.set_snapshots(run.snapshots.size() + run.device.size());
  info.set_stored_bytes(run.stored_bytes);
  info.set_owner_uid(run.record.owner_uid());
  info.set_created_unix_ms(run.record.created_unix_ms());
  info.set_host_boundary(run.record.host_boundary());
  uint64_t steps = run.record.spec().steps();
  info.set_device_boundary(steps - std::min(steps, run.record.device_steps()));
  uint64_t lost = 0, compressed = 0;
  for (const auto& [step, snap] : run.snapshots) {
    const bool gone = snap.record.tier() == v1::TIER_LOST;
    lost += gone;
    compressed += !gone && snap.record.codec() != v1::CODEC_NONE;
  }
  for (const auto& [step, held] : run.device) lost += held.lost;
  info.set_lost_snapshots(lost);
  info.set_compressed_snapshots(compressed);
  info.set_failure(run.failure);
  Tiering::WaitCounts waits = tiering_.WaitsOf(ix_, run);
  info.set_waiting_pushes(waits.pushes);
  info.set_waiting_fetches(waits.fetches);
  info.set_oldest_wait_seconds(waits.oldest_seconds);
  return info;
}

Store::Waits Store::Waiting(const Tenant& who, size_t limit) {
  IndexLock lock(ix_);
  Waits out;
  for (Tiering::WaitingRequest& w : tiering_.Waiting(ix_)) {
    (w.wait.kind() == "push" ? out.pushes : out.fetches)++;
    out.oldest_seconds = std::max(out.oldest_seconds, w.wait.seconds());
    if (out.waits.size() < limit && (who.admin || w.owner_uid == who.uid)) {
      out.waits.push_back(std::move(w.wait));
    }
  }
  return out;
}

v1::SnapshotInfo Store::Info(const Run& run, uint64_t step, const DeviceStep& held) {
  v1::SnapshotInfo info;
  info.set_step(step);
  info.set_tier(held.lost ? v1::TIER_LOST : v1::TIER_DEVICE);
  info.set_raw_bytes(run.record.spec().bytes_per_step());
  info.set_stored_bytes(run.record.spec().bytes_per_step());
  info.set_device_session(held.session_id);
  return info;
}

v1::SnapshotInfo Store::Info(const Snapshot& snap) {
  const v1::SnapshotRecord& rec = snap.record;
  v1::SnapshotInfo info;
  info.set_step(rec.step());
  info.set_tier(rec.tier() == v1::TIER_DISK && snap.block ? v1::TIER_HOST : rec.tier());
  info.set_on_disk(rec.tier() == v1::TIER_DISK);
  info.set_raw_bytes(rec.raw_bytes());
  info.set_stored_bytes(rec.stored_bytes());
  info.set_checksum(rec.checksum());
  info.set_checksum_state(rec.checksum_state());
  info.set_codec(rec.codec());
  return info;
}

Result<std::vector<v1::SnapshotInfo>> Store::ListSnapshots(const std::string& name,
                                                           v1::RunInfo* info,
                                                           const Tenant& who) const {
  IndexLock lock(ix_);
  ADJSNAP_ASSIGN_OR_RETURN(const Run* run, FindByName(name, who));
  *info = Info(*run);
  std::vector<v1::SnapshotInfo> out;
  out.reserve(run->snapshots.size() + run->device.size());
  for (const auto& [step, snap] : run->snapshots) out.push_back(Info(snap));
  for (const auto& [step, held] : run->device) out.push_back(Info(*run, step, held));
  std::sort(out.begin(), out.end(), [](const v1::SnapshotInfo& a, const v1::SnapshotInfo& b) {
    return a.step() < b.step();
  });
  return out;
}

Result<v1::SnapshotInfo> Store::Locate(const std::string& name, uint64_t step,
                                       const Tenant& who) const {
  IndexLock lock(ix_);
  ADJSNAP_ASSIGN_OR_RETURN(const Run* run, FindByName(name, who));
  if (auto d = run->device.find(step); d != run->device.end()) return Info(*run, step, d->second);
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) {
    // Pushed, not stored yet: the solver may already have its buffer back (released).
    if (run->in_flight.count(step)) {
      v1::SnapshotInfo info;
      info.set_step(step);
      info.set_tier(v1::TIER_IN_FLIGHT);
      info.set_raw_bytes(run->record.spec().bytes_per_step());
      return info;
    }
    return StepNotFound(*run, step);
  }
  return Info(it->second);
}

StoreCounters Store::Counters() const {
  IndexLock lock(ix_);
  StoreCounters c = ix_.counters;
  c.runs = ix_.runs.size();
  tiering_.AddTieringCounters(ix_, c);
  for (const auto& [id, run] : ix_.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.block) ++c.host_snapshots;
      if (snap.record.tier() == v1::TIER_DISK) {
        ++c.disk_snapshots;
        c.disk_raw_bytes += snap.record.raw_bytes();
        if (disk_ && disk_->ClassOf(snap.record.spool()) == SpoolClass::kShared) {
          ++c.shared_disk_snapshots;
          c.shared_disk_raw_bytes += snap.record.raw_bytes();
        }
      }
      if (snap.record.tier() == v1::TIER_LOST) ++c.lost_snapshots;
    }
  }
  return c;
}

}  // namespace adjsnap
