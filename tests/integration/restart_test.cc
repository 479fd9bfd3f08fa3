// A clean stop loses nothing: SIGTERM writes the host-only steps to disk (the drain) or hands
// the host tier's memfd to systemd's fd store, and the next start serves every step
// byte-exact. The fd store is exercised with the real protocol: a notification socket the
// test owns receives FDSTORE=1 with the memfd (SCM_RIGHTS), and the next adjsnapd gets it back as
// systemd passes it (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES, fd 3). Only the round trip
// through a real systemd needs one as PID 1, and skips, saying so, elsewhere.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

constexpr size_t kStep = (1 << 20) + 40;

void PushSteps(Client& c, uint64_t run_id, uint64_t end, uint64_t seed) {
  std::vector<char> buf(kStep);
  for (uint64_t t = 0; t < end; ++t) {
    FillPattern(buf.data(), kStep, seed, t);
    auto h = c.Push(run_id, t, buf.data(), kStep);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(h->WaitStored().ok()) << h->WaitStored().ToString();
  }
}

Status FetchExact(Client& c, uint64_t run_id, uint64_t step, uint64_t seed) {
  std::vector<char> got(kStep), want(kStep);
  ADJSNAP_RETURN_IF_ERROR(c.Fetch(run_id, step, got.data(), kStep));
  FillPattern(want.data(), kStep, seed, step);
  if (got != want) return Status::DataLoss("step " + std::to_string(step) + " differs");
  return Status::Ok();
}

uint64_t HostOnlySteps(Client& c, const std::string& run) {
  auto list = c.ListSnapshots(run);
  EXPECT_TRUE(list.ok());
  uint64_t host = 0;
  for (const auto& l : *list) host += !l.on_disk && l.tier == Tier::kHost;
  return host;
}

// Waits (up to 30 s) until every step below the run's host boundary is on disk: the
// placement's own demotions are then done, so the steps still only in host memory are the
// ones a stop has to write. Returns false on the deadline.
bool WaitForPlacement(Client& c, const std::string& run, uint64_t host_boundary) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto list = c.ListSnapshots(run);
    if (!list.ok()) return false;
    bool placed = true;
    for (const auto& l : *list) placed = placed && (l.step >= host_boundary || l.on_disk);
    if (placed) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string ReadLog(const std::string& dir) {
  std::ifstream in(dir + "/adjsnapd.log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A datagram socket standing in for systemd's $NOTIFY_SOCKET that also takes the fds sent
// with a message (FDSTORE=1), as systemd does.
class FdStoreSocket {
 public:
  explicit FdStoreSocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr;
    EXPECT_TRUE(UnixAddress(path, &addr).ok());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  }
  ~FdStoreSocket() {
    close(fd_);
    for (auto& [name, fd] : stores_) close(fd);
  }
  // Reads messages until one says FDSTORE=1 (true; its text and fd kept), and then every
  // further FDSTORE=1 already sent (one per arena), or until `timeout` passes.
  bool WaitForStore(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, stores_.empty() ? 100 : 0) != 1) {
        if (!stores_.empty()) return true;  // the stop sent them all before it exited
        continue;
      }
      char buf[4096];
      iovec iov{buf, sizeof buf};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
      if (n <= 0) continue;
      std::string text(buf, static_cast<size_t>(n));
      int fd = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
        }
      }
      if (text.find("FDSTORE=1") == std::string::npos) {
        if (fd >= 0) close(fd);
        continue;
      }
      text_ += text + "\n";
      size_t name = text.find("FDNAME=");
      stores_.emplace_back(
          name == std::string::npos ? "" : text.substr(name + 7, text.find('\n', name) - name - 7),
          fd);
    }
    return !stores_.empty();
  }
  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }
  // The first fd stored (-1: none), and every (FDNAME, fd) in the order they came.
  int stored() const { return stores_.empty() ? -1 : stores_.front().second; }
  const std::vector<std::pair<std::string, int>>& stores() const { return stores_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string text_;
  std::vector<std::pair<std::string, int>> stores_;
};

