// Client::Impl's control channel: gRPC to adjsnapd (see client_impl.h), and the public calls
// that are one control-plane request each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client_impl.h"
#include "device_pool.h"
#include "adjsnap/layers.h"
#include "adjsnap/transfer_fit.h"

namespace adjsnap {

namespace {

constexpr auto kControlDeadline = std::chrono::seconds(30);

Status FromGrpc(const grpc::Status& s) {
  return Status(static_cast<Code>(s.error_code()), s.error_message());
}

RunSpec FromProto(const v1::RunSpec& p) {
  RunSpec s;
  s.name = p.name();
  s.steps = p.steps();
  s.bytes_per_step = p.bytes_per_step();
  s.dtype = static_cast<Dtype>(p.dtype());
  s.shape.assign(p.shape().begin(), p.shape().end());
  s.layers = p.layers() == v1::LAYERS_DEFAULT ? "" : LayersName(p.layers());
  s.keep = p.keep();
  s.block_when_full = p.block_when_full();
  s.codec = static_cast<Codec>(p.codec());
  s.codec_param = p.codec_param();
  s.compress_at_ingest = p.compress_when() == v1::COMPRESS_AT_INGEST;
  s.job = p.job();
  s.check_finite = p.check_finite();
  s.overwrite = p.overwrite();
  s.spool_class = p.spool_class();
  return s;
}

Location FromProto(const v1::SnapshotInfo& s) {
  Location loc;
  loc.step = s.step();
  loc.tier = static_cast<Tier>(s.tier());
  loc.raw_bytes = s.raw_bytes();
  loc.stored_bytes = s.stored_bytes();
  loc.checksum = s.checksum();
  loc.checksum_recorded = s.checksum_state() == v1::CHECKSUM_RECORDED;
  loc.on_disk = s.on_disk();
  loc.codec = static_cast<Codec>(s.codec());
  loc.device_session = s.device_session();
  return loc;
}

RunInfo FromProto(const v1::RunInfo& p) {
  RunInfo r;
  r.run_id = p.run_id();
  r.spec = FromProto(p.spec());
  r.closed = p.state() == v1::RUN_CLOSED;
  r.snapshots = p.snapshots();
  r.stored_bytes = p.stored_bytes();
  r.host_boundary = p.host_boundary();
  r.device_boundary = p.device_boundary();
  r.lost_snapshots = p.lost_snapshots();
  r.compressed_snapshots = p.compressed_snapshots();
  r.failure = p.failure();
  return r;
}

}  // namespace

Status Client::Impl::Control(const std::function<grpc::Status(grpc::ClientContext*)>& call,
                             bool* resent) {
  // Once connected, a call during a restart of adjsnapd waits for it (reconnect_timeout_s), with
  // backoff; Connect itself fails at once.
  const double timeout = session_id != 0 ? reconnect_timeout_s.load() : 0;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  auto backoff = std::chrono::milliseconds(50);
  uint64_t generation;
  {
    MutexLock lock(conn_mu);
    generation = conn_generation;
  }
  bool reopened = false;
  for (;;) {
    Status s = ControlOnce(call);
    if (s.code() == Code::kUnauthenticated && timeout > 0 && !reopened) {
      // adjsnapd does not know this session: it restarted, and the gRPC channel reached the new
      // adjsnapd before the data plane noticed the old one go. Open a new session as a lost
      // endpoint does, then call again with it (the call reads the session when it runs).
      auto reopen = std::make_shared<std::promise<Status>>();
      std::future<Status> done = reopen->get_future();
      AfterReconnect(generation, [reopen](Status r) { reopen->set_value(std::move(r)); });
      if (Status r = done.get(); !r.ok()) return r;
      reopened = true;
      continue;
    }
    // CANCELLED: adjsnapd cancelled the call as it stopped (it answers what is in flight for up
    // to 2 s, then cancels the rest), which a restart does; it is sent again once adjsnapd is back,
    // as a call during the restart is. Either may have run before the stop: `resent` says so.
    const bool cut = s.code() == Code::kUnavailable || s.code() == Code::kCancelled;
    if (!cut || timeout <= 0 || std::chrono::steady_clock::now() + backoff > deadline) {
      if (s.code() == Code::kCancelled) {
        return Status::Unavailable("adjsnapd at " + socket_path +
                                   " cancelled the call as it stopped (" + s.message() + ")");
      }
      return s;
    }
    if (resent) *resent = true;
    {
      MutexLock lock(conn_mu);
      if (closing) return s;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

std::string Client::Impl::WaitExplainer::Explain(const std::string& kind, uint64_t run_id,
                                                 uint64_t step) {
  MutexLock lock(mu_);  // held through the call: Detach waits for it
  Impl* impl = impl_;
  if (!impl) return "";
  v1::StatsResponse resp;
  Status s = impl->ControlOnce([&](grpc::ClientContext* ctx) {
    return impl->stub->Stats(ctx, v1::StatsRequest(), &resp);
  });
  if (!s.ok()) return "asking adjsnapd what it waits for failed: " + s.ToString();
  for (const v1::Wait& w : resp.waits()) {
    if (w.kind() == kind && w.run_id() == run_id && w.step() == step) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f s", w.seconds());
      return "adjsnapd reports it has waited " + std::string(waited) + " for " + w.waiting_for();
    }
  }
  return "adjsnapd reports no " + kind + " of it waiting (" + std::to_string(resp.waiting_pushes()) +
         " pushes and " + std::to_string(resp.waiting_fetches()) +
         " fetches wait there): its answer is on its way, or was lost between adjsnapd and this "
         "client";
}

void Client::Impl::Describe(detail::OpState& state, const std::string& kind, uint64_t run_id,
                            uint64_t step) {
  state.what = kind + " of step " + std::to_string(step) + " of run id " + std::to_string(run_id);
  state.explain = [explainer = explainer, kind, run_id, step] {
    return explainer->Explain(kind, run_id, step);
  };
  state.default_timeout = wait_timeout;
}

Status Client::Impl::ControlOnce(
    const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  grpc::Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kControlDeadline);
    // The retry waits for the channel to connect again instead of failing fast.
    ctx.set_wait_for_ready(attempt > 0);
    s = call(&ctx);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    ADJSNAP_RETURN_IF_ERROR(detail::ProbeSocket(socket_path));  // adjsnapd is gone: say so
    // adjsnapd is there but this channel's connection was lost (for example to a flood of other
    // connections on the socket). gRPC says "failed to connect" only for a call it never
    // sent, so sending it once more cannot run it twice; anything else is returned as it is.
    if (s.error_message().find("failed to connect") == std::string::npos) break;
  }
  return FromGrpc(s);
}

Status Client::Impl::OpenSession(const std::string& client_name, bool with_ucx,
                                 v1::OpenSessionResponse* resp, double deadline_s) {
  v1::OpenSessionRequest req;
  req.set_client_name(client_name);
  if (with_ucx) req.set_ucx_address(loop->address());
  {
    // A reconnect: the new session attaches to this client's runs, so that its death orphans
    // them (control.proto, OpenSessionRequest.run_ids; adjsnapd takes at most 4096).
    MutexLock lock(runs_mu);
    for (auto it = known_runs.rbegin(); it != known_runs.rend(); ++it) {  // the newest first
      if (req.run_ids_size() == kMaxReattachRuns) break;
      req.add_run_ids(it->first);
    }
  }
  auto call = [&](grpc::ClientContext* ctx) { return stub->OpenSession(ctx, req, resp); };
  if (deadline_s > 0) {  // a reconnect's one try: it has its own retries
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
    ctx.set_wait_for_ready(true);
    grpc::Status opened = call(&ctx);
    if (!opened.ok()) {
      return Status(static_cast<Code>(opened.error_code()), opened.error_message());
    }
  } else {
    ADJSNAP_RETURN_IF_ERROR(Control(call));
  }
  if (resp->wire_version() != wire::kVersion) {
    return Status::FailedPrecondition("adjsnapd speaks data-plane wire version " +
                                      std::to_string(resp->wire_version()) +
                                      " but this libadjsnap speaks " +
                                      std::to_string(wire::kVersion) + "; upgrade the older one");
  }
  return Status::Ok();
}

void Client::Impl::CloseSession() {
  if (!stub || session_id == 0) return;
  v1::CloseSessionRequest req;
  req.set_session_id(session_id);
  req.set_token(token);
  v1::CloseSessionResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (void)stub->CloseSession(&ctx, req, &resp);  // the daemon also drops dead endpoints
}

Result<RunInfo> Client::OpenRun(const RunSpec& spec) {
  v1::OpenRunRequest req;
  v1::RunSpec* p = req.mutable_spec();
  p->set_name(spec.name);
  p->set_steps(spec.steps);
  p->set_bytes_per_step(spec.bytes_per_step);
  p->set_dtype(static_cast<v1::Dtype>(spec.dtype));
  for (uint64_t d : spec.shape) p->add_shape(d);
  v1::Layers layers;
  if (!ParseLayers(spec.layers, &layers)) {
    return Status::InvalidArgument("run '" + spec.name + "': unknown layers '" + spec.layers +
                                   "' (DiskHostDevice, HostDevice, DiskHost, Host, Device, "
                                   "Disk or NoLayers)");
  }
  p->set_layers(layers);
  p->set_keep(spec.keep);
  p->set_block_when_full(spec.block_when_full);
  p->set_codec(static_cast<v1::Codec>(spec.codec));
  p->set_codec_param(spec.codec_param);
  p->set_compress_when(spec.compress_at_ingest ? v1::COMPRESS_AT_INGEST
                                               : v1::COMPRESS_ON_DEMOTION);
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  p->set_job(!spec.job.empty() ? spec.job : slurm_job ? slurm_job : "");
  p->set_check_finite(spec.check_finite);
  p->set_overwrite(spec.overwrite);
  p->set_spool_class(spec.spool_class);
  if (spec.check_finite && spec.dtype != Dtype::kFloat32 && spec.dtype != Dtype::kFloat64) {
    return Status::InvalidArgument("run '" + spec.name +
                                   "': check_finite needs dtype float32 or float64");
  }
  // Device layers: reserve the pool slots for the newest steps before the daemon splits the
  // rest between host and disk.
  detail::DevicePool* pool = nullptr;
  detail::DevicePool::RunPlan plan;
  const LayersEntry* uses = FindLayers(layers);
  if (std::string why = spec.overwrite ? OverwriteWithDeviceLayers(spec.name, layers) : "";
      !why.empty()) {
    return Status::InvalidArgument(why);  // as the daemon would, before any GPU is set up
  }
  if (uses && uses->device) {
    ADJSNAP_ASSIGN_OR_RETURN(pool, impl_->EnsurePool(spec.name, layers));
    if (pool->RunIdOf(spec.name)) pool = nullptr;  // reopened here: its slots are reserved
  }
  if (pool) {
    plan = pool->ReserveRun(spec.steps, spec.bytes_per_step);
    if (!uses->host && !uses->disk && (plan.slots == 0 || plan.slots < spec.steps)) {
      pool->FreeRegion(plan);
      return Status::ResourceExhausted(
          "run '" + spec.name + "': layers Device keep every step in this client's GPU pool, " +
          "which has room for " + std::to_string(plan.slots) + " of " +
          (spec.steps ? std::to_string(spec.steps) : std::string("an unknown number of")) +
          " steps of " + std::to_string(spec.bytes_per_step) +
          " bytes; use HostDevice or DiskHostDevice, or raise ADJSNAP_DEVICE_MEM");
    }
    req.set_device_steps(plan.slots);
  }
  v1::OpenRunResponse resp;
  Status opened = impl_->Control([&](grpc::ClientContext* ctx) {
    // The session as it is when the call runs: a reconnect between two tries replaces it.
    req.set_session_id(impl_->session_id);  // a run not kept goes when every opener died
    req.set_token(impl_->token);
    return impl_->stub->OpenRun(ctx, req, &resp);
  });
  if (pool && (!opened.ok() || !resp.created() || plan.slots == 0)) {
    pool->FreeRegion(plan);  // refused, or attached: the creator's pool holds its device steps
  } else if (pool) {
    pool->AddRun(resp.run().run_id(), spec.name, plan, spec.steps, spec.keep,
                 !uses->host && !uses->disk);
  }
  ADJSNAP_RETURN_IF_ERROR(opened);
  RunInfo info = FromProto(resp.run());
  info.created = resp.created();
  {
    MutexLock lock(impl_->runs_mu);  // also when attaching to a run another client opened
    Impl::KnownRun& known = impl_->known_runs[info.run_id];
    known.name = info.spec.name;
    known.bytes_per_step = info.spec.bytes_per_step;
    if (info.spec.check_finite) known.finite_checked = info.spec.dtype;
    known.frames = info.spec.codec == Codec::kBitcomp || info.spec.codec == Codec::kBitcompLossy ||
                   info.spec.codec == Codec::kAns;
  }
  return info;
}

Status Client::CloseRun(const std::string& name) {
  impl_->FlushRecords();  // device steps pushed before the close are recorded before it
  v1::CloseRunRequest req;
  req.set_name(name);
  v1::CloseRunResponse resp;
  return impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->CloseRun(ctx, req, &resp); });
}

