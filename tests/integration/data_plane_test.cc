// End-to-end behaviour of the real adjsnapd binary over each data path: the copied path (UCX)
// over tcp (the operator's UCX_TLS=tcp) and over adjsnapd's default transports (every one but
// tcp, with UCX_MM_ERROR_HANDLING=y), and the mapped host tier over its session socket.
// Each case checks the link the client really uses (Client::data_transports): by default UCX
// 1.13 picks shared memory (sysv); a mapped client has no UCX endpoint at all. If a UCX
// version picks otherwise, the "shared_memory" case fails here and the docs must say so.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/checksum.h"
#include "adjsnap/client.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "sanitizer.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

struct Transport {
  const char* name;
  const char* ucx_tls;
  bool mapped;
  const char* lanes;  // what data_transports() reports
};

class DataPlaneTest : public AdjsnapTest, public ::testing::WithParamInterface<Transport> {
 protected:
  void SetUp() override {
    if (*GetParam().ucx_tls) {
      setenv("UCX_TLS", GetParam().ucx_tls, 1);
    } else {
      unsetenv("UCX_TLS");  // adjsnapd's and libadjsnap's default
    }
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("512M")));
  }
  void TearDown() override {
    AdjsnapTest::TearDown();
    unsetenv("UCX_TLS");
  }
  // A client on this transport's data path; null (with a failure) if it cannot connect.
  Client* ConnectOnTransport() {
    Client* c = Connect(GetParam().mapped);
    if (c != nullptr) {
      EXPECT_EQ(c->data_path(), GetParam().mapped ? DataPath::kMappedHostTier : DataPath::kUcx)
          << c->data_path_reason();
      EXPECT_EQ(c->data_transports(), GetParam().lanes) << "UCX_TLS=" << GetParam().ucx_tls;
    }
    return c;
  }
  // Pushes steps [0, n) of `run` (pattern seed `seed`), forward, then fetches them in reverse
  // and checks every byte.
  static void RoundTrip(Client& c, const std::string& run_name, uint64_t n, size_t bytes,
                        uint64_t seed) {
    RunSpec spec;
    spec.name = run_name;
    spec.steps = n;
    spec.bytes_per_step = bytes;
    spec.keep = true;  // the tests inspect the steps after reading them
    auto run = c.OpenRun(spec);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    std::vector<std::vector<char>> src(3, std::vector<char>(bytes));
    std::vector<PushHandle> handles(n);
    for (uint64_t t = 0; t < n; ++t) {
      if (t >= 3) {
        ASSERT_TRUE(handles[t - 3].WaitReleased().ok());
      }
      FillPattern(src[t % 3].data(), bytes, seed, t);
      auto h = c.Push(run->run_id, t, src[t % 3].data(), bytes);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles[t] = *h;
    }
    for (auto& h : handles) ASSERT_TRUE(h.WaitStored().ok()) << h.WaitStored().ToString();
    std::vector<char> got(bytes), want(bytes);
    for (uint64_t t = n; t-- > 0;) {
      std::memset(got.data(), 0, bytes);
      Status s = c.Fetch(run->run_id, t, got.data(), bytes);
      ASSERT_TRUE(s.ok()) << "step " << t << ": " << s.ToString();
      FillPattern(want.data(), bytes, seed, t);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), bytes)) << "step " << t << " differs";
    }
  }
};

// 256 KiB + 24 bytes: rendezvous-sized, and not a multiple of a page or of the checksum block.
constexpr size_t kStepBytes = 256 * 1024 + 24;

TEST_P(DataPlaneTest, RoundTripOf100StepsIsByteExact) {
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  RoundTrip(*c, "roundtrip", 100, kStepBytes, 1);
  auto where = c->Locate("roundtrip", 99);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tier, Tier::kHost);
  EXPECT_EQ(where->raw_bytes, kStepBytes);
  EXPECT_EQ(Stats().pushes(), 100u);
}

TEST_P(DataPlaneTest, SmallSnapshotsTravelEagerlyAndStayExact) {
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  RoundTrip(*c, "small", 20, 100, 2);
}

