#include "snapd/client.h"

#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "device_copy.h"
#include "device_pool.h"
#include "op_state.h"
#include "snapd/paths.h"
#include "snapd/kernels.h"
#include "snapd/layers.h"
#include "snapd/v1/control.grpc.pb.h"
#include "snapd/wire.h"
#include "task_thread.h"
#include "snapd/ucx.h"
#include "snapd/unix_socket.h"

namespace snapd {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return "device";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
    case Tier::kLost: return "lost";
    default: return "unknown";
  }
}

Status PushHandle::WaitReleased() const { return state_->WaitReleased(); }
Status PushHandle::WaitStored() const { return state_->WaitCompleted(); }
bool PushHandle::released() const {
  MutexLock lock(state_->mu);
  return state_->released;
}
bool PushHandle::stored() const {
  MutexLock lock(state_->mu);
  return state_->completed;
}
Status FetchHandle::Wait() const { return state_->WaitCompleted(); }
bool FetchHandle::done() const {
  MutexLock lock(state_->mu);
  return state_->completed;
}

namespace {

constexpr auto kControlDeadline = std::chrono::seconds(30);

Status FromGrpc(const grpc::Status& s) {
  return Status(static_cast<Code>(s.error_code()), s.error_message());
}

// A plain connect() tells "no daemon" apart from other failures, with errno, before gRPC
// retries hide the cause.
Status ProbeSocket(const std::string& path) {
  auto fd = ConnectUnix(path);
  if (fd.ok() || fd.status().code() != Code::kUnavailable) return fd.status();
  return Status::Unavailable("snapd is not running at " + path + " (" + fd.status().message() +
                             "). Start it with `snapd` (or `systemctl start snapd`), or set "
                             "SNAPD_SOCKET to the socket it listens on");
}

uint64_t NanosSince(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
}

// Asks the arena socket for the host tier's memfd and maps it. The daemon refuses clients of
// another uid; the caller then uses the copied UCX path.
Status MapArena(const std::string& path, uint64_t session_id, uint64_t token, char** base,
                uint64_t* bytes) {
  if (path.empty()) return Status::Unavailable("snapd offers no arena socket");
  auto connected = ConnectUnix(path);
  if (!connected.ok()) {
    return Status::Unavailable("arena socket " + path + ": " + connected.status().message());
  }
  ucx::ScopedFd sock = std::move(connected).value();
  wire::ArenaRequest req{session_id, token};
  if (send(sock.get(), &req, sizeof req, MSG_NOSIGNAL) != sizeof req) {
    return Status::Unavailable("arena socket " + path + ": send failed");
  }
  wire::ArenaReply reply{};
  iovec iov{&reply, sizeof reply};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock.get(), &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC) != sizeof reply) {
    return Status::Unavailable("arena socket " + path + ": short reply");
  }
  if (reply.code != 0) {
    size_t n = std::min<size_t>(reply.message_length, wire::kMaxReplyMessage);
    return Status(static_cast<Code>(reply.code), std::string(reply.message, n));
  }
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) {
    return Status::Internal("arena socket replied without a file descriptor");
  }
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  ucx::ScopedFd arena_fd(fd);
  void* p = mmap(nullptr, reply.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Internal(std::string("mapping the host tier: ") +
                                               std::strerror(errno));
  *base = static_cast<char*>(p);
  *bytes = reply.arena_bytes;
  return Status::Ok();
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
  return r;
}

}  // namespace

// Threading: the fields after `loop` belong to the loop thread; everything before is set
// during Connect and then read-only.
struct Client::Impl {
  enum class Kind { kHello, kPush, kFetch, kReserve, kCommit, kFetchMapped };
  struct Pending {
    Kind kind;
    std::shared_ptr<detail::OpState> state;
    void* buffer = nullptr;  // fetch destination, or (kReserve) the push source
    size_t bytes = 0;
    uint64_t run_id = 0;     // kReserve: what to commit once copied
    uint64_t step = 0;
    void* stream = nullptr;  // device pushes and fetches: the caller's CUDA stream
    bool device = false;     // `buffer` is GPU memory: the copy engine moves the bytes
  };

  std::string socket_path;
  char* arena = nullptr;  // the daemon's host tier, mapped; null on the UCX path
  uint64_t arena_bytes = 0;
  std::string data_path_reason;
  std::unique_ptr<v1::Control::Stub> stub;
  uint64_t session_id = 0;
  uint64_t token = 0;
  std::string data_plane_address;  // snapd's packed UCX worker address
  std::atomic<uint64_t> next_request{1};
  std::unique_ptr<ucx::WorkerLoop> loop;
  // Loop-thread state.
  ucp_ep_h ep = nullptr;
  Status ep_error;  // set when the endpoint failed; later requests fail with it
  std::unordered_map<uint64_t, Pending> pending;
  // Pushes not yet stored, by (run, step): a fetch of such a step waits for its push, so a
  // client always reads what it wrote (released comes before the daemon has the step).
  Mutex unstored_mu;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<detail::OpState>> unstored
      SNAPD_GUARDED_BY(unstored_mu);
  void TrackPush(uint64_t run_id, uint64_t step, const std::shared_ptr<detail::OpState>& state);
  PushHandle StartPush(uint64_t run_id, uint64_t step, const void* data, size_t bytes,
                       bool device, void* stream);
  FetchHandle StartFetch(uint64_t run_id, uint64_t step, void* data, size_t bytes, bool device,
                         void* stream);
  // What a push must match, for every run this client opened or attached to (runs it only
  // knows by id are checked by snapd, when stored): its step size, and for a run that checks
  // its values (RunSpec.check_finite) the dtype to scan.
  struct KnownRun {
    uint64_t bytes_per_step = 0;
    std::optional<Dtype> finite_checked;
  };
  Mutex runs_mu;
  std::map<uint64_t, KnownRun> known_runs SNAPD_GUARDED_BY(runs_mu);
  // INVALID_ARGUMENT when a push to a known run has another size, or (a checked run) holds NaN
  // or Inf, naming the step and element. `what`: "push" or "device push".
  Status CheckPush(uint64_t run_id, uint64_t step, const void* data, size_t bytes, bool device,
                   void* stream, const char* what);
  std::shared_ptr<detail::OpState> UnstoredPush(uint64_t run_id, uint64_t step);

