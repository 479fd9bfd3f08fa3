#include "store/store.h"

#include <chrono>

#include "checksum.h"
#include "log.h"
#include "units.h"

namespace snapd {
namespace {

constexpr size_t kMaxRunName = 128;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string StepName(const v1::RunRecord& run, uint64_t step) {
  return "step " + std::to_string(step) + " of run '" + run.spec().name() + "'";
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
  return "";
}

}  // namespace

uint64_t DtypeBytes(v1::Dtype dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
    case v1::DTYPE_INT32:
      return 4;
    case v1::DTYPE_FLOAT64:
    case v1::DTYPE_INT64:
      return 8;
    default:
      return 1;
  }
}

Status ValidateRunSpec(const v1::RunSpec& spec) {
  const std::string& name = spec.name();
  if (name.empty() || name.size() > kMaxRunName) {
    return Status::InvalidArgument("run name must be 1 to 128 characters, got " +
                                   std::to_string(name.size()));
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) {
      return Status::InvalidArgument("run name '" + name +
                                     "' may contain only letters, digits, '.', '_' and '-'");
    }
  }
  if (!v1::Dtype_IsValid(spec.dtype())) {
    return Status::InvalidArgument("run '" + name + "': unknown dtype " +
                                   std::to_string(spec.dtype()));
  }
  if (spec.bytes_per_step() == 0) {
    return Status::InvalidArgument("run '" + name + "': bytes_per_step must be > 0");
  }
  if (spec.bytes_per_step() % DtypeBytes(spec.dtype()) != 0) {
    return Status::InvalidArgument("run '" + name + "': bytes_per_step " +
                                   std::to_string(spec.bytes_per_step()) +
                                   " is not a multiple of the " + v1::Dtype_Name(spec.dtype()) +
                                   " element size");
  }
  if (spec.shape_size() > 0) {
    unsigned __int128 elements = 1;
    for (uint64_t d : spec.shape()) elements *= d;
    unsigned __int128 bytes = elements * DtypeBytes(spec.dtype());
    if (bytes != spec.bytes_per_step()) {
      return Status::InvalidArgument("run '" + name + "': shape holds " +
                                     std::to_string(static_cast<uint64_t>(bytes)) +
                                     " bytes of " + v1::Dtype_Name(spec.dtype()) +
                                     " but bytes_per_step is " +
                                     std::to_string(spec.bytes_per_step()));
    }
  }
  return Status::Ok();
}

Store::Store(Catalog* catalog, HostTier* host, uint64_t epoch)
    : catalog_(catalog), host_(host), epoch_(epoch) {}

Result<std::unique_ptr<Store>> Store::Open(Catalog* catalog, HostTier* host, uint64_t epoch) {
  std::unique_ptr<Store> store(new Store(catalog, host, epoch));
  SNAPD_RETURN_IF_ERROR(store->Load());
  store->checksum_thread_ = std::thread([s = store.get()] { s->ChecksumLoop(); });
  return store;
}

Store::~Store() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  checksum_cv_.NotifyAll();
  if (checksum_thread_.joinable()) checksum_thread_.join();
}

Status Store::Load() {
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snapshots;
  SNAPD_RETURN_IF_ERROR(catalog_->LoadAll(&runs, &snapshots));
  MutexLock lock(mu_);
  for (auto& r : runs) {
    uint64_t id = r.run_id();
    by_name_[r.spec().name()] = id;
    runs_[id].record = std::move(r);
  }
  for (auto& s : snapshots) {
    auto it = runs_.find(s.run_id());
    if (it == runs_.end()) continue;  // unreachable: DeleteRun removes both in one batch
    if (s.tier() == v1::TIER_HOST && s.daemon_epoch() != epoch_) {
      s.set_tier(v1::TIER_LOST);
      s.set_stored_bytes(0);
      SNAPD_RETURN_IF_ERROR(catalog_->PutSnapshot(s));
    }
    if (s.tier() == v1::TIER_LOST) ++lost_snapshots_;
    uint64_t step = s.step();
    it->second.snapshots[step].record = std::move(s);
  }
  if (lost_snapshots_) {
    SNAPD_LOG_WARN("%llu host-tier snapshots from an earlier start are lost",
                   static_cast<unsigned long long>(lost_snapshots_));
  }
  return Status::Ok();
}

static Status RunNotFound(const std::string& name) {
  return Status::NotFound("run '" + name + "' does not exist (list runs with `snapctl runs`)");
}

Result<const Store::Run*> Store::FindByName(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return RunNotFound(name);
  return &runs_.at(it->second);
}

Result<Store::Run*> Store::FindByName(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return RunNotFound(name);
  return &runs_.at(it->second);
}

Result<Store::Run*> Store::FindById(uint64_t run_id) {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) {
    return Status::NotFound("run id " + std::to_string(run_id) +
                            " does not exist (deleted, or never opened on this daemon)");
  }
  return &it->second;
}

