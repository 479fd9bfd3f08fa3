// A peer that speaks raw wire messages to adjsnapd, over a UCX endpoint or a session socket, and
// records the Replies it gets: the hostile or careless client of the wire and abuse tests.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sanitizer.h"
#include "adjsnap/ucx.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap/wire.h"

namespace adjsnap::testing {

class RawPeer {
 public:
  // Opens a session on `stub` with this peer's worker address, then connects to adjsnapd's
  // worker as a client does. Null (with `error` set) when either step fails.
  static std::unique_ptr<RawPeer> Open(v1::Control::Stub& stub, std::string* error = nullptr) {
    auto peer = Create();
    if (!peer) return nullptr;
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_ucx_address(peer->loop_->address());
    grpc::Status s = stub.OpenSession(&ctx, req, &peer->session_);
    if (!s.ok()) {
      if (error) *error = s.error_message();
      return nullptr;
    }
    if (!peer->ConnectTo(peer->session_.data_plane_worker_address())) return nullptr;
    return peer;
  }
  // Opens a session without a UCX address and asks the arena socket for its arena, as a mapped
  // client does; that connection is then this peer's link (its session socket), and Send goes
  // over it. Null, with `error` (the arena socket's refusal, if that was it), when a step fails.
  static std::unique_ptr<RawPeer> OpenSocket(v1::Control::Stub& stub,
                                             std::string* error = nullptr) {
    auto peer = Create();
    if (!peer) return nullptr;
    grpc::ClientContext ctx;
    grpc::Status s = stub.OpenSession(&ctx, v1::OpenSessionRequest(), &peer->session_);
    auto fail = [&](const std::string& why) -> std::unique_ptr<RawPeer> {
      if (error) *error = why;
      return nullptr;
    };
    if (!s.ok()) return fail(s.error_message());
    auto sock = ConnectUnix(peer->session_.arena_socket());
    if (!sock.ok()) return fail(sock.status().ToString());
    wire::ArenaRequest req{peer->session_.session_id(), peer->session_.token()};
    if (::send(sock->get(), &req, sizeof req, MSG_NOSIGNAL) != sizeof req) return fail("send");
    wire::ArenaReply reply{};
    int fd = -1;
    ssize_t got = RecvWithFd(sock->get(), &reply, sizeof reply, MSG_WAITALL, &fd);
    if (fd >= 0) ::close(fd);  // the arena itself is not needed
    if (got != sizeof reply) return fail("short arena reply");
    if (reply.code != 0) {
      return fail(std::string(reply.message,
                              std::min<size_t>(reply.message_length, wire::kMaxReplyMessage)));
    }
    peer->socket_ = std::move(sock).value();
    RawPeer* raw = peer.get();
    peer->reader_ = std::thread([raw] { raw->ReadSocket(); });
    return peer;
  }
  // Connects to adjsnapd's worker at `address` with no session of its own (for example with the
  // address another client was given).
  static std::unique_ptr<RawPeer> Stranger(const std::string& address) {
    auto peer = Create();
    if (!peer || !peer->ConnectTo(address)) return nullptr;
    return peer;
  }
  ~RawPeer() {
    if (socket_.get() >= 0) ::shutdown(socket_.get(), SHUT_RDWR);  // ends ReadSocket
    if (reader_.joinable()) reader_.join();
    if (ep_) loop_->Post([this] { ucx::CloseEndpoint(*loop_, ep_, true); });
    loop_->Stop();
  }
  // Over a session socket: true while adjsnapd keeps it open.
  bool socket_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return socket_.get() >= 0 && !socket_closed_;
  }
  // Over a session socket: writes `bytes` raw bytes to it (frames or garbage).
  void SendRaw(const void* bytes, size_t n) {
    (void)!::send(socket_.get(), bytes, n, MSG_NOSIGNAL);
  }

  const v1::OpenSessionResponse& session() const { return session_; }
  // This peer's own worker address, as it sent it in OpenSession.
  std::string address() const { return loop_->address(); }