TEST_P(DataPlaneTest, TwoClientsInParallelKeepTheirRunsApart) {
  Client* a = ConnectOnTransport();
  Client* b = ConnectOnTransport();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::thread ta([&] { RoundTrip(*a, "client-a", 50, kStepBytes, 10); });
  std::thread tb([&] { RoundTrip(*b, "client-b", 50, kStepBytes, 20); });
  ta.join();
  tb.join();
  EXPECT_EQ(Stats().pushes(), 100u);
}

// Released comes before the daemon has the step; a fetch of it right after must still see it.
TEST_P(DataPlaneTest, AFetchRightAfterReleaseReadsWhatThisClientPushed) {
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  constexpr uint64_t kSteps = 200;
  auto run = c->OpenRun({.name = "read-your-writes", .steps = kSteps, .bytes_per_step = kStepBytes});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::vector<char> src(kStepBytes), dst(kStepBytes);
  for (uint64_t t = 0; t < kSteps; ++t) {
    FillPattern(src.data(), kStepBytes, 7, t);
    auto h = c->Push(run->run_id, t, src.data(), kStepBytes);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(h->WaitReleased().ok());
    Status s = c->Fetch(run->run_id, t, dst.data(), kStepBytes);
    ASSERT_TRUE(s.ok()) << "step " << t << ": " << s.ToString();
    ASSERT_TRUE(h->stored());
    ASSERT_EQ(dst, src) << "step " << t;
  }
}

// The copy that moves a push's bytes computes their checksum: the client's on the mapped path,
// adjsnapd's own for an eager copied push. So a step is stored with its checksum recorded, and
// nothing reads it a second time to hash it. (A rendezvous push lands by UCX's copy, so the
// checksum thread hashes it after; this case pushes it to show the value is the same.)
TEST_P(DataPlaneTest, AStepIsStoredWithTheChecksumItsCopyComputed) {
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  for (size_t bytes : {size_t{1000}, kStepBytes, size_t{9} << 20}) {
    const std::string name = "summed-" + std::to_string(bytes);
    auto run = c->OpenRun({.name = name, .steps = 1, .bytes_per_step = bytes, .keep = true});
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    std::vector<char> src(bytes);
    FillPattern(src.data(), bytes, 5, bytes);
    auto h = c->Push(run->run_id, 0, src.data(), bytes);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(h->WaitStored().ok());
    const bool eager = bytes <= 1000;
    auto where = c->Locate(name, 0);
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    if (GetParam().mapped || eager) {
      EXPECT_TRUE(where->checksum_recorded) << bytes << " bytes: recorded as it was stored";
    } else {
      ASSERT_TRUE(WaitUntil([&] { return c->Locate(name, 0).value().checksum_recorded; },
                            std::chrono::seconds(30)));
      where = c->Locate(name, 0);
    }
    EXPECT_EQ(where->checksum, Checksum(src.data(), bytes)) << bytes << " bytes";
  }
}