  // The device tier (device_pool.h): a pool of GPU memory allocated on the first run with a
  // device layer, kept until the client goes.
  // FAILED_PRECONDITION "`what`: no GPU is usable here (why)" unless one is (probed once).
  Status GpuUsable(const std::string& what);
  std::once_flag gpu_once;
  Status gpu_status;
  double device_fraction = 0.7;
  uint64_t device_bytes = 0;
  Status device_options;  // SNAPD_DEVICE_MEM parsed
  Mutex device_mu;
  std::unique_ptr<detail::DevicePool> device_pool SNAPD_GUARDED_BY(device_mu);
  char* device_base SNAPD_GUARDED_BY(device_mu) = nullptr;
  // Sends HoldDeviceStep records in push order, off the solver's thread (a device-tier push
  // costs the solver no control-plane round trip). Created with the pool.
  std::unique_ptr<detail::TaskThread> recorder SNAPD_GUARDED_BY(device_mu);
  // Waits until the records queued so far reached the daemon (before calls that read or change
  // the run's steps there: close, delete).
  void FlushRecords();
  // The pool, allocated on first use; FAILED_PRECONDITION naming the run when no GPU is usable.
  Result<detail::DevicePool*> EnsurePool(const std::string& run_name, v1::Layers layers);
  // Null until a run with a device layer allocated the pool.
  detail::DevicePool* Pool(char** base = nullptr, detail::TaskThread** recorder = nullptr);
  Status HoldOnDaemon(uint64_t run_id, uint64_t step, uint64_t bytes, bool held);
  // A push or fetch the device tier serves; nullopt when the step is the daemon's.
  std::optional<Result<PushHandle>> PushToPool(uint64_t run_id, uint64_t step, const void* data,
                                               size_t bytes, void* stream);
  std::optional<Result<FetchHandle>> FetchFromPool(uint64_t run_id, uint64_t step, void* data,
                                                   size_t bytes, void* stream);
  // Moves the pool's oldest step of a run of unknown length to the daemon (its slot is needed).
  Status Evict(uint64_t run_id, const detail::DevicePool::Evict& evict, const char* slot);
  Result<PushHandle> PushDeviceToDaemon(uint64_t run_id, uint64_t step, const void* device_data,
                                        size_t bytes, void* stream);

