// Fuzzes the data plane: UCX active messages, as any local uid can send them, through the real
// DataPlane (daemon/data_plane) over a real Store, from a client UCX worker in this process.
// Every message passes through UCX into DataPlane's handlers exactly as a solver's would:
// Admit (endpoint, header size, magic, version, op, token, Hello, mapped-path uid), then each
// handler's decoding of its wire struct and the Store calls behind it.
//
// Input: one flags byte for the session, then messages, each
//   u8 patch, u16 am_id, u8 header_length, u16 data_length, header bytes, data bytes
// (lengths cut to what the input holds). The patch bits make a message valid in one respect
// so the fuzzer gets past a check it cannot guess (the session's token is random):
//   0x01 magic and version   0x02 the session's token   0x04 op = am_id
//   0x08 run_id (header offset 24) = one of this input's runs, chosen by the value there
//   0x10 send without UCP_AM_SEND_FLAG_REPLY   0x20 force rendezvous
//   0x40 send from an endpoint no session created
//   0x80 bytes (offset 40) = the run's bytes_per_step, with that much data
// Session flags: 0x01 the session is uid 1000's (a tenant, not trusted with the mapped path),
// else root's; 0x02 it does not say Hello first; 0x04 its link is a session socket (a mapped
// client's: DataPlane::AttachSocket with one end of a socketpair) instead of a UCX endpoint.
// Over a session socket each message goes as a SocketFrame (op = am_id, its header's length)
// and its header, without data; with patch 0x10 the header and data bytes go raw, unframed, to
// reach the framing's own checks. Patches 0x20 and 0x40 mean nothing there.
//
// Each input gets a new session and endpoint and new runs; after the last message a Hello
// with a fresh request id must be answered within 10 s, or the data plane is wedged (abort).
#include <poll.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "fuzz_node.h"
#include "seeds.h"
#include "adjsnap/ucx.h"
#include "adjsnap/wire.h"

namespace {

using namespace adjsnap;
using adjsnap::fuzz::Check;
using adjsnap::fuzz::Take;

constexpr auto kWedged = std::chrono::seconds(10);

struct Client {
  std::unique_ptr<ucx::WorkerLoop> loop;
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint64_t> replies;  // request ids answered
};

struct World {
  std::unique_ptr<fuzz::Node> node;
  Client client;    // the session's endpoint
  Client stranger;  // an endpoint to the daemon that no session created
  ucp_ep_h stranger_ep = nullptr;
  uint64_t next_request = 1ull << 40;
};

World* world = nullptr;

// Records which request a Reply answers. Its data (a copied fetch) are left to UCX: an eager
// copy is dropped, an unread rendezvous cancelled.
ucs_status_t OnReply(void* arg, const void* header, size_t header_length, void*, size_t,
                     const ucp_am_recv_param_t*) {
  auto* c = static_cast<Client*>(arg);
  if (header_length == sizeof(wire::Reply)) {
    wire::Reply r;
    std::memcpy(&r, header, sizeof r);
    std::lock_guard<std::mutex> lock(c->mu);
    c->replies.insert(r.header.request_id);
    c->cv.notify_all();
  }
  return UCS_OK;
}

void StartClient(Client* c, const char* name) {
  c->loop = Take(ucx::WorkerLoop::Create(name), "client WorkerLoop");
  Check(ucx::SetAmHandler(c->loop->worker(), wire::kReply, &OnReply, c), "SetAmHandler");
  c->loop->Start("fuzz-loop");
}

void OnClientEpError(void*, ucp_ep_h, ucs_status_t) {}

// Runs `f` on the client's loop and waits for it.
template <typename F>
void OnLoop(Client* c, F f) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  c->loop->Post([&] {
    f();
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, kWedged, [&] { return done; })) {
    std::fprintf(stderr, "fuzz harness: the client's UCX loop is stuck\n");
    std::abort();
  }
}