Status Client::DeleteRun(const std::string& name) {
  impl_->FlushRecords();
  v1::DeleteRunRequest req;
  req.set_name(name);
  v1::DeleteRunResponse resp;
  bool resent = false;
  Status deleted = impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->DeleteRun(ctx, req, &resp); }, &resent);
  // Sent again across a restart: NOT_FOUND means the first try deleted it.
  if (!(resent && deleted.code() == Code::kNotFound)) ADJSNAP_RETURN_IF_ERROR(deleted);
  {
    MutexLock lock(impl_->runs_mu);  // a reconnect no longer names it
    for (auto it = impl_->known_runs.begin(); it != impl_->known_runs.end(); ++it) {
      if (it->second.name == name) {
        impl_->known_runs.erase(it);
        break;
      }
    }
  }
  if (detail::DevicePool* pool = impl_->Pool()) {
    detail::DevicePool::Dropped dropped = pool->DropRun(name);
    for (const auto& busy : dropped.busy) (void)busy->WaitCompleted();
    if (dropped.found) pool->FreeRegion(dropped.plan);
  }
  return Status::Ok();
}

Status Client::DeleteSnapshot(const std::string& name, uint64_t step) {
  impl_->FlushRecords();
  v1::DeleteSnapshotRequest req;
  req.set_name(name);
  req.set_step(step);
  v1::DeleteSnapshotResponse resp;
  bool resent = false;
  Status deleted = impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->DeleteSnapshot(ctx, req, &resp); },
      &resent);
  // Sent again across a restart: NOT_FOUND means the first try deleted it.
  if (!(resent && deleted.code() == Code::kNotFound)) ADJSNAP_RETURN_IF_ERROR(deleted);
  if (detail::DevicePool* pool = impl_->Pool()) {
    if (std::optional<uint64_t> id = pool->RunIdOf(name)) pool->Drop(*id, step, nullptr);
  }
  return Status::Ok();
}