class RestartTest : public AdjsnapTest {
 protected:
  // Starts adjsnapd under `notify` (as systemd with an fd store would: $NOTIFY_SOCKET, $FDSTORE),
  // pushes `steps` steps of a kept run `name` with `seed`, stops adjsnapd and waits for the memfd
  // it hands over. Call under ASSERT_NO_FATAL_FAILURE.
  void StopWithAKeptRun(FdStoreSocket& notify, const std::string& host_mem,
                        const std::vector<std::string>& args, const std::string& name,
                        uint64_t steps, uint64_t seed, RunInfo* run) {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(
        Options(host_mem, args, {"/usr/bin/env", "NOTIFY_SOCKET=" + notify.path(), "FDSTORE=4"})));
    Client* c = Connect();
    ASSERT_NE(c, nullptr);
    RunSpec spec = Spec(name, steps, kStep);
    spec.keep = true;
    *run = OpenRun(*c, spec);
    ASSERT_NO_FATAL_FAILURE(PushSteps(*c, run->run_id, steps, seed));
    EXPECT_EQ(HostOnlySteps(*c, name), steps);
    StopDaemon();
    ASSERT_TRUE(notify.WaitForStore(std::chrono::seconds(5))) << ReadLog(dir());
    ASSERT_GE(notify.stored(), 0) << "FDSTORE=1 came without an fd";
  }
  // Starts adjsnapd given back the memfds `notify` kept, as systemd passes them: fd 3 on,
  // LISTEN_PID = adjsnapd's pid (the shell execs adjsnapd in place), LISTEN_FDS, LISTEN_FDNAMES.
  // `every_arena`: each fd stored, under the name it was stored with; else the first alone, as
  // "hosttier" (the name of an earlier adjsnapd's one arena).
  Status StartWithTheKeptTier(const FdStoreSocket& notify, const std::string& host_mem,
                              const std::vector<std::string>& args, bool every_arena = false) {
    std::vector<std::pair<std::string, int>> stores = notify.stores();
    if (!every_arena) stores = {{"hosttier", notify.stored()}};
    std::string names, redirects, closes;
    std::vector<int> passed;
    for (size_t i = 0; i < stores.size(); ++i) {
      // Inherited (no close-on-exec), above the 3.. the daemon gets them as.
      int fd = fcntl(stores[i].second, F_DUPFD, static_cast<int>(3 + stores.size()));
      if (fd < 0) {
        for (int p : passed) close(p);
        return Status::Internal(std::string("no fd to pass the memfd on: ") + strerror(errno));
      }
      passed.push_back(fd);
      names += (i ? ":" : "") + stores[i].first;
      redirects += " " + std::to_string(3 + i) + "<&" + std::to_string(fd);
      closes += " " + std::to_string(fd) + "<&-";
    }
    Status started = TryStartDaemon(
        Options(host_mem, args,
                {"/bin/bash", "-c",  // bash: fds above 9 in redirections
                 "export LISTEN_PID=$$ LISTEN_FDS=" + std::to_string(stores.size()) +
                     " LISTEN_FDNAMES=" + names + "; exec \"$@\"" + redirects + closes,
                 "bash"}));
    for (int p : passed) close(p);
    return started;
  }
};

