// Client::Impl: libadjsnap's state behind adjsnap::Client. Private to the library (not installed).
//
// One struct, split by job across these files:
//   control_channel.cc  gRPC to adjsnapd: Control() and its retry, OpenSession/CloseSession, and
//                       the run calls (Client::OpenRun ... Client::Tiers).
//   data_channel.cc     the data-plane link to adjsnapd (a session socket for a mapped client,
//                       else a UCX endpoint): Send/SendHeader, OnReply/HandleReply,
//                       OnEndpointError/LinkLost, StartLink, CreateEndpoint, FailAll;
//                       StartPush/StartFetch; unstored pushes (TrackPush/UnstoredPush).
//   mapped_arena.cc     the mapped host tier (MapArena, CheckRange, CopyIn/CopyOut,
//                       EndReservation/ReleaseLease and their Post variants).
//   reconnect.cc        a new session after adjsnapd restarts: Retriable, AfterReconnect,
//                       ReconnectInBackground, the episodes (ReconnectEpisode, ReconnectOnce).
//   device_tier.cc      the GPU pool: GpuUsable, EnsurePool, Pool, the recorder thread
//                       (FlushRecords, HoldOnDaemon), PushToPool/FetchFromPool/Evict,
//                       PushDeviceToDaemon, FetchDeviceFromDaemon.
//   client.cc           the rest of the public API (handles, Push/Fetch and their device
//                       forms), Connect, ~Impl (the teardown order), CheckPush.
//
// Threading:
// - socket_path, client_name, mapped, data_path_reason, stub, device_fraction, device_bytes
//   and device_options are set by Connect and then read-only. session_id, token, arena and
//   arena_bytes are atomics, set by Connect and replaced on the loop thread by a reconnect;
//   data_plane_address and pinning are replaced there too (pinning is itself thread-safe; a
//   device copy in flight across a reconnect is not supported).
// - next_request is atomic: any thread numbers requests.
// - link, ep, ep_error and pending belong to the loop thread: touch them only from a task
//   posted to `loop`, from a UCX callback (OnReply, OnEndpointError) or from the session
//   socket's (HandleReply, LinkLost). Send, SendHeader, CopyIn,
//   CopyOut, EndReservation and ReleaseLease run there; the Post variants are for other
//   threads (CUDA completions).
// - unstored is guarded by unstored_mu, known_runs by runs_mu, and the pool, its base and the
//   recorder by device_mu; gpu_status is written once, under gpu_once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "copy_pool.h"
#include "device_pool.h"
#include "host_pinning.h"
#include "op_state.h"
#include "adjsnap/client.h"
#include "adjsnap/message_socket.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/ucx.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap/wire.h"
#include "task_thread.h"
#include "ucx_memory.h"

namespace adjsnap {
namespace detail {

// A plain connect() tells "no daemon" apart from other failures, with errno, before gRPC
// retries hide the cause.
inline Status ProbeSocket(const std::string& path) {
  auto fd = ConnectUnix(path);
  if (fd.ok() || fd.status().code() != Code::kUnavailable) return fd.status();
  return Status::Unavailable("adjsnapd is not running at " + path + " (" + fd.status().message() +
                             "). Start it with `adjsnapd` (or `systemctl start adjsnap`), or set "
                             "ADJSNAP_SOCKET to the socket it listens on");
}

// Asks the arena socket for the memfd of this uid's arena and maps it. With host_arenas =
// "shared" the daemon refuses clients of another uid; the caller then uses the copied UCX
// path. `link` (if given) keeps the connection: a session opened without a UCX address uses
// it as its session socket (wire.h).
Status MapArena(const std::string& path, uint64_t session_id, uint64_t token, char** base,
                uint64_t* bytes, ucx::ScopedFd* link = nullptr);

}  // namespace detail

// Threading: the fields after `loop` belong to the loop thread; everything before is set
// during Connect and then read-only.
struct Client::Impl {
  // What adjsnapd reports a push or fetch of this client waits for (StatsResponse.waits), for a
  // wait that passed its limit. Shared with the handles, which may outlive the client: once the
  // client is gone it answers "". Thread-safe; Explain blocks on one control-plane call.
  class WaitExplainer {
   public:
    explicit WaitExplainer(Impl* impl) : impl_(impl) {}
    void Detach() ADJSNAP_EXCLUDES(mu_) {
      MutexLock lock(mu_);
      impl_ = nullptr;
    }
    // `kind`: "push" or "fetch", as StatsResponse.waits names them.
    std::string Explain(const std::string& kind, uint64_t run_id, uint64_t step)
        ADJSNAP_EXCLUDES(mu_);