Result<std::vector<RunInfo>> Client::ListRuns() {
  v1::ListRunsRequest req;
  v1::ListRunsResponse resp;
  ADJSNAP_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->ListRuns(ctx, req, &resp); }));
  std::vector<RunInfo> runs;
  for (const auto& r : resp.runs()) runs.push_back(FromProto(r));
  return runs;
}

Result<Location> Client::Locate(const std::string& name, uint64_t step) {
  v1::LocateRequest req;
  req.set_name(name);
  req.set_step(step);
  v1::LocateResponse resp;
  ADJSNAP_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->Locate(ctx, req, &resp); }));
  return FromProto(resp.snapshot());
}

Result<std::vector<Location>> Client::ListSnapshots(const std::string& name) {
  v1::ListSnapshotsRequest req;
  req.set_name(name);
  v1::ListSnapshotsResponse resp;
  ADJSNAP_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->ListSnapshots(ctx, req, &resp); }));
  std::vector<Location> out;
  out.reserve(resp.snapshots_size());
  for (const auto& s : resp.snapshots()) out.push_back(FromProto(s));
  return out;
}

Result<uint64_t> Client::Prefetch(const std::string& name, const std::vector<uint64_t>& steps) {
  v1::PrefetchRequest req;
  req.set_name(name);
  for (uint64_t s : steps) req.add_steps(s);
  v1::PrefetchResponse resp;
  ADJSNAP_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->Prefetch(ctx, req, &resp); }));
  return resp.scheduled();
}

