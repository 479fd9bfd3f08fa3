#include "adjsnap/client.h"

#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client_impl.h"
#include "device_copy.h"
#include "op_state.h"
#include "adjsnap/kernels.h"
#include "adjsnap/paths.h"
#include "task_thread.h"

namespace adjsnap {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
    case Tier::kLost: return "lost";
    case Tier::kInFlight: return "in flight";
    default: return "unknown";
  }
}

Status PushHandle::WaitReleased() const { return WaitReleased(state_->default_timeout); }
Status PushHandle::WaitReleased(std::chrono::milliseconds timeout) const {
  return state_->WaitReleasedFor(timeout);
}
Status PushHandle::WaitStored() const { return WaitStored(state_->default_timeout); }
Status PushHandle::WaitStored(std::chrono::milliseconds timeout) const {
  return state_->WaitCompletedFor(timeout);
}
bool PushHandle::released() const {
  MutexLock lock(state_->mu);
  return state_->released;
}
bool PushHandle::stored() const {
  MutexLock lock(state_->mu);
  return state_->completed;
}
Status FetchHandle::Wait() const { return Wait(state_->default_timeout); }
Status FetchHandle::Wait(std::chrono::milliseconds timeout) const {
  return state_->WaitCompletedFor(timeout);
}
uint64_t FetchHandle::frame_bytes() const { return state_ ? state_->frame_bytes.load() : 0; }

bool FetchHandle::done() const {
  MutexLock lock(state_->mu);
  return state_->completed;
}

