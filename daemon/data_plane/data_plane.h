// The UCX data plane of adjsnapd: one UCX worker and the active-message handlers that move
// snapshot bytes between solver processes and the tiers (wire format: proto/adjsnap/wire.h).
//
// Links: a session reaches the data plane over one link, a UCX endpoint or a session socket.
// - Endpoints: there is no listener. OpenSession (control plane, SO_PEERCRED) hands the
//   client the worker's address and calls Connect() with the client's own worker address,
//   which CheckUcxAddress has vetted; the endpoint Connect creates is bound to that session
//   from the start, and UCX pairs it with the one the client creates to this worker.
// - Session sockets: a session opened without a UCX address (ExpectSocket) gets its arena
//   socket connection, authenticated there by id, token and SO_PEERCRED, as its link
//   (AttachSocket); it carries the mapped path's messages only (wire.h).
// Every message is admitted by its link: an endpoint that no session created is dropped, as
// is an AM id outside the wire format (a handler covers all 65536 ids, so UCX never indexes
// past its table). Rejections are counted and logged, at most a few lines a second.
//
// Mapped path (same node, the default there): the client holds its own uid's host-tier arena
// mapped (with host_arenas = "shared": root and adjsnapd's uid only) and copies bytes itself;
// these handlers only reserve/commit steps and lease blocks
// (kReserve, kCommit, kAbort, kFetchMapped, kReleaseLease).
// Copied path (any client, e.g. over tcp): kPush carries the snapshot as AM data; the handler
// validates the header, reserves tier memory through the Store, then receives the data
// straight into that block (rendezvous: one copy by UCX's transport) and commits. A push
// rejected up front never moves its bytes. kFetch: the tier block is sent as the AM data of
// the Reply, received straight into the caller's buffer.
//
// Waiting: a push that finds the host tier full, or a fetch of a step on disk, is answered
// later: the Store calls back (from its threads), the callback is posted to the loop, and the
// reply goes out from there. A waiting rendezvous push keeps its descriptor (UCS_INPROGRESS)
// and is received once it has room; a waiting eager push keeps a copy of its bytes.
//
// Threading: one WorkerLoop thread owns the UCX worker, every endpoint and every session
// socket; all handlers run on it (the sweeper thread only posts Sweep to it). DropSession(),
// ExpectSocket() and AttachSocket() are thread-safe (they post to the loop). Counters are
// atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "log.h"
#include "metrics/latency_histogram.h"
#include "sessions/sessions.h"
#include "adjsnap/message_socket.h"
#include "adjsnap/transfer_fit.h"
#include "adjsnap/ucx.h"
#include "adjsnap/wire.h"
#include "store/store.h"

namespace adjsnap {

struct DataPlaneCounters {
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> fetches{0};
  std::atomic<uint64_t> rejected{0};  // every rejection; by reason: log::RejectionCounts
  // Bytes and nanoseconds of completed transfers into (write) and out of (read) the host tier.
  std::atomic<uint64_t> write_bytes{0};
  std::atomic<uint64_t> write_ns{0};
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> read_ns{0};
  // The same transfers one by one, for the host tier's latency and bandwidth (Stats).
  TransferSamples write_samples;
  TransferSamples read_samples;
  LatencyHistogram push_seconds;  // first message to the stored reply, per push
  void AddWrite(uint64_t bytes, std::chrono::steady_clock::time_point since);
  void AddRead(uint64_t bytes, std::chrono::steady_clock::time_point since);
  // With a duration the client measured for its own copy (mapped path).
  void AddWrite(uint64_t bytes, uint64_t ns);
  void AddRead(uint64_t bytes, uint64_t ns);
};

class DataPlane {
 public:
  // True when the UCX progress thread runs a posted task within `timeout` (the watchdog's
  // health check).
  bool Responsive(std::chrono::milliseconds timeout);
  // A client may hold this many mapped pushes reserved but not committed; more are refused,
  // so one client cannot pin the host tier with reservations it never fills.
  static constexpr size_t kMaxReservationsPerEndpoint = 64;

