// adjsnapd as a systemd service: the sd_notify protocol (READY, WATCHDOG, STOPPING) against a
// notification socket the test owns, as systemd would, and the unit file's verification.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

// A datagram socket standing in for systemd's $NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr;
    EXPECT_TRUE(UnixAddress(path, &addr).ok());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
  }
  ~NotifySocket() { close(fd_); }
  // The next message, or "" after `timeout`.
  std::string Next(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return "";
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  // Messages until one contains `what` (returned), or "" after `timeout` in all.
  std::string WaitFor(const std::string& what, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::string m = Next(std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now()));
      if (m.find(what) != std::string::npos) return m;
    }
    return "";
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// adjsnapd under the wrappers that stand in for systemd.
class ServiceTest : public AdjsnapTest {};

TEST_F(ServiceTest, NotifiesReadyPingsTheWatchdogAndSaysStopping) {
  NotifySocket notify(dir() + "/notify");
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options(
      "64M", {}, {"/usr/bin/env", "NOTIFY_SOCKET=" + notify.path(), "WATCHDOG_USEC=400000"})));
  std::string ready = notify.WaitFor("READY=1", std::chrono::seconds(10));
  ASSERT_NE(ready, "") << daemon().Log();
  EXPECT_NE(ready.find("MAINPID="), std::string::npos) << ready;
  EXPECT_NE(ready.find("STATUS=serving on " + daemon().socket()), std::string::npos) << ready;
  // Pings keep coming (every half interval): three of them, polled with a generous deadline
  // rather than counted in a fixed window a loaded machine may not give it.
  int pings = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pings < 3 && std::chrono::steady_clock::now() < deadline) {
    if (notify.Next(std::chrono::milliseconds(1000)) == "WATCHDOG=1") ++pings;
  }
  EXPECT_EQ(pings, 3) << daemon().Log();
  StopDaemon();
  EXPECT_NE(notify.WaitFor("STOPPING=1", std::chrono::seconds(5)), "");
}

TEST_F(ServiceTest, WithoutNotifySocketAdjsnapdRunsAsUsual) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M", {}, {"/usr/bin/env", "-u", "NOTIFY_SOCKET"})));
  EXPECT_NE(Connect(), nullptr);
}

// The unit in deploy/systemd passes `systemd-analyze verify` (with ExecStart pointed at the
// binary just built, since verify checks that the program exists).
TEST_F(ServiceTest, TheSystemdUnitVerifies) {
  if (access("/usr/bin/systemd-analyze", X_OK) != 0) {
    GTEST_SKIP() << "systemd-analyze is not installed (deploy/install-deps.sh installs it)";
  }
  std::string unit_src = std::string(ADJSNAP_SOURCE_DIR) + "/deploy/systemd/adjsnap.service";
  std::string out, err;
  std::string unit = dir() + "/adjsnap.service";
  ASSERT_EQ(RunProgram({"/bin/sh", "-c",
                        "sed 's|^ExecStart=/usr/local/sbin/adjsnapd|ExecStart=" ADJSNAPD_BINARY "|' " +
                            unit_src + " > " + unit},
                       &out, &err),
            0)
      << err;
  int rc = RunProgram({"/usr/bin/systemd-analyze", "verify", "--man=no", unit}, &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  // Everything it printed is a finding; a clean unit prints nothing about itself.
  EXPECT_EQ((out + err).find("adjsnap.service"), std::string::npos) << out << err;
}

}  // namespace
}  // namespace adjsnap::testing

namespace adjsnap::testing {
namespace {

// The metrics file node_exporter's textfile collector reads: written at start, replaced every
// metrics_interval with the current figures, in the Prometheus text format.
// Each of adjsnapd's own threads carries its role's name ("adjsnap-<role>", docs/architecture.md
// "Threads"), which is what `top -H`, `ps -L`, perf and gdb show an operator.
TEST_F(ServiceTest, AdjsnapdsThreadsAreNamedForTheirRoles) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  ASSERT_NE(Connect(), nullptr);
  std::multiset<std::string> names;
  const std::string tasks = "/proc/" + std::to_string(daemon().pid()) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  std::string all;
  for (const std::string& n : names) all += n + " ";
  for (const char* role :
       {"adjsnap-dplane", "adjsnap-sweeper", "adjsnap-tiering", "adjsnap-io", "adjsnap-cksum",
        "adjsnap-catalog", "adjsnap-arena", "adjsnap-control", "adjsnap-vetting"}) {
    EXPECT_TRUE(names.count(role)) << role << " is not among adjsnapd's threads: " << all;
  }
}

TEST_F(ServiceTest, TheMetricsFileFollowsWhatAdjsnapdDoes) {
  std::string prom = dir() + "/adjsnap.prom";
  ASSERT_NO_FATAL_FAILURE(
      StartDaemon(Options("64M", {"--metrics-textfile", prom, "--metrics-interval", "1"})));
  auto read = [&] {
    std::ifstream in(prom);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  EXPECT_NE(read().find("adjsnap_pushes_total 0\n"), std::string::npos) << read();
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec = Spec("counted", 0, 1 << 20);
  spec.keep = true;
  RunInfo run = OpenRun(*c, spec);
  ASSERT_NE(run.run_id, 0u);
  std::vector<char> step(1 << 20, 'c');
  for (uint64_t t = 0; t < 3; ++t) {
    auto h = c->Push(run.run_id, t, step.data(), step.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  WaitUntil([&] { return read().find("adjsnap_pushes_total 3\n") != std::string::npos; },
            std::chrono::seconds(10));
  std::string text = read();
  EXPECT_NE(text.find("adjsnap_pushes_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("adjsnap_sessions 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("adjsnap_tier_used_bytes{tier=\"host\"} 3145728\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE adjsnap_spill_bytes_total counter\n"), std::string::npos) << text;
  EXPECT_NE(
      text.find("adjsnap_rejections_total{surface=\"data_plane\",reason=\"unknown_am_id\"} 0\n"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find(dir()), std::string::npos) << "no paths in the metrics";
}

}  // namespace
}  // namespace adjsnap::testing