TEST_P(DataPlaneTest, ClientKilledMidPushLeavesCatalogConsistent) {
  const size_t bytes = 1 << 20;
  std::string out_path = dir() + "/helper.out";
  std::string cmd_out;
  pid_t pid = -1;
  {
    // The helper's stdout goes to a file we poll for progress.
    std::string sh = std::string(PUSH_UNTIL_KILLED_BINARY) + " " + daemon().socket() + " victim " +
                     std::to_string(bytes) + " > " + out_path;
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (!GetParam().mapped) setenv("ADJSNAP_DATA_PATH", "ucx", 1);
      execl("/bin/sh", "sh", "-c", ("exec " + sh).c_str(), nullptr);
      _exit(127);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {  // wait until the helper has pushed a few steps, then kill it mid-stream
    std::ifstream in(out_path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find("pushed 20\n") != std::string::npos) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "helper made no progress";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);

  // Every recorded snapshot is complete and exact; the tier holds exactly those.
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  auto runs = c->ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  uint64_t run_id = (*runs)[0].run_id;
  // The daemon notices the dead endpoint and drops its in-flight pushes: on shared memory by
  // UCX's keepalive, which adjsnapd runs every second (UCX's own 20 s would fail this bound).
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  v1::ListSnapshotsResponse list;
  for (;;) {
    list.Clear();
    grpc::ClientContext ctx;
    v1::ListSnapshotsRequest req;
    req.set_name("victim");
    ASSERT_TRUE(stub().ListSnapshots(&ctx, req, &list).ok());
    uint64_t used = Stats().tiers(0).used_bytes();
    if (used == list.snapshots_size() * bytes) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "host tier holds " << used << " bytes for " << list.snapshots_size() << " snapshots";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(list.snapshots_size(), 17);  // "pushed 20" means steps 0..16 were stored
  std::vector<char> got(bytes), want(bytes);
  for (const auto& s : list.snapshots()) {
    ASSERT_TRUE(c->Fetch(run_id, s.step(), got.data(), bytes).ok());
    FillPattern(want.data(), bytes, 7, s.step());
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), bytes)) << "step " << s.step();
  }
  RoundTrip(*c, "after-crash", 10, kStepBytes, 3);  // and the daemon serves everyone else
}

// UCX may give a new client's endpoint the handle of a killed client's. Pushes of the killed
// client that waited for room, answered after it died, must not act on the new endpoint: they
// once took one off its count of waiting pushes (below zero), and from then on it refused
// every push ("64 pushes are already reserved"); the soak found it (tests/soak).
class EndpointReuseTest : public AdjsnapTest {};

TEST_F(EndpointReuseTest, AKilledClientsWaitingPushesLeaveTheNextClientsFreeToPush) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("8M", {"--spool-dirs", "none"})));
  constexpr size_t kBytes = 1 << 20;
  for (int round = 0; round < 4; ++round) {
    const std::string victim = "victim-" + std::to_string(round);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      execl(PUSH_UNTIL_KILLED_BINARY, PUSH_UNTIL_KILLED_BINARY, daemon().socket().c_str(),
            victim.c_str(), std::to_string(kBytes).c_str(), "block", nullptr);
      _exit(127);
    }
    // Its pushes fill the 8 MiB host tier, then wait for room that never comes.
    ASSERT_TRUE(WaitUntil([&] { return Stats().waiting_pushes() >= 2; },
                          std::chrono::seconds(30)))
        << "round " << round << ": no push waits";
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    ASSERT_TRUE(WaitUntil([&] { return Stats().sessions() == 0; }, std::chrono::seconds(30)))
        << "round " << round << ": adjsnapd did not see the killed client go";
    // New clients (new endpoints: one may get the dead one's handle), then the victim's run is
    // deleted, which answers its waiting pushes.
    std::vector<Client*> next;
    for (int i = 0; i < 4; ++i) {
      next.push_back(Connect());
      ASSERT_NE(next.back(), nullptr);
    }
    ASSERT_TRUE(next[0]->DeleteRun(victim).ok());
    ASSERT_TRUE(WaitUntil([&] { return Stats().waiting_pushes() == 0; },
                          std::chrono::seconds(30)));
    for (size_t i = 0; i < next.size(); ++i) {
      RunSpec spec;
      spec.name = "next-" + std::to_string(round) + "-" + std::to_string(i);
      spec.bytes_per_step = 64 << 10;
      auto run = next[i]->OpenRun(spec);
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      std::vector<char> buf(spec.bytes_per_step), got(spec.bytes_per_step);
      for (uint64_t t = 0; t < 4; ++t) {
        FillPattern(buf.data(), buf.size(), 9, t);
        auto h = next[i]->Push(run->run_id, t, buf.data(), buf.size());
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        Status stored = h->WaitStored();
        ASSERT_TRUE(stored.ok()) << "round " << round << ", client " << i << ", step " << t
                                 << ": " << stored.ToString();
      }
      for (uint64_t t = 4; t-- > 0;) {
        ASSERT_TRUE(next[i]->Fetch(run->run_id, t, got.data(), got.size()).ok());
        FillPattern(buf.data(), buf.size(), 9, t);
        ASSERT_EQ(0, std::memcmp(got.data(), buf.data(), buf.size()));
      }
    }
    ReleaseClients();
    ASSERT_TRUE(WaitUntil([&] { return Stats().sessions() == 0; }, std::chrono::seconds(30)));
  }
}