   private:
    Mutex mu_;
    Impl* impl_ ADJSNAP_GUARDED_BY(mu_);
  };

  enum class Kind { kHello, kPush, kFetch, kReserve, kCommit, kFetchMapped };
  struct Pending {
    Kind kind;
    std::shared_ptr<detail::OpState> state;
    void* buffer = nullptr;  // fetch destination, or (kReserve) the push source
    size_t bytes = 0;
    uint64_t run_id = 0;     // kReserve: what to commit once copied
    uint64_t step = 0;
    void* stream = nullptr;  // device pushes and fetches: the caller's CUDA stream
    // `buffer` is GPU memory: the copy engine moves the bytes (mapped path), or UCX takes it as
    // CUDA memory (copied path, ucx_memory.h).
    bool device = false;
  };

  std::string socket_path;
  std::string client_name;
  // The host tier is mapped (decided at Connect; a reconnect maps the new daemon's tier).
  bool mapped = false;
  // The daemon's host tier, mapped; null on the UCX path. Replaced on the loop thread when a
  // reconnect maps the new daemon's tier; read by the loop (copies) and device paths.
  std::atomic<char*> arena{nullptr};
  std::atomic<uint64_t> arena_bytes{0};
  // Loop thread only: one bit per 4 KiB page of the tier mapped for session
  // `populated_session` (1.5 MiB for a 48 GiB tier), set once this process has mapped the page
  // (PopulateOnce). Reset when a reconnect maps another tier, which may land at the same
  // address.
  std::vector<uint64_t> populated_pages;
  uint64_t populated_session = 0;
  // Maps the pages of [offset, offset + bytes) of the arena into this process before a host
  // copy touches them, those not mapped by an earlier copy only, in stripes on the copy
  // threads. Loop thread only.
  void PopulateOnce(uint64_t offset, uint64_t bytes);
  // Copies host pushes into the mapped tier and fetches out of it, with ClientOptions.
  // copy_threads threads (one, no helper, on the UCX path). Called on the loop thread only,
  // which waits for the copy: a reconnect cannot unmap the tier under it.
  std::unique_ptr<detail::CopyPool> copier;
  // The mapped tier pinned for the GPU chunk by chunk, as device pushes and fetches need it;
  // null on the UCX path. Nothing is pinned (and CUDA is not touched) until the first device
  // push or fetch, or the first run with a device layer, starts it.
  std::unique_ptr<detail::HostPinning> pinning;
  std::string data_path_reason;
  std::unique_ptr<v1::Control::Stub> stub;
  // The session; replaced (on the loop thread) when a reconnect opens a new one.
  std::atomic<uint64_t> session_id{0};
  std::atomic<uint64_t> token{0};
  std::string data_plane_address;  // adjsnapd's packed UCX worker address
  std::atomic<uint64_t> next_request{1};
  std::unique_ptr<ucx::WorkerLoop> loop;
  // The loop's UCX takes CUDA memory (ucx_memory.h): on the copied path, device pushes and
  // fetches hand the solver's buffer to UCX rather than stage it in host memory. Set by Connect.
  bool ucx_takes_cuda = false;
  // Loop-thread state. A session's link to adjsnapd: its session socket (mapped clients), or its
  // UCX endpoint (the copied path).
  std::unique_ptr<MessageSocket> link;
  ucp_ep_h ep = nullptr;
  Status ep_error;  // set when the link failed; later requests fail with it
  // The endpoint failed and no reconnect has replaced it yet: what failed with UNAVAILABLE may
  // be sent again after a reconnect (Retriable). Set on the loop thread, read on any.
  std::atomic<bool> link_lost{false};
  std::unordered_map<uint64_t, Pending> pending;
  // Pushes not yet stored, by (run, step): a fetch of such a step waits for its push, so a
  // client always reads what it wrote (released comes before the daemon has the step).
  Mutex unstored_mu;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<detail::OpState>> unstored
      ADJSNAP_GUARDED_BY(unstored_mu);
  void TrackPush(uint64_t run_id, uint64_t step, const std::shared_ptr<detail::OpState>& state);
  PushHandle StartPush(uint64_t run_id, uint64_t step, const void* data, size_t bytes,
                       bool device, void* stream);
  FetchHandle StartFetch(uint64_t run_id, uint64_t step, void* data, size_t bytes, bool device,
                         void* stream);
  // What a push must match, for every run this client opened or attached to (runs it only
  // knows by id are checked by adjsnapd, when stored): its step size, and for a run that checks
  // its values (RunSpec.check_finite) the dtype to scan.
  struct KnownRun {
    std::string name;  // as OpenRun named it (DeleteRun takes a name)
    uint64_t bytes_per_step = 0;
    std::optional<Dtype> finite_checked;
    bool frames = false;  // an nvCOMP codec: a push may carry a chunk frame, fewer bytes
  };
  Mutex runs_mu;
  std::map<uint64_t, KnownRun> known_runs ADJSNAP_GUARDED_BY(runs_mu);
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
  Status device_options;  // ADJSNAP_DEVICE_MEM parsed
  Mutex device_mu;
  std::unique_ptr<detail::DevicePool> device_pool ADJSNAP_GUARDED_BY(device_mu);
  char* device_base ADJSNAP_GUARDED_BY(device_mu) = nullptr;
  // Sends HoldDeviceStep records in push order, off the solver's thread (a device-tier push
  // costs the solver no control-plane round trip). Created with the pool.
  std::unique_ptr<detail::TaskThread> recorder ADJSNAP_GUARDED_BY(device_mu);
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
  // The GPU's copy into (CopyIn) or out of (CopyOut) tier memory at `offset`, once its chunks
  // are pinned: any thread (the loop, or the pinning thread when it had to pin first).
  void EnqueueDeviceCopyIn(const Pending& p, uint64_t offset);
  void EnqueueDeviceCopyOut(const Pending& p, uint64_t offset, uint64_t lease);
  // A device step to or from adjsnapd, not the pool: through the mapped tier; else over UCX,
  // the device buffer handed to UCX where it takes CUDA memory (ucx_memory.h), or through host
  // memory; on the copied path a push returns released and a fetch filled.
  Result<PushHandle> PushDeviceToDaemon(uint64_t run_id, uint64_t step, const void* device_data,
                                        size_t bytes, void* stream);
  Result<FetchHandle> FetchDeviceFromDaemon(uint64_t run_id, uint64_t step, void* device_data,
                                            size_t bytes, void* stream);

