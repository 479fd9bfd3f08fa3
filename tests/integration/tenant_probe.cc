// Test helper, run as a second (untrusted) user by tenancy_test.cc: tries what a hostile
// tenant would, and prints one "name=value" line per attempt (codes as numbers).
//   tenant_probe SOCKET replay STEPS BYTES   mapped-path Reserve+Commit with no bytes copied
//                                            (over a session socket, or where the arena is
//                                            refused, over a UCX endpoint),
//                                            then an ordinary fetch of what was "committed",
//                                            then an honest copied round trip
//   tenant_probe SOCKET close ID TOKEN       CloseSession of someone else's session
//   tenant_probe SOCKET fill STEPS BYTES     pushes a host-only run "hog" until refused or
//                                            STEPS are in; prints how many and why
//   tenant_probe SOCKET hello HEXADDR ID TOKEN
//                                            says Hello and asks for step 0 of run 1 with a
//                                            stolen session id and token, from its own endpoint
//                                            to adjsnapd's worker (HEXADDR); prints the replies
//   tenant_probe SOCKET scan STEPS BYTES [SEED]
//                                            maps this user's own host-tier arena (as the
//                                            client library does) and counts its 4 KiB pages
//                                            that hold a page of the victim's steps (pattern
//                                            SEED, default 1, as tenancy_test.cc pushes them)
//   tenant_probe SOCKET roundtrip STEPS BYTES
//                                            a solver: pushes STEPS steps of a run "solver",
//                                            fetches them back newest first; prints its data
//                                            path and how many came back exact
//   tenant_probe SOCKET keep NAME STEPS BYTES SEED
//                                            pushes a kept run NAME (pattern SEED); prints
//                                            how many were stored
//   tenant_probe SOCKET verify NAME STEPS BYTES SEED
//                                            attaches to the run NAME and fetches every step;
//                                            prints its data path and how many came back exact
//   tenant_probe SOCKET read PATH...         opens each path for reading (a file, or lists a
//                                            directory); prints its errno (0: it could)
#include <dirent.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "daemon_process.h"
#include "raw_peer.h"
#include "adjsnap/client.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/wire.h"

