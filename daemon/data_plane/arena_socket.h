// The arena socket: hands the host tier's memfd to local clients so they copy snapshots
// straight into (and out of) tier memory. Protocol: wire::ArenaRequest / wire::ArenaReply.
//
// Who gets which fd: a client presenting an open session's id and token gets the arena of its
// own uid as the kernel reports it (SO_PEERCRED), which holds that uid's steps only
// (host_tier.h). With host_arenas = "shared" there is one arena for every tenant: only the
// daemon's own uid and root get it, other uids are refused (PERMISSION_DENIED) and use the
// copied UCX path.
//
// Threading: one thread accepts and answers connections one at a time (each is two small
// messages); the destructor shuts the listening socket down and joins it.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "host_tier/host_tier.h"
#include "log.h"
#include "sessions/sessions.h"
#include "snapd/status.h"
#include "snapd/ucx.h"

namespace snapd {

class ArenaSocket {
 public:
  static Result<std::unique_ptr<ArenaSocket>> Start(const std::string& path, HostTier* tier,
                                                    SessionTable* sessions);
  ~ArenaSocket();

  const std::string& path() const { return path_; }

 private:
  ArenaSocket(std::string path, ucx::ScopedFd listen_fd, HostTier* tier,
              SessionTable* sessions);
  void Serve();
  void Answer(int fd);

  const std::string path_;
  ucx::ScopedFd listen_fd_;
  HostTier* const tier_;
  SessionTable* const sessions_;
  log::RejectionLog rejections_{log::Surface::kArenaSocket};
  std::thread thread_;  // declared last: starts after the members it uses exist
};

}  // namespace snapd
