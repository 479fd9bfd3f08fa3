#include "data_plane/data_plane.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <future>

#include "log.h"

namespace snapd {

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
}

void DataPlaneCounters::AddRead(uint64_t bytes, uint64_t ns) {
  read_bytes.fetch_add(bytes, std::memory_order_relaxed);
  read_ns.fetch_add(ns, std::memory_order_relaxed);
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
  SNAPD_ASSIGN_OR_RETURN(auto loop, ucx::WorkerLoop::Create("snapd"));
  std::unique_ptr<DataPlane> dp(new DataPlane(options, store, sessions, std::move(loop)));
  // Every id first, then the wire format's own over them.
  SNAPD_RETURN_IF_ERROR(
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
  dp->loop_->Start();
  DataPlane* raw = dp.get();
  dp->sweeper_ = std::thread([raw] {
    MutexLock lock(raw->sweeper_mu_);
    while (!raw->sweeper_cv_.WaitFor(
        raw->sweeper_mu_, std::chrono::seconds(1),
        [raw]() SNAPD_REQUIRES(raw->sweeper_mu_) { return raw->sweeper_stop_; })) {
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
      ucp_ep_h ep = conns_.begin()->first;
      Forget(conns_.begin());
      ucx::CloseEndpoint(*loop_, ep, /*force=*/true);
    }
  });
  loop_->Stop();
}

template <typename T, wire::AmId kOp, bool kNeedsSession, DataPlane::Handler<T> H>
ucs_status_t DataPlane::Dispatch(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<DataPlane*>(arg);
  Conn* conn = self->Admit(param, header, header_length, sizeof(T), kOp, kNeedsSession);
  if (conn == nullptr) return UCS_OK;  // UCX drops eager data and cancels an unread rendezvous
  T req;
  std::memcpy(&req, header, sizeof req);
  return (self->*H)(*conn, param->reply_ep, req, data, length, param);
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
         "-byte address, handed out by OpenSession; no listener)";
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
    // Pushes and fetches touch only the session's own runs (root and snapd's uid: any run).
    conn.tenant = Tenant{session.uid, TrustedUid(session.uid)};
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
      SNAPD_LOG_INFO("session %llu: closed, its client did not connect within %lld s",
                     static_cast<unsigned long long>(it->second.session_id),
                     static_cast<long long>(options_.connect_timeout.count()));
      CloseLater(it->first);
      Forget(it++);
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
  // how sessions end, not an error of snapd's.
  SNAPD_LOG_INFO("session %llu: client disconnected (UCX: %s)",
                 static_cast<unsigned long long>(it->second.session_id), ucs_status_string(status));
  self->Forget(it, /*died=*/true);
  self->CloseLater(ep);
}

void DataPlane::Forget(std::unordered_map<ucp_ep_h, Conn>::iterator it, bool died) {
  for (const auto& [key, r] : it->second.reserved) store_->AbortPush(r.ticket);
  // Device steps held in that client's GPU memory died with its endpoint.
  if (it->second.session_id != 0) {
    store_->EndSession(it->second.session_id, died);
    (void)sessions_->Close(it->second.session_id, it->second.token);  // may be closed already
  }
  conns_.erase(it);
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
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.session_id == session_id) {
        CloseLater(it->first);
        Forget(it++);
      } else {
        ++it;
      }
    }
  });
}

DataPlane::Conn* DataPlane::Admit(const ucp_am_recv_param_t* param, const void* header,
                                  size_t header_length, size_t expected_length, wire::AmId op,
                                  bool needs_session) {
  std::string op_name = "AM id " + std::to_string(op);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    Reject(log::Reason::kNoReplyEndpoint, op_name);
    return nullptr;
  }
  ucp_ep_h ep = param->reply_ep;
  auto it = conns_.find(ep);
  if (it == conns_.end()) {
    // Not answered: an endpoint snapd did not create is UCX's to free at any time.
    Reject(log::Reason::kUnknownEndpoint, op_name + " (open a session first)");
    return nullptr;
  }
  Conn& conn = it->second;
  auto refuse = [&](log::Reason reason, uint64_t request_id, Status status) {
    Reject(reason, "session " + std::to_string(conn.session_id) + ", " + op_name + ": " +
                       status.ToString());
    Reply(ep, request_id, status);
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
                                "); this snapd speaks version " + std::to_string(wire::kVersion)));
  }
  if (header_length != expected_length || h.op != op) {
    return refuse(log::Reason::kMalformed, h.request_id,
                  Status::InvalidArgument("malformed message for AM id " + std::to_string(op) +
                                          ": header of " + std::to_string(header_length) +
                                          " bytes with op " + std::to_string(h.op) + ", expected " +
                                          std::to_string(expected_length) + " bytes with op " +
                                          std::to_string(op)));
  }
  if (h.token != conn.token || !sessions_->Find(conn.session_id, h.token)) {
    return refuse(
        log::Reason::kWrongToken, h.request_id,
        Status::Unauthenticated("token does not match the open session of this endpoint"));
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

ucs_status_t DataPlane::HandleHello(Conn& conn, ucp_ep_h ep, const wire::HelloRequest& req, void*,
                                    size_t, const ucp_am_recv_param_t*) {
  if (req.session_id != conn.session_id) {
    Reject(log::Reason::kAnotherSession, "Hello for session " + std::to_string(req.session_id) +
                                             " on the endpoint of session " +
                                             std::to_string(conn.session_id));
    Reply(ep, req.header.request_id,
          Status::Unauthenticated("session " + std::to_string(req.session_id) +
                                  " is not the session this endpoint was opened for"));
    return UCS_OK;
  }
  conn.hello = true;
  Reply(ep, req.header.request_id, Status::Ok());
  return UCS_OK;
}

DataPlane::Conn* DataPlane::Find(const Peer& peer) {
  auto it = conns_.find(peer.ep);
  return it != conns_.end() && it->second.serial == peer.serial ? &it->second : nullptr;
}

void DataPlane::Reply(ucp_ep_h ep, uint64_t request_id, const Status& status) {
  Reply(ep, request_id, status, ReplyBody());
}

void DataPlane::Reply(ucp_ep_h ep, uint64_t request_id, const Status& status, ReplyBody body) {
  auto reply = std::make_shared<wire::Reply>();
  std::memset(reply.get(), 0, sizeof *reply);
  reply->header = wire::MakeHeader(wire::kReply, 0, request_id);
  reply->code = static_cast<int32_t>(status.code());
  reply->bytes = body.data ? body.bytes : 0;
  reply->offset = body.offset;
  size_t n = std::min(status.message().size(), wire::kMaxReplyMessage);
  std::memcpy(reply->message, status.message().data(), n);
  reply->message_length = static_cast<uint32_t>(n);
  auto conn = conns_.find(ep);
  if (conn == conns_.end()) return;  // client went away; nothing to answer
  // Sent from the loop, not from inside the UCX callback that produced it.
  loop_->Post([this, peer = Peer{ep, conn->second.serial}, reply, data = body.data,
               keep = std::move(body.keep), since = body.since, on_sent = std::move(body.on_sent)] {
    if (!Find(peer)) return;  // client went away; nothing to answer
    ucp_ep_h ep = peer.ep;
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
    ucx::Track(
        ucp_am_send_nbx(ep, wire::kReply, reply.get(), sizeof *reply, data, reply->bytes, &p), p);
  });
}

}  // namespace snapd