// The operator's case: a kept run half in host memory, SIGTERM, start again: every step is
// served byte-exact from disk, none lost.
TEST_F(RestartTest, StopWritesHostStepsToDiskAndTheRestartServesEveryStepExact) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("24M")));
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec = Spec("kept", 40, kStep);
  spec.keep = true;
  RunInfo run = OpenRun(*c, spec);
  ASSERT_NE(run.run_id, 0u);
  ASSERT_NO_FATAL_FAILURE(PushSteps(*c, run.run_id, 40, 5));
  // Counted once the demotions the placement wants are done: one finishing between the count
  // and the stop would leave the stop one step fewer to write than counted.
  ASSERT_GT(run.host_boundary, 0u);  // 40 steps do not fit in 24 MiB: the oldest go to disk
  ASSERT_TRUE(WaitForPlacement(*c, "kept", run.host_boundary));
  uint64_t in_host = HostOnlySteps(*c, "kept");
  EXPECT_GE(in_host, 15u);  // 24 MiB hold about 20 of the 40 steps
  StopDaemon();             // SIGTERM; a clean exit expected
  std::string log = ReadLog(dir());
  EXPECT_NE(log.find("wrote to disk " + std::to_string(in_host) + " host-only steps"),
            std::string::npos)
      << log;

  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("24M")));
  c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(HostOnlySteps(*c, "kept"), 0u);
  for (uint64_t t = 0; t < 40; ++t) {
    Status s = FetchExact(*c, run.run_id, t, 5);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(Stats().lost_snapshots(), 0u);
}

// Without a disk tier there is nowhere to drain to: the stop names every step it could not
// keep, and the restart reports them lost, never wrong.
TEST_F(RestartTest, StopWithoutADiskTierNamesTheStepsItLoses) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M", {"--spool-dirs", "none"})));
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec = Spec("nowhere", 3, kStep);
  spec.keep = true;
  RunInfo run = OpenRun(*c, spec);
  ASSERT_NO_FATAL_FAILURE(PushSteps(*c, run.run_id, 3, 9));
  StopDaemon();
  std::string log = ReadLog(dir());
  for (int t = 0; t < 3; ++t) {
    EXPECT_NE(log.find("step " + std::to_string(t) +
                       " of run 'nowhere' is lost: it was still only in host memory when "
                       "adjsnapd stopped"),
              std::string::npos)
        << log;
  }
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M", {"--spool-dirs", "none"})));
  c = Connect();
  ASSERT_NE(c, nullptr);
  std::vector<char> buf(kStep);
  EXPECT_EQ(c->Fetch(run.run_id, 1, buf.data(), kStep).code(), Code::kDataLoss);
}

