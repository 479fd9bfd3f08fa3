#include "data_plane/data_plane.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <future>

#include "log.h"
#include "adjsnap/thread_name.h"

namespace adjsnap {

namespace {

uint64_t NanosSince(std::chrono::steady_clock::time_point since) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since)
          .count());
}

}  // namespace

void DataPlaneCounters::AddWrite(uint64_t bytes, uint64_t ns) {
  write_bytes.fetch_add(bytes, std::memory_order_relaxed);
  write_ns.fetch_add(ns, std::memory_order_relaxed);
  write_samples.Add(bytes, static_cast<double>(ns) * 1e-9);
}

void DataPlaneCounters::AddRead(uint64_t bytes, uint64_t ns) {
  read_bytes.fetch_add(bytes, std::memory_order_relaxed);
  read_ns.fetch_add(ns, std::memory_order_relaxed);
  read_samples.Add(bytes, static_cast<double>(ns) * 1e-9);
}

void DataPlaneCounters::AddWrite(uint64_t bytes, std::chrono::steady_clock::time_point since) {
  AddWrite(bytes, NanosSince(since));
}

void DataPlaneCounters::AddRead(uint64_t bytes, std::chrono::steady_clock::time_point since) {
  AddRead(bytes, NanosSince(since));
}

DataPlane::DataPlane(const Options& options, Store* store, SessionTable* sessions,
                     std::unique_ptr<ucx::WorkerLoop> loop)
    : options_(options), store_(store), sessions_(sessions), loop_(std::move(loop)) {}

Result<std::unique_ptr<DataPlane>> DataPlane::Start(const Options& options, Store* store,
                                                    SessionTable* sessions) {
  ADJSNAP_ASSIGN_OR_RETURN(auto loop, ucx::WorkerLoop::Create("adjsnapd"));
  std::unique_ptr<DataPlane> dp(new DataPlane(options, store, sessions, std::move(loop)));
  // Every id first, then the wire format's own over them.
  ADJSNAP_RETURN_IF_ERROR(
      ucx::SetDefaultAmHandler(dp->loop_->worker(), &DataPlane::OnUnknownId, dp.get()));
  using wire::FetchRequest, wire::PushRequest;
  dp->Register<wire::HelloRequest, wire::kHello, false, &DataPlane::HandleHello>();
  dp->Register<PushRequest, wire::kPush, true, &DataPlane::HandlePush>();
  dp->Register<FetchRequest, wire::kFetch, true, &DataPlane::HandleFetch>();
  dp->Register<PushRequest, wire::kReserve, true, &DataPlane::HandleReserve>();
  dp->Register<PushRequest, wire::kCommit, true, &DataPlane::HandleCommit>();
  dp->Register<FetchRequest, wire::kFetchMapped, true, &DataPlane::HandleFetchMapped>();
  dp->Register<wire::LeaseRelease, wire::kReleaseLease, true, &DataPlane::HandleReleaseLease>();
  dp->Register<wire::PushRequest, wire::kAbort, true, &DataPlane::HandleAbort>();
  dp->loop_->Start("adjsnap-dplane");
  DataPlane* raw = dp.get();
  dp->sweeper_ = NamedThread("adjsnap-sweeper", [raw] {
    MutexLock lock(raw->sweeper_mu_);
    while (!raw->sweeper_cv_.WaitFor(
        raw->sweeper_mu_, std::chrono::seconds(1),
        [raw]() ADJSNAP_REQUIRES(raw->sweeper_mu_) { return raw->sweeper_stop_; })) {
      raw->loop_->Post([raw] { raw->Sweep(); });
    }
  });
  return dp;
}

DataPlane::~DataPlane() {
  {
    MutexLock lock(sweeper_mu_);
    sweeper_stop_ = true;
  }
  sweeper_cv_.NotifyAll();
  if (sweeper_.joinable()) sweeper_.join();
  {
    MutexLock lock(liveness_->mu);
    liveness_->alive = false;
  }
  loop_->Post([this] {
    while (!conns_.empty()) {
      ucp_ep_h ep = conns_.begin()->second.ep;
      conns_.begin()->second.ep = nullptr;  // closed here, waiting, not later by Forget
      Forget(conns_.begin());
      if (ep) ucx::CloseEndpoint(*loop_, ep, /*force=*/true);
    }
  });
  loop_->Stop();
}

