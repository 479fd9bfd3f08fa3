// Many solvers on one node: clients with mixed step sizes (odd ones included), half on the
// mapped path and half over UCX, share a small host tier and an ample disk tier at once, and
// one is killed mid-run. No push may be refused while the disk has room, every byte comes back
// exact, and the dead client's session goes away. Bounded: well under a minute on 2 cores.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include "adjsnap/client.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

struct Solver {
  uint64_t bytes;
  uint64_t steps;
  bool mapped;
};

// Forward: push every step; backward: fetch in reverse and compare. Returns "" or what failed;
// counts refusals.
std::string RunSolver(const DaemonProcess& daemon, int id, const Solver& s,
                      std::atomic<int>* refused) {
  auto c = ConnectClient(daemon, s.mapped);
  if (!c.ok()) return c.status().ToString();
  RunSpec spec;
  spec.name = "solver-" + std::to_string(id);
  spec.steps = s.steps;
  spec.bytes_per_step = s.bytes;
  auto run = (*c)->OpenRun(spec);
  if (!run.ok()) return run.status().ToString();
  std::vector<char> in(s.bytes), out(s.bytes);
  for (uint64_t t = 0; t < s.steps; ++t) {
    FillPattern(in.data(), s.bytes, 100 + id, t);
    auto h = (*c)->Push(run->run_id, t, in.data(), s.bytes);
    Status stored = h.ok() ? h->WaitStored() : h.status();
    if (stored.code() == Code::kResourceExhausted) {
      ++*refused;
      return spec.name + " step " + std::to_string(t) + ": " + stored.ToString();
    }
    if (!stored.ok()) return stored.ToString();
  }
  for (uint64_t t = s.steps; t-- > 0;) {
    FillPattern(in.data(), s.bytes, 100 + id, t);
    Status f = (*c)->Fetch(run->run_id, t, out.data(), s.bytes);
    if (!f.ok()) return spec.name + " fetch " + std::to_string(t) + ": " + f.ToString();
    if (in != out) return spec.name + " step " + std::to_string(t) + " came back different";
  }
  return "";
}

// Starts tests/integration/push_until_killed (RUN of BYTES per step; BYTES "0": connect and
// idle; `mode` its fifth argument, "keep", "block" or "idle", or none) and returns its pid once
// it printed its first line, "pushed 0" (the run exists and a push is under way), "stored 0"
// (idle) or "connected"; that line goes to `first_line`. -1 if it could not start.
pid_t StartPushUntilKilled(const DaemonProcess& daemon, const char* run, const char* bytes,
                           const char* mode, std::string* first_line) {
  int out[2];
  if (pipe(out) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    execl(PUSH_UNTIL_KILLED_BINARY, PUSH_UNTIL_KILLED_BINARY, daemon.socket().c_str(), run, bytes,
          mode, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  first_line->clear();
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') first_line->push_back(c);
  close(out[0]);  // later lines go nowhere: the helper ignores SIGPIPE and goes on
  return pid;
}

class ManySolvers : public AdjsnapTest {};

TEST_F(ManySolvers, MixedStepSizesAreNeverRefusedWhileTheDiskHasRoomAndComeBackExact) {
  std::string spool = dir() + "/spool";
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("96M", {"--spool-dirs", spool, "--disk-mem", "4G"})));
  constexpr uint64_t kMiB = 1 << 20;
  const std::vector<Solver> solvers = {
      {1 * kMiB, 60, true},        {4 * kMiB, 30, false},  {16 * kMiB, 12, true},
      {3 * kMiB + 17, 30, false},  {24 * kMiB, 8, true},   {256 * 1024 + 8, 80, false},
      {5 * kMiB + 4096, 20, true}, {12 * kMiB, 10, false},
  };
  std::atomic<int> refused{0};
  std::vector<std::string> errors(solvers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < solvers.size(); ++i) {
    threads.emplace_back(
        [&, i] { errors[i] = RunSolver(daemon(), static_cast<int>(i), solvers[i], &refused); });
  }
  // One more client is killed mid-push, while the others run; its run and session must not
  // hold anyone up.
  std::string line;
  pid_t victim = StartPushUntilKilled(daemon(), "victim", "7340032", /*mode=*/nullptr, &line);
  ASSERT_GT(victim, 0);
  EXPECT_EQ(line, "pushed 0");
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < solvers.size(); ++i) EXPECT_EQ(errors[i], "") << "solver " << i;
  EXPECT_EQ(refused, 0) << daemon().Log();
}