// The fd store: the stop sends the memfd with FDSTORE=1 and FDNAME=hosttier and writes nothing
// to disk; the next start, given the memfd as systemd gives it, serves the steps from the
// same memory after checking each one's checksum. A step whose bytes changed meanwhile is
// reported lost; the others are exact.
TEST_F(RestartTest, TheHostTierKeptInTheFdStoreIsTakenBackAndChecked) {
  FdStoreSocket notify(dir() + "/notify.sock");
  RunInfo run;
  ASSERT_NO_FATAL_FAILURE(StopWithAKeptRun(notify, "64M", {}, "in-place", 10, 11, &run));
  EXPECT_NE(notify.text().find("FDNAME=hosttier"), std::string::npos) << notify.text();
  // fdstore "auto": written to disk first, then kept in place too.
  EXPECT_NE(ReadLog(dir()).find("wrote to disk 10 host-only steps"), std::string::npos)
      << ReadLog(dir());
  EXPECT_NE(ReadLog(dir()).find("kept in systemd's fd store 10 host-tier steps"), std::string::npos)
      << ReadLog(dir());
  EXPECT_NE(ReadLog(dir()).find("0 of them on no disk"), std::string::npos) << ReadLog(dir());

  // Step 0 lies at the bottom of the tier (first fit): one changed byte there.
  char flipped = 0;
  ASSERT_EQ(pread(notify.stored(), &flipped, 1, 100), 1);
  flipped = static_cast<char>(~flipped);
  ASSERT_EQ(pwrite(notify.stored(), &flipped, 1, 100), 1);

  Status started = StartWithTheKeptTier(notify, "64M", {});
  ASSERT_TRUE(started.ok()) << started.ToString();
  std::string log = ReadLog(dir());
  EXPECT_NE(log.find("took back the host tier from systemd's fd store"), std::string::npos) << log;
  EXPECT_NE(log.find("took back 9 host-tier snapshots"), std::string::npos) << log;
  // The changed copy is never served: its spool file is.
  EXPECT_NE(log.find("step 0 of run 'in-place' is served from its spool file, not from its host "
                     "copy (its bytes in the kept host tier fail their checksum)"),
            std::string::npos)
      << log;
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  auto where = c->Locate("in-place", 5);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(where->tier, Tier::kHost);  // in place, and on disk too
  EXPECT_TRUE(where->on_disk);
  where = c->Locate("in-place", 0);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(where->tier, Tier::kDisk);
  for (uint64_t t = 0; t < 10; ++t) {
    Status s = FetchExact(*c, run.run_id, t, 11);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// fdstore "only": the memfd is handed over and nothing is written (a restart copies nothing);
// the steps then live only there, in place.
TEST_F(RestartTest, WithFdstoreOnlyNothingIsWrittenAndTheTierIsTakenBackInPlace) {
  FdStoreSocket notify(dir() + "/notify.sock");
  RunInfo run;
  ASSERT_NO_FATAL_FAILURE(
      StopWithAKeptRun(notify, "64M", {"--fdstore", "only"}, "only", 4, 17, &run));
  std::string log = ReadLog(dir());
  EXPECT_EQ(log.find("wrote to disk"), std::string::npos) << log;
  EXPECT_NE(log.find("kept in systemd's fd store 4 host-tier steps"), std::string::npos) << log;
  EXPECT_NE(log.find("4 of them on no disk"), std::string::npos) << log;
  Status started = StartWithTheKeptTier(notify, "64M", {"--fdstore", "only"});
  ASSERT_TRUE(started.ok()) << started.ToString();
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  for (uint64_t t = 0; t < 4; ++t) {
    auto where = c->Locate("only", t);
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    EXPECT_EQ(where->tier, Tier::kHost);
    EXPECT_FALSE(where->on_disk) << "step " << t;
    Status s = FetchExact(*c, run.run_id, t, 17);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// Three users' arenas through the fd store: root's solver and two ordinary users each keep a
// run in the host tier only (fdstore "only": nothing on disk); the stop hands each arena to the
// fd store under its own name, the next start takes all three back, and every user's steps
// are served exact from its own arena, which holds no other user's bytes.
TEST_F(RestartTest, EveryUsersArenaGoesThroughTheFdStoreAndComesBackExact) {
  if (geteuid() != 0) GTEST_SKIP() << "runs clients as two more users: needs root";
  std::vector<User> users;
  for (const char* name : {"adjsnap-tenant-b", "adjsnap-tenant-c"}) {
    std::optional<User> u = EnsureUser(name);
    ASSERT_TRUE(u.has_value());
    users.push_back(*u);
  }
  ASSERT_EQ(chmod(dir().c_str(), 0711), 0);  // the users reach the socket inside
  FdStoreSocket notify(dir() + "/notify.sock");
  const std::vector<std::string> args = {"--fdstore", "only"};
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("64M", args, {"/usr/bin/env", "NOTIFY_SOCKET=" + notify.path(), "FDSTORE=16"})));
  constexpr uint64_t kSteps = 4;
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec = Spec("root-run", kSteps, kStep);
  spec.keep = true;
  RunInfo run = OpenRun(*c, spec);
  ASSERT_NO_FATAL_FAILURE(PushSteps(*c, run.run_id, kSteps, 31));
  for (size_t i = 0; i < users.size(); ++i) {
    auto f = ProbeAs(users[i], daemon().socket(),
                     {"keep", "user-run", std::to_string(kSteps), std::to_string(kStep),
                      std::to_string(40 + i)});
    EXPECT_EQ(f["mapped"], "1");
    EXPECT_EQ(f["stored"], std::to_string(kSteps));
  }
  StopDaemon();
  ASSERT_TRUE(notify.WaitForStore(std::chrono::seconds(5))) << ReadLog(dir());
  std::vector<std::string> names;
  for (const auto& [name, fd] : notify.stores()) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::vector<std::string> want = {"hosttier-" + std::to_string(geteuid()),
                                   "hosttier-" + std::to_string(users[0].uid),
                                   "hosttier-" + std::to_string(users[1].uid)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want) << notify.text();
  EXPECT_NE(ReadLog(dir()).find("kept in systemd's fd store 12 host-tier steps"), std::string::npos)
      << ReadLog(dir());

  Status started = StartWithTheKeptTier(notify, "64M", args, /*every_arena=*/true);
  ASSERT_TRUE(started.ok()) << started.ToString();
  std::string log = ReadLog(dir());
  EXPECT_NE(log.find("took back the host tier from systemd's fd store (3 arenas"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("took back 12 host-tier snapshots"), std::string::npos) << log;
  c = Connect();
  ASSERT_NE(c, nullptr);
  for (uint64_t t = 0; t < kSteps; ++t) {
    Status s = FetchExact(*c, run.run_id, t, 31);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (size_t i = 0; i < users.size(); ++i) {
    auto f = ProbeAs(users[i], daemon().socket(),
                     {"verify", "user-run", std::to_string(kSteps), std::to_string(kStep),
                      std::to_string(40 + i)});
    EXPECT_EQ(f["created"], "0");  // its kept run, not a new one
    EXPECT_EQ(f["exact"], std::to_string(kSteps)) << log;
    // Its arena, taken back, holds its own steps and none of root's or the other user's.
    auto seen = [&](uint64_t seed) {
      return ProbeAs(users[i], daemon().socket(),
                     {"scan", std::to_string(kSteps), std::to_string(kStep),
                      std::to_string(seed)})["victim_pages"];
    };
    EXPECT_NE(seen(40 + i), "0");  // the scan finds what is there
    EXPECT_EQ(seen(31), "0");
    EXPECT_EQ(seen(40 + (1 - i)), "0");
  }
  EXPECT_EQ(Stats().lost_snapshots(), 0u);
}

// A start that is not given back the memfd the last stop handed over (systemd flushed its fd
// store on `systemctl stop`, the node rebooted, or adjsnapd was started by hand): with fdstore
// "auto" the stop wrote every step to disk as well, and they are served from there, exact.
TEST_F(RestartTest, AFlushedFdStoreLosesNothingTheStopWroteToDisk) {
  FdStoreSocket notify(dir() + "/notify.sock");
  RunInfo run;
  ASSERT_NO_FATAL_FAILURE(StopWithAKeptRun(notify, "16M", {}, "flushed", 3, 5, &run));
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
  EXPECT_EQ(ReadLog(dir()).find("is lost"), std::string::npos) << ReadLog(dir());
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  for (uint64_t t = 0; t < 3; ++t) {
    Status s = FetchExact(*c, run.run_id, t, 5);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  auto runs = c->ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].lost_snapshots, 0u);
  EXPECT_EQ((*runs)[0].failure, "");
}

// With fdstore "only" nothing is on disk: a start not given the memfd back reports those
// steps lost and says why.
TEST_F(RestartTest, AnFdStoreThatDidNotPassTheTierBackIsReportedNotSilent) {
  FdStoreSocket notify(dir() + "/notify.sock");
  RunInfo run;
  ASSERT_NO_FATAL_FAILURE(
      StopWithAKeptRun(notify, "16M", {"--fdstore", "only"}, "dropped", 2, 3, &run));
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
  EXPECT_NE(ReadLog(dir()).find("was in the host tier handed to systemd's fd store, which did "
                                "not pass it back"),
            std::string::npos)
      << ReadLog(dir());
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  std::vector<char> buf(kStep);
  EXPECT_EQ(c->Fetch(run.run_id, 1, buf.data(), kStep).code(), Code::kDataLoss);
}

// A solver pushing in a loop while adjsnapd restarts: its pushes wait for the new daemon and are
// sent again; the run finishes byte-exact and no call returns an error.
TEST_F(RestartTest, AClientPushingThroughARestartFinishesItsRunExact) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  auto client = ConnectClient(daemon());  // the test's own: it outlives the daemon
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Client& c = **client;
  RunSpec spec = Spec("through", 40, kStep);
  spec.keep = true;
  auto run = c.OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::atomic<uint64_t> pushed{0};
  std::vector<std::string> errors;
  std::thread solver([&] {
    std::vector<char> buf(kStep);
    for (uint64_t t = 0; t < 40; ++t) {
      FillPattern(buf.data(), kStep, 21, t);
      auto h = c.Push(run->run_id, t, buf.data(), kStep);
      Status s = h.ok() ? h->WaitStored() : h.status();
      if (!s.ok()) errors.push_back("step " + std::to_string(t) + ": " + s.ToString());
      pushed = t + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
  });
  ASSERT_TRUE(WaitUntil([&] { return pushed >= 8; }, std::chrono::seconds(30)));
  StopDaemon();  // SIGTERM while the solver pushes; the host steps go to disk
  uint64_t at_stop = pushed;
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  solver.join();
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_LT(at_stop, 40u) << "the run ended before the restart: the test proves nothing";
  for (uint64_t t = 0; t < 40; ++t) {
    Status s = FetchExact(c, run->run_id, t, 21);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(Stats().lost_snapshots(), 0u);
}

// adjsnapd killed and started again at once: the client's next control call can reach the new
// adjsnapd before its data plane notices that the old one went, and names a session the new one
// never opened. adjsnapd answers UNAUTHENTICATED and libadjsnap opens a new session and calls again,
// so the solver's OpenRun succeeds (it failed NOT_FOUND "session N is not open"; the soak
// found it).
TEST_F(RestartTest, AControlCallRightAfterARestartOpensANewSessionAndSucceeds) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
  auto client = ConnectClient(daemon());  // the test's own: it outlives the daemon
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Client& c = **client;
  for (int round = 0; round < 3; ++round) {
    KillDaemon();
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
    RunSpec spec = Spec("after-" + std::to_string(round), 2, kStep);
    auto run = c.OpenRun(spec);
    ASSERT_TRUE(run.ok()) << "round " << round << ": " << run.status().ToString();
    std::vector<char> buf(kStep);
    for (uint64_t t = 0; t < 2; ++t) {
      FillPattern(buf.data(), kStep, 5, t);
      auto h = c.Push(run->run_id, t, buf.data(), kStep);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      ASSERT_TRUE(h->WaitStored().ok()) << h->WaitStored().ToString();
    }
    for (uint64_t t = 2; t-- > 0;) ASSERT_TRUE(FetchExact(c, run->run_id, t, 5).ok());
  }
}

// Control calls keep coming on a connection accepted before the stop: each asks the control
// socket's listener who is calling. The stop closes the listener to new connections first and
// the server last, so a call in between found the listener destroyed (a use after free: the
// soak's stop died with SIGSEGV in ControlService::Caller). Now the stop exits 0 whatever
// calls arrive (and under AddressSanitizer, nothing touches freed memory).
TEST_F(RestartTest, ControlCallsArrivingThroughoutAStopFindTheirCallerAndTheStopExitsCleanly) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
  auto channel =
      grpc::CreateChannel("unix:" + daemon().socket(), grpc::InsecureChannelCredentials());
  auto stub = v1::Control::NewStub(channel);
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      while (!stop) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
        v1::ListRunsResponse resp;
        if (stub->ListRuns(&ctx, v1::ListRunsRequest(), &resp).ok()) ++answered;
      }
    });
  }
  while (answered < 100) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  StopDaemon();  // SIGTERM; a clean exit (0) expected
  stop = true;
  for (auto& c : callers) c.join();
  EXPECT_GE(answered.load(), 100);
}

