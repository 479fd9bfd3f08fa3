// A connected unix stream socket carrying framed messages (wire::SocketFrame, then the
// message), non-blocking, driven by a WorkerLoop: the session socket over which a mapped
// client and adjsnapd exchange the mapped path's messages (wire.h, "Session socket").
//
// Reads are parsed into whole messages and handed to `on_message` in order; writes are queued
// and sent as the socket takes them. The socket ends, once, with `on_closed(why)`: the peer
// hung up or reset it, a frame was malformed or over `max_message` bytes, or more than
// `max_queued` bytes waited to be sent (a peer that does not read). After it ends nothing more
// is delivered or sent.
//
// Threading: created, used and destroyed on the loop thread. A callback may destroy the
// MessageSocket that called it; nothing of it is touched after that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "adjsnap/status.h"
#include "adjsnap/ucx.h"

namespace adjsnap {

class MessageSocket {
 public:
  using OnMessage = std::function<void(uint16_t op, const void* message, size_t bytes)>;
  using OnClosed = std::function<void(const Status& why)>;
  struct Limits {
    size_t max_message = 512;         // a frame announcing more ends the socket
    size_t max_queued = 1024 * 1024;  // unsent bytes beyond this end the socket
  };

  // Makes `fd` non-blocking and watches it on `loop` (loop thread).
  static Result<std::unique_ptr<MessageSocket>> Start(ucx::WorkerLoop* loop, ucx::ScopedFd fd,
                                                      Limits limits, OnMessage on_message,
                                                      OnClosed on_closed);
  ~MessageSocket();
  MessageSocket(const MessageSocket&) = delete;
  MessageSocket& operator=(const MessageSocket&) = delete;

  // Queues one framed message; sends what the socket takes now. False once ended (the
  // message is dropped; on_closed has been or will be called).
  bool Send(uint16_t op, const void* message, size_t bytes);
  bool ended() const { return ended_; }
  int fd() const { return fd_.get(); }

 private:
  MessageSocket(ucx::WorkerLoop* loop, ucx::ScopedFd fd, Limits limits, OnMessage on_message,
                OnClosed on_closed);
  void OnReady(uint32_t events);
  // Reads what is there and delivers every whole message; false once ended (or destroyed).
  bool ReadAll();
  // Sends what is queued; false once ended.
  bool Flush();
  // Ends the socket and calls on_closed(why); false, for `return End(...)`.
  bool End(const Status& why);

  ucx::WorkerLoop* const loop_;
  ucx::ScopedFd fd_;
  const Limits limits_;
  OnMessage on_message_;
  OnClosed on_closed_;
  std::string in_;   // received bytes not yet a whole message
  std::string out_;  // framed bytes not yet sent
  bool ended_ = false;
  bool want_write_ = false;  // watching EPOLLOUT
  // Cleared by the destructor: a callback that destroyed this socket ends its caller's loop.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace adjsnap
