// A UCX peer that speaks raw wire messages to snapd and records the Replies it gets: the
// hostile or careless client of the wire and abuse tests.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "snapd/v1/control.grpc.pb.h"
#include "snapd/wire.h"
#include "snapd/ucx.h"

namespace snapd::testing {

class RawPeer {
 public:
  // Opens a session on `stub` with this peer's worker address, then connects to snapd's
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
  // Connects to snapd's worker at `address` with no session of its own (for example with the
  // address another client was given).
  static std::unique_ptr<RawPeer> Stranger(const std::string& address) {
    auto peer = Create();
    if (!peer || !peer->ConnectTo(address)) return nullptr;
    return peer;
  }
  ~RawPeer() {
    if (ep_) loop_->Post([this] { ucx::CloseEndpoint(*loop_, ep_, true); });
    loop_->Stop();
  }

  const v1::OpenSessionResponse& session() const { return session_; }
  // This peer's own worker address, as it sent it in OpenSession.
  std::string address() const { return loop_->address(); }

  // Sends one AM (with `data` as its AM data) and waits for its send to complete.
  void Send(uint16_t id, const void* header, size_t header_bytes, const void* data = nullptr,
            size_t data_bytes = 0) {
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
    peer->loop_->Start();
    return peer;
  }
  bool ConnectTo(const std::string& address) {
    std::promise<bool> done;
    loop_->Post([&] {
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

  std::unique_ptr<ucx::WorkerLoop> loop_;
  ucp_ep_h ep_ = nullptr;
  v1::OpenSessionResponse session_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, wire::Reply> replies_;
};

inline std::string Message(const wire::Reply& r) {
  return std::string(r.message, r.message_length);
}

}  // namespace snapd::testing
