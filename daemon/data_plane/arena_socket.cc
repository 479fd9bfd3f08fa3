#include "data_plane/arena_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/wire.h"

namespace adjsnap {
namespace {

// False when the peer is gone (it left before the answer).
bool SendReply(int fd, const Status& s, uint64_t arena_bytes, int pass_fd) {
  wire::ArenaReply reply{};
  reply.code = static_cast<int32_t>(s.code());
  size_t n = std::min(s.message().size(), wire::kMaxReplyMessage);
  std::memcpy(reply.message, s.message().data(), n);
  reply.message_length = static_cast<uint32_t>(n);
  reply.arena_bytes = arena_bytes;
  return SendWithFd(fd, &reply, sizeof reply, pass_fd) >= 0;
}

// Reads exactly `bytes`, or fewer when the peer closes, errs or lets `limit` pass in all. A
// signal that interrupts the read (EINTR, or a partial read under MSG_WAITALL) is not the
// peer's fault: the read goes on for what is left of the limit (SO_RCVTIMEO set to it before
// each try). Time adjsnapd spends stopped (SIGSTOP) counts.
bool RecvExactly(int fd, void* data, size_t bytes, std::chrono::milliseconds limit) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < bytes) {
    auto left = duration_cast<microseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    timeval wait{static_cast<time_t>(left.count() / 1000000),
                 static_cast<suseconds_t>(left.count() % 1000000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    ssize_t n = recv(fd, p + got, bytes - got, MSG_WAITALL);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      return false;  // closed, or the limit passed, or a real error
    }
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ArenaSocket>> ArenaSocket::Start(const std::string& path, HostTier* tier,
                                                        SessionTable* sessions,
                                                        OnLinked on_linked) {
  // 0666: the uid check happens per connection.
  ADJSNAP_ASSIGN_OR_RETURN(ucx::ScopedFd fd, ListenUnix(path, 0666, "arena socket"));
  std::unique_ptr<ArenaSocket> s(
      new ArenaSocket(path, std::move(fd), tier, sessions, std::move(on_linked)));
  s->thread_ = NamedThread("adjsnap-arena", [p = s.get()] { p->Serve(); });
  return s;
}

ArenaSocket::ArenaSocket(std::string path, ucx::ScopedFd listen_fd, HostTier* tier,
                         SessionTable* sessions, OnLinked on_linked)
    : path_(std::move(path)),
      listen_fd_(std::move(listen_fd)),
      tier_(tier),
      sessions_(sessions),
      on_linked_(std::move(on_linked)) {}

ArenaSocket::~ArenaSocket() {
  shutdown(listen_fd_.get(), SHUT_RDWR);  // wakes accept() in Serve
  if (thread_.joinable()) thread_.join();
  unlink(path_.c_str());
}

void ArenaSocket::Serve() {
  for (;;) {
    int fd = AcceptConnection(listen_fd_.get(), SOCK_CLOEXEC, [](int err) {
      ADJSNAP_LOG_WARN("arena socket: accept failed (%s); retrying", std::strerror(err));
    });
    if (fd < 0) return;  // listening socket shut down
    ucx::ScopedFd conn(fd);
    Answer(conn);
  }
}

void ArenaSocket::Answer(ucx::ScopedFd& conn) {
  const int fd = conn.get();
  // A client that connects and sends nothing, or part of a request, must not stall the others
  // for long: every read and write on the connection gives up after 500 ms.
  // (RecvExactly sets the read's limit itself, to what is left of it.)
  constexpr std::chrono::milliseconds kLimit{500};
  timeval limit{0, static_cast<suseconds_t>(kLimit.count() * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  wire::ArenaRequest req{};
  // Every refusal is answered (a client that waits learns why) and logged, rate-limited: a
  // peer that connects in a loop cannot flood the journal.
  auto refuse = [&](log::Reason reason, const Status& why) {
    rejections_.Reject(
        reason,
        why.ToString() + (SendReply(fd, why, 0, -1) ? "" : " (the peer left before the answer)"));
  };
  if (!RecvExactly(fd, &req, sizeof req, kLimit)) {
    refuse(log::Reason::kMalformed, Status::InvalidArgument("expected a 16-byte ArenaRequest"));
    return;
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    SendReply(fd, Status::Internal("SO_PEERCRED failed"), 0, -1);
    return;
  }
  std::optional<Session> session = sessions_->Find(req.session_id, req.token);
  if (!session) {
    refuse(log::Reason::kUnknownSession,
           Status::Unauthenticated("no open session with this id and token"));
    return;
  }
  if (session->uid != cred.uid) {
    refuse(log::Reason::kAnotherUid,
           Status::PermissionDenied("this session belongs to another uid"));
    return;
  }
  if (!tier_->per_uid_arenas() && !TrustedUid(cred.uid)) {
    // Not an attack: with host_arenas = "shared", every client of another uid asks, then uses
    // the copied UCX path.
    SendReply(fd,
              Status::PermissionDenied(
                  "the mapped host tier is shared only with uid " + std::to_string(geteuid()) +
                  " (host_arenas = \"shared\"); uid " + std::to_string(cred.uid) +
                  " uses the copied UCX path, which for another uid needs "
                  "UCX's tcp transport in UCX_TLS (docs/operations.md, "
                  "\"Ports\")"),
              0, -1);
    return;
  }
  // The arena of the caller's own uid, which holds its steps and nobody else's.
  auto arena = tier_->ArenaFd(tier_->ArenaFor(cred.uid));
  if (!arena.ok()) {
    SendReply(fd, arena.status(), 0, -1);
    return;
  }
  if (!SendReply(fd, Status::Ok(), arena->second, arena->first)) {
    ADJSNAP_LOG_INFO("arena socket: session %llu left before the host tier was handed over",
                   static_cast<unsigned long long>(req.session_id));
    return;
  }
  if (session->socket_link && on_linked_) {
    // The data plane's socket is non-blocking: the 500 ms limits above no longer apply.
    on_linked_(*session, std::move(conn));
  }
}

}  // namespace adjsnap