Client::Impl::~Impl() {
  explainer->Detach();  // the handles may outlive the client
  {
    MutexLock lock(conn_mu);
    closing = true;
  }
  conn_cv.NotifyAll();
  reconnector.reset();  // a reconnect in progress gives up; what waits for it fails
  {
    std::unique_ptr<detail::TaskThread> records;
    {
      MutexLock lock(device_mu);
      records = std::move(recorder);
    }
    records.reset();  // sends the device-tier records still queued, while the session lives
  }
  // A session socket that closes ends its session on adjsnapd's side at once, as a killed
  // client's does: a mapped client closes its session first, in order (what is pending fails
  // "client disconnected" when adjsnapd then closes the socket).
  const bool closed_first = mapped;
  if (closed_first) CloseSession();
  // Order matters: (1) on the loop, close the endpoint so no more replies arrive, and fail
  // what is pending (GPU copies still in flight post follow-ups that fail fast for want of an
  // endpoint); (2) stop the loop.
  if (loop && loop->running()) {  // not running: Connect failed before any endpoint existed
    auto closed = std::make_shared<detail::OpState>();
    loop->Post([this, closed] {
      if (ep) ucx::CloseEndpoint(*loop, ep, /*force=*/false);
      ep = nullptr;
      link.reset();
      FailAll(Status::Aborted("client disconnected"));
      closed->Complete(Status::Ok());
    });
    (void)closed->WaitCompleted();
  }
  if (loop) loop->Stop();
  if (!closed_first) CloseSession();
  if (arena) {
    pinning.reset();  // unpins what device pushes and fetches pinned
    munmap(arena.load(), arena_bytes);
  }
  MutexLock lock(device_mu);
  if (device_base) detail::DeviceRelease(device_base);  // waits for copies still in flight
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->socket_path = options.socket_path.empty() ? ClientSocketPath() : options.socket_path;
  impl->client_name = options.client_name;
  impl->reconnect_timeout_s = options.reconnect_timeout_s;
  if (const char* t = std::getenv("ADJSNAP_RECONNECT_TIMEOUT"); t && *t) {
    char* end = nullptr;
    double seconds = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(seconds >= 0)) {
      return Status::InvalidArgument(std::string("ADJSNAP_RECONNECT_TIMEOUT must be a number of "
                                                 "seconds (0 = do not reconnect), got '") +
                                     t + "'");
    }
    impl->reconnect_timeout_s = seconds;
  }
  double wait_timeout_s = options.wait_timeout_s;
  if (const char* t = std::getenv("ADJSNAP_WAIT_TIMEOUT"); t && *t) {
    char* end = nullptr;
    wait_timeout_s = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(wait_timeout_s >= 0)) {
      return Status::InvalidArgument(std::string("ADJSNAP_WAIT_TIMEOUT must be a number of "
                                                 "seconds (0 = wait for ever), got '") +
                                     t + "'");
    }
  }
  if (!(wait_timeout_s >= 0)) {
    return Status::InvalidArgument("ClientOptions.wait_timeout_s must be >= 0 (0 = wait for "
                                   "ever), got " + std::to_string(wait_timeout_s));
  }
  impl->wait_timeout = wait_timeout_s == 0 || wait_timeout_s > 1e9
                           ? detail::OpState::kForever
                           : std::chrono::milliseconds(
                                 static_cast<int64_t>(std::ceil(wait_timeout_s * 1000)));
  std::string copy_error;
  int copy_threads = detail::CopyPool::Choose(options.copy_threads, &copy_error);
  if (copy_threads == 0) return Status::InvalidArgument(copy_error);
  ADJSNAP_RETURN_IF_ERROR(detail::ProbeSocket(impl->socket_path));
  // Reconnects after a restart of adjsnapd come quickly: gRPC's default backoff grows to 2 min.
  grpc::ChannelArguments channel_args;
  channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  impl->stub = v1::Control::NewStub(grpc::CreateCustomChannel(
      "unix:" + impl->socket_path, grpc::InsecureChannelCredentials(), channel_args));

  // The worker runs before the session opens: adjsnapd connects to it while answering.
  ADJSNAP_ASSIGN_OR_RETURN(impl->loop, ucx::WorkerLoop::Create("libadjsnap"));
  impl->ucx_takes_cuda = detail::UcxTakesCuda(impl->loop->context());
  ADJSNAP_RETURN_IF_ERROR(ucx::SetDefaultAmHandler(impl->loop->worker(), &Impl::OnUnknownId,
                                                 impl.get()));
  ADJSNAP_RETURN_IF_ERROR(
      ucx::SetAmHandler(impl->loop->worker(), wire::kReply, &Impl::OnReply, impl.get()));
  impl->loop->Start("adjsnap-client");

  if (const char* mem = std::getenv("ADJSNAP_DEVICE_MEM"); mem && *mem) {
    impl->device_options = detail::ParseDeviceMem(mem, &impl->device_fraction,
                                                  &impl->device_bytes);
  } else {
    impl->device_fraction = options.device_mem_perc;
    impl->device_bytes = options.device_mem_bytes;
    if (!(options.device_mem_perc > 0 && options.device_mem_perc <= 1)) {
      impl->device_options = Status::InvalidArgument(
          "ClientOptions.device_mem_perc " + std::to_string(options.device_mem_perc) +
          " is not in (0, 1]");
    }
  }
  // The mapped path first: a session with no UCX endpoint, whose link is the arena socket's
  // connection (wire.h). Where the arena is refused, or mapping is off, a session with a UCX
  // endpoint instead (the copied path).
  const char* path_env = std::getenv("ADJSNAP_DATA_PATH");
  const bool try_mapped = options.map_host_tier && !(path_env && std::string(path_env) == "ucx");
  v1::OpenSessionResponse resp;
  ADJSNAP_RETURN_IF_ERROR(impl->OpenSession(options.client_name, /*with_ucx=*/!try_mapped, &resp));
  impl->session_id = resp.session_id();
  impl->token = resp.token();
  char* base = nullptr;
  uint64_t base_bytes = 0;
  auto socket = std::make_shared<ucx::ScopedFd>();
  if (!try_mapped) {
    impl->data_path_reason = "mapping turned off by the caller";
  } else if (Status s = detail::MapArena(resp.arena_socket(), impl->session_id, impl->token, &base,
                                         &base_bytes, socket.get());
             !s.ok()) {
    impl->data_path_reason = s.ToString();
    impl->CloseSession();  // it has no link; the copied path needs one with an endpoint
    resp.Clear();
    if (Status u = impl->OpenSession(options.client_name, /*with_ucx=*/true, &resp); !u.ok()) {
      return Status(u.code(), u.message() +
                                  " (for the copied path, since the mapped one was "
                                  "refused: " +
                                  impl->data_path_reason + ")");
    }
    impl->session_id = resp.session_id();
    impl->token = resp.token();
  }
  impl->data_plane_address = resp.data_plane_worker_address();
  impl->arena = base;
  impl->arena_bytes = base_bytes;
  impl->mapped = base != nullptr;
  impl->copier = std::make_unique<detail::CopyPool>(impl->mapped ? copy_threads : 1);
  if (impl->arena) {
    impl->pinning = std::make_unique<detail::HostPinning>(
        base, base_bytes, detail::HostPinning::kDefaultChunk, detail::PinHost,
        detail::UnpinHost);
  }

  // Before the link: a link lost at once starts a reconnect on it (Impl::LinkLost).
  impl->reconnector = std::make_unique<detail::TaskThread>("adjsnap-reconn");
  // The session's link: its socket, or an endpoint bound to the session with Hello.
  auto hello = std::make_shared<detail::OpState>();
  Impl* raw = impl.get();
  raw->loop->Post([raw, hello, socket] { raw->StartLink(raw->mapped ? socket : nullptr, hello); });
  Status bound = hello->WaitCompleted();
  if (!bound.ok()) {
    return Status(
        bound.code(),
        "binding the data plane to the session: " + bound.message() +
            (impl->mapped ? std::string()
                          : " (the copied path; the mapped one: " + impl->data_path_reason + ")"));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<PushHandle> Client::Push(uint64_t run_id, uint64_t step, const void* data,
                                size_t bytes) {
  if (data == nullptr && bytes != 0) {
    return Status::InvalidArgument("push of step " + std::to_string(step) +
                                   ": data is null but bytes is " + std::to_string(bytes));
  }
  ADJSNAP_RETURN_IF_ERROR(
      impl_->CheckPush(run_id, step, data, bytes, /*device=*/false, nullptr, "push"));
  if (auto pooled = impl_->PushToPool(run_id, step, data, bytes, nullptr)) return *pooled;
  return impl_->StartPush(run_id, step, data, bytes, /*device=*/false, nullptr);
}

Result<PushHandle> Client::PushDevice(uint64_t run_id, uint64_t step, const void* device_data,
                                      size_t bytes, void* stream) {
  if (device_data == nullptr && bytes != 0) {
    return Status::InvalidArgument("device push of step " + std::to_string(step) +
                                   ": data is null but bytes is " + std::to_string(bytes));
  }
  ADJSNAP_RETURN_IF_ERROR(
      impl_->GpuUsable("device push of step " + std::to_string(step) + " needs CUDA"));
  ADJSNAP_RETURN_IF_ERROR(
      impl_->CheckPush(run_id, step, device_data, bytes, /*device=*/true, stream, "device push"));
  if (auto pooled = impl_->PushToPool(run_id, step, device_data, bytes, stream)) return *pooled;
  return impl_->PushDeviceToDaemon(run_id, step, device_data, bytes, stream);
}

Status Client::Impl::CheckPush(uint64_t run_id, uint64_t step, const void* data, size_t bytes,
                               bool device, void* stream, const char* what) {
  KnownRun known;
  {
    MutexLock lock(runs_mu);
    auto it = known_runs.find(run_id);
    if (it == known_runs.end()) return Status::Ok();
    known = it->second;
  }
  // A chunk frame of an nvCOMP run is shorter (adjsnapd checks it when it stores it); its values
  // are coded, so a finite check applies to the raw step only.
  bool frame = known.frames && bytes > 0 && bytes < known.bytes_per_step;
  if (known.bytes_per_step != bytes && !frame) {
    return Status::InvalidArgument(std::string(what) + " of step " + std::to_string(step) +
                                   " of run " + std::to_string(run_id) + ": " +
                                   std::to_string(bytes) + " bytes, but the run stores " +
                                   std::to_string(known.bytes_per_step) + " per step");
  }
  if (!known.finite_checked || frame) return Status::Ok();
  Dtype dtype = *known.finite_checked;
  bool f64 = dtype == Dtype::kFloat64;
  uint64_t count = bytes / (f64 ? 8 : 4);
  uint64_t bad = kernels::kAllFinite;
  if (device) {
    ADJSNAP_RETURN_IF_ERROR(detail::FirstNonFiniteOnDevice(data, count, f64, stream, &bad));
  } else {
    bad = kernels::FirstNonFiniteCpu(data, count, f64 ? kernels::Real::kFloat64
                                                      : kernels::Real::kFloat32);
  }
  if (bad == kernels::kAllFinite) return Status::Ok();
  return Status::InvalidArgument("step " + std::to_string(step) + " of run id " +
                                 std::to_string(run_id) + ": element " + std::to_string(bad) +
                                 " is NaN or infinite; not pushed (the run has check_finite)");
}

Result<FetchHandle> Client::FetchAsync(uint64_t run_id, uint64_t step, void* data,
                                       size_t bytes) {
  if (data == nullptr) {
    return Status::InvalidArgument("fetch of step " + std::to_string(step) +
                                   ": destination buffer is null");
  }
  if (auto pooled = impl_->FetchFromPool(run_id, step, data, bytes, nullptr)) return *pooled;
  return impl_->StartFetch(run_id, step, data, bytes, /*device=*/false, nullptr);
}

Result<FetchHandle> Client::FetchDeviceAsync(uint64_t run_id, uint64_t step, void* device_data,
                                             size_t bytes, void* stream) {
  if (device_data == nullptr) {
    return Status::InvalidArgument("device fetch of step " + std::to_string(step) +
                                   ": destination is null");
  }
  ADJSNAP_RETURN_IF_ERROR(
      impl_->GpuUsable("device fetch of step " + std::to_string(step) + " needs CUDA"));
  if (auto pooled = impl_->FetchFromPool(run_id, step, device_data, bytes, stream)) {
    return *pooled;
  }
  return impl_->FetchDeviceFromDaemon(run_id, step, device_data, bytes, stream);
}

Status Client::Fetch(uint64_t run_id, uint64_t step, void* data, size_t bytes) {
  ADJSNAP_ASSIGN_OR_RETURN(FetchHandle h, FetchAsync(run_id, step, data, bytes));
  return h.Wait();
}

const std::string& Client::socket_path() const { return impl_->socket_path; }
void Client::set_reconnect_timeout(double seconds) {
  impl_->reconnect_timeout_s = seconds > 0 ? seconds : 0;
}
DataPath Client::data_path() const {
  return impl_->mapped ? DataPath::kMappedHostTier : DataPath::kUcx;
}
const std::string& Client::data_path_reason() const { return impl_->data_path_reason; }

std::string Client::data_transports() const { return impl_->EndpointTransports(); }

int Client::copy_threads() const { return impl_->copier->threads(); }

}  // namespace adjsnap