void Send(Client* c, ucp_ep_h ep, uint16_t id, std::vector<char> header, std::vector<char> data,
          uint32_t flags) {
  OnLoop(c, [&] {
    // Both buffers stay alive in the completion callback until UCX is done with them.
    auto h = std::make_shared<std::vector<char>>(std::move(header));
    auto d = std::make_shared<std::vector<char>>(std::move(data));
    ucp_request_param_t p = ucx::SendParam([h, d](ucs_status_t, size_t) {});
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flags;
    ucx::Track(ucp_am_send_nbx(ep, id, h->data(), h->size(), d->data(), d->size(), &p), p);
  });
}

bool WaitReply(Client* c, uint64_t request_id) {
  std::unique_lock<std::mutex> lock(c->mu);
  return c->cv.wait_for(lock, kWedged, [&] { return c->replies.count(request_id) > 0; });
}

std::vector<char> HelloBytes(uint64_t token, uint64_t request_id, uint64_t session_id) {
  wire::HelloRequest h{wire::MakeHeader(wire::kHello, token, request_id), session_id};
  std::vector<char> v(sizeof h);
  std::memcpy(v.data(), &h, sizeof h);
  return v;
}

v1::RunSpec Spec(const char* name, uint64_t steps, uint64_t bytes, bool keep) {
  v1::RunSpec s;
  s.set_name(name);
  s.set_steps(steps);
  s.set_bytes_per_step(bytes);
  s.set_dtype(v1::DTYPE_FLOAT32);
  s.set_layers(v1::LAYERS_HOST);
  s.set_keep(keep);
  return s;
}

