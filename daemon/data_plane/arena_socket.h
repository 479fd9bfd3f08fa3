// The arena socket: hands the host tier's memfd to local clients so they copy snapshots
// straight into (and out of) tier memory. Protocol: wire::ArenaRequest / wire::ArenaReply.
//
// Who gets which fd: a client presenting an open session's id and token gets the arena of its
// own uid as the kernel reports it (SO_PEERCRED), which holds that uid's steps only
// (host_tier.h). With host_arenas = "shared" there is one arena for every tenant: only the
// daemon's own uid and root get it, other uids are refused (PERMISSION_DENIED) and use the
// copied UCX path.
//
// A session opened without a UCX address (Session::socket_link) keeps the connection that got
// its arena: it goes to `on_linked`, the data plane, as the session's socket (wire.h).
//
// Threading: one thread accepts and answers connections one at a time (each is two small
// messages); the destructor shuts the listening socket down and joins it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "host_tier/host_tier.h"
#include "log.h"
#include "sessions/sessions.h"
#include "adjsnap/status.h"
#include "adjsnap/ucx.h"

namespace adjsnap {

class ArenaSocket {
 public:
  // Takes the connection of a socket-linked session once it has its arena (from the
  // ArenaSocket's thread); null: such connections are closed.
  using OnLinked = std::function<void(const Session&, ucx::ScopedFd)>;
  static Result<std::unique_ptr<ArenaSocket>> Start(const std::string& path, HostTier* tier,
                                                    SessionTable* sessions,
                                                    OnLinked on_linked = nullptr);
  ~ArenaSocket();

  const std::string& path() const { return path_; }

 private:
  ArenaSocket(std::string path, ucx::ScopedFd listen_fd, HostTier* tier, SessionTable* sessions,
              OnLinked on_linked);
  void Serve();
  // Answers the connection; hands it to on_linked_ (leaving `conn` empty) when it becomes a
  // session socket.
  void Answer(ucx::ScopedFd& conn);

  const std::string path_;
  ucx::ScopedFd listen_fd_;
  HostTier* const tier_;
  SessionTable* const sessions_;
  const OnLinked on_linked_;
  log::RejectionLog rejections_{log::Surface::kArenaSocket};
  std::thread thread_;  // declared last: starts after the members it uses exist
};

}  // namespace adjsnap