  struct Options {
    // A session whose client has not said Hello by then is closed (it never connected, or
    // its endpoint cannot reach it).
    std::chrono::seconds connect_timeout{30};
    // Runs that are not kept and whose every opening client died are removed this long after
    // (Store::RemoveOrphans, from the sweeper); 0 = never.
    std::chrono::seconds orphan_grace{600};
  };

  static Result<std::unique_ptr<DataPlane>> Start(const Options& options, Store* store,
                                                  SessionTable* sessions);
  // Closes every endpoint (in-flight pushes are aborted, never recorded), then stops the
  // progress thread.
  ~DataPlane();

  // The worker's packed UCX address, for OpenSession's reply.
  const std::string& worker_address() const { return loop_->address(); }
  // A line for logs and `adjsnap status`.
  std::string Describe() const;
  // Creates the session's endpoint to the client worker at `client_address` (vetted by
  // CheckUcxAddress). Blocks until the loop thread has done it: not for reactors.
  Status Connect(const Session& session, const std::string& client_address);
  // Closes the links bound to a session that the control plane closed.
  void DropSession(uint64_t session_id);
  // `session` was opened without a UCX address: its link will be its session socket. Unless
  // AttachSocket brings it within the connect timeout, the session is closed.
  void ExpectSocket(const Session& session);
  // The arena socket authenticated `fd` for `session` and handed it its arena: it becomes the
  // session's link. A session that expects none (a UCX session, one whose socket came already
  // or expired) gets the connection closed, and the refusal is logged.
  void AttachSocket(const Session& session, ucx::ScopedFd fd);
  const DataPlaneCounters& counters() const { return counters_; }

 private:
  using Clock = std::chrono::steady_clock;
  // What a Conn is found by: the ucp_ep_h of its UCX endpoint, or the MessageSocket* of its
  // session socket. Only compared, never dereferenced through this type.
  using Link = const void*;
  struct Conn {
    // Unique per endpoint this data plane made. UCX may hand a closed endpoint's handle to a
    // later client, so a callback that outlives its endpoint names it by handle and serial
    // (Peer), or it would act for that other client.
    uint64_t serial = 0;
    uint64_t session_id = 0;  // the session that created the endpoint
    uint64_t token = 0;
    ucp_ep_h ep = nullptr;                  // the link: a UCX endpoint, or
    std::unique_ptr<MessageSocket> socket;  // the session socket
    bool hello = false;  // the client said Hello: it may push and fetch
    std::chrono::steady_clock::time_point opened;
    Tenant tenant;  // the session's uid (from the control socket's SO_PEERCRED)
    struct Reservation {
      Store::PushTicket ticket;
      std::chrono::steady_clock::time_point since;    // granted: the client's copy starts
      std::chrono::steady_clock::time_point arrived;  // the Reserve reached adjsnapd
    };
    struct Lease {
      std::shared_ptr<HostBlock> block;
      uint64_t bytes;
      std::chrono::steady_clock::time_point since;
      uint64_t run_id;
      uint64_t step;
      uint64_t generation;  // for read-once release when the client is done
    };
    // Mapped pushes between kReserve and kCommit, by (run_id, step).
    std::map<std::pair<uint64_t, uint64_t>, Reservation> reserved;
    // Blocks pinned for mapped fetches, by lease (the kFetchMapped request_id).
    std::unordered_map<uint64_t, Lease> leases;
    // Mapped pushes waiting for host room (counted against kMaxReservationsPerEndpoint).
    size_t parked = 0;
  };
  // A link as a store callback (which may outlive it) names it.
  struct Peer {
    Link link;
    uint64_t serial;
  };
  // The connection `peer` names; null once its endpoint is gone (closed, or its handle reused).
  Conn* Find(const Peer& peer);
  // What a Reply carries besides its status.
  struct ReplyBody {
    uint64_t offset = 0;                          // arena offset (kReserve, kFetchMapped)
    uint64_t bytes = 0;  // length of `data`; kFetchMapped: the step's bytes in the block
    const void* data = nullptr;                   // copied fetch: the snapshot bytes
    std::shared_ptr<HostBlock> keep;              // keeps `data` alive until sent
    std::chrono::steady_clock::time_point since;  // copied fetch: when it was requested
    std::function<void()> on_sent;  // copied fetch: runs once the bytes were delivered
  };
  // Set to false (under mu) before the loop stops: store callbacks that arrive later, from
  // I/O threads, find no data plane to post to and are dropped.
  struct Liveness {
    Mutex mu;
    bool alive ADJSNAP_GUARDED_BY(mu) = true;
  };
  // Wraps a store callback so it runs on the loop thread, if the data plane still exists.
  template <typename T>
  std::function<void(T)> OnLoop(std::function<void(T)> f);

