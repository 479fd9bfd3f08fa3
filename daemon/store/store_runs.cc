// Runs: lookup by name and id within what the caller may see (tenancy), quotas, open, delete
// and the run listing, device steps. Closing a run, its record's later changes, its sessions
// and orphans are in store_run_life.cc; what the store reports of a run or a step is in
// store_views.cc.
#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "log.h"
#include "adjsnap/checksum.h"
#include "adjsnap/layers.h"
#include "adjsnap/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace adjsnap {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Names the first field in which two specs differ, or "" when equal.
std::string SpecDifference(const v1::RunSpec& a, const v1::RunSpec& b) {
  if (a.steps() != b.steps()) {
    return "steps (" + std::to_string(a.steps()) + " vs " + std::to_string(b.steps()) + ")";
  }
  if (a.bytes_per_step() != b.bytes_per_step()) {
    return "bytes_per_step (" + std::to_string(a.bytes_per_step()) + " vs " +
           std::to_string(b.bytes_per_step()) + ")";
  }
  if (a.dtype() != b.dtype()) {
    return "dtype (" + v1::Dtype_Name(a.dtype()) + " vs " + v1::Dtype_Name(b.dtype()) + ")";
  }
  if (a.shape_size() != b.shape_size() ||
      !std::equal(a.shape().begin(), a.shape().end(), b.shape().begin())) {
    return "shape";
  }
  // `b` is the request: default layers attach to whatever the run resolved them to.
  if (b.layers() != v1::LAYERS_DEFAULT && a.layers() != b.layers()) {
    return std::string("layers (") + LayersName(a.layers()) + " vs " + LayersName(b.layers()) +
           ")";
  }
  if (a.keep() != b.keep()) return "keep";
  if (a.codec() != b.codec() || a.codec_param() != b.codec_param() ||
      a.compress_when() != b.compress_when()) {
    return "codec";
  }
  if (a.block_when_full() != b.block_when_full()) return "block_when_full";
  if (a.overwrite() != b.overwrite()) return "overwrite";
  if (a.spool_class() != b.spool_class()) return "spool_class";
  return "";
}

}  // namespace

static Status RunNotFound(const std::string& name) {
  return Status::NotFound("run '" + name + "' does not exist (list runs with `adjsnap runs`)");
}

static bool Sees(const Tenant& who, const v1::RunRecord& r) {
  return who.admin || r.owner_uid() == who.uid;
}

// `name` is the caller's own run's name, or (for an admin, or a tenant naming its own uid)
// "UID:name". An admin's plain name that the admin does not own means the one run of that
// name on the node; several are ambiguous and must be named as UID:name.
Result<const Store::Run*> Store::FindByName(const std::string& name, const Tenant& who) const {
  size_t colon = name.find(':');
  if (colon != std::string::npos) {
    const std::string uid_text = name.substr(0, colon);
    char* end = nullptr;
    unsigned long uid = std::strtoul(uid_text.c_str(), &end, 10);
    if (uid_text.empty() || *end != '\0' || uid > UINT32_MAX) return RunNotFound(name);
    auto it = by_name_.find({static_cast<uint32_t>(uid), name.substr(colon + 1)});
    if (it == by_name_.end() || !Sees(who, ix_.runs.at(it->second).record)) return RunNotFound(name);
    return &ix_.runs.at(it->second);
  }
  if (auto it = by_name_.find({who.uid, name}); it != by_name_.end()) return &ix_.runs.at(it->second);
  if (!who.admin) return RunNotFound(name);
  const Run* found = nullptr;
  std::string owners;
  for (const auto& [key, id] : by_name_) {
    if (key.second != name) continue;
    owners += (owners.empty() ? "" : ", ") + std::to_string(key.first);
    found = found ? nullptr : &ix_.runs.at(id);
    if (!found) {
      return Status::InvalidArgument("several users have a run named '" + name + "' (uids " +
                                     owners + ", ...); name one as UID:" + name);
    }
  }
  if (!found) return RunNotFound(name);
  return found;
}

Result<Store::Run*> Store::FindByName(const std::string& name, const Tenant& who) {
  ADJSNAP_ASSIGN_OR_RETURN(const Run* run, static_cast<const Store*>(this)->FindByName(name, who));
  return const_cast<Run*>(run);  // *this is not const: neither is the run
}

Result<Store::Run*> Store::FindById(uint64_t run_id, const Tenant& who) {
  auto it = ix_.runs.find(run_id);
  if (it == ix_.runs.end() || !Sees(who, it->second.record)) {
    return Status::NotFound("run id " + std::to_string(run_id) +
                            " does not exist (deleted, or never opened on this daemon)");
  }
  return &it->second;
}