  // Sends one AM (with `data` as its AM data) and waits for its send to complete.
  void Send(uint16_t id, const void* header, size_t header_bytes, const void* data = nullptr,
            size_t data_bytes = 0) {
    if (socket_.get() >= 0) {  // a session socket carries the header only
      wire::SocketFrame frame{id, static_cast<uint16_t>(header_bytes), 0};
      std::string framed(reinterpret_cast<const char*>(&frame), sizeof frame);
      framed.append(static_cast<const char*>(header), header_bytes);
      SendRaw(framed.data(), framed.size());
      return;
    }
    auto keep = std::make_shared<std::vector<char>>(static_cast<const char*>(header),
                                                    static_cast<const char*>(header) +
                                                        header_bytes);
    auto body = std::make_shared<std::vector<char>>();
    if (data) body->assign(static_cast<const char*>(data),
                           static_cast<const char*>(data) + data_bytes);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    loop_->Post([&, keep, body] {
      ucp_request_param_t p = ucx::SendParam([&, keep, body](ucs_status_t, size_t) {
        std::lock_guard<std::mutex> lock(mu);
        done = true;
        cv.notify_all();
      });
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_REPLY;
      ucx::Track(ucp_am_send_nbx(ep_, id, keep->data(), keep->size(),
                                 body->empty() ? nullptr : body->data(), body->size(), &p),
                 p);
    });
    std::unique_lock<std::mutex> lock(mu);
    // A send to a peer that drops the message may never complete; do not wait forever.
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
  }

  // The Reply to `request_id`, waiting up to `timeout`.
  std::optional<wire::Reply> WaitReply(uint64_t request_id,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return replies_.count(request_id) > 0; });
    auto it = replies_.find(request_id);
    if (it == replies_.end()) return std::nullopt;
    return it->second;
  }
  size_t replies() {
    std::lock_guard<std::mutex> lock(mu_);
    return replies_.size();
  }

 private:
  static std::unique_ptr<RawPeer> Create() {
    auto loop = ucx::WorkerLoop::Create("raw-peer");
    if (!loop.ok()) return nullptr;
    auto peer = std::unique_ptr<RawPeer>(new RawPeer(std::move(loop).value()));
    if (!ucx::SetAmHandler(peer->loop_->worker(), wire::kReply, &RawPeer::OnReply, peer.get())
             .ok()) {
      return nullptr;
    }
    peer->loop_->Start("raw-peer");
    return peer;
  }
  bool ConnectTo(const std::string& address) {
    std::promise<bool> done;
    loop_->Post([&] {
      // A peer of another uid cannot attach adjsnapd's shared memory, and UCX 1.13 leaks a little
      // on that error path (tenancy_test's stranger provokes it on purpose).
      IgnoreLeaks ucx_error_path;
      auto ep = ucx::ConnectToWorker(loop_->worker(), address, &RawPeer::OnError, this);
      if (ep.ok()) ep_ = *ep;
      done.set_value(ep.ok());
    });
    return done.get_future().get();
  }
  explicit RawPeer(std::unique_ptr<ucx::WorkerLoop> loop) : loop_(std::move(loop)) {}
  static ucs_status_t OnReply(void* arg, const void* header, size_t length, void*, size_t,
                              const ucp_am_recv_param_t*) {
    auto* self = static_cast<RawPeer*>(arg);
    if (length != sizeof(wire::Reply)) return UCS_OK;
    wire::Reply r;
    std::memcpy(&r, header, sizeof r);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->replies_[r.header.request_id] = r;
    self->cv_.notify_all();
    return UCS_OK;
  }
  static void OnError(void*, ucp_ep_h, ucs_status_t) {}
  void ReadSocket() {
    std::string in;
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(socket_.get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      in.append(buf, static_cast<size_t>(n));
      wire::SocketFrame frame;
      while (in.size() >= sizeof frame) {
        std::memcpy(&frame, in.data(), sizeof frame);
        if (in.size() < sizeof frame + frame.bytes) break;
        if (frame.op == wire::kReply && frame.bytes == sizeof(wire::Reply)) {
          wire::Reply r;
          std::memcpy(&r, in.data() + sizeof frame, sizeof r);
          std::lock_guard<std::mutex> lock(mu_);
          replies_[r.header.request_id] = r;
          cv_.notify_all();
        }
        in.erase(0, sizeof frame + frame.bytes);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    socket_closed_ = true;
    cv_.notify_all();
  }

  std::unique_ptr<ucx::WorkerLoop> loop_;
  ucp_ep_h ep_ = nullptr;
  ucx::ScopedFd socket_;  // a session socket's link, when OpenSocket made this peer
  std::thread reader_;
  bool socket_closed_ = false;  // under mu_
  v1::OpenSessionResponse session_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, wire::Reply> replies_;
};

inline std::string Message(const wire::Reply& r) {
  return std::string(r.message, r.message_length);
}

}  // namespace adjsnap::testing
