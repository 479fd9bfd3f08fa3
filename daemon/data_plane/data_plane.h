// The UCX data plane of snapd: a UCX listener and the active-message handlers that move
// snapshot bytes between solver processes and the tiers (wire format: proto/snapd/wire.h).
//
// Push: the client sends kPush with the snapshot as AM data. The handler validates the header
// and reserves tier memory through the Store, then receives the data straight into that tier
// block (rendezvous: one copy, done by UCX's transport, e.g. CMA on the same node) and
// commits. A push rejected up front never moves its bytes.
// Fetch: the handler sends the tier block as the AM data of its Reply; the client receives it
// straight into the caller's buffer.
//
// Threading: one WorkerLoop thread owns the UCX worker, the listener and every endpoint; all
// handlers run on it. DropSession() is thread-safe (it posts to the loop). Counters are atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "sessions/sessions.h"
#include "store/store.h"
#include "ucx.h"
#include "snapd/wire.h"

namespace snapd {

struct DataPlaneCounters {
  std::atomic<uint64_t> pushes{0};
  std::atomic<uint64_t> fetches{0};
  std::atomic<uint64_t> rejected{0};
};

class DataPlane {
 public:
  struct Options {
    std::string address = "127.0.0.1";
    uint32_t port = 0;
  };

  static Result<std::unique_ptr<DataPlane>> Start(const Options& options, Store* store,
                                                  SessionTable* sessions);
  // Closes the listener and every endpoint (in-flight pushes are aborted, never recorded),
  // then stops the progress thread.
  ~DataPlane();

  // "IP:PORT" the listener is bound to.
  const std::string& address() const { return address_; }
  // Closes the endpoints bound to a session that the control plane closed.
  void DropSession(uint64_t session_id);
  const DataPlaneCounters& counters() const { return counters_; }

 private:
  struct Conn {
    uint64_t session_id = 0;  // 0 until a valid Hello
    uint64_t token = 0;
  };

  DataPlane(Store* store, SessionTable* sessions, std::unique_ptr<ucx::WorkerLoop> loop);
  Status Listen(const Options& options);
  void RegisterHandler(wire::AmId id, ucp_am_recv_callback_t cb);

  static void OnConnRequest(ucp_conn_request_h request, void* arg);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnHello(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnPush(void* arg, const void* header, size_t header_length, void* data,
                             size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnFetch(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);

  // Checks endpoint, header size, magic, version, op and (unless Hello) the session token.
  // On failure counts the message as rejected, answers it when it can, and returns null.
  Conn* Admit(const ucp_am_recv_param_t* param, const void* header, size_t header_length,
              size_t expected_length, wire::AmId op, bool needs_session);
  void HandlePush(ucp_ep_h ep, const wire::PushRequest& req, void* data, size_t length,
                  const ucp_am_recv_param_t* param);
  void FinishPush(ucp_ep_h ep, uint64_t request_id, const Store::PushTicket& ticket);
  // Posts a Reply (and optional data kept alive by `keep`) to `ep` if it is still connected.
  void Reply(ucp_ep_h ep, uint64_t request_id, const Status& status, uint64_t bytes = 0,
             const void* data = nullptr, std::shared_ptr<HostBlock> keep = nullptr);
  void CloseLater(ucp_ep_h ep);

  Store* const store_;
  SessionTable* const sessions_;
  DataPlaneCounters counters_;
  std::string address_;
  // Loop-thread state. Declared before loop_ so it outlives the progress thread.
  std::unordered_map<ucp_ep_h, Conn> conns_;
  ucp_listener_h listener_ = nullptr;
  std::unique_ptr<ucx::WorkerLoop> loop_;
};

}  // namespace snapd