struct Cursor {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T Get() {
    T v{};
    size_t k = std::min(sizeof v, n);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  std::vector<char> Bytes(size_t k) {
    k = std::min(k, n);
    std::vector<char> v(p, p + k);
    p += k;
    n -= k;
    return v;
  }
};

// A session socket's far end: what the fuzzer's client writes to, and reads replies from.
struct SocketClient {
  int fd = -1;
  std::string in;  // bytes read that are not yet a whole frame
  // What was sent past the last whole frame, framed as adjsnapd reads it; and whether a frame
  // adjsnapd ends the socket on was sent.
  std::string unframed;
  bool ends = false;
  void Write(const std::vector<char>& bytes) {
    Track(bytes.data(), bytes.size());
    size_t at = 0;
    while (at < bytes.size()) {
      ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;  // adjsnapd ended the socket: what is left is not delivered
      at += static_cast<size_t>(n);
    }
  }
  void Track(const char* bytes, size_t n) {
    if (ends) return;
    unframed.append(bytes, n);
    wire::SocketFrame frame;
    while (unframed.size() >= sizeof frame) {
      std::memcpy(&frame, unframed.data(), sizeof frame);
      if (frame.reserved != 0 || frame.bytes > wire::kMaxSocketMessage) {
        ends = true;
        return;
      }
      if (unframed.size() < sizeof frame + frame.bytes) return;
      unframed.erase(0, sizeof frame + frame.bytes);
    }
  }
  // Raw bytes may leave a frame partly sent, which adjsnapd rightly waits for the rest of: zeros
  // complete it, so that what is sent next is read as a message of its own.
  void CompleteFrame() {
    wire::SocketFrame frame;
    while (!ends && !unframed.empty()) {
      size_t need = sizeof frame - std::min(sizeof frame, unframed.size());
      if (need == 0) {
        std::memcpy(&frame, unframed.data(), sizeof frame);
        need = sizeof frame + frame.bytes - unframed.size();
      }
      Write(std::vector<char>(need, '\0'));
    }
  }
  // True once a Reply to `request_id` came, or adjsnapd closed the socket; false after kWedged.
  bool WaitReplyOrClose(uint64_t request_id) {
    auto deadline = std::chrono::steady_clock::now() + kWedged;
    char buf[4096];
    for (;;) {
      wire::SocketFrame frame;
      while (in.size() >= sizeof frame) {
        std::memcpy(&frame, in.data(), sizeof frame);
        if (in.size() < sizeof frame + frame.bytes) break;
        if (frame.op == wire::kReply && frame.bytes == sizeof(wire::Reply)) {
          wire::Reply r;
          std::memcpy(&r, in.data() + sizeof frame, sizeof r);
          if (r.header.request_id == request_id) return true;
        }
        in.erase(0, sizeof frame + frame.bytes);
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return true;  // closed by adjsnapd: it answered by ending the session
      in.append(buf, static_cast<size_t>(n));
    }
  }
};

std::vector<char> Framed(uint16_t op, const std::vector<char>& header) {
  wire::SocketFrame frame{op, static_cast<uint16_t>(header.size()), 0};
  std::vector<char> out(sizeof frame);
  std::memcpy(out.data(), &frame, sizeof frame);
  out.insert(out.end(), header.begin(), header.end());
  return out;
}

}  // namespace

// One message of the input format: `patch` bits, id, the header as the real encoder makes it
// (token 0 and run 0: patched in by 0x02 and 0x08), and `data`.
template <typename T>
std::string Message(uint8_t patch, wire::AmId id, T header, size_t data = 0) {
  return std::string(1, char(patch)) + fuzz::U16(id) + std::string(1, char(sizeof header)) +
         fuzz::U16(data) + fuzz::Raw(header) + std::string(data, '\x5a');
}

void WriteSeeds() {
  using wire::MakeHeader;
  const uint8_t all = 0x01 | 0x02 | 0x04 | 0x08 | 0x80;  // valid, for run pick 0 ("fa")
  wire::PushRequest push{MakeHeader(wire::kPush, 0, 7), 0, 0, 0, 0};
  wire::FetchRequest fetch{MakeHeader(wire::kFetch, 0, 8), 0, 0, 0};
  wire::PushRequest reserve{MakeHeader(wire::kReserve, 0, 9), 0, 1, 0, 0};
  wire::PushRequest commit{MakeHeader(wire::kCommit, 0, 10), 0, 1, 0, 1000};
  wire::PushRequest abort{MakeHeader(wire::kAbort, 0, 11), 0, 1, 0, 0};
  wire::FetchRequest mapped{MakeHeader(wire::kFetchMapped, 0, 12), 0, 1, 0};
  wire::LeaseRelease release{MakeHeader(wire::kReleaseLease, 0, 12), 12, 0};
  wire::HelloRequest hello{MakeHeader(wire::kHello, 0, 13), 1};
  fuzz::WriteSeed("hello", "\x02" + Message(0x03, wire::kHello, hello));
  fuzz::WriteSeed("push_fetch", std::string("\x00") + Message(all, wire::kPush, push) +
                                    Message(all, wire::kFetch, fetch));
  fuzz::WriteSeed("push_rndv", "\x00" + Message(all | 0x20, wire::kPush, push));
  fuzz::WriteSeed("reserve_commit_fetch_release",
                  std::string("\x00") + Message(all, wire::kReserve, reserve) +
                      Message(all, wire::kCommit, commit) +
                      Message(all, wire::kFetchMapped, mapped) +
                      Message(0x07, wire::kReleaseLease, release));
  fuzz::WriteSeed("reserve_abort", std::string("\x00") + Message(all, wire::kReserve, reserve) +
                                       Message(all, wire::kAbort, abort));
  fuzz::WriteSeed("tenant_mapped", "\x01" + Message(all, wire::kReserve, reserve));
  fuzz::WriteSeed("before_hello", "\x02" + Message(all, wire::kPush, push));
  fuzz::WriteSeed("bad_magic", "\x00" + Message(0x02, wire::kFetch, fetch));
  fuzz::WriteSeed("unknown_id", "\x00" + Message(0x07, static_cast<wire::AmId>(77), fetch));
  fuzz::WriteSeed("stranger", "\x00" + Message(all | 0x40, wire::kPush, push));
  fuzz::WriteSeed("no_reply_ep", "\x00" + Message(all | 0x10, wire::kFetch, fetch));
  fuzz::WriteSeed("socket_reserve_commit_fetch_release",
                  std::string("\x04") + Message(all, wire::kReserve, reserve) +
                      Message(all, wire::kCommit, commit) +
                      Message(all, wire::kFetchMapped, mapped) +
                      Message(0x07, wire::kReleaseLease, release));
  fuzz::WriteSeed("socket_tenant_reserve_abort", std::string("\x05") +
                                                     Message(all, wire::kReserve, reserve) +
                                                     Message(all, wire::kAbort, abort));
  fuzz::WriteSeed("socket_push", "\x04" + Message(all, wire::kPush, push));
  fuzz::WriteSeed("socket_raw", "\x04" + Message(all | 0x10, wire::kReserve, reserve));
  // A frame that announces 56 bytes and brings 10: adjsnapd waits for the rest (the first 1 h
  // run's only finding, the harness's: its probe went into that frame).
  struct PartialFrame {
    wire::SocketFrame frame;
    char body[10];
  } partial{{wire::kReserve, sizeof(wire::PushRequest), 0}, {}};
  fuzz::WriteSeed("socket_partial_frame", "\x04" + Message(0x10, wire::kReserve, partial));
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (fuzz::SeedDir()) {
    WriteSeeds();
    std::exit(0);
  }
  fuzz::QuietLogs();
  world = new World;
  fuzz::NodeOptions o;
  o.data_plane = true;
  o.host_bytes = 16ull << 20;
  world->node = fuzz::Node::Start(o);
  StartClient(&world->client, "fuzz-client");
  StartClient(&world->stranger, "fuzz-stranger");
  const std::string& daemon = world->node->data_plane()->worker_address();
  OnLoop(&world->stranger, [&] {
    world->stranger_ep = Take(ucx::ConnectToWorker(world->stranger.loop->worker(), daemon,
                                                   &OnClientEpError, nullptr),
                              "stranger endpoint");
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  World& w = *world;
  Store* store = w.node->store();
  Cursor in{bytes, size};
  const uint8_t session_flags = in.Get<uint8_t>();
  const uint32_t uid = (session_flags & 1) ? 1000 : 0;

  // This input's runs: two of root's (read-once, and kept), one of uid 1000's.
  struct RunRef {
    uint64_t id;
    uint64_t bytes;
  };
  std::vector<RunRef> runs;
  for (auto [spec, owner] : {std::pair{Spec("fa", 8, 256, false), 0u},
                             std::pair{Spec("fb", 4, 4096, true), 0u},
                             std::pair{Spec("fc", 8, 256, false), 1000u}}) {
    bool created = false;
    v1::RunInfo info = Take(store->OpenRun(spec, owner, &created), "OpenRun");
    runs.push_back({info.run_id(), spec.bytes_per_step()});
  }

  const bool over_socket = session_flags & 4;
  Session session = Take(w.node->sessions()->Open("fuzz", uid, over_socket), "open a session");
  ucp_ep_h ep = nullptr;
  SocketClient sock;
  if (over_socket) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      std::perror("fuzz harness: socketpair");
      std::abort();
    }
    sock.fd = fds[1];
    w.node->data_plane()->ExpectSocket(session);
    w.node->data_plane()->AttachSocket(session, ucx::ScopedFd(fds[0]));
  } else {
    Check(w.node->data_plane()->Connect(session, w.client.loop->address()), "Connect");
    OnLoop(&w.client, [&] {
      ep =
          Take(ucx::ConnectToWorker(w.client.loop->worker(), w.node->data_plane()->worker_address(),
                                    &OnClientEpError, nullptr),
               "client endpoint");
    });
  }
  if (!over_socket && !(session_flags & 2)) {
    uint64_t id = w.next_request++;
    Send(&w.client, ep, wire::kHello, HelloBytes(session.token, id, session.id), {},
         UCP_AM_SEND_FLAG_REPLY);
    if (!WaitReply(&w.client, id)) {
      std::fprintf(stderr, "data plane wedged: Hello unanswered for 10 s\n");
      std::abort();
    }
  }

  while (in.n > 0) {
    const uint8_t patch = in.Get<uint8_t>();
    const uint16_t am_id = in.Get<uint16_t>();
    const size_t header_length = in.Get<uint8_t>();
    size_t data_length = in.Get<uint16_t>();
    std::vector<char> header = in.Bytes(header_length);
    auto put = [&](size_t offset, auto value) {
      if (header.size() >= offset + sizeof value) std::memcpy(&header[offset], &value, sizeof value);
    };
    if (patch & 0x01) {
      put(0, wire::kMagic);
      put(4, wire::kVersion);
    }
    if (patch & 0x02) put(8, session.token);
    if (patch & 0x04) put(6, am_id);
    const RunRef* run = nullptr;
    if (header.size() >= 32) {
      uint64_t pick;
      std::memcpy(&pick, &header[24], sizeof pick);
      run = &runs[pick % runs.size()];
      if (patch & 0x08) put(24, run->id);
    }
    std::vector<char> data;
    if ((patch & 0x80) && run) {
      put(40, run->bytes);
      data.assign(run->bytes, static_cast<char>(am_id));
      data_length = 0;
    }
    std::vector<char> more = in.Bytes(data_length);
    data.insert(data.end(), more.begin(), more.end());
    if (over_socket) {
      if (patch & 0x10) {
        header.insert(header.end(), data.begin(), data.end());
        sock.Write(header);
      } else {
        sock.Write(Framed(am_id, header));
      }
      continue;
    }
    uint32_t flags = (patch & 0x10) ? 0 : UCP_AM_SEND_FLAG_REPLY;
    if (patch & 0x20) flags |= UCP_AM_SEND_FLAG_RNDV;
    if (patch & 0x40) {
      Send(&w.stranger, w.stranger_ep, am_id, std::move(header), std::move(data), flags);
    } else {
      Send(&w.client, ep, am_id, std::move(header), std::move(data), flags);
    }
  }

  // Alive and answering: a Hello after the input's messages (on the same endpoint, so after
  // them) is answered; with the session's token, unless the session already said Hello, it
  // is a valid one.
  // Over a session socket a Hello is refused, with a Reply, unless adjsnapd ended the socket.
  uint64_t probe = w.next_request++;
  if (over_socket) {
    sock.CompleteFrame();
    sock.Write(Framed(wire::kHello, HelloBytes(session.token, probe, session.id)));
    if (!sock.WaitReplyOrClose(probe)) {
      std::fprintf(stderr,
                   "data plane wedged: a Hello after the input was neither answered nor "
                   "the session socket closed for 10 s\n");
      std::abort();
    }
  } else {
    Send(&w.client, ep, wire::kHello, HelloBytes(session.token, probe, session.id), {},
         UCP_AM_SEND_FLAG_REPLY);
    if (!WaitReply(&w.client, probe)) {
      std::fprintf(stderr, "data plane wedged: a Hello after the input was unanswered for 10 s\n");
      std::abort();
    }
  }

  // Tear down this input's state: the session's endpoint (its reservations and leases go with
  // it), then its runs.
  w.node->data_plane()->DropSession(session.id);
  if (ep) OnLoop(&w.client, [&] { ucx::CloseEndpoint(*w.client.loop, ep, /*force=*/true); });
  if (sock.fd >= 0) ::close(sock.fd);
  if (!w.node->data_plane()->Responsive(kWedged)) {
    std::fprintf(stderr, "data plane wedged: the loop did not run a task for 10 s\n");
    std::abort();
  }
  for (const char* name : {"fa", "fb", "1000:fc"}) {
    auto deleted = store->DeleteRun(name);
    if (!deleted.ok() && deleted.status().code() != Code::kNotFound) {
      Check(deleted.status(), "DeleteRun");
    }
  }
  {
    std::lock_guard<std::mutex> lock(w.client.mu);
    w.client.replies.clear();
  }
  return 0;
}