// A clean stop writes the host-only steps to disk (restart_test covers it in depth): the
// restarted daemon serves them exactly, and everyone else as before.
TEST_P(DataPlaneTest, RestartedDaemonServesHostStepsFromDiskAndNewRuns) {
  {
    Client* c = ConnectOnTransport();
    ASSERT_NE(c, nullptr);
    RoundTrip(*c, "before", 5, kStepBytes, 4);
  }
  StopDaemon();  // its client leaves first; a clean exit expected
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("512M")));
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  auto where = c->Locate("before", 2);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(where->tier, Tier::kDisk);
  auto runs = c->ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  std::vector<char> got(kStepBytes), want(kStepBytes);
  ASSERT_TRUE(c->Fetch((*runs)[0].run_id, 2, got.data(), kStepBytes).ok());
  FillPattern(want.data(), kStepBytes, 4, 2);
  EXPECT_EQ(got, want);
  EXPECT_EQ(Stats().lost_snapshots(), 0u);
  RoundTrip(*c, "after", 10, kStepBytes, 5);
}

// A client that ends closes its session in order, on either link: adjsnapd logs the close, counts
// no rejection (a session socket closed before CloseSession would make CloseSession find no
// session), and holds no session afterwards.
TEST_P(DataPlaneTest, AClientThatEndsClosesItsSessionInOrder) {
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  ASSERT_NO_FATAL_FAILURE(RoundTrip(*c, "ends", 4, 1 << 16, 3));
  ReleaseClients();
  EXPECT_TRUE(WaitUntil([&] { return Stats().sessions() == 0; }, std::chrono::seconds(30)));
  EXPECT_EQ(RejectionsTotal(), 0u) << daemon().Log();
  EXPECT_NE(daemon().Log().find("closed by its client"), std::string::npos) << daemon().Log();
}