template <typename T, wire::AmId kOp, bool kNeedsSession, DataPlane::Handler<T> H>
ucs_status_t DataPlane::Dispatch(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<DataPlane*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    self->Reject(log::Reason::kNoReplyEndpoint, "AM id " + std::to_string(kOp));
    return UCS_OK;
  }
  Conn* conn = self->Admit(param->reply_ep, header, header_length, sizeof(T), kOp, kNeedsSession);
  if (conn == nullptr) return UCS_OK;  // UCX drops eager data and cancels an unread rendezvous
  T req;
  std::memcpy(&req, header, sizeof req);
  return (self->*H)(*conn, param->reply_ep, req, data, length, param);
}

template <typename T, wire::AmId kOp, DataPlane::Handler<T> H>
void DataPlane::DispatchFromSocket(Link link, const void* message, size_t bytes) {
  Conn* conn = Admit(link, message, bytes, sizeof(T), kOp, /*needs_session=*/true);
  if (conn == nullptr) return;
  T req;
  std::memcpy(&req, message, sizeof req);
  (void)(this->*H)(*conn, link, req, nullptr, 0, nullptr);
}

void DataPlane::DispatchSocket(Link link, uint16_t op, const void* message, size_t bytes) {
  using wire::FetchRequest, wire::PushRequest;
  switch (op) {
    case wire::kReserve:
      return DispatchFromSocket<PushRequest, wire::kReserve, &DataPlane::HandleReserve>(
          link, message, bytes);
    case wire::kCommit:
      return DispatchFromSocket<PushRequest, wire::kCommit, &DataPlane::HandleCommit>(link, message,
                                                                                      bytes);
    case wire::kAbort:
      return DispatchFromSocket<PushRequest, wire::kAbort, &DataPlane::HandleAbort>(link, message,
                                                                                    bytes);
    case wire::kFetchMapped:
      return DispatchFromSocket<FetchRequest, wire::kFetchMapped, &DataPlane::HandleFetchMapped>(
          link, message, bytes);
    case wire::kReleaseLease:
      return DispatchFromSocket<wire::LeaseRelease, wire::kReleaseLease,
                                &DataPlane::HandleReleaseLease>(link, message, bytes);
    default:
      break;
  }
  // Hello, Push, Fetch or an unknown op: answered when it carries a request id.
  auto it = conns_.find(link);
  if (it == conns_.end()) return;
  Status why = Status::InvalidArgument(
      "op " + std::to_string(op) +
      " over a session socket, which carries only the mapped path's messages (Reserve, "
      "Commit, Abort, FetchMapped, ReleaseLease); copied pushes and fetches need a session "
      "with a UCX endpoint");
  Reject(log::Reason::kMalformed,
         "session " + std::to_string(it->second.session_id) + ": " + why.ToString());
  wire::Header h{};
  if (bytes >= sizeof h) {
    std::memcpy(&h, message, sizeof h);
    Reply(link, h.request_id, why);
  }
}

ucs_status_t DataPlane::OnUnknownId(void* arg, const void*, size_t header_length, void*,
                                    size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<DataPlane*>(arg);
  // UCX does not pass the id to the handler; every wire-format id has its own handler, so
  // this one is reached only by ids outside the format.
  bool known =
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && self->conns_.count(param->reply_ep);
  char why[200];
  std::snprintf(why, sizeof why, "%zu-byte header, %zu bytes of data, from %s", header_length,
                length, known ? "a session's endpoint" : "an endpoint no session created");
  self->Reject(log::Reason::kUnknownAmId, why);
  return UCS_OK;  // eager data are dropped; an unread rendezvous is cancelled
}

void DataPlane::Reject(log::Reason reason, const std::string& detail) {
  counters_.rejected.fetch_add(1, std::memory_order_relaxed);
  rejections_.Reject(reason, detail);
}

template <typename T, wire::AmId kOp, bool kNeedsSession, DataPlane::Handler<T> H>
void DataPlane::Register() {
  // Registration only fails on invalid parameters, which are fixed here.
  (void)ucx::SetAmHandler(loop_->worker(), kOp, &DataPlane::Dispatch<T, kOp, kNeedsSession, H>,
                          this);
}

std::string DataPlane::Describe() const {
  return "UCX worker (" + std::to_string(loop_->address().size()) +
         "-byte address, handed out by OpenSession; no listener; " + loop_->transports() +
         ") and session sockets";
}