namespace {
TransferCost CostOf(const v1::TransferFit& f) {
  return {f.latency_seconds(), f.bytes_per_second(), f.samples(), f.min_bytes(), f.max_bytes()};
}
TransferFit FitOf(const TransferCost& c) {
  return {c.latency_seconds, c.bytes_per_second, c.samples, c.min_bytes, c.max_bytes};
}
}  // namespace

bool TransferCost::Covers(uint64_t bytes) const { return FitOf(*this).Covers(bytes); }

double TransferCost::Seconds(uint64_t bytes) const { return FitOf(*this).Seconds(bytes); }

Result<std::vector<TierInfo>> Client::Tiers() {
  v1::StatsResponse resp;
  ADJSNAP_RETURN_IF_ERROR(impl_->Control([&](grpc::ClientContext* ctx) {
    return impl_->stub->Stats(ctx, v1::StatsRequest(), &resp);
  }));
  std::vector<TierInfo> out;
  for (const auto& t : resp.tiers()) {
    out.push_back({.tier = static_cast<Tier>(t.tier()),
                   .budget_bytes = t.budget_bytes(),
                   .used_bytes = t.used_bytes(),
                   .snapshots = t.snapshots(),
                   .write_bytes_per_second = t.write_bytes_per_second(),
                   .read_bytes_per_second = t.read_bytes_per_second(),
                   .spool_class = t.spool_class(),
                   .write_fit = CostOf(t.write_fit()),
                   .read_fit = CostOf(t.read_fit())});
  }
  if (detail::DevicePool* pool = impl_->Pool()) {  // this client's own GPU pool
    out.push_back({.tier = Tier::kDevice,
                   .budget_bytes = pool->capacity(),
                   .used_bytes = pool->reserved_bytes(),
                   .snapshots = pool->held_steps()});
  }
  return out;
}

}  // namespace adjsnap