INSTANTIATE_TEST_SUITE_P(Transports, DataPlaneTest,
                         ::testing::Values(Transport{"tcp", "tcp", false, "tcp/lo"},
                                           Transport{"shared_memory", "", false, "sysv/memory"},
                                           Transport{"mapped", "", true, "unix/session-socket"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Every loop (the daemon's data plane, libadjsnap's I/O thread) sleeps with a timeout that is only
// a backstop: a posted task or an event wakes it. Set to an hour, a lost wake-up (a task queued
// while the loop goes to sleep, seen only when the timeout fires) hangs this test, where at
// the default 100 ms it only made the backward pass 8-15x slower.
class WakeUpTest : public DataPlaneTest {
 protected:
  void SetUp() override {
    setenv("ADJSNAP_LOOP_IDLE_POLL_MS", "3600000", 1);  // the daemon and the clients inherit it
    DataPlaneTest::SetUp();
  }
  void TearDown() override {
    DataPlaneTest::TearDown();
    unsetenv("ADJSNAP_LOOP_IDLE_POLL_MS");
  }
};

TEST_P(WakeUpTest, AThousandPushFetchAndReleaseCyclesFinishWithNoTimeoutToWakeTheLoops) {
  Client* c = ConnectOnTransport();
  ASSERT_NE(c, nullptr);
  // Three sizes: eager (4 KiB), rendezvous (256 KiB + 24), and one that the client's copy
  // threads split (4 MiB); one read-once run each, so every fetch also releases its step.
  constexpr size_t kSizes[] = {4096, kStepBytes, size_t{4} << 20};
  constexpr uint64_t kCycles = 1000;
  uint64_t run_ids[3];
  for (int i = 0; i < 3; ++i) {
    auto run = c->OpenRun({.name = "wake-" + std::to_string(i), .steps = kCycles,
                           .bytes_per_step = kSizes[i]});
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    run_ids[i] = run->run_id;
  }
  std::vector<char> src(kSizes[2]), dst(kSizes[2]);
  for (uint64_t t = 0; t < kCycles; ++t) {
    const int i = static_cast<int>(t % 3);
    const size_t bytes = kSizes[i];
    FillPattern(src.data(), bytes, 11, t);
    auto h = c->Push(run_ids[i], t, src.data(), bytes);
    ASSERT_TRUE(h.ok()) << "cycle " << t << ": " << h.status().ToString();
    ASSERT_TRUE(h->WaitReleased().ok()) << "cycle " << t;
    Status s = c->Fetch(run_ids[i], t, dst.data(), bytes);  // read-once: releases the step
    ASSERT_TRUE(s.ok()) << "cycle " << t << ": " << s.ToString();
    ASSERT_EQ(0, std::memcmp(dst.data(), src.data(), bytes)) << "cycle " << t;
  }
  EXPECT_EQ(Stats().pushes(), kCycles);
  EXPECT_TRUE(
      WaitUntil([&] { return Stats().tiers(0).used_bytes() == 0; }, std::chrono::seconds(30)))
      << "every step was read once, so the host tier holds none";
}

INSTANTIATE_TEST_SUITE_P(Transports, WakeUpTest,
                         ::testing::Values(Transport{"tcp", "tcp", false, "tcp/lo"},
                                           Transport{"shared_memory", "", false, "sysv/memory"},
                                           Transport{"mapped", "", true, "unix/session-socket"}),
                         [](const auto& info) { return std::string(info.param.name); });

// A solver process maps the host tier afresh for every shot. The client populates the tier
// pages of a push or fetch in bulk before its copy, so a fresh process takes far fewer page
// faults than one per 4 KiB page (the kernel faults around 16 pages at a time; huge pages
// would make it one per 2 MiB). With host_prefault, the first process on a new daemon finds
// every page allocated too.
struct FreshPass {
  long push_faults = -1;
  long fetch_faults = -1;
  long pages = 0;
};

// Runs tests/integration/fresh_process_pass against the daemon; a failure if it did not
// round-trip its run exactly.
FreshPass RunFreshProcess(const DaemonProcess& daemon, const std::string& run, int steps,
                          uint64_t bytes) {
  std::string cmd = std::string(FRESH_PROCESS_PASS_BINARY) + " " + daemon.socket() + " " + run +
                    " " + std::to_string(steps) + " " + std::to_string(bytes);
  FILE* out = popen(cmd.c_str(), "r");
  FreshPass r;
  if (out == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return r;
  }
  char line[256] = {};
  bool got = std::fgets(line, sizeof line, out) != nullptr;
  int status = pclose(out);
  EXPECT_EQ(status, 0) << cmd << " (its error is in the test's stderr)";
  EXPECT_TRUE(got && std::sscanf(line, "push_faults %ld fetch_faults %ld pages %ld",
                                 &r.push_faults, &r.fetch_faults, &r.pages) == 3)
      << line;
  return r;
}

// Counts page faults of a whole process: under AddressSanitizer or ThreadSanitizer its shadow
// memory faults too, and the count no longer tells the tier's pages apart.
class FirstTouchTest : public AdjsnapTest {
 protected:
  void SetUp() override {
    if (kShadowMemory) {
      GTEST_SKIP() << "the sanitizer's shadow memory takes page faults of its own in the "
                      "copying process; the plain build counts the tier's faults alone";
    }
    AdjsnapTest::SetUp();
  }
};

TEST_F(FirstTouchTest, AFreshProcessTakesFarFewerFaultsThanPagesItCopies) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("256M", {"--host-huge-pages", "off"})));
  constexpr int kSteps = 16;
  constexpr uint64_t kBytes = 4 << 20;
  FreshPass first = RunFreshProcess(daemon(), "shot-1", kSteps, kBytes);  // adjsnapd's pages new
  FreshPass second = RunFreshProcess(daemon(), "shot-2", kSteps, kBytes);
  ASSERT_EQ(second.pages, kSteps * static_cast<long>(kBytes / 4096));
  EXPECT_GE(second.push_faults, 0);
  EXPECT_LT(second.push_faults, second.pages / 4) << "first process: " << first.push_faults;
  EXPECT_LT(second.fetch_faults, second.pages / 4);
}