Status DataPlane::Connect(const Session& session, const std::string& client_address) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  loop_->Post([this, session, client_address, done] {
    auto ep =
        ucx::ConnectToWorker(loop_->worker(), client_address, &DataPlane::OnEndpointError, this);
    if (!ep.ok()) {
      done->set_value(Status::InvalidArgument("ucx_address: UCX cannot connect to it (" +
                                              ep.status().message() + ")"));
      return;
    }
    Conn conn;
    conn.serial = next_serial_++;
    conn.session_id = session.id;
    conn.token = session.token;
    conn.ep = *ep;
    // Pushes and fetches touch only the session's own runs (root and adjsnapd's uid: any run).
    conn.tenant = Tenant{session.uid, TrustedUid(session.uid), session.id};
    conn.opened = std::chrono::steady_clock::now();
    conns_[*ep] = std::move(conn);
    done->set_value(Status::Ok());
  });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return Status::Unavailable("the data plane did not create the session's endpoint in 10 s");
  }
  return result.get();
}

void DataPlane::Sweep() {
  auto now = std::chrono::steady_clock::now();
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (!it->second.hello && now - it->second.opened > options_.connect_timeout) {
      ADJSNAP_LOG_INFO("session %llu: closed, its client did not connect within %lld s",
                     static_cast<unsigned long long>(it->second.session_id),
                     static_cast<long long>(options_.connect_timeout.count()));
      // Gone, as a killed client is: a reconnect may have attached it to runs (AttachSession),
      // which it must orphan again.
      Forget(it++, /*died=*/true);
    } else {
      ++it;
    }
  }
  for (auto it = awaited_sockets_.begin(); it != awaited_sockets_.end();) {
    if (now - it->second.since > options_.connect_timeout) {
      ADJSNAP_LOG_INFO(
          "session %llu: closed, its client did not bring its session socket within "
          "%lld s",
          static_cast<unsigned long long>(it->first),
          static_cast<long long>(options_.connect_timeout.count()));
      store_->EndSession(it->first, /*died=*/true);  // gone (see above)
      (void)sessions_->Close(it->first, it->second.token);
      it = awaited_sockets_.erase(it);
    } else {
      ++it;
    }
  }
  if (options_.orphan_grace.count() > 0) store_->RemoveOrphans(options_.orphan_grace);
}

void DataPlane::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<DataPlane*>(arg);
  auto it = self->conns_.find(ep);
  if (it == self->conns_.end()) return;
  // A client that ends (or dies) shows up here as a reset or timed-out endpoint: that is
  // how sessions end, not an error of adjsnapd's.
  ADJSNAP_LOG_INFO("session %llu: client disconnected (UCX: %s)",
                 static_cast<unsigned long long>(it->second.session_id), ucs_status_string(status));
  self->Forget(it, /*died=*/true);
}

void DataPlane::Forget(std::unordered_map<Link, Conn>::iterator it, bool died) {
  for (const auto& [key, r] : it->second.reserved) store_->AbortPush(r.ticket);
  // Device steps held in that client's GPU memory died with its endpoint.
  if (it->second.session_id != 0) {
    store_->EndSession(it->second.session_id, died);
    (void)sessions_->Close(it->second.session_id, it->second.token);  // may be closed already
  }
  if (it->second.ep) CloseLater(it->second.ep);
  conns_.erase(it);  // a session socket closes here
}

void DataPlane::ExpectSocket(const Session& session) {
  loop_->Post([this, id = session.id, token = session.token] {
    awaited_sockets_[id] = AwaitedSocket{token, Clock::now()};
  });
}

