// snapd as a systemd service: the sd_notify protocol (READY, WATCHDOG, STOPPING) against a
// notification socket the test owns, as systemd would, and the unit file's verification.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "snapd/client.h"
#include "snapd/unix_socket.h"

namespace snapd::testing {
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

TEST(ServiceTest, NotifiesReadyPingsTheWatchdogAndSaysStopping) {
  TempDir dir;
  NotifySocket notify(dir.path() + "/notify");
  auto d = DaemonProcess::Start(
      {dir.path(), "64M", {}, {"/usr/bin/env", "NOTIFY_SOCKET=" + notify.path(),
                               "WATCHDOG_USEC=400000"}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::string ready = notify.WaitFor("READY=1", std::chrono::seconds(10));
  ASSERT_NE(ready, "") << (*d)->Log();
  EXPECT_NE(ready.find("MAINPID="), std::string::npos) << ready;
  EXPECT_NE(ready.find("STATUS=serving on " + (*d)->socket()), std::string::npos) << ready;
  // Half the watchdog interval: several pings in a second.
  int pings = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    if (notify.Next(std::chrono::milliseconds(300)) == "WATCHDOG=1") ++pings;
  }
  EXPECT_GE(pings, 3) << (*d)->Log();
  EXPECT_EQ((*d)->Stop(), 0);
  EXPECT_NE(notify.WaitFor("STOPPING=1", std::chrono::seconds(5)), "");
}

TEST(ServiceTest, WithoutNotifySocketSnapdRunsAsUsual) {
  TempDir dir;
  auto d = DaemonProcess::Start({dir.path(), "64M", {}, {"/usr/bin/env", "-u", "NOTIFY_SOCKET"}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto c = ConnectClient(**d);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*d)->Stop(), 0);
}

// The unit in deploy/systemd passes `systemd-analyze verify` (with ExecStart pointed at the
// binary just built, since verify checks that the program exists).
TEST(ServiceTest, TheSystemdUnitVerifies) {
  if (access("/usr/bin/systemd-analyze", X_OK) != 0) {
    GTEST_SKIP() << "systemd-analyze is not installed (deploy/install-deps.sh installs it)";
  }
  TempDir dir;
  std::string unit_src = std::string(SNAPD_SOURCE_DIR) + "/deploy/systemd/snapd.service";
  std::string out, err;
  std::string unit = dir.path() + "/snapd.service";
  ASSERT_EQ(RunProgram({"/bin/sh", "-c",
                        "sed 's|^ExecStart=/usr/local/sbin/snapd|ExecStart=" SNAPD_BINARY "|' " +
                            unit_src + " > " + unit},
                       &out, &err),
            0)
      << err;
  int rc = RunProgram({"/usr/bin/systemd-analyze", "verify", "--man=no", unit}, &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  // Everything it printed is a finding; a clean unit prints nothing about itself.
  EXPECT_EQ((out + err).find("snapd.service"), std::string::npos) << out << err;
}

}  // namespace
}  // namespace snapd::testing

namespace snapd::testing {
namespace {

// The metrics file node_exporter's textfile collector reads: written at start, replaced every
// metrics_interval with the current figures, in the Prometheus text format.
TEST(ServiceTest, TheMetricsFileFollowsWhatSnapdDoes) {
  TempDir dir;
  std::string prom = dir.path() + "/snapd.prom";
  auto d = DaemonProcess::Start(
      {dir.path(), "64M", {"--metrics-textfile", prom, "--metrics-interval", "1"}, {}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto read = [&] {
    std::ifstream in(prom);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  EXPECT_NE(read().find("snapd_pushes_total 0\n"), std::string::npos) << read();
  auto c = ConnectClient(**d);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RunSpec spec;
  spec.name = "counted";
  spec.bytes_per_step = 1 << 20;
  spec.keep = true;
  auto run = (*c)->OpenRun(spec);
  ASSERT_TRUE(run.ok());
  std::vector<char> step(1 << 20, 'c');
  for (uint64_t t = 0; t < 3; ++t) {
    auto h = (*c)->Push(run->run_id, t, step.data(), step.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  WaitUntil([&] { return read().find("snapd_pushes_total 3\n") != std::string::npos; },
            std::chrono::seconds(10));
  std::string text = read();
  EXPECT_NE(text.find("snapd_pushes_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("snapd_sessions 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("snapd_tier_used_bytes{tier=\"host\"} 3145728\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE snapd_spill_bytes_total counter\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(dir.path()), std::string::npos) << "no paths in the metrics";
  EXPECT_EQ((*d)->Stop(), 0) << (*d)->Log();
}

}  // namespace
}  // namespace snapd::testing