v1::RunInfo Store::Info(const Run& run) {
  v1::RunInfo info;
  info.set_run_id(run.record.run_id());
  *info.mutable_spec() = run.record.spec();
  info.set_state(run.record.state());
  info.set_snapshots(run.snapshots.size());
  info.set_stored_bytes(run.stored_bytes);
  info.set_owner_uid(run.record.owner_uid());
  info.set_created_unix_ms(run.record.created_unix_ms());
  return info;
}

v1::SnapshotInfo Store::Info(const v1::SnapshotRecord& rec) {
  v1::SnapshotInfo info;
  info.set_step(rec.step());
  info.set_tier(rec.tier());
  info.set_raw_bytes(rec.raw_bytes());
  info.set_stored_bytes(rec.stored_bytes());
  info.set_checksum(rec.checksum());
  info.set_checksum_state(rec.checksum_state());
  return info;
}

Result<v1::RunInfo> Store::OpenRun(const v1::RunSpec& spec, uint32_t owner_uid, bool* created) {
  SNAPD_RETURN_IF_ERROR(ValidateRunSpec(spec));
  if (spec.bytes_per_step() > host_->budget()) {
    return Status::ResourceExhausted(
        "run '" + spec.name() + "': one step of " + FormatBytes(spec.bytes_per_step()) +
        " exceeds the whole host tier (" + FormatBytes(host_->budget()) +
        "); raise host_mem or split the snapshot");
  }
  MutexLock lock(mu_);
  if (auto it = by_name_.find(spec.name()); it != by_name_.end()) {
    Run& run = runs_.at(it->second);
    std::string diff = SpecDifference(run.record.spec(), spec);
    if (!diff.empty()) {
      return Status::AlreadyExists("run '" + spec.name() + "' exists with a different " + diff +
                                   "; pick another name or delete it (`snapctl rm " +
                                   spec.name() + "`)");
    }
    *created = false;
    return Info(run);
  }
  SNAPD_ASSIGN_OR_RETURN(uint64_t id, catalog_->AllocateRunId());
  Run run;
  run.record.set_run_id(id);
  *run.record.mutable_spec() = spec;
  run.record.set_state(v1::RUN_OPEN);
  run.record.set_owner_uid(owner_uid);
  run.record.set_created_unix_ms(NowMs());
  SNAPD_RETURN_IF_ERROR(catalog_->PutRun(run.record));
  by_name_[spec.name()] = id;
  *created = true;
  return Info(runs_[id] = std::move(run));
}

Result<v1::RunInfo> Store::CloseRun(const std::string& name) {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name));
  if (run->record.state() != v1::RUN_CLOSED) {
    v1::RunRecord updated = run->record;
    updated.set_state(v1::RUN_CLOSED);
    SNAPD_RETURN_IF_ERROR(catalog_->PutRun(updated));
    run->record = std::move(updated);
  }
  return Info(*run);
}

Result<uint64_t> Store::DeleteRun(const std::string& name) {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name));
  uint64_t id = run->record.run_id();
  SNAPD_RETURN_IF_ERROR(catalog_->DeleteRun(id));
  uint64_t freed = run->stored_bytes;
  for (const auto& [step, snap] : run->snapshots) {
    if (snap.record.tier() == v1::TIER_LOST) --lost_snapshots_;
  }
  by_name_.erase(name);
  runs_.erase(id);  // blocks still held by in-flight fetches are freed when those complete
  return freed;
}

Result<uint64_t> Store::DeleteSnapshot(const std::string& name, uint64_t step) {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name));
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) {
    return Status::NotFound(StepName(run->record, step) + " was never stored");
  }
  SNAPD_RETURN_IF_ERROR(catalog_->DeleteSnapshot(run->record.run_id(), step));
  uint64_t freed = it->second.record.stored_bytes();
  if (it->second.record.tier() == v1::TIER_LOST) --lost_snapshots_;
  run->stored_bytes -= freed;
  run->snapshots.erase(it);  // an in-flight fetch keeps the block until it completes
  return freed;
}

std::vector<v1::RunInfo> Store::ListRuns() const {
  MutexLock lock(mu_);
  std::vector<v1::RunInfo> out;
  for (const auto& [id, run] : runs_) out.push_back(Info(run));
  return out;
}

Result<std::vector<v1::SnapshotInfo>> Store::ListSnapshots(const std::string& name,
                                                           v1::RunInfo* info) const {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(const Run* run, FindByName(name));
  *info = Info(*run);
  std::vector<v1::SnapshotInfo> out;
  out.reserve(run->snapshots.size());
  for (const auto& [step, snap] : run->snapshots) out.push_back(Info(snap.record));
  return out;
}

Result<v1::SnapshotInfo> Store::Locate(const std::string& name, uint64_t step) const {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(const Run* run, FindByName(name));
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) {
    return Status::NotFound(StepName(run->record, step) + " was never stored");
  }
  return Info(it->second.record);
}

