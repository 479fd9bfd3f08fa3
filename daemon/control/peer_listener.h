// The control socket, accepted by adjsnapd itself so that every connection's identity comes from
// the kernel: each accepted connection's uid/gid/pid (SO_PEERCRED) is recorded, then the
// connection is handed to gRPC (AddInsecureChannelFromFd). A handler finds its caller from
// the call's peer string ("fd:N"). Nothing a client sends decides who it is.
//
// An entry stays valid while gRPC owns the connection: a call holds its transport, so the
// descriptor cannot be closed and reused under a call in flight; a reused descriptor number is
// re-recorded at its accept, before gRPC sees it.
//
// Threading: one thread accepts; Find() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/ucx.h"

namespace grpc {
class Server;
}

namespace adjsnap {

struct Peer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

class PeerListener {
 public:
  // Listens on `path` (mode `mode`); connections wait in the backlog until Serve.
  static Result<std::unique_ptr<PeerListener>> Listen(const std::string& path, mode_t mode);
  // Accepts and hands connections to `server`, which must outlive the accepting (until
  // StopAccepting, or this is destroyed). Once.
  void Serve(grpc::Server* server);
  // Stops accepting (the socket file goes too); connections already handed over stay with
  // gRPC, and Find still answers for them: a stop calls this first and destroys the listener
  // only once the server has no call left that could ask. Idempotent.
  void StopAccepting();
  ~PeerListener();  // StopAccepting

  // The caller of a gRPC call whose ServerContext::peer() is `grpc_peer`.
  std::optional<Peer> Find(std::string_view grpc_peer) const ADJSNAP_EXCLUDES(mu_);

 private:
  PeerListener(std::string path, ucx::ScopedFd listen_fd);
  void Accept(grpc::Server* server);

  const std::string path_;
  ucx::ScopedFd listen_fd_;
  mutable Mutex mu_;
  std::map<int, Peer> peers_ ADJSNAP_GUARDED_BY(mu_);
  bool stopped_ = false;  // StopAccepting ran (it and the destructor run on one thread)
  std::thread thread_;    // declared last: starts after the members it uses exist
};

}  // namespace adjsnap