// A client killed while idle (no traffic that would notice) loses its session, and with it its
// token, within 30 s (docs/operations.md; UCX's keepalive finds the dead peer).
TEST_F(ManySolvers, AKilledIdleClientsSessionCloses) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("32M")));
  auto sessions = [&] { return Stats().sessions(); };
  std::string line;
  pid_t idle = StartPushUntilKilled(daemon(), "idle", "0", /*mode=*/nullptr, &line);
  ASSERT_GT(idle, 0);
  EXPECT_EQ(line, "connected");
  EXPECT_EQ(sessions(), 1u);
  kill(idle, SIGKILL);
  waitpid(idle, nullptr, 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitUntil([&] { return sessions() == 0; }, std::chrono::seconds(30)))
      << daemon().Log();
  EXPECT_NE(daemon().Log().find("client disconnected"), std::string::npos);
  std::printf("a killed idle client's session closed after %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// A run that is not kept goes orphan_grace after every client that opened it died; a kept
// one, and one whose client is alive, stay.
TEST_F(ManySolvers, AKilledClientsRunIsRemovedAfterTheGraceUnlessKept) {
  std::string spool = dir() + "/spool";
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("32M", {"--spool-dirs", spool, "--disk-mem", "1G", "--orphan-grace", "2"})));
  std::string line;
  pid_t orphan = StartPushUntilKilled(daemon(), "orphan", "1048576", /*mode=*/nullptr, &line);
  EXPECT_EQ(line, "pushed 0");  // the run exists
  pid_t kept = StartPushUntilKilled(daemon(), "kept", "1048576", "keep", &line);
  EXPECT_EQ(line, "pushed 0");
  ASSERT_GT(orphan, 0);
  ASSERT_GT(kept, 0);
  Client* alive = Connect();
  ASSERT_NE(alive, nullptr);
  ASSERT_NE(OpenRun(*alive, Spec("alive", 0, 4096)).run_id, 0u);
  for (pid_t pid : {orphan, kept}) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  auto names = [&] {
    std::set<std::string> n;
    auto runs = alive->ListRuns();
    EXPECT_TRUE(runs.ok());
    if (runs.ok()) {
      for (const auto& r : *runs) n.insert(r.spec.name);
    }
    return n;
  };
  WaitUntil([&] { return names().count("orphan") == 0; }, std::chrono::seconds(20));
  EXPECT_EQ(names(), (std::set<std::string>{"alive", "kept"})) << daemon().Log();
  EXPECT_NE(daemon().Log().find("run 'orphan' removed"), std::string::npos) << daemon().Log();
}

// Across a restart, a run goes orphan_grace after its clients died unless one comes back: a
// client alive at the stop reconnects by itself (without a push or fetch) and attaches its
// runs again, so that its death still orphans them; one killed while adjsnapd was down never
// comes back. A run whose client closed cleanly stays. Without this, both runs of killed
// clients stayed for ever: the soak's disk filled with them.
TEST_F(ManySolvers, AfterARestartARunGoesWhenItsClientsDieUnlessClosedCleanly) {
  std::string spool = dir() + "/spool";
  const DaemonOptions options =
      Options("32M", {"--spool-dirs", spool, "--disk-mem", "1G", "--orphan-grace", "8"});
  ASSERT_NO_FATAL_FAILURE(StartDaemon(options));
  std::string line;
  pid_t back = StartPushUntilKilled(daemon(), "back", "65536", "idle", &line);
  ASSERT_GT(back, 0);
  ASSERT_EQ(line, "stored 0");
  pid_t gone = StartPushUntilKilled(daemon(), "gone", "65536", "idle", &line);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(line, "stored 0");
  {
    ClientOptions o;
    o.socket_path = daemon().socket();
    auto closed = Client::Connect(o);
    ASSERT_TRUE(closed.ok()) << closed.status().ToString();
    RunSpec spec = Spec("closed", 0, 4096);
    spec.keep = false;
    auto run = (*closed)->OpenRun(spec);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    std::vector<char> step(4096, 'c');
    auto pushed = (*closed)->Push(run->run_id, 0, step.data(), step.size());
    ASSERT_TRUE(pushed.ok() && pushed->WaitStored().ok());
  }  // closed cleanly: not an orphan
  StopDaemon();
  kill(gone, SIGKILL);  // dies while adjsnapd is down
  waitpid(gone, nullptr, 0);
  ASSERT_NO_FATAL_FAILURE(StartDaemon(options));
  EXPECT_NE(daemon().Log().find("2 runs had clients at the last stop"), std::string::npos)
      << daemon().Log();
  // `back` reconnects on its own: it neither pushes nor fetches.
  EXPECT_TRUE(WaitUntil([&] { return Stats().sessions() == 1; }, std::chrono::seconds(20)))
      << daemon().Log();
  Client* viewer = Connect();
  ASSERT_NE(viewer, nullptr);
  auto names = [&] {
    std::set<std::string> n;
    auto runs = viewer->ListRuns();
    EXPECT_TRUE(runs.ok());
    if (runs.ok()) {
      for (const auto& r : *runs) n.insert(r.spec.name);
    }
    return n;
  };
  EXPECT_TRUE(WaitUntil([&] { return names().count("gone") == 0; }, std::chrono::seconds(30)))
      << daemon().Log();
  EXPECT_EQ(names(), (std::set<std::string>{"back", "closed"})) << daemon().Log();
  kill(back, SIGKILL);
  waitpid(back, nullptr, 0);
  EXPECT_TRUE(WaitUntil([&] { return names().count("back") == 0; }, std::chrono::seconds(60)))
      << daemon().Log();
  EXPECT_EQ(names(), (std::set<std::string>{"closed"})) << daemon().Log();
}

}  // namespace
}  // namespace adjsnap::testing
