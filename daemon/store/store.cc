#include "store/store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "log.h"
#include "snapd/checksum.h"
#include "snapd/layers.h"
#include "snapd/units.h"
#include "tiering/placement.h"
#include "tiering/snapshot_io.h"

namespace snapd {
namespace {

constexpr size_t kMaxRunName = 128;

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
      // The name is not echoed: it may hold control characters.
      return Status::InvalidArgument("run name may contain only letters, digits, '.', '_' and "
                                     "'-' (found byte " +
                                     std::to_string(static_cast<unsigned char>(c)) + ")");
    }
  }
  // Names become file names (dump) and command-line arguments (snapctl rm NAME): '.', '..',
  // hidden names and option-like names such as "-rf" are refused.
  if (name[0] == '.' || name[0] == '-') {
    return Status::InvalidArgument("run name '" + name +
                                   "' must begin with a letter, a digit or '_'");
  }
  if (spec.job().size() > 64) {
    return Status::InvalidArgument("run '" + name + "': job must be at most 64 characters, got " +
                                   std::to_string(spec.job().size()));
  }
  if (!v1::Layers_IsValid(spec.layers())) {
    return Status::InvalidArgument("run '" + name + "': unknown layers " +
                                   std::to_string(spec.layers()));
  }
  if (std::string why = spec.overwrite() ? OverwriteWithDeviceLayers(name, spec.layers()) : "";
      !why.empty()) {
    return Status::InvalidArgument(why);
  }
  if (!v1::Dtype_IsValid(spec.dtype())) {
    return Status::InvalidArgument("run '" + name + "': unknown dtype " +
                                   std::to_string(spec.dtype()));
  }
  if (!v1::Codec_IsValid(spec.codec())) {
    return Status::InvalidArgument("run '" + name + "': unknown codec " +
                                   std::to_string(spec.codec()));
  }
  if (!v1::CompressWhen_IsValid(spec.compress_when())) {
    return Status::InvalidArgument("run '" + name + "': unknown compress_when " +
                                   std::to_string(spec.compress_when()));
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
  // Each product is checked against 2^64 before the next, so no count wraps.
  constexpr unsigned __int128 kU64Max = UINT64_MAX;
  if (static_cast<unsigned __int128>(spec.steps()) * spec.bytes_per_step() > kU64Max) {
    return Status::InvalidArgument("run '" + name + "': " + std::to_string(spec.steps()) +
                                   " steps of " + std::to_string(spec.bytes_per_step()) +
                                   " bytes is more than 2^64 bytes");
  }
  if (spec.shape_size() > 0) {
    unsigned __int128 elements = 1;
    for (uint64_t d : spec.shape()) {
      elements *= d;
      if (elements > kU64Max) {
        return Status::InvalidArgument("run '" + name + "': shape has more than 2^64 elements");
      }
    }
    unsigned __int128 bytes = elements * DtypeBytes(spec.dtype());
    if (bytes > kU64Max) {
      return Status::InvalidArgument("run '" + name + "': shape holds more than 2^64 bytes");
    }
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

Store::Store(Catalog* catalog, HostTier* host, DiskTier* disk, const StoreOptions& options)
    : Tiering(catalog, host, disk, options) {}

Result<std::unique_ptr<Store>> Store::Open(Catalog* catalog, HostTier* host, DiskTier* disk,
                                           const StoreOptions& options) {
  std::unique_ptr<Store> store(new Store(catalog, host, disk, options));
  SNAPD_RETURN_IF_ERROR(store->Load());
  Store* s = store.get();
  s->compress_ = std::make_unique<compress::CompressPool>(options.compress_threads);
  s->io_ = std::make_unique<IoPool>(std::max(1, options.io_threads));
  s->checksums_.Start();
  s->StartTiering();
  {
    MutexLock lock(s->ix_.mu);
    for (auto& [id, run] : s->ix_.runs) {
      for (auto& [step, snap] : run.snapshots) {
        if (!snap.verified) s->StartScrub(id, step);
      }
    }
  }
  return store;
}

Store::~Store() {
  {
    MutexLock lock(ix_.mu);
    ix_.stopping = true;
  }
  StopWaking();
  StopTiering();
  checksums_.Stop();
  io_.reset();  // finishes the I/O already queued; completions still find the index intact
  DetachWaker();  // blocks released from now on wake nobody
  {
    MutexLock lock(ix_.mu);
    if (!unsaved_why_.empty()) {
      // A stop whose drain fell short: what did not reach the disk is named, never silent.
      uint64_t lost = 0;
      for (auto& [id, run] : ix_.runs) {
        for (auto& [step, snap] : run.snapshots) {
          if (snap.record.tier() != v1::TIER_HOST || !snap.block) continue;
          MarkLost(run, snap, "it was still only in host memory when snapd stopped (" +
                                  unsaved_why_ + ")");
          ++lost;
        }
      }
      if (lost) {
        SNAPD_LOG_ERROR("%llu host-tier steps were not written to disk before snapd stopped",
                        static_cast<unsigned long long>(lost));
      }
    }
  }
  // Whoever still waits gets an answer.
  Deferred deferred;
  {
    MutexLock lock(ix_.mu);
    Status down = Status::Unavailable("snapd is shutting down");
    AnswerWaiting(down, deferred);
    for (auto& [id, run] : ix_.runs) {
      for (auto& [step, snap] : run.snapshots) {
        for (auto& w : snap.waiters) deferred.push_back([l = std::move(w), down] { l(down); });
        snap.waiters.clear();
      }
    }
  }
  for (auto& f : deferred) f();
}

Status Store::Load() {
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snapshots;
  SNAPD_RETURN_IF_ERROR(catalog_->LoadAll(&runs, &snapshots));
  MutexLock lock(ix_.mu);
  for (auto& r : runs) {
    uint64_t id = r.run_id();
    by_name_[{r.owner_uid(), r.spec().name()}] = id;
    ix_.runs[id].record = std::move(r);
  }
  std::set<std::string> keep;
  // Files of steps found damaged now or lost before: moved aside, never deleted.
  struct Damaged {
    std::string step;
    v1::SnapshotRecord record;
    std::string why;
  };
  std::vector<Damaged> damaged;
  uint64_t lost_host = 0, recovered = 0, taken_back = 0;
  for (auto& rec : snapshots) {
    auto it = ix_.runs.find(rec.run_id());
    if (it == ix_.runs.end()) continue;  // unreachable: DeleteRun removes both in one batch
    Run& run = it->second;
    Snapshot& snap = run.snapshots[rec.step()];
    snap.record = std::move(rec);
    snap.generation = next_generation_++;
    run.stored_bytes += snap.record.stored_bytes();  // before MarkLost takes it off again
    v1::SnapshotRecord& r = snap.record;
    // A file a record names is never an interrupted write, whatever became of the step.
    if (disk_ && !r.disk_name().empty()) {
      keep.insert(DiskTier::Key(r.spool(), r.run_id(), r.disk_name()));
    }
    if (r.tier() == v1::TIER_LOST && disk_ && !r.disk_name().empty()) {
      damaged.push_back({StepName(run.record, r.step()), r, "lost before this start"});
    }
    if (r.tier() == v1::TIER_HOST && r.daemon_epoch() != options_.epoch) {
      if (Status kept = TakeBack(run, snap); kept.ok()) {
        ++taken_back;
      } else {
        ++lost_host;
        if (kept.message().empty()) {
          NoteFailure(run, StepName(run.record, r.step()) +
                               " is lost: it was in host memory when snapd last stopped "
                               "without writing it to disk (kill -9 or a crash)");
        }
        MarkLost(run, snap, kept.message());
      }
    } else if (r.tier() == v1::TIER_DISK) {
      Status adopted = disk_ ? disk_->Adopt(r.spool(), r.run_id(), r.disk_name(),
                                            FileContentBytes(r))
                             : Status::FailedPrecondition("snapd now runs without a disk tier");
      if (adopted.ok()) {
        keep.insert(DiskTier::Key(r.spool(), r.run_id(), r.disk_name()));
        snap.verified = false;  // checked by a background scrub (StartScrub) and on every read
        ++recovered;
        if (r.has_host_copy()) {
          // A host copy kept through the restart: served from memory if it checks out, else
          // the file serves, which is the durable copy either way.
          if (Status kept = TakeBack(run, snap); kept.ok()) {
            ++taken_back;
          } else {
            SNAPD_LOG_INFO("%s is served from its spool file, not from its host copy (%s)",
                           StepName(run.record, r.step()).c_str(),
                           kept.message().empty() ? "not kept" : kept.message().c_str());
            r.clear_host_copy();
            if (Status s = catalog_->PutSnapshot(r); !s.ok()) return s;
          }
        }
      } else {
        SNAPD_LOG_WARN("%s is lost: %s", StepName(run.record, r.step()).c_str(),
                       adopted.message().c_str());
        if (disk_) damaged.push_back({StepName(run.record, r.step()), r, adopted.message()});
        MarkLost(run, snap, "");
      }
    }
  }
  if (disk_) {
    for (const Damaged& d : damaged) {
      auto moved = disk_->Quarantine(d.record.spool(), d.record.run_id(), d.record.disk_name(),
                                     /*accounted_raw=*/0);
      if (moved.ok()) {
        SNAPD_LOG_WARN("quarantined the spool file of lost %s (%s, %s recorded) as %s: %s",
                       d.step.c_str(), d.record.disk_name().c_str(),
                       FormatBytes(FileContentBytes(d.record)).c_str(), moved->c_str(),
                       d.why.c_str());
      } else if (moved.status().code() != Code::kNotFound) {
        SNAPD_LOG_WARN("quarantining the spool file of lost %s: %s", d.step.c_str(),
                       moved.status().message().c_str());
      }
    }
    // Until files of recorded steps were kept (above), a file cut short behind snapd's back
    // (Adopt refused it) was counted here too and deleted as an "interrupted write"; now only
    // `.tmp` files and files renamed into place whose record was never written are.
    std::vector<std::string> orphans = disk_->RemoveOrphans(keep);
    if (!orphans.empty()) {
      std::string some;
      for (size_t i = 0; i < orphans.size() && i < 3; ++i) some += (i ? ", " : "") + orphans[i];
      SNAPD_LOG_INFO("removed %zu spool file%s that no snapshot record names (writes a stop "
                     "interrupted): %s%s",
                     orphans.size(), orphans.size() == 1 ? "" : "s", some.c_str(),
                     orphans.size() > 3 ? ", ..." : "");
    }
  }
  if (lost_host) {
    SNAPD_LOG_WARN("%llu host-tier snapshots from an earlier start are lost",
                   static_cast<unsigned long long>(lost_host));
  }
  if (taken_back) {
    SNAPD_LOG_INFO("took back %llu host-tier snapshots kept through the restart (checksums "
                   "verified)",
                   static_cast<unsigned long long>(taken_back));
  }
  if (recovered) {
    SNAPD_LOG_INFO("recovered %llu disk-tier snapshots; verifying their checksums",
                   static_cast<unsigned long long>(recovered));
  }
  return Status::Ok();
}

Status Store::TakeBack(const Run& run, Snapshot& snap) {
  v1::SnapshotRecord& r = snap.record;
  const auto& kept = options_.kept_host_tier;
  if (!kept || r.daemon_epoch() != kept->epoch() || !r.has_host_copy()) {
    return Status::DataLoss("");  // in host memory at a stop that did not keep the tier
  }
  if (!options_.host_tier_adopted) {
    return Status::DataLoss(
        "it was in the host tier handed to systemd's fd store, which did not pass it back at "
        "this start");
  }
  const v1::HostCopy& copy = r.host_copy();
  auto block = ClaimHost(run, copy.offset(), copy.bytes());
  if (!block.ok()) {
    return Status::DataLoss("its place in the kept host tier: " + block.status().message());
  }
  // A disk step's host copy holds its raw bytes; a host step's block what it stores.
  const uint64_t held = r.tier() == v1::TIER_DISK ? r.raw_bytes() : r.stored_bytes();
  if (held > (*block)->size() || Checksum((*block)->data(), held) != copy.checksum()) {
    return Status::DataLoss("its bytes in the kept host tier fail their checksum");
  }
  snap.block = std::move(block).value();
  r.set_daemon_epoch(options_.epoch);  // in this start's host tier now
  r.clear_host_copy();
  return catalog_->PutSnapshot(r);
}

static Status RunNotFound(const std::string& name) {
  return Status::NotFound("run '" + name + "' does not exist (list runs with `snapctl runs`)");
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
  SNAPD_ASSIGN_OR_RETURN(const Run* run, static_cast<const Store*>(this)->FindByName(name, who));
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
  MutexLock lock(ix_.mu);
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
  MutexLock lock(ix_.mu);
  return UsageOf(uid);
}

Result<uint64_t> Store::RunId(const std::string& name, const Tenant& who) const {
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(const Run* run, FindByName(name, who));
  return run->record.run_id();
}

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
  WaitCounts waits = WaitsOf(run);
  info.set_waiting_pushes(waits.pushes);
  info.set_waiting_fetches(waits.fetches);
  info.set_oldest_wait_seconds(waits.oldest_seconds);
  return info;
}

Store::Waits Store::Waiting(const Tenant& who, size_t limit) {
  MutexLock lock(ix_.mu);
  Waits out;
  for (WaitingRequest& w : Tiering::Waiting()) {
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

Status Store::DeviceStepHere(const Run& run, uint64_t step, const DeviceStep& held) {
  std::string where = StepName(run.record, step) + " was kept in the GPU memory of session " +
                      std::to_string(held.session_id);
  if (held.lost) return Status::DataLoss(where + ", which ended: the bytes ended with it");
  return Status::FailedPrecondition(where + "; that client serves it (libsnapd reads its own "
                                    "device steps), the daemon never had its bytes");
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
  SNAPD_RETURN_IF_ERROR(ValidateRunSpec(requested));
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
        " need a disk tier, and this snapd runs without one (spool_dirs = none); use Host, or "
        "start snapd with spool_dirs");
  }
  if (spec.codec() != v1::CODEC_NONE) {
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
  SNAPD_RETURN_IF_ERROR(CheckFitsTheNode(spec, device_steps));
  MutexLock lock(ix_.mu);
  if (auto it = by_name_.find({owner_uid, name}); it != by_name_.end()) {
    Run& run = ix_.runs.at(it->second);
    std::string diff = SpecDifference(run.record.spec(), requested);
    if (!diff.empty()) {
      return Status::AlreadyExists("run '" + name + "' exists with a different " + diff +
                                   "; pick another name or delete it (`snapctl rm " + name +
                                   "`)");
    }
    *created = false;
    if (session_id != 0) {
      run.sessions.insert(session_id);
      run.orphaned_at.reset();  // a client attached again
    }
    return Info(run);
  }
  SNAPD_ASSIGN_OR_RETURN(uint64_t id, catalog_->AllocateRunId());
  Run run;
  run.record.set_run_id(id);
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
  SNAPD_RETURN_IF_ERROR(catalog_->PutRun(run.record));
  by_name_[{owner_uid, name}] = id;
  *created = true;
  if (session_id != 0) run.sessions.insert(session_id);
  return Info(ix_.runs[id] = std::move(run));
}

Result<v1::RunInfo> Store::CloseRun(const std::string& name, const Tenant& who) {
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
  if (run->record.state() != v1::RUN_CLOSED) {
    v1::RunRecord updated = run->record;
    updated.set_state(v1::RUN_CLOSED);
    SNAPD_RETURN_IF_ERROR(catalog_->PutRun(updated));
    run->record = std::move(updated);
  }
  return Info(*run);
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

Status Store::Erase(Run& run, std::map<uint64_t, Snapshot>::iterator it) {
  uint64_t id = run.record.run_id();
  SNAPD_RETURN_IF_ERROR(catalog_->DeleteSnapshot(id, it->first));
  Deferred deferred;
  ReleaseSnapshotResources(disk_, io_.get(), id, it->second.record,
                           std::move(it->second.waiters),
                           Status::NotFound(StepName(run.record, it->first) +
                                            " was deleted while being read"),
                           deferred);
  if (it->second.record.tier() == v1::TIER_DISK) DiskRoomFreed();
  run.stored_bytes -= it->second.record.stored_bytes();
  run.snapshots.erase(it);  // an in-flight fetch keeps the block until it completes
  // Waiters of a deleted snapshot are answered from an I/O thread, never under ix_.mu.
  if (!deferred.empty()) {
    io_->Submit([d = std::move(deferred)] { for (auto& f : d) f(); }, /*urgent=*/true);
  }
  return Status::Ok();
}

Result<uint64_t> Store::DeleteRun(const std::string& name, const Tenant& who) {
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
  return DeleteRunLocked(run);
}

Result<uint64_t> Store::DeleteRunLocked(Run* run) {
  const std::string name = run->record.spec().name();
  uint64_t id = run->record.run_id();
  SNAPD_RETURN_IF_ERROR(catalog_->DeleteRun(id));
  uint64_t freed = run->stored_bytes;
  Deferred deferred;
  Status why = Status::NotFound("run '" + name + "' was deleted while a step was being read");
  for (auto& [step, snap] : run->snapshots) {
    ReleaseSnapshotResources(disk_, io_.get(), id, snap.record, std::move(snap.waiters), why,
                             deferred);
  }
  DiskRoomFreed();
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
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
  if (run->device.erase(step)) return uint64_t{0};  // its client frees the GPU memory
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) {
    return Status::NotFound(StepName(run->record, step) + " was never stored");
  }
  uint64_t freed = it->second.record.stored_bytes();
  SNAPD_RETURN_IF_ERROR(Erase(*run, it));
  Wake();
  return freed;
}

std::vector<v1::RunInfo> Store::ListRuns(const Tenant& who) const {
  MutexLock lock(ix_.mu);
  std::vector<v1::RunInfo> out;
  for (const auto& [id, run] : ix_.runs) {
    if (Sees(who, run.record)) out.push_back(Info(run));
  }
  return out;
}

Result<std::vector<v1::SnapshotInfo>> Store::ListSnapshots(const std::string& name,
                                                           v1::RunInfo* info,
                                                           const Tenant& who) const {
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(const Run* run, FindByName(name, who));
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
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(const Run* run, FindByName(name, who));
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

Status Store::HoldDeviceStep(uint64_t run_id, uint64_t step, uint64_t bytes,
                             uint64_t session_id, bool held, const Tenant& who) {
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindById(run_id, who));
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
  SNAPD_RETURN_IF_ERROR(CheckNewStep(*run, step, bytes, "device copy", "holds"));
  run->device[step] = DeviceStep{session_id, false};
  run->released.erase(step);
  return Status::Ok();
}

void Store::EndSession(uint64_t session_id, bool died) {
  MutexLock lock(ix_.mu);
  for (auto& [id, run] : ix_.runs) {
    for (auto& [step, held] : run.device) {
      if (held.session_id == session_id) held.lost = true;
    }
    if (run.sessions.erase(session_id) && run.sessions.empty() && died &&
        !run.record.spec().keep()) {
      run.orphaned_at = std::chrono::steady_clock::now();
    }
  }
}

void Store::RemoveOrphans(std::chrono::seconds grace) {
  MutexLock lock(ix_.mu);
  auto now = std::chrono::steady_clock::now();
  std::vector<uint64_t> expired;
  for (const auto& [id, run] : ix_.runs) {
    if (run.orphaned_at && now - *run.orphaned_at >= grace) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    std::string name = ix_.runs.at(id).record.spec().name();
    auto freed = DeleteRunLocked(&ix_.runs.at(id));
    if (freed.ok()) {
      SNAPD_LOG_INFO(
          "run '%s' removed, %s freed: every client that opened it died %lld s ago "
          "and it is not kept (orphan_grace)",
          name.c_str(), FormatBytes(*freed).c_str(), static_cast<long long>(grace.count()));
    }
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
                           const char* moves) {
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
  SNAPD_RETURN_IF_ERROR(CheckSize(run, step, bytes, what, moves));
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
                        const char* moves) {
  const v1::RunRecord& r = run.record;
  if (bytes == r.spec().bytes_per_step()) return Status::Ok();
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
  MutexLock lock(ix_.mu);
  if (closing_) {
    return Status::Unavailable("snapd is stopping: push of step " + std::to_string(step) +
                               " of run id " + std::to_string(run_id) +
                               " refused; push it again once snapd is back");
  }
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindById(run_id, who));
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
  Status fresh = CheckNewStep(*run, step, bytes, "push", "carries");
  if (auto old = run->snapshots.find(step); fresh.code() == Code::kAlreadyExists &&
                                            r.spec().overwrite() && old != run->snapshots.end() &&
                                            !run->in_flight.count(step)) {
    // Valid but for the stored copy, which it replaces: that copy goes now, as a
    // DeleteSnapshot would (a fetch of it in flight keeps its block until done), and its room
    // serves this push.
    SNAPD_RETURN_IF_ERROR(Erase(*run, old));
    Wake();
    fresh = CheckNewStep(*run, step, bytes, "push", "carries");
  }
  SNAPD_RETURN_IF_ERROR(fresh);
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
  return AdmitPush(*run, step, bytes, later);
}

Status Store::CommitPush(const PushTicket& t) {
  MutexLock lock(ix_.mu);
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
  std::shared_ptr<HostBlock> block = std::move(reserved->second);
  run.in_flight.erase(reserved);
  Checksums::NoteDataPlaneActivity(ix_);
  uint64_t raw = run.record.spec().bytes_per_step();
  v1::SnapshotRecord rec;
  rec.set_run_id(t.run_id);
  rec.set_step(t.step);
  rec.set_tier(v1::TIER_HOST);
  rec.set_raw_bytes(raw);
  rec.set_stored_bytes(raw);
  rec.set_checksum_state(v1::CHECKSUM_PENDING);
  rec.set_daemon_epoch(options_.epoch);
  SNAPD_RETURN_IF_ERROR(catalog_->PutSnapshot(rec));
  Snapshot& snap = run.snapshots[t.step];
  snap.record = std::move(rec);
  snap.block = std::move(block);
  snap.generation = next_generation_++;
  run.released.erase(t.step);
  run.stored_bytes += raw;
  if (CompressesAtIngest(run.record.spec())) {
    StartIngestCompression(run, snap);  // asks for the checksum itself, before compressing
  } else {
    checksums_.Queue(ix_, t.run_id, snap, raw);
  }
  if (DemotionWanted(run, snap)) Wake();
  return Status::Ok();
}

void Store::AbortPush(const PushTicket& t) {
  MutexLock lock(ix_.mu);
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
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindById(run_id, who));
  const v1::RunRecord& r = run->record;
  SNAPD_RETURN_IF_ERROR(CheckSize(*run, step, bytes, "fetch", "into a buffer of"));
  Checksums::NoteDataPlaneActivity(ix_);
  if (auto d = run->device.find(step); d != run->device.end()) {
    return DeviceStepHere(*run, step, d->second);
  }
  auto it = run->snapshots.find(step);
  if (it == run->snapshots.end()) return StepNotFound(*run, step);
  Snapshot& snap = it->second;
  if (snap.record.tier() == v1::TIER_LOST) {
    return Status::DataLoss(StepName(r, step) +
                            " was lost: it was in host memory when snapd restarted, or its "
                            "disk copy failed verification");
  }
  return AdmitFetch(*run, snap, backward, later);
}

void Store::Consumed(uint64_t run_id, uint64_t step, uint64_t generation) {
  MutexLock lock(ix_.mu);
  auto run = ix_.runs.find(run_id);
  if (run == ix_.runs.end() || run->second.record.spec().keep()) return;
  auto it = run->second.snapshots.find(step);
  if (it == run->second.snapshots.end() || it->second.generation != generation) return;
  Status s = Erase(run->second, it);
  if (!s.ok()) {
    SNAPD_LOG_ERROR("releasing a consumed step: %s", s.ToString().c_str());
    return;
  }
  run->second.released.insert(step);
  ++ix_.counters.released;
  Wake();
}

Result<uint64_t> Store::Prefetch(const std::string& name, const std::vector<uint64_t>& steps,
                                 const Tenant& who) {
  MutexLock lock(ix_.mu);
  SNAPD_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
  return PrefetchSteps(*run, steps);
}

void Store::Drain(std::function<void(Result<DrainResult>)> done) { StartDrain(std::move(done)); }

void Store::ScrubRun(const std::string& name, std::function<void(Result<ScrubResult>)> done,
                     const Tenant& who) {
  struct Tally {
    std::mutex mu;
    ScrubResult result;
    uint64_t left = 0;
    std::function<void(Result<ScrubResult>)> done;
  };
  auto tally = std::make_shared<Tally>();
  {
    MutexLock lock(ix_.mu);
    auto run = FindByName(name, who);
    if (!run.ok()) {
      lock.Unlock();
      done(run.status());
      return;
    }
    if (!disk_) {
      lock.Unlock();
      done(Status::FailedPrecondition("snapd runs without a disk tier: nothing to scrub"));
      return;
    }
    std::vector<uint64_t> steps;
    for (const auto& [step, snap] : (*run)->snapshots) {
      if (snap.record.tier() == v1::TIER_DISK && !snap.writing) steps.push_back(step);
    }
    tally->left = steps.size();
    tally->done = std::move(done);
    if (steps.empty()) {
      lock.Unlock();
      tally->done(tally->result);
      return;
    }
    uint64_t id = (*run)->record.run_id();
    for (uint64_t step : steps) {
      StartScrub(id, step, [tally, step](Status s) {
        std::unique_lock<std::mutex> l(tally->mu);
        if (s.ok()) {
          ++tally->result.verified;
        } else if (s.code() == Code::kDataLoss) {
          tally->result.lost.push_back({step, s.message()});
        } else {
          ++tally->result.unreadable;
        }
        if (--tally->left == 0) {
          l.unlock();
          std::sort(tally->result.lost.begin(), tally->result.lost.end());
          tally->done(tally->result);
        }
      });
    }
  }
}

void Store::ProbeSpools(std::function<void(int)> done) {
  if (!disk_) {
    done(0);
    return;
  }
  // A probe writes and syncs: an I/O thread's job, never the caller's (a gRPC reactor).
  io_->Submit([this, done = std::move(done)] { done(disk_->ProbeNow()); }, /*urgent=*/true);
}

void Store::BeginStop() {
  Deferred deferred;
  {
    MutexLock lock(ix_.mu);
    closing_ = true;
    AnswerParkedPushes(Status::Unavailable("snapd is stopping: a push waiting for room was "
                                           "refused; push it again once snapd is back"),
                       deferred);
  }
  for (auto& f : deferred) f();
}

uint64_t Store::PushesInFlight() const {
  MutexLock lock(ix_.mu);
  uint64_t n = 0;
  for (const auto& [id, run] : ix_.runs) n += run.in_flight.size();
  return n;
}

Store::StopResult Store::DrainForStop(std::chrono::steady_clock::time_point deadline,
                                      bool keep_host_copies) {
  if (keep_host_copies) {
    MutexLock lock(ix_.mu);
    KeepHostCopies();
  }
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<DrainResult>> result;
  };
  auto outcome = std::make_shared<Outcome>();
  Drain([outcome](Result<DrainResult> r) {
    std::lock_guard<std::mutex> lock(outcome->mu);
    outcome->result = std::move(r);
    outcome->cv.notify_all();
  });
  StopResult result;
  {
    std::unique_lock<std::mutex> lock(outcome->mu);
    outcome->cv.wait_until(lock, deadline, [&] { return outcome->result.has_value(); });
    if (!outcome->result) {
      result.status = Status(Code::kDeadlineExceeded, "the drain did not finish within "
                                                      "stop_timeout");
    } else if (!outcome->result->ok()) {
      result.status = outcome->result->status();
    } else {
      result.steps = (*outcome->result)->moved;
      result.bytes = (*outcome->result)->moved_bytes;
    }
  }
  MutexLock lock(ix_.mu);
  if (!result.status.ok()) unsaved_why_ = result.status.message();
  return result;
}

