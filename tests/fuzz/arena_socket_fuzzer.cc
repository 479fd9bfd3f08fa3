// Fuzzes the arena socket (daemon/data_plane/arena_socket.cc): the bytes a local process of
// any uid may write to it, answered by the real ArenaSocket over a real host tier and session
// table. Every connection must be answered with a well-formed ArenaReply (its message within
// bounds), an arena fd only for the request naming an open session of the caller's uid.
//
// Input: one flags byte, then the bytes to send (at most 64; the write side is shut after
// them, so a short request is refused at once rather than after the 500 ms read limit).
//   0x01 the first 16 bytes are made the id and token of an open session
//   0x02 that session is uid 1000's (this process is another uid: PERMISSION_DENIED)
//   0x04 the session is closed before the request is sent
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "fuzz_node.h"
#include "seeds.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/wire.h"

namespace {

using namespace adjsnap;

fuzz::Node* node = nullptr;

[[noreturn]] void Fail(const char* why) {
  std::fprintf(stderr, "arena socket: %s\n", why);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (fuzz::SeedDir()) {
    wire::ArenaRequest r{1, 0x1234};
    fuzz::WriteSeed("valid", "\x01" + fuzz::Raw(r));
    fuzz::WriteSeed("other_uid", "\x03" + fuzz::Raw(r));
    fuzz::WriteSeed("closed", "\x05" + fuzz::Raw(r));
    fuzz::WriteSeed("unknown", "\x00" + fuzz::Raw(r));
    fuzz::WriteSeed("short", "\x01" + fuzz::Raw(r).substr(0, 9));
    std::exit(0);
  }
  fuzz::QuietLogs();
  fuzz::NodeOptions o;
  o.arena_socket = true;
  o.host_bytes = 8ull << 20;
  node = fuzz::Node::Start(o).release();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = bytes[0];
  std::vector<char> request(bytes + 1, bytes + 1 + std::min<size_t>(size - 1, 64));
  const uint32_t uid = (flags & 0x02) ? 1000 : geteuid();
  Session session = fuzz::Take(node->sessions()->Open("fuzz", uid), "open a session");
  if ((flags & 0x01) && !request.empty()) {
    wire::ArenaRequest r{session.id, session.token};
    std::memcpy(request.data(), &r, std::min(request.size(), sizeof r));
  }
  if (flags & 0x04) (void)node->sessions()->Close(session.id, session.token);
  bool valid = (flags & 0x07) == 0x01 && request.size() >= sizeof(wire::ArenaRequest);

  ucx::ScopedFd fd = fuzz::Take(ConnectUnix(node->arena()->path()), "connect to the arena socket");
  const auto connected = std::chrono::steady_clock::now();
  if (!request.empty() && send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    // The daemon rightly closes a connection that sends nothing for 500 ms; a fuzzer descheduled
    // that long on a loaded machine (it ran at nice 19) sees its send fail. Sooner is a fault.
    const int err = errno;
    if ((err == EPIPE || err == ECONNRESET) &&
        std::chrono::steady_clock::now() - connected >= std::chrono::milliseconds(450)) {
      if (!(flags & 0x04)) (void)node->sessions()->Close(session.id, session.token);
      return 0;
    }
    Fail((std::string("send failed: ") + std::strerror(err)).c_str());
  }
  shutdown(fd.get(), SHUT_WR);
  timeval limit{5, 0};  // the daemon's own limit is 500 ms
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  wire::ArenaReply reply{};
  int passed = -1;
  ssize_t n = RecvWithFd(fd.get(), &reply, sizeof reply, MSG_WAITALL, &passed);
  ucx::ScopedFd arena(passed);
  if (n != static_cast<ssize_t>(sizeof reply)) Fail("no whole ArenaReply came back");
  if (reply.message_length > wire::kMaxReplyMessage) Fail("reply message_length out of bounds");
  if (reply.code == 0 && passed < 0) Fail("code 0 without an arena fd");
  if (reply.code != 0 && passed >= 0) Fail("an arena fd with a refusal");
  if (passed >= 0 && !valid) Fail("an arena fd for a request that names no open session of ours");
  if (valid && reply.code != 0) Fail("a valid request was refused");
  if (!(flags & 0x04)) (void)node->sessions()->Close(session.id, session.token);
  return 0;
}
