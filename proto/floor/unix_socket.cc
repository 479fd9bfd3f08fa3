#include "adjsnap/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace adjsnap {

Status UnixAddress(const std::string& path, sockaddr_un* out) {
  *out = sockaddr_un{};
  if (path.empty() || path.size() >= sizeof out->sun_path) {
    return Status::InvalidArgument("socket path '" + path + "' must be 1 to " +
                                   std::to_string(sizeof out->sun_path - 1) + " bytes long");
  }
  out->sun_family = AF_UNIX;
  std::memcpy(out->sun_path, path.c_str(), path.size());
  return Status::Ok();
}

Result<ucx::ScopedFd> ConnectUnix(const std::string& path) {
  sockaddr_un addr;
  ADJSNAP_RETURN_IF_ERROR(UnixAddress(path, &addr));
  ucx::ScopedFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::Internal(std::string("socket(): ") + std::strerror(errno));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return Status::Unavailable(std::strerror(errno));
  }
  return fd;
}

Result<ucx::ScopedFd> ListenUnix(const std::string& path, unsigned mode, const char* what) {
  sockaddr_un addr;
  ADJSNAP_RETURN_IF_ERROR(UnixAddress(path, &addr));
  ucx::ScopedFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::Internal(std::string("socket(): ") + std::strerror(errno));
  unlink(path.c_str());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd.get(), 128) != 0) {
    return Status::Unavailable(std::string(what) + " " + path + ": " + std::strerror(errno));
  }
  if (chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    return Status::PermissionDenied("chmod " + path + ": " + std::strerror(errno));
  }
  return fd;
}

int AcceptConnection(int listen_fd, int flags, const std::function<void(int)>& on_pressure) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, flags);
    if (fd >= 0) return fd;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      on_pressure(errno);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    return -1;  // shut down
  }
}

ssize_t SendWithFd(int fd, const void* data, size_t bytes, int pass_fd, const sockaddr_un* to,
                   socklen_t to_len) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr_un*>(to);
  msg.msg_namelen = to ? to_len : 0;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL);
}

ssize_t RecvWithFd(int fd, void* data, size_t bytes, int flags, int* pass_fd) {
  iovec iov{data, bytes};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  *pass_fd = -1;
  for (cmsghdr* c = n >= 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c != nullptr;
       c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(pass_fd, CMSG_DATA(c), sizeof(int));
    }
  }
  return n;
}

}  // namespace adjsnap