  ~Impl();
  Status Control(const std::function<grpc::Status(grpc::ClientContext*)>& call);
  Status CreateEndpoint();
  void FailAll(const Status& s);
  // Sends one request on the loop thread; `data` (push only) travels as AM data.
  // Sends one request on the loop thread; `data` (copied push only) travels as AM data. An
  // entry without state expects no Reply.
  void Send(std::shared_ptr<const void> header, size_t header_bytes, uint64_t request_id,
            wire::AmId op, Pending pending_entry, const void* data, size_t data_bytes);
  // Loop thread: sends a header-only request of type T built from `fields`.
  template <typename T>
  void SendHeader(wire::AmId op, T fields, Pending entry) {
    uint64_t id = next_request++;
    fields.header = wire::MakeHeader(op, token, id);
    auto header = std::make_shared<T>(fields);
    Send(header, sizeof(T), id, op, std::move(entry), nullptr, 0);
  }
  // Loop thread, inside OnReply: a reservation or lease arrived. Host memory is copied by a
  // task the loop posts to itself (the loop thread is the only one a mapped push or fetch
  // crosses); GPU memory is handed to the copy engine, whose completion posts the follow-up
  // back to the loop.
  void CopyIn(Pending p, uint64_t offset);
  void CopyOut(Pending p, uint64_t offset, uint64_t lease);
  // Loop thread: ends push `p`'s reservation: kCommit once its bytes are in tier memory
  // (copied in `copy_ns`; stored when the daemon answers), kAbort when they never will be.
  void EndReservation(wire::AmId op, const Pending& p, uint64_t copy_ns);
  void ReleaseLease(uint64_t lease, uint64_t copy_ns);
  // The same from another thread (a CUDA completion): posted to the loop.
  void PostReservationEnd(wire::AmId op, const Pending& p, uint64_t copy_ns);
  void PostLeaseRelease(uint64_t lease, uint64_t copy_ns);
  Status CheckRange(uint64_t offset, size_t bytes) const;
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Drops any message but a Reply (snapd sends nothing else).
  static ucs_status_t OnUnknownId(void*, const void*, size_t, void*, size_t,
                                  const ucp_am_recv_param_t*) {
    return UCS_OK;
  }
  static ucs_status_t OnReply(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
};

Client::Impl::~Impl() {
  {
    std::unique_ptr<detail::TaskThread> records;
    {
      MutexLock lock(device_mu);
      records = std::move(recorder);
    }
    records.reset();  // sends the device-tier records still queued, while the session lives
  }
  // Order matters: (1) on the loop, close the endpoint so no more replies arrive, and fail
  // what is pending (GPU copies still in flight post follow-ups that fail fast for want of an
  // endpoint); (2) stop the loop.
  if (loop && loop->running()) {  // not running: Connect failed before any endpoint existed
    auto closed = std::make_shared<detail::OpState>();
    loop->Post([this, closed] {
      if (ep) ucx::CloseEndpoint(*loop, ep, /*force=*/false);
      ep = nullptr;
      FailAll(Status::Aborted("client disconnected"));
      closed->Complete(Status::Ok());
    });
    (void)closed->WaitCompleted();
  }
  if (loop) loop->Stop();
  if (stub && session_id) {
    v1::CloseSessionRequest req;
    req.set_session_id(session_id);
    req.set_token(token);
    v1::CloseSessionResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    (void)stub->CloseSession(&ctx, req, &resp);  // the daemon also drops dead endpoints
  }
  if (arena) {
    detail::UnregisterHost(arena);  // if a device push or fetch registered it
    munmap(arena, arena_bytes);
  }
  MutexLock lock(device_mu);
  if (device_base) detail::DeviceRelease(device_base);  // waits for copies still in flight
}

Status Client::Impl::CheckRange(uint64_t offset, size_t bytes) const {
  if (offset > arena_bytes || bytes > arena_bytes - offset) {
    return Status::Internal("snapd named arena offset " + std::to_string(offset) +
                            " outside its " + std::to_string(arena_bytes) + "-byte host tier");
  }
  return Status::Ok();
}

void Client::Impl::EndReservation(wire::AmId op, const Pending& p, uint64_t ns) {
  wire::PushRequest end{};
  end.run_id = p.run_id;
  end.step = p.step;
  end.bytes = p.bytes;
  end.copy_ns = ns;
  SendHeader(op, end, Pending{Kind::kCommit, op == wire::kCommit ? p.state : nullptr});
}

void Client::Impl::ReleaseLease(uint64_t lease, uint64_t ns) {
  wire::LeaseRelease release{};
  release.lease = lease;
  release.copy_ns = ns;
  SendHeader(wire::kReleaseLease, release, Pending{Kind::kFetchMapped, nullptr});
}

void Client::Impl::PostReservationEnd(wire::AmId op, const Pending& p, uint64_t ns) {
  loop->Post([this, op, p, ns] { EndReservation(op, p, ns); });
}

void Client::Impl::PostLeaseRelease(uint64_t lease, uint64_t ns) {
  loop->Post([this, lease, ns] { ReleaseLease(lease, ns); });
}

void Client::Impl::CopyIn(Pending p, uint64_t offset) {
  if (Status s = CheckRange(offset, p.bytes); !s.ok()) {
    p.state->Complete(s);
    return;
  }
  if (p.device) {  // the GPU copies into tier memory; the reservation is committed after
    auto t0 = std::chrono::steady_clock::now();
    auto landed = [this, p, t0](Status) {
      p.state->Release(Status::Ok());
      PostReservationEnd(wire::kCommit, p, NanosSince(t0));
    };
    Status s = detail::CopyDeviceToHostAsync(arena + offset, p.buffer, p.bytes, p.stream, landed);
    if (!s.ok()) {  // not enqueued: the push failed; give the reservation back
      p.state->Complete(s);
      PostReservationEnd(wire::kAbort, p, 0);
    }
    return;
  }
  // Host memory: copied on the loop thread that received the reservation and committed at
  // once, so the push crosses no other thread of this client. Posted to the loop itself: the
  // commit is sent after this UCX callback returns, never from inside it.
  loop->Post([this, p, offset] {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(arena + offset, p.buffer, p.bytes);
    uint64_t ns = NanosSince(t0);
    p.state->Release(Status::Ok());
    EndReservation(wire::kCommit, p, ns);
  });
}

void Client::Impl::CopyOut(Pending p, uint64_t offset, uint64_t lease) {
  if (Status s = CheckRange(offset, p.bytes); !s.ok()) {
    p.state->Complete(s);
    return;
  }
  if (p.device) {
    auto t0 = std::chrono::steady_clock::now();
    Status s = detail::CopyHostToDeviceAsync(p.buffer, arena + offset, p.bytes, p.stream,
                                             [this, p, lease, t0](Status) {
                                               PostLeaseRelease(lease, NanosSince(t0));
                                               p.state->Complete(Status::Ok());
                                             });
    if (!s.ok()) {
      PostLeaseRelease(lease, 0);
      p.state->Complete(s);
    }
    return;
  }
  loop->Post([this, p, offset, lease] {  // on the loop thread, as CopyIn
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(p.buffer, arena + offset, p.bytes);
    ReleaseLease(lease, NanosSince(t0));
    p.state->Complete(Status::Ok());
  });
}

Status Client::Impl::Control(const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  grpc::Status s;
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kControlDeadline);
    // The retry waits for the channel to connect again instead of failing fast.
    ctx.set_wait_for_ready(attempt > 0);
    s = call(&ctx);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    SNAPD_RETURN_IF_ERROR(ProbeSocket(socket_path));  // snapd is gone: say so
    // snapd is there but this channel's connection was lost (for example to a flood of other
    // connections on the socket). gRPC says "failed to connect" only for a call it never
    // sent, so sending it once more cannot run it twice; anything else is returned as it is.
    if (s.error_message().find("failed to connect") == std::string::npos) break;
  }
  return FromGrpc(s);
}