uint64_t Store::QuotaOf(uint32_t uid) const {
  auto it = quotas_.find(uid);
  return it != quotas_.end() ? it->second : options_.tenant_quota;
}

void Store::SetQuota(uint32_t uid, uint64_t bytes) {
  IndexLock lock(ix_);
  quotas_[uid] = bytes;
}

Store::Usage Store::UsageOf(uint32_t uid) const {
  Usage u;
  u.quota = QuotaOf(uid);
  for (const auto& [id, run] : ix_.runs) {
    if (run.record.owner_uid() != uid) continue;
    u.stored_bytes += run.stored_bytes;
    u.in_flight_bytes += run.in_flight.size() * run.record.spec().bytes_per_step();
    ++u.runs;
  }
  return u;
}

Store::Usage Store::TenantUsage(uint32_t uid) const {
  IndexLock lock(ix_);
  return UsageOf(uid);
}

Result<uint64_t> Store::RunId(const std::string& name, const Tenant& who) const {
  IndexLock lock(ix_);
  ADJSNAP_ASSIGN_OR_RETURN(const Run* run, FindByName(name, who));
  return run->record.run_id();
}

Status Store::DeviceStepHere(const Run& run, uint64_t step, const DeviceStep& held) {
  std::string where = StepName(run.record, step) + " was kept in the GPU memory of session " +
                      std::to_string(held.session_id);
  if (held.lost) return Status::DataLoss(where + ", which ended: the bytes ended with it");
  return Status::FailedPrecondition(where + "; that client serves it (libadjsnap reads its own "
                                    "device steps), the daemon never had its bytes");
}

Status Store::CheckFitsTheNode(const v1::RunSpec& spec, uint64_t device_steps) const {
  if (spec.steps() == 0 || spec.codec() != v1::CODEC_NONE || spec.block_when_full()) {
    return Status::Ok();
  }
  uint64_t steps = spec.steps() - device_steps;  // device steps stay in the client's GPU pool
  unsigned __int128 need = static_cast<unsigned __int128>(steps) * spec.bytes_per_step();
  uint64_t host = UsesHost(spec.layers()) ? host_->budget() : 0;
  uint64_t disk = UsesDisk(spec.layers()) && disk_ ? disk_->budget() : 0;
  if (need <= static_cast<unsigned __int128>(host) + disk) return Status::Ok();
  std::string tiers = host && disk ? "the host tier (" + FormatBytes(host) +
                                         ") and the disk tier (" + FormatBytes(disk) + ") together"
                      : host ? "the host tier (" + FormatBytes(host) + ")"
                             : "the disk tier (" + FormatBytes(disk) + ")";
  return Status::ResourceExhausted(
      "run '" + spec.name() + "': " + std::to_string(steps) + " steps of " +
      FormatBytes(spec.bytes_per_step()) + " (" + FormatBytes(static_cast<uint64_t>(need)) +
      ") are more than " + tiers +
      " of this node can hold; declare fewer steps, compress "
      "(codec), set block_when_full to wait for room, or raise the budgets");
}

uint64_t Store::HostRoomForNewRun() const {
  uint64_t claimed = 0;
  for (const auto& [id, run] : ix_.runs) {
    uint64_t held = 0;
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.block) held += snap.block->size();
    }
    uint64_t planned = 0;  // the rest of an open declared run's resident range [j, k)
    const v1::RunSpec& spec = run.record.spec();
    if (run.record.state() == v1::RUN_OPEN && spec.steps() != 0 && UsesHost(spec.layers())) {
      uint64_t k = spec.steps() - std::min(spec.steps(), run.record.device_steps());
      uint64_t j = std::min(k, run.record.host_boundary());
      planned = (k - j) * BlockBytes(run);
    }
    claimed += std::max(held, planned);
  }
  return claimed >= host_->budget() ? 0 : host_->budget() - claimed;
}

uint64_t Store::PinnedHostBytesOf(uint32_t uid) const {
  uint64_t pinned = 0;
  for (const auto& [id, run] : ix_.runs) {
    if (run.record.owner_uid() != uid || UsesDisk(run.record.spec().layers())) continue;
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.block) pinned += snap.block->size();
    }
  }
  return pinned;
}

