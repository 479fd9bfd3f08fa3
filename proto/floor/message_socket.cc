#include "adjsnap/message_socket.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "adjsnap/wire.h"

namespace adjsnap {

Result<std::unique_ptr<MessageSocket>> MessageSocket::Start(ucx::WorkerLoop* loop, ucx::ScopedFd fd,
                                                            Limits limits, OnMessage on_message,
                                                            OnClosed on_closed) {
  int flags = fcntl(fd.get(), F_GETFL);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return Status::Internal(std::string("session socket: fcntl: ") + std::strerror(errno));
  }
  std::unique_ptr<MessageSocket> s(
      new MessageSocket(loop, std::move(fd), limits, std::move(on_message), std::move(on_closed)));
  MessageSocket* raw = s.get();
  ADJSNAP_RETURN_IF_ERROR(loop->Watch(raw->fd(), EPOLLIN | EPOLLRDHUP,
                                    [raw](uint32_t events) { raw->OnReady(events); }));
  return s;
}

MessageSocket::MessageSocket(ucx::WorkerLoop* loop, ucx::ScopedFd fd, Limits limits,
                             OnMessage on_message, OnClosed on_closed)
    : loop_(loop),
      fd_(std::move(fd)),
      limits_(limits),
      on_message_(std::move(on_message)),
      on_closed_(std::move(on_closed)) {}

MessageSocket::~MessageSocket() {
  *alive_ = false;
  loop_->Unwatch(fd_.get());
}

bool MessageSocket::End(const Status& why) {
  if (ended_) return false;
  ended_ = true;
  loop_->Unwatch(fd_.get());
  out_.clear();
  in_.clear();
  OnClosed done = std::move(on_closed_);
  if (done) done(why);  // may destroy this socket
  return false;
}

bool MessageSocket::Send(uint16_t op, const void* message, size_t bytes) {
  if (ended_) return false;
  wire::SocketFrame frame{op, static_cast<uint16_t>(bytes), 0};
  if (bytes > limits_.max_message) {
    return End(Status::Internal("session socket: a message of " + std::to_string(bytes) +
                                " bytes to send is over the limit of " +
                                std::to_string(limits_.max_message)));
  }
  if (out_.size() + sizeof frame + bytes > limits_.max_queued) {
    return End(Status::ResourceExhausted("session socket: the peer does not read: " +
                                         std::to_string(out_.size()) + " bytes wait to be sent"));
  }
  out_.append(reinterpret_cast<const char*>(&frame), sizeof frame);
  out_.append(static_cast<const char*>(message), bytes);
  return Flush();
}

bool MessageSocket::Flush() {
  while (!out_.empty()) {
    ssize_t n = ::send(fd_.get(), out_.data(), out_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return End(Status::Unavailable(std::string("session socket: send: ") +
                                   (n < 0 ? std::strerror(errno) : "closed")));
  }
  bool want = !out_.empty();
  if (want != want_write_) {
    want_write_ = want;
    uint32_t events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
    if (Status s = loop_->Watch(fd_.get(), events, [this](uint32_t e) { OnReady(e); }); !s.ok()) {
      return End(s);
    }
  }
  return true;
}

bool MessageSocket::ReadAll() {
  char buf[4096];
  bool peer_done = false;
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      if (in_.size() > limits_.max_message + sizeof(wire::SocketFrame) + sizeof buf) break;
      continue;
    }
    if (n == 0) {
      peer_done = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return End(Status::Unavailable(std::string("session socket: recv: ") + std::strerror(errno)));
  }
  size_t at = 0;
  auto alive = alive_;
  while (in_.size() - at >= sizeof(wire::SocketFrame)) {
    wire::SocketFrame frame;
    std::memcpy(&frame, in_.data() + at, sizeof frame);
    if (frame.reserved != 0 || frame.bytes > limits_.max_message) {
      return End(Status::InvalidArgument(
          "session socket: malformed frame (op " + std::to_string(frame.op) + ", " +
          std::to_string(frame.bytes) + " bytes, reserved " + std::to_string(frame.reserved) +
          "; at most " + std::to_string(limits_.max_message) + " bytes, reserved 0)"));
    }
    if (in_.size() - at < sizeof frame + frame.bytes) break;
    // Delivered from a copy: the callback may end or destroy this socket.
    std::string message = in_.substr(at + sizeof frame, frame.bytes);
    at += sizeof frame + frame.bytes;
    on_message_(frame.op, message.data(), message.size());
    if (!*alive || ended_) return false;
  }
  in_.erase(0, at);
  if (peer_done) {
    return End(Status::Unavailable(in_.empty()
                                       ? "session socket: closed by the peer"
                                       : "session socket: closed by the peer inside a message (" +
                                             std::to_string(in_.size()) + " bytes of it)"));
  }
  return true;
}

void MessageSocket::OnReady(uint32_t events) {
  auto alive = alive_;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (!ReadAll() || !*alive) return;
    if (events & (EPOLLHUP | EPOLLERR)) {
      End(Status::Unavailable("session socket: the connection failed"));
      return;
    }
  }
  if (events & EPOLLOUT) Flush();
}

}  // namespace adjsnap