namespace {

using adjsnap::testing::RawPeer;
namespace wire = adjsnap::wire;
namespace v1 = adjsnap::v1;

void Print(const char* name, long long value) {
  std::printf("%s=%lld\n", name, value);
  std::fflush(stdout);
}

int Replay(const std::string& socket, uint64_t steps, uint64_t bytes) {
  // As a mapped client links: a session socket. Where the arena socket refuses it (a shared
  // arena), a UCX endpoint, which the mapped path's messages are then sent on.
  auto stub = v1::Control::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  std::string why;
  std::unique_ptr<RawPeer> peer = RawPeer::OpenSocket(*stub, &why);
  Print("linked", peer != nullptr);
  if (!peer) {
    std::printf("link_refused=%s\n", why.c_str());
    peer = RawPeer::Open(*stub, &why);
    if (!peer) {
      std::fprintf(stderr, "open session: %s\n", why.c_str());
      return 1;
    }
    wire::HelloRequest hello{wire::MakeHeader(wire::kHello, peer->session().token(), 1),
                             peer->session().session_id()};
    peer->Send(wire::kHello, &hello, sizeof hello);
    auto hi = peer->WaitReply(1);
    Print("hello", hi ? hi->code : -1);
  }
  const uint64_t token = peer->session().token();
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("replay");
  open.mutable_spec()->set_steps(steps);
  open.mutable_spec()->set_bytes_per_step(bytes);
  open.mutable_spec()->set_keep(true);
  open.mutable_spec()->set_layers(v1::LAYERS_HOST);
  v1::OpenRunResponse opened;
  grpc::ClientContext ctx;
  grpc::Status s = stub->OpenRun(&ctx, open, &opened);
  Print("open_run", s.error_code());
  if (!s.ok()) return 1;
  const uint64_t run = opened.run().run_id();
  long long reserve_refused = 0, commit_refused = 0, fetch_not_found = 0;
  std::string reserve_message;
  std::vector<char> got(bytes);
  for (uint64_t t = 0; t < steps; ++t) {
    wire::PushRequest reserve{wire::MakeHeader(wire::kReserve, token, 100 + 3 * t), run, t, bytes,
                              0};
    peer->Send(wire::kReserve, &reserve, sizeof reserve);
    auto r = peer->WaitReply(100 + 3 * t);
    if (r && r->code == 7) ++reserve_refused;
    if (r && reserve_message.empty()) reserve_message = adjsnap::testing::Message(*r);
    wire::PushRequest commit{wire::MakeHeader(wire::kCommit, token, 101 + 3 * t), run, t, bytes, 0};
    peer->Send(wire::kCommit, &commit, sizeof commit);
    auto c = peer->WaitReply(101 + 3 * t);
    if (c && c->code == 7) ++commit_refused;
  }
  Print("reserve_refused", reserve_refused);
  Print("commit_refused", commit_refused);
  std::printf("reserve_message=%s\n", reserve_message.c_str());
  // What an ordinary client of this user then reads of the "committed" steps.
  adjsnap::ClientOptions o;
  o.socket_path = socket;
  auto client = adjsnap::Client::Connect(o);
  if (!client.ok()) return 1;
  Print("mapped", (*client)->data_path() == adjsnap::DataPath::kMappedHostTier);
  for (uint64_t t = 0; t < steps; ++t) {
    adjsnap::Status f = (*client)->Fetch(run, t, got.data(), bytes);
    if (f.code() == adjsnap::Code::kNotFound) ++fetch_not_found;
  }
  Print("fetch_not_found", fetch_not_found);
  // What the "committed" steps hold when they were stored: zeros (fresh pages of this user's
  // own arena) or the victim's bytes.
  long long victim_fetched = 0;
  std::vector<char> victim(bytes);
  for (uint64_t t = 0; t < steps; ++t) {
    adjsnap::testing::FillPattern(victim.data(), bytes, 1, t);
    if ((*client)->Fetch(run, t, got.data(), bytes).ok() && got == victim) ++victim_fetched;
  }
  Print("victim_fetched", victim_fetched);
  // A fresh run of the same name for the honest round trip (the steps above may be stored).
  (void)(*client)->DeleteRun("replay");
  adjsnap::RunSpec again;
  again.name = "replay";
  again.steps = steps;
  again.bytes_per_step = bytes;
  again.keep = true;
  again.layers = "Host";
  auto reopened = (*client)->OpenRun(again);
  if (!reopened.ok()) {
    std::fprintf(stderr, "reopen: %s\n", reopened.status().ToString().c_str());
    return 1;
  }
  const uint64_t honest = reopened->run_id;
  // An honest copied round trip into blocks another tenant freed shows only this user's bytes.
  long long exact = 0;
  for (uint64_t t = 0; t < steps; ++t) {
    std::vector<char> mine(bytes);
    adjsnap::testing::FillPattern(mine.data(), bytes, 99, t);
    auto h = (*client)->Push(honest, t, mine.data(), bytes);
    if (!h.ok() || !h->WaitStored().ok()) continue;
    if ((*client)->Fetch(honest, t, got.data(), bytes).ok() && got == mine) ++exact;
  }
  Print("exact", exact);
  return 0;
}

int Scan(const std::string& socket, uint64_t steps, uint64_t bytes, uint64_t seed) {
  // A session for a session socket, as a mapped client opens it.
  auto stub = v1::Control::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::OpenSessionResponse session;
  if (grpc::Status s = stub->OpenSession(&ctx, v1::OpenSessionRequest(), &session); !s.ok()) {
    std::fprintf(stderr, "open session: %s\n", s.error_message().c_str());
    return 1;
  }
  auto sock = adjsnap::ConnectUnix(session.arena_socket());
  if (!sock.ok()) return 1;
  wire::ArenaRequest req{session.session_id(), session.token()};
  if (send(sock->get(), &req, sizeof req, MSG_NOSIGNAL) != sizeof req) return 1;
  wire::ArenaReply reply{};
  int fd = -1;
  if (adjsnap::RecvWithFd(sock->get(), &reply, sizeof reply, MSG_WAITALL, &fd) != sizeof reply) {
    return 1;
  }
  Print("arena_code", reply.code);
  if (reply.code != 0 || fd < 0) return 0;
  auto* base = static_cast<const char*>(
      mmap(nullptr, reply.arena_bytes, PROT_READ, MAP_SHARED, fd, 0));
  ::close(fd);
  if (base == MAP_FAILED) return 1;
  constexpr size_t kPage = 4096;
  std::vector<char> victim(steps * bytes);
  for (uint64_t t = 0; t < steps; ++t) {
    adjsnap::testing::FillPattern(victim.data() + t * bytes, bytes, seed, t);
  }
  std::unordered_set<std::string_view> pages;
  for (size_t at = 0; at + kPage <= victim.size(); at += kPage) {
    pages.emplace(victim.data() + at, kPage);
  }
  long long found = 0, nonzero = 0;
  for (uint64_t at = 0; at + kPage <= reply.arena_bytes; at += kPage) {
    std::string_view page(base + at, kPage);
    if (page.find_first_not_of('\0') != std::string_view::npos) ++nonzero;
    if (pages.count(page)) ++found;
  }
  Print("arena_bytes", static_cast<long long>(reply.arena_bytes));
  Print("arena_nonzero_pages", nonzero);
  Print("victim_pages", found);
  munmap(const_cast<char*>(base), reply.arena_bytes);
  return 0;
}

// A client of `socket` (its data path printed as "mapped") with `spec` opened; nullopt after
// saying why on stderr.
struct Opened {
  std::unique_ptr<adjsnap::Client> client;
  adjsnap::RunInfo run;
};
std::optional<Opened> ConnectAndOpen(const std::string& socket, const adjsnap::RunSpec& spec) {
  adjsnap::ClientOptions o;
  o.socket_path = socket;
  auto client = adjsnap::Client::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return std::nullopt;
  }
  Print("mapped", (*client)->data_path() == adjsnap::DataPath::kMappedHostTier);
  auto run = (*client)->OpenRun(spec);
  if (!run.ok()) {
    std::fprintf(stderr, "open: %s\n", run.status().ToString().c_str());
    return std::nullopt;
  }
  return Opened{std::move(client).value(), *run};
}