void Client::Impl::FailAll(const Status& s) {
  auto failed = std::move(pending);
  pending.clear();
  for (auto& [id, p] : failed) p.state->Complete(s);
}

void Client::Impl::OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<Impl*>(arg);
  self->ep_error = ucx::FromUcs(status, "data-plane connection to snapd lost");
  self->FailAll(self->ep_error);
}

ucs_status_t Client::Impl::OnReply(void* arg, const void* header, size_t header_length,
                                   void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  if (header_length != sizeof(wire::Reply)) return UCS_OK;  // not a reply we understand
  wire::Reply reply;
  std::memcpy(&reply, header, sizeof reply);
  auto it = self->pending.find(reply.header.request_id);
  if (it == self->pending.end()) return UCS_OK;
  Pending p = std::move(it->second);
  self->pending.erase(it);
  size_t n = std::min<size_t>(reply.message_length, wire::kMaxReplyMessage);
  Status status(static_cast<Code>(reply.code), std::string(reply.message, n));
  if (status.ok() && p.kind == Kind::kReserve) {
    self->CopyIn(std::move(p), reply.offset);
    return UCS_OK;
  }
  if (status.ok() && p.kind == Kind::kFetchMapped) {
    self->CopyOut(std::move(p), reply.offset, reply.header.request_id);
    return UCS_OK;
  }
  if (p.kind != Kind::kFetch || !status.ok()) {
    p.state->Complete(status);
    return UCS_OK;
  }
  if (length != p.bytes) {
    p.state->Complete(Status::Internal("snapd sent " + std::to_string(length) +
                                       " bytes for a fetch of " + std::to_string(p.bytes)));
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {  // eager: data are here already
    std::memcpy(p.buffer, data, length);
    p.state->Complete(Status::Ok());
    return UCS_OK;
  }
  auto state = p.state;
  ucp_request_param_t rp = ucx::RecvDataParam([state](ucs_status_t s, size_t) {
    state->Complete(ucx::FromUcs(s, "receiving the snapshot"));
  });
  ucx::Track(ucp_am_recv_data_nbx(self->loop->worker(), data, p.buffer, length, &rp), rp);
  return UCS_OK;
}

Status Client::Impl::CreateEndpoint() {
  SNAPD_ASSIGN_OR_RETURN(ep, ucx::ConnectToWorker(loop->worker(), data_plane_address,
                                            &Impl::OnEndpointError, this));
  return Status::Ok();
}

void Client::Impl::Send(std::shared_ptr<const void> header, size_t header_bytes,
                        uint64_t request_id, wire::AmId op, Pending entry, const void* data,
                        size_t data_bytes) {
  auto state = entry.state;
  if (!ep_error.ok() || ep == nullptr) {
    if (state) state->Complete(ep_error.ok() ? Status::Unavailable("not connected to snapd")
                                             : ep_error);
    return;
  }
  if (state) pending.emplace(request_id, std::move(entry));
  bool is_push = op == wire::kPush;
  ucp_request_param_t p = ucx::SendParam([state, header, is_push](ucs_status_t s, size_t) {
    if (!state) return;
    // A rejected push completes its send with OK; its Reply carries the reason.
    if (is_push) state->Release(ucx::FromUcs(s, "sending the snapshot"));
    if (s != UCS_OK) state->Complete(ucx::FromUcs(s, "sending to snapd"));
  });
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  // The header must stay valid until the send completes; the callback holds it.
  ucx::Track(ucp_am_send_nbx(ep, op, header.get(), header_bytes, data, data_bytes, &p), p);
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->socket_path = options.socket_path.empty() ? ClientSocketPath() : options.socket_path;
  SNAPD_RETURN_IF_ERROR(ProbeSocket(impl->socket_path));
  impl->stub = v1::Control::NewStub(
      grpc::CreateChannel("unix:" + impl->socket_path, grpc::InsecureChannelCredentials()));

  // The worker runs before the session opens: snapd connects to it while answering.
  SNAPD_ASSIGN_OR_RETURN(impl->loop, ucx::WorkerLoop::Create("libsnapd"));
  SNAPD_RETURN_IF_ERROR(ucx::SetDefaultAmHandler(impl->loop->worker(), &Impl::OnUnknownId,
                                                 impl.get()));
  SNAPD_RETURN_IF_ERROR(
      ucx::SetAmHandler(impl->loop->worker(), wire::kReply, &Impl::OnReply, impl.get()));
  impl->loop->Start();

  v1::OpenSessionRequest req;
  req.set_client_name(options.client_name);
  req.set_ucx_address(impl->loop->address());
  v1::OpenSessionResponse resp;
  SNAPD_RETURN_IF_ERROR(impl->Control(
      [&](grpc::ClientContext* ctx) { return impl->stub->OpenSession(ctx, req, &resp); }));
  if (resp.wire_version() != wire::kVersion) {
    return Status::FailedPrecondition("snapd speaks data-plane wire version " +
                                      std::to_string(resp.wire_version()) +
                                      " but this libsnapd speaks " +
                                      std::to_string(wire::kVersion) + "; upgrade the older one");
  }
  if (const char* mem = std::getenv("SNAPD_DEVICE_MEM"); mem && *mem) {
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
  impl->session_id = resp.session_id();
  impl->token = resp.token();
  impl->data_plane_address = resp.data_plane_worker_address();
  const char* path_env = std::getenv("SNAPD_DATA_PATH");
  if (!options.map_host_tier || (path_env && std::string(path_env) == "ucx")) {
    impl->data_path_reason = "mapping turned off by the caller";
  } else if (Status s = MapArena(resp.arena_socket(), impl->session_id, impl->token,
                                 &impl->arena, &impl->arena_bytes);
             !s.ok()) {
    impl->data_path_reason = s.ToString();
  }

  // Connect and bind the endpoint to the session with Hello.
  auto hello = std::make_shared<detail::OpState>();
  Impl* raw = impl.get();
  raw->loop->Post([raw, hello] {
    Status s = raw->CreateEndpoint();
    if (!s.ok()) {
      raw->ep_error = s;
      hello->Complete(s);
      return;
    }
    wire::HelloRequest h{};
    h.session_id = raw->session_id;
    raw->SendHeader(wire::kHello, h, Impl::Pending{Impl::Kind::kHello, hello});
  });
  Status bound = hello->WaitCompleted();
  if (!bound.ok()) {
    return Status(bound.code(), "binding the data plane to the session: " + bound.message());
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
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
  if (spec.check_finite && spec.dtype != Dtype::kFloat32 && spec.dtype != Dtype::kFloat64) {
    return Status::InvalidArgument("run '" + spec.name +
                                   "': check_finite needs dtype float32 or float64");
  }
  // Device layers: reserve the pool slots for the newest steps before the daemon splits the
  // rest between host and disk.
  detail::DevicePool* pool = nullptr;
  detail::DevicePool::RunPlan plan;
  const LayersEntry* uses = FindLayers(layers);
  if (uses && uses->device) {
    SNAPD_ASSIGN_OR_RETURN(pool, impl_->EnsurePool(spec.name, layers));
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
          " bytes; use HostDevice or DiskHostDevice, or raise SNAPD_DEVICE_MEM");
    }
    req.set_device_steps(plan.slots);
  }
  req.set_session_id(impl_->session_id);  // a run not kept goes when every opener died
  req.set_token(impl_->token);
  v1::OpenRunResponse resp;
  Status opened = impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->OpenRun(ctx, req, &resp); });
  if (pool && (!opened.ok() || !resp.created() || plan.slots == 0)) {
    pool->FreeRegion(plan);  // refused, or attached: the creator's pool holds its device steps
  } else if (pool) {
    pool->AddRun(resp.run().run_id(), spec.name, plan, spec.steps, spec.keep,
                 !uses->host && !uses->disk);
  }
  SNAPD_RETURN_IF_ERROR(opened);
  RunInfo info = FromProto(resp.run());
  info.created = resp.created();
  {
    MutexLock lock(impl_->runs_mu);  // also when attaching to a run another client opened
    Impl::KnownRun& known = impl_->known_runs[info.run_id];
    known.bytes_per_step = info.spec.bytes_per_step;
    if (info.spec.check_finite) known.finite_checked = info.spec.dtype;
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
  SNAPD_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->DeleteRun(ctx, req, &resp); }));
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
  SNAPD_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->DeleteSnapshot(ctx, req, &resp); }));
  if (detail::DevicePool* pool = impl_->Pool()) {
    if (std::optional<uint64_t> id = pool->RunIdOf(name)) pool->Drop(*id, step, nullptr);
  }
  return Status::Ok();
}

