#include "control/peer_listener.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/unix_socket.h"

namespace adjsnap {

Result<std::unique_ptr<PeerListener>> PeerListener::Listen(const std::string& path, mode_t mode) {
  ADJSNAP_ASSIGN_OR_RETURN(ucx::ScopedFd fd, ListenUnix(path, mode, "control socket"));
  return std::unique_ptr<PeerListener>(new PeerListener(path, std::move(fd)));
}

PeerListener::PeerListener(std::string path, ucx::ScopedFd listen_fd)
    : path_(std::move(path)), listen_fd_(std::move(listen_fd)) {}

void PeerListener::Serve(grpc::Server* server) {
  thread_ = NamedThread("adjsnap-control", [this, server] { Accept(server); });
}

void PeerListener::StopAccepting() {
  if (stopped_) return;
  stopped_ = true;
  shutdown(listen_fd_.get(), SHUT_RDWR);  // wakes accept() in Serve
  if (thread_.joinable()) thread_.join();
  unlink(path_.c_str());
}

PeerListener::~PeerListener() { StopAccepting(); }

void PeerListener::Accept(grpc::Server* server) {
  for (;;) {
    // Non-blocking: gRPC's event engine takes the descriptor as it is.
    int fd = AcceptConnection(listen_fd_.get(), SOCK_CLOEXEC | SOCK_NONBLOCK, [](int err) {
      ADJSNAP_LOG_WARN("control socket: accept failed (%s); retrying", std::strerror(err));
    });
    if (fd < 0) return;  // listening socket shut down
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ADJSNAP_LOG_WARN("control socket: SO_PEERCRED failed (%s); connection dropped",
                     std::strerror(errno));
      close(fd);
      continue;
    }
    {
      MutexLock lock(mu_);
      peers_[fd] = Peer{cred.uid, cred.gid, cred.pid};
    }
    grpc::AddInsecureChannelFromFd(server, fd);  // gRPC owns (and closes) fd from here
  }
}

std::optional<Peer> PeerListener::Find(std::string_view grpc_peer) const {
  // gRPC names a channel made from a descriptor "fd:N".
  constexpr std::string_view kPrefix = "fd:";
  if (grpc_peer.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  int fd = -1;
  std::string_view digits = grpc_peer.substr(kPrefix.size());
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fd);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  MutexLock lock(mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace adjsnap