Store::StopResult Store::KeepHostTier(std::chrono::steady_clock::time_point deadline) {
  StopResult result;
  checksums_.WaitIdle(ix_);  // every step's checksum recorded (the checksum thread stops below)
  {
    MutexLock lock(ix_.mu);
    ix_.stopping = true;  // the tiering thread starts nothing more
  }
  for (;;) {
    {
      MutexLock lock(ix_.mu);
      if (IoIdle()) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      result.status = Status(Code::kDeadlineExceeded,
                             "disk I/O in flight did not end within stop_timeout");
      MutexLock lock(ix_.mu);
      unsaved_why_ = result.status.message();
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MutexLock lock(ix_.mu);
  std::vector<v1::SnapshotRecord> records;
  uint64_t host_only = 0;
  for (auto& [id, run] : ix_.runs) {
    for (auto& [step, snap] : run.snapshots) {
      v1::SnapshotRecord& r = snap.record;
      if (!snap.block || (r.tier() != v1::TIER_HOST && r.tier() != v1::TIER_DISK)) continue;
      // The checksum of what the block holds: the recorded one, or (never expected after
      // WaitChecksumsIdle) computed now. A disk step's block holds its raw bytes.
      uint64_t sum = r.tier() == v1::TIER_DISK ? r.checksum()
                     : r.codec() != v1::CODEC_NONE ? r.stored_checksum()
                     : r.checksum_state() == v1::CHECKSUM_RECORDED
                         ? r.checksum()
                         : Checksum(snap.block->data(), r.stored_bytes());
      host_only += r.tier() == v1::TIER_HOST;
      v1::SnapshotRecord kept = r;
      kept.set_daemon_epoch(options_.epoch);  // in this start's host tier
      kept.mutable_host_copy()->set_offset(snap.block->offset());
      kept.mutable_host_copy()->set_bytes(snap.block->size());
      kept.mutable_host_copy()->set_checksum(sum);
      records.push_back(std::move(kept));
      result.bytes += r.tier() == v1::TIER_DISK ? r.raw_bytes() : r.stored_bytes();
    }
  }
  v1::HostTierKept marker;
  marker.set_epoch(options_.epoch);
  marker.set_arena_bytes(host_->budget());
  marker.set_steps(records.size());
  result.status = catalog_->PutHostTierKept(marker, records);
  if (result.status.ok()) {
    result.steps = records.size();
    result.host_only = host_only;
    unsaved_why_.clear();  // what a drain left in host memory is in the kept tier
  } else {
    unsaved_why_ = "recording the host tier for systemd's fd store failed: " +
                   result.status.message();
  }
  return result;
}

StoreCounters Store::Counters() const {
  MutexLock lock(ix_.mu);
  StoreCounters c = ix_.counters;
  c.runs = ix_.runs.size();
  AddTieringCounters(c);
  for (const auto& [id, run] : ix_.runs) {
    for (const auto& [step, snap] : run.snapshots) {
      if (snap.block) ++c.host_snapshots;
      if (snap.record.tier() == v1::TIER_DISK) {
        ++c.disk_snapshots;
        c.disk_raw_bytes += snap.record.raw_bytes();
      }
      if (snap.record.tier() == v1::TIER_LOST) ++c.lost_snapshots;
    }
  }
  return c;
}

}  // namespace snapd
