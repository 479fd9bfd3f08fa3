// The push and fetch path: each request checked against its run, then admitted to the tiers
// (Tiering::AdmitPush, AdmitFetch), committed, aborted, consumed; and prefetch.
#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "log.h"
#include "adjsnap/checksum.h"
#include "adjsnap/chunk_frame.h"
#include "adjsnap/layers.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

void Store::Attach(Run& run, const Tenant& who) {
  if (who.session_id != 0 && run.sessions.insert(who.session_id).second) {
    run.orphaned_at.reset();  // a client uses it again
  }
}

Status Store::StepNotFound(const Run& run, uint64_t step) {
  if (run.released.count(step)) {
    return Status::NotFound(StepName(run.record, step) +
                            " was read once and released (open the run with keep to read "
                            "steps more than once)");
  }
  return Status::NotFound(StepName(run.record, step) + " was never stored");
}

Status Store::CheckNewStep(const Run& run, uint64_t step, uint64_t bytes, const char* what,
                           const char* moves, bool frame_ok) {
  const v1::RunRecord& r = run.record;
  if (r.state() == v1::RUN_CLOSED) {
    return Status::FailedPrecondition("run '" + r.spec().name() +
                                      "' is closed: its forward pass is over, it takes no "
                                      "more pushes");
  }
  if (r.spec().steps() != 0 && step >= r.spec().steps()) {
    return Status::OutOfRange(StepName(r, step) + " is outside the declared steps 0.." +
                              std::to_string(r.spec().steps() - 1));
  }
  ADJSNAP_RETURN_IF_ERROR(CheckSize(run, step, bytes, what, moves, frame_ok));
  if (run.snapshots.count(step) || run.device.count(step)) {
    return Status::AlreadyExists(StepName(r, step) +
                                 " is already stored; each step is pushed once");
  }
  if (run.in_flight.count(step)) {
    return Status::AlreadyExists(StepName(r, step) + " is already being pushed");
  }
  return Status::Ok();
}

Status Store::CheckSize(const Run& run, uint64_t step, uint64_t bytes, const char* what,
                        const char* moves, bool frame_ok) {
  const v1::RunRecord& r = run.record;
  if (bytes == r.spec().bytes_per_step()) return Status::Ok();
  if (frame_ok && compress::IsGpuCodec(r.spec().codec()) && bytes > 0 &&
      bytes < r.spec().bytes_per_step()) {
    return Status::Ok();
  }
  return Status::InvalidArgument(std::string(what) + " of " + StepName(r, step) + " " + moves +
                                 " " +
                                 std::to_string(bytes) + " bytes but the run stores " +
                                 std::to_string(r.spec().bytes_per_step()) + " per step");
}

bool Store::BeginPush(uint64_t run_id, uint64_t step, uint64_t bytes, PushDone done,
                      const Tenant& who) {
  auto now = TryBeginPush(run_id, step, bytes, done, who);
  if (now.ok() && !now->has_value()) return true;  // parked: `done` was moved there
  done(now.ok() ? Result<PushTicket>(std::move(**now)) : Result<PushTicket>(now.status()));
  return false;
}

// A push refused for room after its request was found valid (`why` names the step): the run
// now lacks that step.
Status Store::Refused(Run& run, Status why) {
  NoteFailure(run, "push refused: " + why.message());
  return why;
}