  // Riding through a restart of adjsnapd. When the data plane fails with UNAVAILABLE (the
  // endpoint died, or adjsnapd refused a push because it is stopping), a push not yet released
  // or a fetch waits for a new session (AfterReconnect) and is sent again on it; a push
  // already released whose reply was lost is looked up (Locate) and completes if stored.
  // One reconnect runs at a time, on `reconnector`: ProbeSocket + OpenSession + the arena +
  // the endpoint and Hello, retried with backoff (50 ms doubling to 1 s) until
  // reconnect_timeout_s; then everything waiting fails with UNAVAILABLE naming the socket.
  std::atomic<double> reconnect_timeout_s{60};
  // ClientOptions.wait_timeout_s: the handles' wait limit when the caller gives none.
  std::chrono::milliseconds wait_timeout = detail::OpState::kForever;
  const std::shared_ptr<WaitExplainer> explainer = std::make_shared<WaitExplainer>(this);
  // Names `state` ("push of step S of run id R") and lets its waits say what adjsnapd reports it
  // waits for, within wait_timeout unless the caller gives a limit.
  void Describe(detail::OpState& state, const std::string& kind, uint64_t run_id, uint64_t step);
  Mutex conn_mu;
  CondVar conn_cv;
  uint64_t conn_generation ADJSNAP_GUARDED_BY(conn_mu) = 0;  // sessions opened after the first
  bool reconnecting ADJSNAP_GUARDED_BY(conn_mu) = false;
  bool closing ADJSNAP_GUARDED_BY(conn_mu) = false;  // teardown: no more reconnects
  std::vector<std::function<void(Status)>> after_reconnect ADJSNAP_GUARDED_BY(conn_mu);
  // The operations waiting in after_reconnect fail at this time: each that joins pushes it to
  // reconnect_timeout from its own start.
  std::chrono::steady_clock::time_point reconnect_deadline ADJSNAP_GUARDED_BY(conn_mu);
  // The link went (LinkLost): the episode keeps trying past the deadline (failing only the
  // operations that wait) until a session is open or the client closes, so that the client's
  // runs get their new session (OpenSession) even while it is idle.
  bool reconnect_until_open ADJSNAP_GUARDED_BY(conn_mu) = false;
  std::unique_ptr<detail::TaskThread> reconnector;
  uint64_t Generation();
  // Runs `then` off the loop thread once a session newer than generation `seen` is open (Ok),
  // or with the reason none could be opened within reconnect_timeout.
  void AfterReconnect(uint64_t seen, std::function<void(Status)> then);
  // LinkLost: a reconnect now, kept up until it succeeds (reconnect_until_open).
  void ReconnectInBackground();
  // Starts an episode on `reconnector` unless one runs.
  void StartEpisode() ADJSNAP_REQUIRES(conn_mu);
  void ReconnectEpisode();
  Status ReconnectOnce();  // one attempt at a new session
  // UNAVAILABLE because adjsnapd went away (the endpoint failed) or said it is stopping, and
  // reconnects are on: the operation waits for a reconnect and is sent again. Not another
  // UNAVAILABLE (a push that needed the disk tier when no spool worked): that is the answer.
  // `generation`: the connection the operation was sent on (a reconnect since then also
  // makes it retriable).
  bool Retriable(const Status& s, uint64_t generation);
  // One try of a push or fetch for the caller's `outer` handle; tried again after a reconnect.
  void PushAttempt(std::shared_ptr<detail::OpState> outer, uint64_t run_id, uint64_t step,
                   const void* data, size_t bytes, bool device, void* stream);
  void FetchAttempt(std::shared_ptr<detail::OpState> outer, uint64_t run_id, uint64_t step,
                    void* data, size_t bytes, bool device, void* stream);