TEST_F(FirstTouchTest, WithPrefaultTheFirstProcessOnANewDaemonFindsThePagesThere) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("256M", {"--host-huge-pages", "off", "--host-prefault", "true"})));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t prefaulted = 0, budget = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    v1::StatsResponse stats = Stats();
    for (const auto& t : stats.tiers()) {
      if (t.tier() == v1::TIER_HOST) {
        prefaulted = t.prefaulted_bytes();
        budget = t.budget_bytes();
        EXPECT_EQ(t.pages(), "4 KiB pages");
      }
    }
    if (budget > 0 && prefaulted == budget) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(prefaulted, budget);
  FreshPass first = RunFreshProcess(daemon(), "shot-1", 16, 4 << 20);
  EXPECT_GE(first.push_faults, 0);
  EXPECT_LT(first.push_faults, first.pages / 4);
}

// A field of /proc/PID/status in bytes ("VmRSS", "RssShmem"); -1 if absent.
int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

class MemoryReleaseTest : public AdjsnapTest {};

// A job pushes, its run is deleted, the tier goes idle: adjsnapd gives the memory back, the
// memfd and the daemon's own RSS both drop to a small fixed overhead, and it serves again.
TEST_F(MemoryReleaseTest, AfterARunIsDeletedAndTheTierIdlesTheMemoryGoesBack) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("256M", {"--host-huge-pages", "off", "--host-release-after", "1"})));
  constexpr uint64_t kSteps = 24, kBytes = 4 << 20;
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunInfo run = OpenRun(*c, Spec("job", kSteps, kBytes));
  const int64_t shmem_before = ProcStatusBytes(daemon().pid(), "RssShmem");
  std::vector<char> buf(kBytes);
  for (uint64_t t = 0; t < kSteps; ++t) {
    FillPattern(buf.data(), kBytes, 9, t);
    auto h = c->Push(run.run_id, t, buf.data(), kBytes);
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  auto host = [&] {
    v1::StatsResponse stats = Stats();
    for (const auto& t : stats.tiers()) {
      if (t.tier() == v1::TIER_HOST) return t;
    }
    return v1::TierStats();
  };
  const uint64_t stored = kSteps * kBytes;
  EXPECT_GE(host().resident_bytes(), stored);
  // The daemon hashes every step through its own mapping (its checksum thread, off the push's
  // path): its RSS comes to hold them as shared pages, on top of what it held before the run
  // (UCX's shared segments, a sanitizer's shadow), which the release below does not give back.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int64_t shmem_full = 0;
  while ((shmem_full = ProcStatusBytes(daemon().pid(), "RssShmem") - shmem_before) <
             static_cast<int64_t>(stored) * 7 / 8 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(shmem_full, static_cast<int64_t>(stored) * 7 / 8);
  shmem_full += shmem_before;
  const int64_t rss_full = ProcStatusBytes(daemon().pid(), "VmRSS");
  ASSERT_TRUE(c->DeleteRun("job").ok());
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (host().resident_bytes() >= kBytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(host().resident_bytes(), kBytes) << "of " << stored << " pushed";
  // ... and lets them go (its other memory, UCX's shared segments and a sanitizer's shadow
  // among it, is not the tier's).
  const int64_t shmem_idle = ProcStatusBytes(daemon().pid(), "RssShmem");
  EXPECT_GE(shmem_full - shmem_idle, static_cast<int64_t>(stored) * 3 / 4)
      << "RssShmem " << shmem_full << " with the run, " << shmem_idle << " after; VmRSS "
      << rss_full << " with the run, " << ProcStatusBytes(daemon().pid(), "VmRSS") << " after";
  ExpectRoundTrip();
}

// Nothing waits forever in silence. A push that cannot get host room (here on purpose: a
// Host-only run that blocks when full, on a daemon with no disk tier) is listed by Stats,
// `adjsnap status` and `adjsnap runs` at once, with what it waits for; logged once it has
// waited wait_warn_after; and a client wait with a limit says what adjsnapd reports it waits for.
class WaitsTest : public AdjsnapTest, public ::testing::WithParamInterface<bool> {};

TEST_P(WaitsTest, AStuckPushIsListedLoggedAndItsTimedWaitSaysWhatItWaitsFor) {
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon(Options("1M", {"--spool-dirs", "none", "--wait-warn-after", "1"})));
  Client* c = Connect(/*map_host_tier=*/GetParam());
  ASSERT_NE(c, nullptr);
  constexpr uint64_t kStep = 256 << 10;
  RunSpec spec = Spec("stuck", 0, kStep);
  spec.layers = "Host";
  spec.block_when_full = true;
  spec.keep = true;
  RunInfo run = OpenRun(*c, spec);
  ASSERT_NE(run.run_id, 0u);
  std::vector<char> data(kStep, 7);
  for (uint64_t t = 0; t < 4; ++t) {  // the whole host tier
    auto p = c->Push(run.run_id, t, data.data(), kStep);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE(p->WaitStored().ok()) << t;
  }
  auto stuck = c->Push(run.run_id, 4, data.data(), kStep);
  ASSERT_TRUE(stuck.ok()) << stuck.status().ToString();

  v1::StatsResponse stats;
  ASSERT_TRUE(WaitUntil(
      [&] {
        stats = Stats();
        return stats.waiting_pushes() == 1;
      },
      std::chrono::seconds(1)))
      << stats.DebugString();
  ASSERT_EQ(stats.waits_size(), 1);
  const v1::Wait& w = stats.waits(0);
  EXPECT_EQ(w.kind(), "push");
  EXPECT_EQ(w.run(), "stuck");
  EXPECT_EQ(w.run_id(), run.run_id);
  EXPECT_EQ(w.step(), 4u);
  EXPECT_NE(w.waiting_for().find("host room for"), std::string::npos) << w.waiting_for();
  EXPECT_NE(w.waiting_for().find("deleted or consumed"), std::string::npos) << w.waiting_for();

  std::string out, err;
  ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon().socket(), "status"}, &out, &err), 0)
      << err;
  EXPECT_NE(out.find("waiting   1 push, 0 fetches"), std::string::npos) << out;
  EXPECT_NE(out.find("stuck"), std::string::npos) << out;
  ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon().socket(), "runs"}, &out, &err), 0)
      << err;
  EXPECT_NE(out.find("1p "), std::string::npos) << out;

  Status timed = stuck->WaitReleased(std::chrono::milliseconds(300));
  EXPECT_EQ(timed.code(), Code::kDeadlineExceeded) << timed.ToString();
  EXPECT_NE(timed.message().find("push of step 4 of run id " + std::to_string(run.run_id)),
            std::string::npos)
      << timed.ToString();
  EXPECT_NE(timed.message().find("adjsnapd reports it has waited"), std::string::npos)
      << timed.ToString();
  EXPECT_NE(timed.message().find("host room for"), std::string::npos) << timed.ToString();

  EXPECT_TRUE(WaitUntil(
      [&] { return daemon().Log().find("push of step 4 of run 'stuck'") != std::string::npos; },
      std::chrono::seconds(20)))
      << daemon().Log();
  EXPECT_NE(daemon().Log().find("has waited"), std::string::npos) << daemon().Log();

  // Room comes: the push goes on from where it waited, and nothing waits any more.
  ASSERT_TRUE(c->DeleteSnapshot("stuck", 0).ok());
  EXPECT_TRUE(stuck->WaitStored(std::chrono::seconds(30)).ok());
  EXPECT_EQ(Stats().waiting_pushes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Paths, WaitsTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "MappedHostTier" : "Ucx";
                         });

}  // namespace
}  // namespace adjsnap::testing