Result<std::optional<Store::PushTicket>> Store::TryBeginPush(uint64_t run_id, uint64_t step,
                                                             uint64_t bytes, PushDone& later,
                                                             const Tenant& who) {
  IndexLock lock(ix_);
  if (closing_) {
    return Status::Unavailable("adjsnapd is stopping: push of step " + std::to_string(step) +
                               " of run id " + std::to_string(run_id) +
                               " refused; push it again once adjsnapd is back");
  }
  ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindById(run_id, who));
  Attach(*run, who);
  const v1::RunRecord& r = run->record;
  if (r.spec().layers() == v1::LAYERS_NO_LAYERS) {
    return Status::FailedPrecondition("run '" + r.spec().name() +
                                      "' has layers NoLayers: it stores no snapshots");
  }
  if (r.spec().layers() == v1::LAYERS_DEVICE) {
    return Status::FailedPrecondition("run '" + r.spec().name() +
                                      "' has layers Device: its steps stay in the GPU memory "
                                      "of the client that opened it; the daemon stores "
                                      "none");
  }
  Status fresh = CheckNewStep(*run, step, bytes, "push", "carries", /*frame_ok=*/true);
  if (auto old = run->snapshots.find(step); fresh.code() == Code::kAlreadyExists &&
                                            r.spec().overwrite() && old != run->snapshots.end() &&
                                            !run->in_flight.count(step)) {
    // Valid but for the stored copy, which it replaces: that copy goes now, as a
    // DeleteSnapshot would (a fetch of it in flight keeps its block until done), and its room
    // serves this push.
    Erase(*run, old);  // with no wait: the new record is queued behind the delete
    Wake();
    fresh = CheckNewStep(*run, step, bytes, "push", "carries", /*frame_ok=*/true);
  }
  ADJSNAP_RETURN_IF_ERROR(fresh);
  Checksums::NoteDataPlaneActivity(ix_);
  if (Usage u = UsageOf(r.owner_uid()); u.quota != 0 && !who.admin) {
    uint64_t held = u.stored_bytes + u.in_flight_bytes;
    if (held + bytes > u.quota) {
      return Refused(*run, Status::ResourceExhausted(
          StepName(r, step) + ": uid " + std::to_string(r.owner_uid()) +
          " would exceed its quota of " + FormatBytes(u.quota) + " (" + FormatBytes(held) +
          " stored or being pushed, this step " + FormatBytes(bytes) +
          "); delete runs it no longer needs, or ask for a larger quota"));
    }
  }
  if (options_.tenant_host_share < 1.0 && !who.admin && !UsesDisk(r.spec().layers())) {
    uint64_t share = static_cast<uint64_t>(options_.tenant_host_share * host_->budget());
    uint64_t pinned = PinnedHostBytesOf(r.owner_uid()) + run->in_flight.size() * BlockBytes(*run);
    if (pinned + BlockBytes(*run) > share) {
      return Refused(*run, Status::ResourceExhausted(
          StepName(r, step) + ": uid " + std::to_string(r.owner_uid()) + " holds " +
          FormatBytes(pinned) +
          " of the host tier in runs that cannot move to disk, and its "
          "share is " +
          FormatBytes(share) + " (tenant_host_share " +
          std::to_string(options_.tenant_host_share).substr(0, 4) +
          "); fetch or delete steps, or use layers with Disk"));
    }
  }
  return tiering_.AdmitPush(ix_, *run, step, bytes, later);
}

void Store::CommitPush(const PushTicket& t, std::function<void(Install)> recorded) {
  Status refused = [&]() -> Status {
    IndexLock lock(ix_);
    auto it = ix_.runs.find(t.run_id);
    if (it == ix_.runs.end()) {
      return Status::NotFound("run id " + std::to_string(t.run_id) +
                              " was deleted while step " + std::to_string(t.step) +
                              " was being pushed");
    }
    Run& run = it->second;
    auto reserved = run.in_flight.find(t.step);
    if (reserved == run.in_flight.end() || !reserved->second) {
      return Status::FailedPrecondition(StepName(run.record, t.step) +
                                        " has no reservation to commit");
    }
    Checksums::NoteDataPlaneActivity(ix_);
    const v1::RunSpec& spec = run.record.spec();
    uint64_t raw = spec.bytes_per_step();
    v1::SnapshotRecord rec;
    rec.set_run_id(t.run_id);
    rec.set_step(t.step);
    rec.set_tier(v1::TIER_HOST);
    rec.set_raw_bytes(raw);
    rec.set_stored_bytes(raw);
    if (t.bytes != raw) {  // a chunk frame (CheckSize): its header and table must hold
      auto frame =
          compress::ReadFrame(t.block->data(), t.bytes, static_cast<uint16_t>(spec.codec()), raw);
      if (!frame.ok()) {
        return Status::InvalidArgument(
            "push of " + StepName(run.record, t.step) + " carries " + std::to_string(t.bytes) +
            " bytes, fewer than a raw step's " + std::to_string(raw) +
            ", and they are not a chunk frame of codec " + compress::CodecName(CodecOf(spec)) +
            ": " + frame.status().message());
      }
      rec.set_stored_bytes(t.bytes);
      rec.set_codec(spec.codec());
      rec.set_codec_param(spec.codec_param());
    }
    if (t.checksum) {  // computed by the copy that wrote the block (PushTicket)
      Checksums::SetRecorded(rec, *t.checksum);
    } else {
      rec.set_checksum_state(v1::CHECKSUM_PENDING);
    }
    rec.set_daemon_epoch(options_.epoch);
    // Queued under the lock, so the catalog applies it in the store's order: before a delete
    // of this run, which can come while it is written. The step stays reserved until then.
    catalog_->PutSnapshotThen(rec, [this, t, rec, recorded](Status written) {
      recorded([this, t, rec, written] { return InstallCommitted(t, rec, written); });
    });
    return Status::Ok();
  }();
  if (!refused.ok()) {
    AbortPush(t);
    recorded([refused] { return refused; });
  }
}