  DataPlane(const Options& options, Store* store, SessionTable* sessions,
            std::unique_ptr<ucx::WorkerLoop> loop);

  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // The handler of every AM id that is not part of the wire format.
  static ucs_status_t OnUnknownId(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  // Counts a dropped or refused message (in total and by reason) and logs `reason: detail`, at
  // most a few lines a second for each reason (a flood of one kind hides no other). Loop thread.
  void Reject(log::Reason reason, const std::string& detail);
  // Closes the sessions that did not say Hello within the connect timeout. Loop thread.
  void Sweep();

  // Every AM handler: the admitted connection, its endpoint, the parsed header, and the AM
  // data (only kPush carries any).
  // Returns UCS_INPROGRESS when it keeps a rendezvous descriptor past the callback (a push
  // waiting for host room), else UCS_OK.
  template <typename T>
  // `param` is null for a message from a session socket (which carries no AM data).
  using Handler = ucs_status_t (DataPlane::*)(Conn& conn, Link link, const T& req, void* data,
                                              size_t length, const ucp_am_recv_param_t* param);
  // The UCX callback for AM id `kOp`: admits the message (see Admit), copies its header into a
  // T, and calls `H`.
  template <typename T, wire::AmId kOp, bool kNeedsSession, Handler<T> H>
  static ucs_status_t Dispatch(void* arg, const void* header, size_t header_length, void* data,
                               size_t length, const ucp_am_recv_param_t* param);
  template <typename T, wire::AmId kOp, bool kNeedsSession, Handler<T> H>
  void Register();
  // A message from a session socket: admitted as a UCX one is, then the same handler; only
  // the mapped path's messages are accepted there.
  void DispatchSocket(Link link, uint16_t op, const void* message, size_t bytes);
  template <typename T, wire::AmId kOp, Handler<T> H>
  void DispatchFromSocket(Link link, const void* message, size_t bytes);
  // Sessions opened without a UCX address whose socket has not come yet (loop thread).
  struct AwaitedSocket {
    uint64_t token;
    Clock::time_point since;
  };
  std::unordered_map<uint64_t, AwaitedSocket> awaited_sockets_;

  ucs_status_t HandleHello(Conn& conn, Link link, const wire::HelloRequest& req, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandlePush(Conn& conn, Link link, const wire::PushRequest& req, void* data,
                          size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandleFetch(Conn& conn, Link link, const wire::FetchRequest& req, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandleReserve(Conn& conn, Link link, const wire::PushRequest& req, void* data,
                             size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandleCommit(Conn& conn, Link link, const wire::PushRequest& req, void* data,
                            size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandleFetchMapped(Conn& conn, Link link, const wire::FetchRequest& req, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  // Removes and returns the endpoint's reservation of req's step; without one, answers
  // FAILED_PRECONDITION ("`what` of step S ... without a reservation") and returns nullopt.
  std::optional<Conn::Reservation> TakeReservation(Conn& conn, Link link,
                                                   const wire::PushRequest& req, const char* what);
  ucs_status_t HandleAbort(Conn& conn, Link link, const wire::PushRequest& req, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  ucs_status_t HandleReleaseLease(Conn& conn, Link link, const wire::LeaseRelease& req, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  // Forgets a connection: aborts its reservations, drops its leases, ends its session, and
  // closes its link (a UCX endpoint later, from the loop; a session socket now).
  void Forget(std::unordered_map<Link, Conn>::iterator it, bool died = false);

  // Checks the link, header size, magic, version, op and (unless Hello) the session token.
  // On failure counts the message as rejected, answers it when it can, and returns null.
  Conn* Admit(Link link, const void* header, size_t header_length, size_t expected_length,
              wire::AmId op, bool needs_session);
  // `arrived`: when the push's first message reached adjsnapd (its latency is observed here).
  // Commits the push, and answers it if its endpoint is still connected.
  void FinishPush(const Peer& peer, uint64_t request_id, const Store::PushTicket& ticket,
                  Clock::time_point arrived);
  // A copied push has its tier memory: receives the data (eager: from `eager`; rendezvous:
  // from the descriptor `data`) and commits.
  void ReceivePush(const Peer& peer, uint64_t request_id, Store::PushTicket ticket, void* data,
                   size_t length, bool rndv, const std::vector<char>* eager,
                   Clock::time_point arrived);
  // OK when `block` lies in the arena the endpoint's client maps (its uid's), else
  // PERMISSION_DENIED saying so (an admin reaching into another tenant's run).
  Status MappedByEndpoint(const Conn& conn, const HostBlock& block, uint64_t run_id,
                          uint64_t step) const;
  void OnReserved(const Peer& peer, uint64_t request_id, bool parked, Result<Store::PushTicket> t,
                  Clock::time_point arrived);
  // Both fetch paths: asks the store for the step's host bytes, then answers in OnFetched
  // (mapped: a lease and the arena offset; copied: the bytes as the Reply's data).
  void StartFetch(const Conn& conn, Link link, const wire::FetchRequest& req, bool mapped);
  void OnFetched(const Peer& peer, uint64_t request_id, bool mapped, const wire::FetchRequest& req,
                 Result<Store::FetchGrant> grant);
  // Answers on `link` (loop thread): a session socket's Reply is queued on it now; an
  // endpoint's is posted, and sent if the endpoint is still the one connected then.
  void Reply(Link link, uint64_t request_id, const Status& status, ReplyBody body);
  void Reply(Link link, uint64_t request_id, const Status& status);
  void CloseLater(ucp_ep_h ep);

  const Options options_;
  Store* const store_;
  SessionTable* const sessions_;
  DataPlaneCounters counters_;
  std::shared_ptr<Liveness> liveness_ = std::make_shared<Liveness>();
  // Loop-thread state. Declared before loop_ so it outlives the progress thread.
  std::unordered_map<Link, Conn> conns_;
  uint64_t next_serial_ = 1;  // Conn::serial of the next endpoint
  log::RejectionLog rejections_{log::Surface::kDataPlane};
  std::unique_ptr<ucx::WorkerLoop> loop_;
  // Posts Sweep() to the loop once a second; stopped before the loop.
  Mutex sweeper_mu_;
  CondVar sweeper_cv_;
  bool sweeper_stop_ ADJSNAP_GUARDED_BY(sweeper_mu_) = false;
  std::thread sweeper_;
};

template <typename T>
std::function<void(T)> DataPlane::OnLoop(std::function<void(T)> f) {
  return [this, liveness = liveness_, f = std::move(f)](T value) {
    if (loop_->InLoopThread()) {  // answered at once, inside the handler that asked
      f(std::move(value));
      return;
    }
    MutexLock lock(liveness->mu);
    if (!liveness->alive) return;  // shutting down: nobody left to answer
    loop_->Post([f, value = std::move(value)]() mutable { f(std::move(value)); });
  };
}

}  // namespace adjsnap