Result<Store::PushTicket> Store::BeginPush(uint64_t run_id, uint64_t step, uint64_t bytes) {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindById(run_id));
  const v1::RunRecord& r = run->record;
  if (r.state() == v1::RUN_CLOSED) {
    return Status::FailedPrecondition("run '" + r.spec().name() +
                                      "' is closed: its forward pass is over, it takes no "
                                      "more pushes");
  }
  if (r.spec().steps() != 0 && step >= r.spec().steps()) {
    return Status::OutOfRange(StepName(r, step) + " is outside the declared steps 0.." +
                              std::to_string(r.spec().steps() - 1));
  }
  if (bytes != r.spec().bytes_per_step()) {
    return Status::InvalidArgument("push of " + StepName(r, step) + " carries " +
                                   std::to_string(bytes) + " bytes but the run stores " +
                                   std::to_string(r.spec().bytes_per_step()) + " per step");
  }
  if (run->snapshots.count(step)) {
    return Status::AlreadyExists(StepName(r, step) +
                                 " is already stored; each step is pushed once");
  }
  if (run->in_flight.count(step)) {
    return Status::AlreadyExists(StepName(r, step) + " is already being pushed");
  }
  SNAPD_ASSIGN_OR_RETURN(auto block, host_->Allocate(bytes));
  run->in_flight.insert(step);
  return PushTicket{run_id, step, std::move(block)};
}

Status Store::CommitPush(const PushTicket& t) {
  MutexLock lock(mu_);
  auto it = runs_.find(t.run_id);
  if (it == runs_.end()) {
    return Status::NotFound("run id " + std::to_string(t.run_id) +
                            " was deleted while step " + std::to_string(t.step) +
                            " was being pushed");
  }
  Run& run = it->second;
  run.in_flight.erase(t.step);
  uint64_t raw = run.record.spec().bytes_per_step();
  v1::SnapshotRecord rec;
  rec.set_run_id(t.run_id);
  rec.set_step(t.step);
  rec.set_tier(v1::TIER_HOST);
  rec.set_raw_bytes(raw);
  rec.set_stored_bytes(raw);
  rec.set_checksum_state(v1::CHECKSUM_PENDING);
  rec.set_daemon_epoch(epoch_);
  SNAPD_RETURN_IF_ERROR(catalog_->PutSnapshot(rec));
  run.snapshots[t.step] = Snapshot{std::move(rec), t.block};
  run.stored_bytes += raw;
  checksum_queue_.push_back({t.run_id, t.step, raw, t.block});
  checksum_cv_.NotifyOne();
  return Status::Ok();
}

void Store::AbortPush(const PushTicket& t) {
  MutexLock lock(mu_);
  if (auto it = runs_.find(t.run_id); it != runs_.end()) it->second.in_flight.erase(t.step);
}

Result<std::shared_ptr<HostBlock>> Store::BeginFetch(uint64_t run_id, uint64_t step,
                                                     uint64_t bytes) {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindById(run_id));
  const v1::RunRecord& r = run->record;
  if (bytes != r.spec().bytes_per_step()) {
    return Status::InvalidArgument("fetch of " + StepName(r, step) + " into a buffer of " +
                                   std::to_string(bytes) + " bytes; the run stores " +
                                   std::to_string(r.spec().bytes_per_step()) + " per step");
  }
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) {
    return Status::NotFound(StepName(r, step) + " was never stored");
  }
  if (it->second.record.tier() == v1::TIER_LOST) {
    return Status::DataLoss(StepName(r, step) +
                            " was lost: it was in host memory when snapd restarted");
  }
  return it->second.block;
}

StoreCounters Store::Counters() const {
  MutexLock lock(mu_);
  StoreCounters c;
  c.runs = runs_.size();
  c.lost_snapshots = lost_snapshots_;
  for (const auto& [id, run] : runs_) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.record.tier() == v1::TIER_HOST) ++c.host_snapshots;
    }
  }
  return c;
}

void Store::WaitChecksumsIdle() {
  MutexLock lock(mu_);
  checksum_cv_.Wait(mu_, [&]() SNAPD_REQUIRES(mu_) {
    return checksum_queue_.empty() && !checksum_busy_;
  });
}

void Store::ChecksumLoop() {
  MutexLock lock(mu_);
  for (;;) {
    checksum_cv_.Wait(mu_, [&]() SNAPD_REQUIRES(mu_) {
      return stopping_ || !checksum_queue_.empty();
    });
    if (stopping_) return;
    ChecksumJob job = std::move(checksum_queue_.front());
    checksum_queue_.pop_front();
    checksum_busy_ = true;
    lock.Unlock();
    uint64_t sum = Checksum(job.block->data(), job.bytes);
    lock.Lock();
    checksum_busy_ = false;
    // Record it only if the snapshot is still the one hashed (the run may have been deleted).
    if (auto run = runs_.find(job.run_id); run != runs_.end()) {
      auto snap = run->second.snapshots.find(job.step);
      if (snap != run->second.snapshots.end() && snap->second.block == job.block) {
        v1::SnapshotRecord updated = snap->second.record;
        updated.set_checksum(sum);
        updated.set_checksum_state(v1::CHECKSUM_RECORDED);
        Status s = catalog_->PutSnapshot(updated);
        if (s.ok()) {
          snap->second.record = std::move(updated);
        } else {
          SNAPD_LOG_ERROR("recording checksum: %s", s.ToString().c_str());
        }
      }
    }
    checksum_cv_.NotifyAll();
  }
}

}  // namespace snapd