  ~Impl();
  // `resent` (if given) is set when the call was sent again after adjsnapd went away or cut it
  // in a stop: the first try may have run.
  Status Control(const std::function<grpc::Status(grpc::ClientContext*)>& call,
                 bool* resent = nullptr);
  // One call, retried once when only this channel's connection was lost.
  Status ControlOnce(const std::function<grpc::Status(grpc::ClientContext*)>& call);
  // OpenSession for `client_name`, at the loop's UCX address or (`with_ucx` false) for a
  // session socket; FAILED_PRECONDITION when adjsnapd speaks another data-plane wire version.
  // `deadline_s` > 0: one try within it, else Control's retries.
  Status OpenSession(const std::string& client_name, bool with_ucx, v1::OpenSessionResponse* resp,
                     double deadline_s = 0);
  // A new session's link (loop thread): its session socket `fd` when given, else a UCX
  // endpoint and Hello; `hello` completes once it can carry requests.
  void StartLink(std::shared_ptr<ucx::ScopedFd> fd, std::shared_ptr<detail::OpState> hello);
  // Best effort, on teardown: adjsnapd also drops the sessions of dead endpoints.
  void CloseSession();
  // OpenSessionRequest.run_ids names at most this many of known_runs (adjsnapd's limit).
  static constexpr int kMaxReattachRuns = 4096;
  Status CreateEndpoint();
  void FailAll(const Status& s);
  // Sends one request on the loop thread; `data` (copied push only) travels as AM data, handed
  // to UCX as `memory` says (ucx_memory.h). An entry without state expects no Reply.
  void Send(std::shared_ptr<const void> header, size_t header_bytes, uint64_t request_id,
            wire::AmId op, Pending pending_entry, const void* data, size_t data_bytes,
            detail::UcxBuffer memory = detail::UcxBuffer::kHost);
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
  // kCommit carries `checksum` when the copy computed it (host pushes; a device push's
  // checksum is left to adjsnapd).
  void EndReservation(wire::AmId op, const Pending& p, uint64_t copy_ns,
                      std::optional<uint64_t> checksum = std::nullopt);
  void ReleaseLease(uint64_t lease, uint64_t copy_ns);
  // The same from another thread (a CUDA completion): posted to the loop.
  void PostReservationEnd(wire::AmId op, const Pending& p, uint64_t copy_ns);
  void PostLeaseRelease(uint64_t lease, uint64_t copy_ns);
  Status CheckRange(uint64_t offset, size_t bytes) const;
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Client::data_transports: the endpoint's lanes, read on the loop thread.
  std::string EndpointTransports();
  // Drops any message but a Reply (adjsnapd sends nothing else).
  static ucs_status_t OnUnknownId(void*, const void*, size_t, void*, size_t,
                                  const ucp_am_recv_param_t*) {
    return UCS_OK;
  }
  static ucs_status_t OnReply(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  // A Reply from either link (`data`: a copied fetch's bytes, UCX only). Loop thread.
  void HandleReply(const wire::Reply& reply, void* data, size_t length, bool rndv);
  // The link failed (`what` says how): what is pending fails UNAVAILABLE. Loop thread.
  void LinkLost(const std::string& what);
};

}  // namespace adjsnap