int RoundTrip(const std::string& socket, uint64_t steps, uint64_t bytes) {
  adjsnap::RunSpec spec;
  spec.name = "solver";
  spec.steps = steps;
  spec.bytes_per_step = bytes;
  std::optional<Opened> opened = ConnectAndOpen(socket, spec);
  if (!opened) return 1;
  adjsnap::Client* client = opened->client.get();
  const adjsnap::RunInfo* run = &opened->run;
  std::vector<char> step(bytes), back(bytes);
  for (uint64_t t = 0; t < steps; ++t) {
    adjsnap::testing::FillPattern(step.data(), bytes, 7, t);
    auto h = client->Push(run->run_id, t, step.data(), bytes);
    adjsnap::Status s = h.ok() ? h->WaitStored() : h.status();
    if (!s.ok()) {
      std::fprintf(stderr, "push %llu: %s\n", static_cast<unsigned long long>(t),
                   s.ToString().c_str());
      return 1;
    }
  }
  long long exact = 0;
  for (uint64_t t = steps; t-- > 0;) {
    adjsnap::testing::FillPattern(step.data(), bytes, 7, t);
    if (client->Fetch(run->run_id, t, back.data(), bytes).ok() && back == step) ++exact;
  }
  Print("exact", exact);
  (void)client->DeleteRun("solver");
  return 0;
}

// keep (push a kept run) or verify (attach and fetch it back) NAME.
int KeepOrVerify(const std::string& socket, bool keep, const std::string& name, uint64_t steps,
                 uint64_t bytes, uint64_t seed) {
  adjsnap::RunSpec spec;
  spec.name = name;
  spec.steps = steps;
  spec.bytes_per_step = bytes;
  spec.keep = true;
  std::optional<Opened> opened = ConnectAndOpen(socket, spec);
  if (!opened) return 1;
  adjsnap::Client* client = opened->client.get();
  const adjsnap::RunInfo* run = &opened->run;
  Print("created", run->created);
  std::vector<char> want(bytes), got(bytes);
  long long done = 0;
  for (uint64_t t = 0; t < steps; ++t) {
    adjsnap::testing::FillPattern(want.data(), bytes, seed, t);
    if (keep) {
      auto h = client->Push(run->run_id, t, want.data(), bytes);
      adjsnap::Status s = h.ok() ? h->WaitStored() : h.status();
      if (!s.ok()) {
        std::fprintf(stderr, "push %llu: %s\n", static_cast<unsigned long long>(t),
                     s.ToString().c_str());
      }
      done += s.ok();
    } else {
      adjsnap::Status s = client->Fetch(run->run_id, t, got.data(), bytes);
      if (!s.ok() || got != want) {
        std::fprintf(stderr, "fetch %llu: %s\n", static_cast<unsigned long long>(t),
                     s.ok() ? "bytes differ" : s.ToString().c_str());
      }
      done += s.ok() && got == want;
    }
  }
  Print(keep ? "stored" : "exact", done);
  return 0;
}

int Close(const std::string& socket, uint64_t id, uint64_t token) {
  auto stub = v1::Control::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  v1::CloseSessionRequest req;
  req.set_session_id(id);
  req.set_token(token);
  v1::CloseSessionResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = stub->CloseSession(&ctx, req, &resp);
  Print("close", s.error_code());
  std::printf("close_message=%s\n", s.error_message().c_str());
  return 0;
}

