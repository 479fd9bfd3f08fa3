// Unix-domain stream sockets by path, shared by the daemon's sockets and the client's probes.
#pragma once

#include <sys/un.h>

#include <functional>
#include <string>

#include "adjsnap/status.h"
#include "adjsnap/ucx.h"  // ScopedFd

namespace adjsnap {

// The address of the socket at `path`; INVALID_ARGUMENT when the path does not fit.
Status UnixAddress(const std::string& path, sockaddr_un* out);

// A connected stream socket to `path`. INVALID_ARGUMENT for a path that does not fit;
// UNAVAILABLE whose message is the system's reason (strerror) when nothing accepts there.
Result<ucx::ScopedFd> ConnectUnix(const std::string& path);

// A listening stream socket at `path` (an old socket file there is replaced) with permissions
// `mode`. `what` names the socket in errors ("control socket").
Result<ucx::ScopedFd> ListenUnix(const std::string& path, unsigned mode, const char* what);

// The next connection on `listen_fd` (accept4 with `flags`), or -1 once the listening socket
// is shut down. Interrupted and aborted accepts are retried; when out of descriptors or memory
// it calls `on_pressure` with the errno, waits 100 ms and retries, so a listener never stops
// while its socket is open.
int AcceptConnection(int listen_fd, int flags, const std::function<void(int)>& on_pressure);

// sendmsg of `bytes` from `data` on `fd`, with `pass_fd` attached (SCM_RIGHTS) unless it is
// negative; to `to` (`to_len` bytes) for a datagram socket, or null on a connected one.
// MSG_NOSIGNAL. Returns what sendmsg returns.
ssize_t SendWithFd(int fd, const void* data, size_t bytes, int pass_fd,
                   const sockaddr_un* to = nullptr, socklen_t to_len = 0);

// recvmsg of at most `bytes` into `data` on `fd` with `flags` (MSG_CMSG_CLOEXEC added),
// retried when interrupted; a file descriptor the message carries (SCM_RIGHTS) goes to
// *pass_fd, else -1 there. Returns what recvmsg returns.
ssize_t RecvWithFd(int fd, void* data, size_t bytes, int flags, int* pass_fd);

}  // namespace adjsnap