// A daemon that does not come back within the client's reconnect timeout: the push fails
// with UNAVAILABLE naming the socket, after about that long.
TEST_F(RestartTest, PastTheReconnectTimeoutAPushFailsNamingTheSocket) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("16M")));
  ClientOptions o;
  o.socket_path = daemon().socket();
  o.reconnect_timeout_s = 1;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  RunSpec spec = Spec("gone", 4, kStep);
  auto run = (*client)->OpenRun(spec);
  ASSERT_TRUE(run.ok());
  std::string socket = daemon().socket();
  StopDaemon();
  std::vector<char> buf(kStep);
  auto t0 = std::chrono::steady_clock::now();
  auto h = (*client)->Push(run->run_id, 0, buf.data(), kStep);
  Status s = h.ok() ? h->WaitStored() : h.status();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(socket), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("did not come back within 1 s"), std::string::npos) << s.message();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 10.0);
}

// The same round trip through a real systemd: a transient unit with an fd store, restarted
// with `systemctl restart`. Needs systemd as PID 1 (254 or later, for $FDSTORE) and root.
TEST_F(RestartTest, SystemctlRestartKeepsTheHostTierThroughARealFdStore) {
  std::ifstream comm("/proc/1/comm");
  std::string init;
  std::getline(comm, init);
  if (init != "systemd") {
    GTEST_SKIP() << "PID 1 is '" << init
                 << "', not systemd: the fd store round trip through systemd cannot run here "
                    "(TheHostTierKeptInTheFdStoreIsTakenBackAndChecked covers the protocol)";
  }
  if (geteuid() != 0) GTEST_SKIP() << "starting a transient systemd unit needs root";
  {
    std::string version, err;
    RunProgram({"/usr/bin/systemctl", "--version"}, &version, &err);
    int major = 0;  // "systemd 252 (252.30-1~deb12u2)"
    if (std::sscanf(version.c_str(), "systemd %d", &major) != 1 || major < 254) {
      GTEST_SKIP() << "systemd " << major << " sets no $FDSTORE (254 or later does): "
                   << "TheHostTierKeptInTheFdStoreIsTakenBackAndChecked covers the protocol";
    }
  }
  std::string unit = "adjsnap-restart-test-" + std::to_string(getpid());
  std::string socket = dir() + "/adjsnap.sock";
  std::string out, err;
  ASSERT_EQ(
      RunProgram({"/usr/bin/systemd-run", "--unit", unit, "-p", "Type=notify", "-p",
                  "NotifyAccess=main", "-p", "FileDescriptorStoreMax=4", "-p",
                  "FileDescriptorStorePreserve=yes", "--setenv=UCX_NET_DEVICES=lo", ADJSNAPD_BINARY,
                  "--socket", socket, "--state-dir", dir() + "/state", "--host-mem", "64M"},
                 &out, &err),
      0)
      << err;
  auto stop_unit = [&] {
    RunProgram({"/usr/bin/systemctl", "stop", unit}, &out, &err);
    RunProgram({"/usr/bin/systemctl", "clean", "--what=fdstore", unit}, &out, &err);
  };
  ClientOptions o;
  o.socket_path = socket;
  auto client = Client::Connect(o);
  if (!client.ok()) {
    stop_unit();
    FAIL() << client.status().ToString();
  }
  RunSpec spec = Spec("systemd", 4, kStep);
  spec.keep = true;
  auto run = (*client)->OpenRun(spec);
  ASSERT_TRUE(run.ok());
  ASSERT_NO_FATAL_FAILURE(PushSteps(**client, run->run_id, 4, 13));
  client->reset();
  ASSERT_EQ(RunProgram({"/usr/bin/systemctl", "restart", unit}, &out, &err), 0) << err;
  client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto where = (*client)->Locate("systemd", 2);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tier, Tier::kHost);
  for (uint64_t t = 0; t < 4; ++t) EXPECT_TRUE(FetchExact(**client, run->run_id, t, 13).ok());
  client->reset();
  stop_unit();
}

}  // namespace
}  // namespace adjsnap::testing