Result<v1::RunInfo> Store::OpenRun(const v1::RunSpec& requested, uint32_t owner_uid, bool* created,
                                   uint64_t device_steps, uint64_t session_id) {
  ADJSNAP_RETURN_IF_ERROR(ValidateRunSpec(requested));
  v1::RunSpec spec = requested;
  const std::string& name = spec.name();
  if (spec.layers() == v1::LAYERS_DEFAULT) {
    spec.set_layers(disk_ ? v1::LAYERS_DISK_HOST : v1::LAYERS_HOST);
  }
  if (device_steps != 0 && !UsesDevice(spec.layers())) {
    return Status::InvalidArgument("run '" + name + "': device_steps " +
                                   std::to_string(device_steps) + " with layers " +
                                   LayersName(spec.layers()) + ", which have no device tier");
  }
  if (spec.steps() != 0 && device_steps > spec.steps()) {
    return Status::InvalidArgument("run '" + name + "': device_steps " +
                                   std::to_string(device_steps) + " exceeds the run's " +
                                   std::to_string(spec.steps()) + " steps");
  }
  if (UsesDisk(spec.layers()) && !disk_) {
    return Status::FailedPrecondition(
        "run '" + name + "': layers " + LayersName(spec.layers()) +
        " need a disk tier, and this adjsnapd runs without one (spool_dirs = none); use Host, or "
        "start adjsnapd with spool_dirs");
  }
  ADJSNAP_RETURN_IF_ERROR(CheckSpoolClass(spec, disk_));
  if (compress::IsGpuCodec(spec.codec())) {
    // libadjsnap compresses where the solver is and pushes chunk frames, which adjsnapd stores,
    // moves and serves as they are (docs/architecture.md, "Compression on the GPU").
    if (spec.compress_when() == v1::COMPRESS_AT_INGEST) {
      return Status::InvalidArgument("run '" + name + "': codec " +
                                     compress::CodecName(CodecOf(spec)) +
                                     " compresses in the solver's process, before the push; "
                                     "compress_when at_ingest is for the zfp codecs");
    }
    Status usable = compress::CheckGpuCodec(CodecOf(spec), FieldOf(spec));
    if (!usable.ok()) return Status::InvalidArgument("run '" + name + "': " + usable.message());
  } else if (spec.codec() != v1::CODEC_NONE) {
    if (spec.compress_when() == v1::COMPRESS_ON_DEMOTION && !UsesDisk(spec.layers())) {
      return Status::InvalidArgument("run '" + name + "': codec " +
                                     compress::CodecName(CodecOf(spec)) +
                                     " applies when steps move to the disk tier, and layers " +
                                     LayersName(spec.layers()) +
                                     " never do (compress at ingest instead)");
    }
    Status usable = compress::Validate(CodecOf(spec), FieldOf(spec));
    if (!usable.ok()) return Status::InvalidArgument("run '" + name + "': " + usable.message());
  }
  if (spec.bytes_per_step() > host_->budget()) {
    return Status::ResourceExhausted(
        "run '" + name + "': one step of " + FormatBytes(spec.bytes_per_step()) +
        " exceeds the whole host tier (" + FormatBytes(host_->budget()) +
        "); raise host_mem or split the snapshot");
  }
  ADJSNAP_RETURN_IF_ERROR(CheckFitsTheNode(spec, device_steps));
  IndexLock lock(ix_);
  auto existing = [&]() ADJSNAP_REQUIRES_INDEX(ix_) -> std::optional<Result<v1::RunInfo>> {
    auto it = by_name_.find({owner_uid, name});
    if (it == by_name_.end()) return std::nullopt;
    Run& run = ix_.runs.at(it->second);
    std::string diff = SpecDifference(run.record.spec(), requested);
    if (!diff.empty()) {
      return Status::AlreadyExists("run '" + name + "' exists with a different " + diff +
                                   "; pick another name or delete it (`adjsnap rm " + name +
                                   "`)");
    }
    *created = false;
    if (session_id != 0) {
      run.sessions.insert(session_id);
      run.orphaned_at.reset();  // a client attached again
    }
    return Info(run);
  };
  if (auto found = existing()) return *found;
  // A new run's id and record are written with the index's mutex released (no catalog wait is
  // made under it), one run at a time: a second OpenRun of the name waits here, then finds it.
  lock.Unlock();
  MutexLock creating(create_mu_);
  lock.Lock();
  if (auto found = existing()) return *found;
  Run run;
  *run.record.mutable_spec() = spec;
  run.record.set_state(v1::RUN_OPEN);
  run.record.set_owner_uid(owner_uid);
  run.record.set_created_unix_ms(NowMs());
  run.record.set_device_steps(device_steps);
  if (!CompressesAtIngest(spec)) {  // otherwise sizes are known only once compressed
    // The device keeps [N - device_steps, N); host and disk share what is below.
    run.record.set_host_boundary(HostBoundary(spec.layers(), spec.steps() - device_steps,
                                              BlockBytes(run), HostRoomForNewRun()));
  }
  lock.Unlock();
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t id, catalog_->AllocateRunId());
  run.record.set_run_id(id);
  ADJSNAP_RETURN_IF_ERROR(catalog_->PutRun(run.record));
  lock.Lock();
  by_name_[{owner_uid, name}] = id;
  *created = true;
  if (session_id != 0) run.sessions.insert(session_id);
  return Info(ix_.runs[id] = std::move(run));
}