void DataPlane::AttachSocket(const Session& session, ucx::ScopedFd fd) {
  auto shared = std::make_shared<ucx::ScopedFd>(std::move(fd));
  loop_->Post([this, session, shared] {
    auto awaited = awaited_sockets_.find(session.id);
    if (awaited == awaited_sockets_.end() || awaited->second.token != session.token) {
      Reject(log::Reason::kAnotherSession,
             "a session socket for session " + std::to_string(session.id) +
                 ", which expects none (opened with a UCX address, or its socket came already "
                 "or expired); closed");
      return;  // the connection closes with `shared`
    }
    awaited_sockets_.erase(awaited);
    auto link_of = std::make_shared<Link>(nullptr);
    const uint64_t serial = next_serial_++;
    auto started = MessageSocket::Start(
        loop_.get(), std::move(*shared), MessageSocket::Limits{wire::kMaxSocketMessage, 1 << 20},
        [this, link_of](uint16_t op, const void* message, size_t bytes) {
          DispatchSocket(*link_of, op, message, bytes);
        },
        [this, link_of, serial](const Status& why) {
          // Forgotten from the loop, not inside the socket's own callback.
          loop_->Post([this, link = *link_of, serial, why] {
            auto it = conns_.find(link);
            if (it == conns_.end() || it->second.serial != serial) return;
            // How sessions end when their client ends or dies, not an error of adjsnapd's.
            ADJSNAP_LOG_INFO("session %llu: client disconnected (%s)",
                           static_cast<unsigned long long>(it->second.session_id),
                           why.ToString().c_str());
            Forget(it, /*died=*/true);
          });
        });
    if (!started.ok()) {
      ADJSNAP_LOG_WARN("session %llu: cannot serve its session socket: %s",
                     static_cast<unsigned long long>(session.id),
                     started.status().ToString().c_str());
      store_->EndSession(session.id, /*died=*/false);
      (void)sessions_->Close(session.id, session.token);
      return;
    }
    Conn conn;
    conn.serial = serial;
    conn.session_id = session.id;
    conn.token = session.token;
    conn.hello = true;  // the arena socket checked its id, token and uid
    conn.tenant = Tenant{session.uid, TrustedUid(session.uid), session.id};
    conn.opened = Clock::now();
    conn.socket = std::move(started).value();
    *link_of = conn.socket.get();
    conns_[*link_of] = std::move(conn);
  });
}

void DataPlane::CloseLater(ucp_ep_h ep) {
  // Closing from inside a UCX callback is not allowed; do it from the loop.
  loop_->Post([ep] {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
    if (req != nullptr && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
  });
}

bool DataPlane::Responsive(std::chrono::milliseconds timeout) {
  auto ran = std::make_shared<std::promise<void>>();
  std::future<void> done = ran->get_future();
  loop_->Post([ran] { ran->set_value(); });
  return done.wait_for(timeout) == std::future_status::ready;
}

void DataPlane::DropSession(uint64_t session_id) {
  loop_->Post([this, session_id] {
    awaited_sockets_.erase(session_id);  // closed before its socket came
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.session_id == session_id) {
        Forget(it++);
      } else {
        ++it;
      }
    }
  });
}

DataPlane::Conn* DataPlane::Admit(Link link, const void* header, size_t header_length,
                                  size_t expected_length, wire::AmId op, bool needs_session) {
  std::string op_name = "AM id " + std::to_string(op);
  auto it = conns_.find(link);
  if (it == conns_.end()) {
    // Not answered: an endpoint adjsnapd did not create is UCX's to free at any time.
    Reject(log::Reason::kUnknownEndpoint, op_name + " (open a session first)");
    return nullptr;
  }
  Conn& conn = it->second;
  auto refuse = [&](log::Reason reason, uint64_t request_id, Status status) {
    Reject(reason, "session " + std::to_string(conn.session_id) + ", " + op_name + ": " +
                       status.ToString());
    Reply(link, request_id, status);
    return nullptr;
  };
  wire::Header h{};
  if (header_length < sizeof h) {
    return refuse(
        log::Reason::kMalformed, 0,
        Status::InvalidArgument("malformed message: header of " + std::to_string(header_length) +
                                " bytes, expected " + std::to_string(expected_length)));
  }
  std::memcpy(&h, header, sizeof h);
  if (h.magic != wire::kMagic || h.version != wire::kVersion) {
    return refuse(
        log::Reason::kWireVersion, h.request_id,
        Status::InvalidArgument("unsupported wire format (magic " + std::to_string(h.magic) +
                                ", version " + std::to_string(h.version) +
                                "); this adjsnapd speaks version " + std::to_string(wire::kVersion)));
  }
  if (header_length != expected_length || h.op != op) {
    return refuse(log::Reason::kMalformed, h.request_id,
                  Status::InvalidArgument("malformed message for AM id " + std::to_string(op) +
                                          ": header of " + std::to_string(header_length) +
                                          " bytes with op " + std::to_string(h.op) + ", expected " +
                                          std::to_string(expected_length) + " bytes with op " +
                                          std::to_string(op)));
  }
  if (h.token != conn.token) {
    return refuse(
        log::Reason::kWrongToken, h.request_id,
        Status::Unauthenticated("token does not match the open session of this endpoint"));
  }
  if (!sessions_->Find(conn.session_id, h.token)) {
    // The right token, on the session's own link, after CloseSession closed the session and
    // before its DropSession reached this loop: the client's last messages (a lease it
    // released) were in flight. Not a rejection; the link goes with DropSession.
    Reply(link, h.request_id,
          Status::Unavailable("session " + std::to_string(conn.session_id) + " was closed"));
    return nullptr;
  }
  if (needs_session && !conn.hello) {
    return refuse(log::Reason::kBeforeHello, h.request_id,
                  Status::Unauthenticated("endpoint has not said Hello: send Hello with the "
                                          "OpenSession id and token first"));
  }
  if (wire::IsMappedPath(op) && !store_->host_per_uid_arenas() && !TrustedUid(conn.tenant.uid)) {
    return refuse(log::Reason::kUntrustedUid, h.request_id,
                  Status::PermissionDenied("AM id " + std::to_string(op) +
                                           " belongs to the mapped host-tier path, which "
                                           "host_arenas = \"shared\" gives only root and uid " +
                                           std::to_string(geteuid()) + "; uid " +
                                           std::to_string(conn.tenant.uid) +
                                           " pushes and fetches with "
                                           "the copied messages (Push, Fetch)"));
  }
  return &conn;
}