int Fill(const std::string& socket, uint64_t steps, uint64_t bytes) {
  adjsnap::ClientOptions o;
  o.socket_path = socket;
  auto client = adjsnap::Client::Connect(o);
  if (!client.ok()) return 1;
  adjsnap::RunSpec spec;
  spec.name = "hog";
  spec.bytes_per_step = bytes;
  spec.layers = "Host";
  spec.keep = true;
  auto run = (*client)->OpenRun(spec);
  if (!run.ok()) {
    std::fprintf(stderr, "open: %s\n", run.status().ToString().c_str());
    return 1;
  }
  std::vector<char> step(bytes, 'h');
  uint64_t stored = 0;
  std::string why;
  for (uint64_t t = 0; t < steps && why.empty(); ++t) {
    auto h = (*client)->Push(run->run_id, t, step.data(), bytes);
    adjsnap::Status s = h.ok() ? h->WaitStored() : h.status();
    if (s.ok())
      ++stored;
    else
      why = s.ToString();
  }
  Print("stored", static_cast<long long>(stored));
  std::printf("refused=%s\n", why.c_str());
  return 0;
}

int Hello(const std::string& hex, uint64_t id, uint64_t token) {
  std::string address;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    address.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  // With adjsnapd's default transports a process of another uid cannot even reach adjsnapd's
  // worker (shared memory is its owner's).
  std::unique_ptr<RawPeer> stranger = RawPeer::Stranger(address);
  Print("connected", stranger != nullptr);
  if (!stranger) {
    Print("replies", 0);
    return 0;
  }
  wire::HelloRequest hello{wire::MakeHeader(wire::kHello, token, 1), id};
  stranger->Send(wire::kHello, &hello, sizeof hello);
  wire::FetchRequest fetch{wire::MakeHeader(wire::kFetch, token, 2), 1, 0, 4096};
  stranger->Send(wire::kFetch, &fetch, sizeof fetch);
  bool answered = stranger->WaitReply(1, std::chrono::milliseconds(1000)).has_value() ||
                  stranger->WaitReply(2, std::chrono::milliseconds(200)).has_value();
  Print("replies", answered ? static_cast<long long>(stranger->replies()) : 0);
  return 0;
}

int Read(int argc, char** argv) {
  for (int i = 3; i < argc; ++i) {
    int fd = ::open(argv[i], O_RDONLY | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      struct stat st {};
      if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR* d = fdopendir(fd);
        if (d == nullptr || readdir(d) == nullptr) err = errno ? errno : EIO;
        if (d)
          closedir(d);
        else
          ::close(fd);
      } else {
        char c;
        if (::read(fd, &c, 1) < 0) err = errno;
        ::close(fd);
      }
    }
    std::printf("read %s=%d\n", argv[i], err);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[2], "read") == 0) return Read(argc, argv);
  if (argc == 6 && std::strcmp(argv[2], "hello") == 0) {
    return Hello(argv[3], std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10));
  }
  if (argc == 5 && std::strcmp(argv[2], "fill") == 0) {
    return Fill(argv[1], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10));
  }
  if (argc == 5 && std::strcmp(argv[2], "replay") == 0) {
    return Replay(argv[1], std::strtoull(argv[3], nullptr, 10),
                  std::strtoull(argv[4], nullptr, 10));
  }
  if (argc == 7 && (std::strcmp(argv[2], "keep") == 0 || std::strcmp(argv[2], "verify") == 0)) {
    return KeepOrVerify(argv[1], std::strcmp(argv[2], "keep") == 0, argv[3],
                        std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10),
                        std::strtoull(argv[6], nullptr, 10));
  }
  if (argc == 5 && std::strcmp(argv[2], "roundtrip") == 0) {
    return RoundTrip(argv[1], std::strtoull(argv[3], nullptr, 10),
                     std::strtoull(argv[4], nullptr, 10));
  }
  if ((argc == 5 || argc == 6) && std::strcmp(argv[2], "scan") == 0) {
    return Scan(argv[1], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                argc == 6 ? std::strtoull(argv[5], nullptr, 10) : 1);
  }
  if (argc == 5 && std::strcmp(argv[2], "close") == 0) {
    return Close(argv[1], std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10));
  }
  std::fprintf(stderr, "usage: tenant_probe SOCKET replay STEPS BYTES | close ID TOKEN\n");
  return 2;
}