// Frees what a snapshot holds once it is gone from the index: its disk file (on an I/O thread)
// and its waiting fetches (answered with `why`).
static void ReleaseSnapshotResources(DiskTier* disk, IoPool* io, uint64_t run_id,
                                     const v1::SnapshotRecord& rec,
                                     std::vector<Store::FetchDone> waiters, const Status& why,
                                     std::vector<std::function<void()>>& deferred) {
  if (rec.tier() == v1::TIER_DISK && disk) {
    io->Submit([disk, run_id, spool = rec.spool(), name = rec.disk_name(),
                bytes = FileContentBytes(rec)] { disk->Remove(spool, run_id, name, bytes); },
               /*urgent=*/false);
  }
  for (auto& w : waiters) deferred.push_back([w = std::move(w), why] { w(why); });
}

void Store::Erase(Run& run, std::map<uint64_t, Snapshot>::iterator it, Catalog::Done deleted) {
  uint64_t id = run.record.run_id();
  // The file goes once its record has: a crash in between leaves no record naming a file
  // that is gone (which the next start would report lost).
  catalog_->DeleteSnapshotThen(id, it->first,
                               [disk = disk_, io = io_.get(), id, rec = it->second.record,
                                deleted = std::move(deleted)](Status s) {
                                 if (s.ok()) {
                                   Deferred none;
                                   ReleaseSnapshotResources(disk, io, id, rec, {}, Status::Ok(),
                                                            none);
                                 } else {
                                   ADJSNAP_LOG_ERROR(
                                       "deleting step %llu of run %llu: %s; its record%s stay%s "
                                       "until the next start finds the step again",
                                       static_cast<unsigned long long>(rec.step()),
                                       static_cast<unsigned long long>(id), s.ToString().c_str(),
                                       rec.tier() == v1::TIER_DISK ? " and file" : "",
                                       rec.tier() == v1::TIER_DISK ? "" : "s");
                                 }
                                 if (deleted) deleted(std::move(s));
                               });
  // The step leaves the index now; its file waits for the delete above.
  Deferred deferred;
  ReleaseSnapshotResources(
      /*disk=*/nullptr, io_.get(), id, it->second.record, std::move(it->second.waiters),
      Status::NotFound(StepName(run.record, it->first) + " was deleted while being read"),
      deferred);
  if (it->second.record.tier() == v1::TIER_DISK) tiering_.DiskRoomFreed(ix_);
  run.stored_bytes -= it->second.record.stored_bytes();
  run.EraseSnapshot(it);  // an in-flight fetch keeps the block until it completes
  // Waiters of a deleted snapshot are answered from an I/O thread, never under ix_.mu.
  if (!deferred.empty()) {
    io_->Submit([d = std::move(deferred)] { for (auto& f : d) f(); }, /*urgent=*/true);
  }
}

Result<uint64_t> Store::DeleteRun(const std::string& name, const Tenant& who) {
  auto written = std::make_shared<std::promise<Status>>();
  std::future<Status> deleted = written->get_future();
  std::string named;
  uint64_t id = 0, freed = 0;
  uint32_t owner = 0;
  {
    IndexLock lock(ix_);
    ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
    named = run->record.spec().name();
    id = run->record.run_id();
    owner = run->record.owner_uid();
    freed = DeleteRunLocked(run, [written](Status s) { written->set_value(std::move(s)); });
  }
  // The answer waits for the catalog, the index does not: no lock is held across RocksDB.
  if (Status s = deleted.get(); !s.ok()) {
    return Status(s.code(), "run '" + named + "' is gone from adjsnapd, but its catalog record "
                            "could not be deleted (" + s.message() +
                            "); the next start finds it again");
  }
  // Who removed a run, and when, is what an operator asks of a run that went missing.
  ADJSNAP_LOG_INFO("run '%s' (run id %llu, uid %u) deleted by uid %u, %s freed", named.c_str(),
                   static_cast<unsigned long long>(id), owner, who.uid, FormatBytes(freed).c_str());
  return freed;
}