ucs_status_t DataPlane::HandleHello(Conn& conn, Link link, const wire::HelloRequest& req, void*,
                                    size_t, const ucp_am_recv_param_t*) {
  if (req.session_id != conn.session_id) {
    Reject(log::Reason::kAnotherSession, "Hello for session " + std::to_string(req.session_id) +
                                             " on the endpoint of session " +
                                             std::to_string(conn.session_id));
    Reply(link, req.header.request_id,
          Status::Unauthenticated("session " + std::to_string(req.session_id) +
                                  " is not the session this endpoint was opened for"));
    return UCS_OK;
  }
  conn.hello = true;
  Reply(link, req.header.request_id, Status::Ok());
  return UCS_OK;
}

DataPlane::Conn* DataPlane::Find(const Peer& peer) {
  auto it = conns_.find(peer.link);
  return it != conns_.end() && it->second.serial == peer.serial ? &it->second : nullptr;
}

void DataPlane::Reply(Link link, uint64_t request_id, const Status& status) {
  Reply(link, request_id, status, ReplyBody());
}

void DataPlane::Reply(Link link, uint64_t request_id, const Status& status, ReplyBody body) {
  auto reply = std::make_shared<wire::Reply>();
  std::memset(reply.get(), 0, sizeof *reply);
  reply->header = wire::MakeHeader(wire::kReply, 0, request_id);
  reply->code = static_cast<int32_t>(status.code());
  reply->bytes = body.bytes;
  reply->offset = body.offset;
  size_t n = std::min(status.message().size(), wire::kMaxReplyMessage);
  std::memcpy(reply->message, status.message().data(), n);
  reply->message_length = static_cast<uint32_t>(n);
  auto conn = conns_.find(link);
  if (conn == conns_.end()) return;  // client went away; nothing to answer
  if (conn->second.socket) {
    // A session socket carries no AM data: only the mapped path's Replies come here. If it
    // ends on this send, its conn is forgotten from the loop, not under the caller.
    conn->second.socket->Send(wire::kReply, reply.get(), sizeof *reply);
    return;
  }
  // Sent from the loop, not from inside the UCX callback that produced it.
  loop_->Post([this, peer = Peer{link, conn->second.serial}, reply, data = body.data,
               keep = std::move(body.keep), since = body.since, on_sent = std::move(body.on_sent)] {
    Conn* to = Find(peer);
    if (!to) return;  // client went away; nothing to answer
    ucp_ep_h ep = to->ep;
    bool is_fetch = data != nullptr;
    ucp_request_param_t p =
        ucx::SendParam([this, reply, keep, is_fetch, since, on_sent](ucs_status_t s, size_t) {
          if (is_fetch && s == UCS_OK) {
            counters_.fetches.fetch_add(1, std::memory_order_relaxed);
            counters_.AddRead(reply->bytes, since);
            if (on_sent) on_sent();
          }
        });
    // The header must stay valid until the send completes; the callback holds it.
    ucx::Track(ucp_am_send_nbx(ep, wire::kReply, reply.get(), sizeof *reply, data,
                               data ? reply->bytes : 0, &p),
               p);
  });
}

}  // namespace adjsnap
