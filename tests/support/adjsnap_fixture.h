// The fixture the integration and client suites share: a real adjsnapd in the test's own
// directory, clients connected to it and runs opened on them. Teardown lets the clients go
// first, as they would in a real shutdown, then checks that adjsnapd is still alive and answering
// (whatever the test threw at it), then stops it and expects a clean exit.
//
//   class WireTest : public AdjsnapTest {
//     void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M"))); }
//   };
//   TEST_F(WireTest, ...) { Client* c = Connect(); ASSERT_NE(c, nullptr); ... }
//
// A parameterized suite adds ::testing::WithParamInterface<T>. Not thread-safe: the helpers
// are for the test's own thread (a thread of the test may use a Client it was given).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "adjsnap/client.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "temp_dir.h"

namespace adjsnap::testing {

// A run spec with the fields most tests set; the rest are RunSpec's defaults.
RunSpec Spec(std::string name, uint64_t steps, uint64_t bytes_per_step);

// A real second user for tenancy tests: `name` as a system user (created with useradd if it
// does not exist; needs root). Its uid and gid, or nullopt with a failure saying why.
struct User {
  uint32_t uid = 0;
  uint32_t gid = 0;
};
std::optional<User> EnsureUser(const std::string& name);
// Runs tests/integration/tenant_probe.cc as `user` against `socket` with `args`; its
// "name=value" lines. A failure, with the probe's output, if it does not exit 0.
std::map<std::string, std::string> ProbeAs(const User& user, const std::string& socket,
                                           const std::vector<std::string>& args);

class AdjsnapTest : public ::testing::Test {
 protected:
  // Options for a daemon in this test's directory.
  DaemonOptions Options(std::string host_mem = "64M", std::vector<std::string> extra_args = {},
                        std::vector<std::string> wrapper = {}) const;
  // Starts adjsnapd (stopping the one already running first: clients released, clean exit
  // expected). A fatal failure naming why if it does not start: call it under
  // ASSERT_NO_FATAL_FAILURE.
  void StartDaemon(const DaemonOptions& options);
  // StartDaemon for a test that skips, rather than fails, when adjsnapd cannot start.
  Status TryStartDaemon(const DaemonOptions& options);
  // Releases the clients, then stops adjsnapd with SIGTERM and expects a clean exit (0).
  void StopDaemon();
  // Releases the clients, then kills adjsnapd with SIGKILL (a crash).
  void KillDaemon();
  bool has_daemon() const { return daemon_ != nullptr; }
  // The running daemon (after StartDaemon).
  DaemonProcess& daemon() { return *daemon_; }
  // The test's private directory: the daemon's socket and state live in it.
  const std::string& dir() const { return dir_.path(); }

  // A client of the running daemon, owned by the fixture until ReleaseClients or teardown.
  // `map_host_tier` false: the copied UCX path. Null, with a failure naming why, if it cannot
  // connect.
  Client* Connect(bool map_host_tier = true);
  // Opens `spec` on `client`. run_id 0, with a failure naming why, when it is refused.
  RunInfo OpenRun(Client& client, const RunSpec& spec);
  // Disconnects every client Connect made, and drops stub().
  void ReleaseClients();

  // A gRPC stub on the daemon's control socket, made on first use.
  v1::Control::Stub& stub();
  // Stats from the daemon (within 10 s; a failure with the daemon's log otherwise).
  v1::StatsResponse Stats();
  // Rejections the daemon counted (Stats.rejections, the source of adjsnap_rejections_total):
  // all of them, or one surface ("data_plane", "arena_socket", "control_plane") and reason
  // ("malformed", "wrong_token", ...); -1 when that pair is not reported at all.
  uint64_t RejectionsTotal();
  int64_t Rejections(const std::string& surface, const std::string& reason);
  // The daemon still serves a well-behaved client end to end: a fresh client opens a run,
  // pushes a step and fetches it back exactly.
  void ExpectRoundTrip();

  // Releases the clients; unless the test stopped it, checks the daemon is alive and
  // answering, then stops it and expects a clean exit. A fixture with clients of its own (raw
  // peers, threads) releases them first, then calls this.
  void TearDown() override;

 private:
  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::unique_ptr<v1::Control::Stub> stub_;
  int round_trips_ = 0;  // names ExpectRoundTrip's runs apart
};

}  // namespace adjsnap::testing