uint64_t Store::DeleteRunLocked(Run* run, Catalog::Done deleted) {
  const std::string name = run->record.spec().name();
  uint64_t id = run->record.run_id();
  uint64_t freed = run->stored_bytes;
  // Its files go once its records have (as Erase's), then its directories: a close on a
  // network mount may wait, so on an I/O thread, after the removals queued before it.
  std::vector<v1::SnapshotRecord> records;
  Deferred deferred;
  Status why = Status::NotFound("run '" + name + "' was deleted while a step was being read");
  for (auto& [step, snap] : run->snapshots) {
    ReleaseSnapshotResources(nullptr, io_.get(), id, snap.record, std::move(snap.waiters), why,
                             deferred);
    if (snap.record.tier() == v1::TIER_DISK) records.push_back(snap.record);
  }
  catalog_->DeleteRunThen(id, [disk = disk_, io = io_.get(), id, records = std::move(records),
                               deleted = std::move(deleted)](Status s) {
    if (s.ok()) {
      Deferred none;
      for (const auto& rec : records) {
        ReleaseSnapshotResources(disk, io, id, rec, {}, Status::Ok(), none);
      }
      if (disk) io->Submit([disk, id] { disk->ForgetRunDirs(id); }, /*urgent=*/false);
    } else {
      ADJSNAP_LOG_ERROR("deleting run %llu: %s; its records and files stay until the next start "
                        "finds the run again",
                        static_cast<unsigned long long>(id), s.ToString().c_str());
    }
    if (deleted) deleted(std::move(s));
  });
  tiering_.DiskRoomFreed(ix_);
  by_name_.erase({run->record.owner_uid(), name});
  ix_.runs.erase(id);  // blocks still held by in-flight fetches are freed when those complete
  if (!deferred.empty()) {
    io_->Submit([d = std::move(deferred)] { for (auto& f : d) f(); }, /*urgent=*/true);
  }
  Wake();
  return freed;
}

Result<uint64_t> Store::DeleteSnapshot(const std::string& name, uint64_t step,
                                       const Tenant& who) {
  auto written = std::make_shared<std::promise<Status>>();
  std::future<Status> deleted = written->get_future();
  uint64_t freed = 0;
  std::string step_name;
  {
    IndexLock lock(ix_);
    ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
    if (run->device.erase(step)) return uint64_t{0};  // its client frees the GPU memory
    auto it = run->snapshots.find(step);
    if (it == run->snapshots.end()) {
      return Status::NotFound(StepName(run->record, step) + " was never stored");
    }
    freed = it->second.record.stored_bytes();
    step_name = StepName(run->record, step);
    Erase(*run, it, [written](Status s) { written->set_value(std::move(s)); });
    Wake();
  }
  if (Status s = deleted.get(); !s.ok()) {  // waited for with no lock held
    return Status(s.code(), step_name + " is gone from adjsnapd, but its catalog record could "
                            "not be deleted (" + s.message() + "); the next start finds it again");
  }
  return freed;
}

std::vector<v1::RunInfo> Store::ListRuns(const Tenant& who) const {
  IndexLock lock(ix_);
  std::vector<v1::RunInfo> out;
  for (const auto& [id, run] : ix_.runs) {
    if (Sees(who, run.record)) out.push_back(Info(run));
  }
  return out;
}

Status Store::HoldDeviceStep(uint64_t run_id, uint64_t step, uint64_t bytes,
                             uint64_t session_id, bool held, const Tenant& who) {
  IndexLock lock(ix_);
  ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindById(run_id, who));
  const v1::RunRecord& r = run->record;
  auto d = run->device.find(step);
  if (!held) {
    if (d == run->device.end() || d->second.session_id != session_id) {
      return Status::NotFound(StepName(r, step) + " is not in session " +
                              std::to_string(session_id) + "'s GPU memory");
    }
    run->device.erase(d);
    return Status::Ok();
  }
  if (!UsesDevice(r.spec().layers())) {
    return Status::FailedPrecondition("run '" + r.spec().name() + "' has layers " +
                                      LayersName(r.spec().layers()) +
                                      ", without a device tier: push the step instead");
  }
  ADJSNAP_RETURN_IF_ERROR(CheckNewStep(*run, step, bytes, "device copy", "holds"));
  run->device[step] = DeviceStep{session_id, false};
  run->released.erase(step);
  return Status::Ok();
}

}  // namespace adjsnap