Result<std::vector<RunInfo>> Client::ListRuns() {
  v1::ListRunsRequest req;
  v1::ListRunsResponse resp;
  SNAPD_RETURN_IF_ERROR(impl_->Control(
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
  SNAPD_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->Locate(ctx, req, &resp); }));
  return FromProto(resp.snapshot());
}

Result<std::vector<Location>> Client::ListSnapshots(const std::string& name) {
  v1::ListSnapshotsRequest req;
  req.set_name(name);
  v1::ListSnapshotsResponse resp;
  SNAPD_RETURN_IF_ERROR(impl_->Control(
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
  SNAPD_RETURN_IF_ERROR(impl_->Control(
      [&](grpc::ClientContext* ctx) { return impl_->stub->Prefetch(ctx, req, &resp); }));
  return resp.scheduled();
}

Result<std::vector<TierInfo>> Client::Tiers() {
  v1::StatsResponse resp;
  SNAPD_RETURN_IF_ERROR(impl_->Control([&](grpc::ClientContext* ctx) {
    return impl_->stub->Stats(ctx, v1::StatsRequest(), &resp);
  }));
  std::vector<TierInfo> out;
  for (const auto& t : resp.tiers()) {
    out.push_back({.tier = static_cast<Tier>(t.tier()),
                   .budget_bytes = t.budget_bytes(),
                   .used_bytes = t.used_bytes(),
                   .snapshots = t.snapshots(),
                   .write_bytes_per_second = t.write_bytes_per_second(),
                   .read_bytes_per_second = t.read_bytes_per_second()});
  }
  if (detail::DevicePool* pool = impl_->Pool()) {  // this client's own GPU pool
    out.push_back({.tier = Tier::kDevice,
                   .budget_bytes = pool->capacity(),
                   .used_bytes = pool->reserved_bytes(),
                   .snapshots = pool->held_steps()});
  }
  return out;
}

Result<detail::DevicePool*> Client::Impl::EnsurePool(const std::string& run_name,
                                                     v1::Layers layers) {
  MutexLock lock(device_mu);
  if (device_pool) return device_pool.get();
  std::string what = "run '" + run_name + "': layers " + LayersName(layers) +
                     " keep the newest steps in this process's GPU memory";
  if (Status gpu = GpuUsable(what); !gpu.ok()) {
    return Status::FailedPrecondition(gpu.message() + "; use DiskHost or Host");
  }
  if (!device_options.ok()) return Status(device_options.code(), what + ": " +
                                          device_options.message());
  uint64_t free_bytes = 0;
  SNAPD_RETURN_IF_ERROR(detail::DeviceFreeMemory(&free_bytes));
  uint64_t budget = detail::DevicePoolBudget(device_fraction, device_bytes, free_bytes);
  void* base = nullptr;
  if (Status s = detail::DeviceAllocate(budget, &base); !s.ok()) {
    return Status::ResourceExhausted(what + ": allocating its pool of " +
                                     std::to_string(budget) + " bytes failed (" + s.message() +
                                     "); lower SNAPD_DEVICE_MEM");
  }
  device_base = static_cast<char*>(base);
  device_pool = std::make_unique<detail::DevicePool>(budget);
  recorder = std::make_unique<detail::TaskThread>();
  return device_pool.get();
}

void Client::Impl::FlushRecords() {
  detail::TaskThread* records = nullptr;
  if (!Pool(nullptr, &records) || !records) return;
  auto flushed = std::make_shared<detail::OpState>();
  records->Submit([flushed] { flushed->Complete(Status::Ok()); });
  (void)flushed->WaitCompleted();
}

Status Client::Impl::GpuUsable(const std::string& what) {
  std::call_once(gpu_once, [this] {
    kernels::DeviceProbe probe = kernels::ProbeDevice();
    if (!probe.usable) gpu_status = Status::FailedPrecondition(probe.description);
  });
  if (gpu_status.ok()) return Status::Ok();
  return Status::FailedPrecondition(what + ", and no GPU is usable here (" +
                                    gpu_status.message() + ")");
}

detail::DevicePool* Client::Impl::Pool(char** base, detail::TaskThread** records) {
  MutexLock lock(device_mu);
  if (base) *base = device_base;
  if (records) *records = recorder.get();
  return device_pool.get();
}

Status Client::Impl::HoldOnDaemon(uint64_t run_id, uint64_t step, uint64_t bytes, bool held) {
  v1::HoldDeviceStepRequest req;
  req.set_session_id(session_id);
  req.set_token(token);
  req.set_run_id(run_id);
  req.set_step(step);
  req.set_bytes(bytes);
  req.set_held(held);
  v1::HoldDeviceStepResponse resp;
  return Control([&](grpc::ClientContext* ctx) { return stub->HoldDeviceStep(ctx, req, &resp); });
}

std::optional<Result<PushHandle>> Client::Impl::PushToPool(uint64_t run_id, uint64_t step,
                                                           const void* data, size_t bytes,
                                                           void* stream) {
  char* base = nullptr;
  detail::TaskThread* records = nullptr;
  detail::DevicePool* pool = Pool(&base, &records);
  if (!pool || !pool->HasRun(run_id)) return std::nullopt;
  Result<detail::DevicePool::Placement> placed = pool->Place(run_id, step, bytes);
  if (!placed.ok()) return Result<PushHandle>(placed.status());
  if (!placed->on_device) return std::nullopt;
  uint64_t offset = placed->offset;
  if (placed->evict) {
    if (Status s = Evict(run_id, *placed->evict, base + offset); !s.ok()) {
      pool->Undo(run_id, offset);
      return Result<PushHandle>(s);
    }
  } else if (placed->busy) {
    (void)placed->busy->WaitCompleted();  // a fetch still copying the slot's last step out
  }
  // Released once the copy landed; stored once the daemon has recorded the step too.
  auto state = std::make_shared<detail::OpState>();
  auto join = std::make_shared<detail::JoinedCompletion>(state, 2);
  Status copy = detail::CopyAnyAsync(base + offset, data, bytes, stream, [state, join](Status s) {
    state->Release(s);
    join->Done(s);
  });
  if (!copy.ok()) {
    pool->Undo(run_id, offset);
    return Result<PushHandle>(copy);
  }
  pool->Commit(run_id, step, offset, bytes, state);
  records->Submit([this, pool, run_id, step, bytes, join] {
    // Refused (a duplicate, a closed or deleted run): the step leaves the pool, and its slot is
    // reused once the copy is out of the way.
    Status recorded = HoldOnDaemon(run_id, step, bytes, true);
    if (!recorded.ok()) pool->Drop(run_id, step, nullptr);
    join->Done(recorded);
  });
  return Result<PushHandle>(PushHandle(state));
}

Status Client::Impl::Evict(uint64_t run_id, const detail::DevicePool::Evict& evict,
                           const char* slot) {
  // Completes once the step's copy landed and its record was answered; a step the daemon
  // refused was never stored, and its slot is simply reused.
  if (!evict.filled->WaitCompleted().ok()) return Status::Ok();
  SNAPD_RETURN_IF_ERROR(HoldOnDaemon(run_id, evict.step, evict.bytes, false));
  Result<PushHandle> moved = PushDeviceToDaemon(run_id, evict.step, slot, evict.bytes, nullptr);
  Status s = moved.ok() ? moved->WaitReleased() : moved.status();
  if (!s.ok()) {
    return Status(s.code(), "step " + std::to_string(evict.step) +
                                " left the GPU pool to make room and did not reach snapd, so "
                                "it is lost: " + s.message());
  }
  return Status::Ok();
}

std::optional<Result<FetchHandle>> Client::Impl::FetchFromPool(uint64_t run_id, uint64_t step,
                                                               void* data, size_t bytes,
                                                               void* stream) {
  char* base = nullptr;
  detail::TaskThread* records = nullptr;
  detail::DevicePool* pool = Pool(&base, &records);
  if (!pool) return std::nullopt;
  std::optional<detail::DevicePool::Held> held = pool->Find(run_id, step);
  if (!held) return std::nullopt;
  if (bytes != held->bytes) {
    return Result<FetchHandle>(Status::InvalidArgument(
        "fetch of step " + std::to_string(step) + " of run id " + std::to_string(run_id) +
        " into a buffer of " + std::to_string(bytes) + " bytes; its steps are " +
        std::to_string(held->bytes) + " bytes"));
  }
  // Pushed on another stream, or still being recorded: read only what was stored. A push the
  // daemon refused left the pool; the daemon answers for the step then.
  if (!held->filled->WaitCompleted().ok()) return std::nullopt;
  auto state = std::make_shared<detail::OpState>();
  Status copy = detail::CopyAnyAsync(data, base + held->offset, bytes, stream,
                                     [state](Status s) { state->Complete(s); });
  if (!copy.ok()) return Result<FetchHandle>(copy);
  if (!held->keep && pool->Drop(run_id, step, state)) {
    // Read-once: the slot is reused once this copy is out; the record goes in push order.
    records->Submit([this, run_id, step, bytes] { (void)HoldOnDaemon(run_id, step, bytes, false); });
  }
  return Result<FetchHandle>(FetchHandle(state));
}

void Client::Impl::TrackPush(uint64_t run_id, uint64_t step,
                             const std::shared_ptr<detail::OpState>& state) {
  {
    MutexLock lock(unstored_mu);
    unstored[{run_id, step}] = state;
  }
  std::weak_ptr<detail::OpState> weak = state;
  state->WhenCompleted([this, run_id, step, weak] {
    MutexLock lock(unstored_mu);
    auto it = unstored.find({run_id, step});
    if (it != unstored.end() && it->second == weak.lock()) unstored.erase(it);
  });
}

std::shared_ptr<detail::OpState> Client::Impl::UnstoredPush(uint64_t run_id, uint64_t step) {
  MutexLock lock(unstored_mu);
  auto it = unstored.find({run_id, step});
  return it == unstored.end() ? nullptr : it->second;
}

Result<PushHandle> Client::Push(uint64_t run_id, uint64_t step, const void* data,
                                size_t bytes) {
  if (data == nullptr && bytes != 0) {
    return Status::InvalidArgument("push of step " + std::to_string(step) +
                                   ": data is null but bytes is " + std::to_string(bytes));
  }
  SNAPD_RETURN_IF_ERROR(
      impl_->CheckPush(run_id, step, data, bytes, /*device=*/false, nullptr, "push"));
  if (auto pooled = impl_->PushToPool(run_id, step, data, bytes, nullptr)) return *pooled;
  return impl_->StartPush(run_id, step, data, bytes, /*device=*/false, nullptr);
}

PushHandle Client::Impl::StartPush(uint64_t run_id, uint64_t step, const void* data,
                                   size_t bytes, bool device, void* stream) {
  auto state = std::make_shared<detail::OpState>();
  TrackPush(run_id, step, state);
  if (arena) {
    Pending entry{Kind::kReserve, state, const_cast<void*>(data), bytes, run_id, step, stream,
                  device};
    loop->Post([this, entry, run_id, step, bytes] {
      wire::PushRequest reserve{};
      reserve.run_id = run_id;
      reserve.step = step;
      reserve.bytes = bytes;
      SendHeader(wire::kReserve, reserve, entry);
    });
    return PushHandle(state);
  }
  uint64_t id = next_request++;
  auto header = std::make_shared<wire::PushRequest>(wire::PushRequest{
      wire::MakeHeader(wire::kPush, token, id), run_id, step, bytes, /*copy_ns=*/0});
  loop->Post([this, header, id, state, data, bytes] {
    Send(header, sizeof *header, id, wire::kPush, Pending{Kind::kPush, state}, data, bytes);
  });
  return PushHandle(state);
}

Result<PushHandle> Client::PushDevice(uint64_t run_id, uint64_t step, const void* device_data,
                                      size_t bytes, void* stream) {
  if (device_data == nullptr && bytes != 0) {
    return Status::InvalidArgument("device push of step " + std::to_string(step) +
                                   ": data is null but bytes is " + std::to_string(bytes));
  }
  SNAPD_RETURN_IF_ERROR(
      impl_->GpuUsable("device push of step " + std::to_string(step) + " needs CUDA"));
  SNAPD_RETURN_IF_ERROR(
      impl_->CheckPush(run_id, step, device_data, bytes, /*device=*/true, stream, "device push"));
  if (auto pooled = impl_->PushToPool(run_id, step, device_data, bytes, stream)) return *pooled;
  return impl_->PushDeviceToDaemon(run_id, step, device_data, bytes, stream);
}

Result<PushHandle> Client::Impl::PushDeviceToDaemon(uint64_t run_id, uint64_t step,
                                                    const void* device_data, size_t bytes,
                                                    void* stream) {
  if (arena) {
    SNAPD_RETURN_IF_ERROR(detail::RegisterHost(arena, arena_bytes));
    return StartPush(run_id, step, device_data, bytes, /*device=*/true, stream);
  }
  // No mapped tier: through host memory, and released before returning.
  std::vector<char> staging(bytes);
  SNAPD_RETURN_IF_ERROR(detail::CopyDeviceToHost(staging.data(), device_data, bytes, stream));
  PushHandle h = StartPush(run_id, step, staging.data(), bytes, false, nullptr);
  SNAPD_RETURN_IF_ERROR(h.WaitReleased());
  return h;
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
  if (known.bytes_per_step != bytes) {
    return Status::InvalidArgument(std::string(what) + " of step " + std::to_string(step) +
                                   " of run " + std::to_string(run_id) + ": " +
                                   std::to_string(bytes) + " bytes, but the run stores " +
                                   std::to_string(known.bytes_per_step) + " per step");
  }
  if (!known.finite_checked) return Status::Ok();
  Dtype dtype = *known.finite_checked;
  bool f64 = dtype == Dtype::kFloat64;
  uint64_t count = bytes / (f64 ? 8 : 4);
  uint64_t bad = kernels::kAllFinite;
  if (device) {
    SNAPD_RETURN_IF_ERROR(detail::FirstNonFiniteOnDevice(data, count, f64, stream, &bad));
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

FetchHandle Client::Impl::StartFetch(uint64_t run_id, uint64_t step, void* data, size_t bytes,
                                     bool device, void* stream) {
  auto state = std::make_shared<detail::OpState>();
  bool mapped = arena != nullptr;
  auto send = [this, mapped, state, run_id, step, data, bytes, device, stream] {
    loop->Post([this, mapped, state, run_id, step, data, bytes, device, stream] {
      wire::FetchRequest fetch{};
      fetch.run_id = run_id;
      fetch.step = step;
      fetch.bytes = bytes;
      if (mapped) {
        SendHeader(wire::kFetchMapped, fetch,
                   Pending{Kind::kFetchMapped, state, data, bytes, 0, 0, stream, device});
      } else {
        SendHeader(wire::kFetch, fetch, Pending{Kind::kFetch, state, data, bytes});
      }
    });
  };
  if (auto push = UnstoredPush(run_id, step)) {
    push->WhenCompleted(std::move(send));  // read what this client wrote, once it is stored
  } else {
    send();
  }
  return FetchHandle(state);
}

Result<FetchHandle> Client::FetchDeviceAsync(uint64_t run_id, uint64_t step, void* device_data,
                                             size_t bytes, void* stream) {
  if (device_data == nullptr) {
    return Status::InvalidArgument("device fetch of step " + std::to_string(step) +
                                   ": destination is null");
  }
  SNAPD_RETURN_IF_ERROR(
      impl_->GpuUsable("device fetch of step " + std::to_string(step) + " needs CUDA"));
  if (auto pooled = impl_->FetchFromPool(run_id, step, device_data, bytes, stream)) {
    return *pooled;
  }
  if (impl_->arena) {
    SNAPD_RETURN_IF_ERROR(detail::RegisterHost(impl_->arena, impl_->arena_bytes));
    return impl_->StartFetch(run_id, step, device_data, bytes, /*device=*/true, stream);
  }
  // No mapped tier: through host memory, done before returning.
  std::vector<char> staging(bytes);
  SNAPD_RETURN_IF_ERROR(impl_->StartFetch(run_id, step, staging.data(), bytes, false, nullptr)
                            .Wait());
  SNAPD_RETURN_IF_ERROR(detail::CopyHostToDevice(device_data, staging.data(), bytes, stream));
  auto done = std::make_shared<detail::OpState>();
  done->Complete(Status::Ok());
  return FetchHandle(done);
}

Status Client::Fetch(uint64_t run_id, uint64_t step, void* data, size_t bytes) {
  SNAPD_ASSIGN_OR_RETURN(FetchHandle h, FetchAsync(run_id, step, data, bytes));
  return h.Wait();
}

const std::string& Client::socket_path() const { return impl_->socket_path; }
DataPath Client::data_path() const {
  return impl_->arena ? DataPath::kMappedHostTier : DataPath::kUcx;
}
const std::string& Client::data_path_reason() const { return impl_->data_path_reason; }

}  // namespace snapd