Status Store::CommitPush(const PushTicket& t) {
  std::promise<Install> second_half;
  CommitPush(t, [&second_half](Install install) { second_half.set_value(std::move(install)); });
  return second_half.get_future().get()();
}

Status Store::InstallCommitted(const PushTicket& t, v1::SnapshotRecord rec, Status recorded) {
  IndexLock lock(ix_);
  auto it = ix_.runs.find(t.run_id);
  if (it == ix_.runs.end()) {  // its delete, queued after the record, removed that too
    return Status::NotFound("run id " + std::to_string(t.run_id) + " was deleted while step " +
                            std::to_string(t.step) + " was being committed");
  }
  Run& run = it->second;
  auto reserved = run.in_flight.find(t.step);
  if (reserved == run.in_flight.end() || !reserved->second) {
    return Status::FailedPrecondition(StepName(run.record, t.step) +
                                      " lost its reservation while its record was written");
  }
  std::shared_ptr<HostBlock> block = std::move(reserved->second);
  run.in_flight.erase(reserved);
  if (!recorded.ok()) return recorded;  // the push is abandoned: its block goes with it
  uint64_t stored = rec.stored_bytes();
  // A frame's tail comes free. Nobody else reads the block now: the push's copy is done, and
  // the data plane's lease (`t`) only waits for this install, on this thread.
  if (IsFramed(rec)) block->ShrinkTo(stored);
  Snapshot& snap = run.snapshots[t.step];
  run.SetRecord(snap, std::move(rec));
  snap.block = std::move(block);
  snap.generation = next_generation_++;
  run.released.erase(t.step);
  run.stored_bytes += stored;
  if (CompressesAtIngest(run.record.spec())) {
    ingest_.Start(ix_, run, snap);  // asks for the checksum itself, before compressing
  } else if (snap.record.checksum_state() == v1::CHECKSUM_PENDING) {
    checksums_.Queue(ix_, t.run_id, snap, stored);  // a frame's checksum covers the frame
  }
  if (tiering_.DemotionWanted(ix_, run, snap)) Wake();
  return Status::Ok();
}

void Store::AbortPush(const PushTicket& t) {
  IndexLock lock(ix_);
  if (auto it = ix_.runs.find(t.run_id); it != ix_.runs.end()) it->second.in_flight.erase(t.step);
}

bool Store::BeginFetch(uint64_t run_id, uint64_t step, uint64_t bytes, bool backward,
                       FetchDone done, const Tenant& who) {
  auto now = TryBeginFetch(run_id, step, bytes, backward, done, who);
  if (now.ok() && !now->has_value()) return true;  // waits for a disk read: `done` is there
  done(now.ok() ? Result<FetchGrant>(std::move(**now)) : Result<FetchGrant>(now.status()));
  return false;
}

Result<std::optional<Store::FetchGrant>> Store::TryBeginFetch(uint64_t run_id, uint64_t step,
                                                              uint64_t bytes, bool backward,
                                                              FetchDone& later,
                                                              const Tenant& who) {
  IndexLock lock(ix_);
  ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindById(run_id, who));
  Attach(*run, who);
  const v1::RunRecord& r = run->record;
  ADJSNAP_RETURN_IF_ERROR(CheckSize(*run, step, bytes, "fetch", "into a buffer of"));
  Checksums::NoteDataPlaneActivity(ix_);
  if (auto d = run->device.find(step); d != run->device.end()) {
    return DeviceStepHere(*run, step, d->second);
  }
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) return StepNotFound(*run, step);
  Snapshot& snap = it->second;
  if (snap.record.tier() == v1::TIER_LOST) {
    return Status::DataLoss(StepName(r, step) +
                            " was lost: it was in host memory when adjsnapd restarted, or its "
                            "disk copy failed verification");
  }
  return tiering_.AdmitFetch(ix_, *run, snap, backward, later);
}

void Store::Consumed(uint64_t run_id, uint64_t step, uint64_t generation) {
  IndexLock lock(ix_);
  auto run = ix_.runs.find(run_id);
  if (run == ix_.runs.end() || run->second.record.spec().keep()) return;
  auto it = run->second.snapshots.find(step);
  if (it == run->second.snapshots.end() || it->second.generation != generation) return;
  Erase(run->second, it);
  run->second.released.insert(step);
  ++ix_.counters.released;
  Wake();
}

Result<uint64_t> Store::Prefetch(const std::string& name, const std::vector<uint64_t>& steps,
                                 const Tenant& who) {
  IndexLock lock(ix_);
  ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
  return tiering_.PrefetchSteps(ix_, *run, steps);
}

}  // namespace adjsnap
