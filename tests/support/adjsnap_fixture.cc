#include "adjsnap_fixture.h"

#include <grpcpp/grpcpp.h>

#include <pwd.h>

#include <chrono>
#include <sstream>
#include <utility>

namespace adjsnap::testing {

std::optional<User> EnsureUser(const std::string& name) {
  passwd* pw = getpwnam(name.c_str());
  if (pw == nullptr) {
    std::string out, err;
    int rc = RunProgram({"/usr/sbin/useradd", "--system", "--no-create-home", "--shell",
                         "/usr/sbin/nologin", name},
                        &out, &err);
    pw = getpwnam(name.c_str());
    if (pw == nullptr) {
      ADD_FAILURE() << "useradd " << name << " (exit " << rc << "): " << err;
      return std::nullopt;
    }
  }
  return User{pw->pw_uid, pw->pw_gid};
}

std::map<std::string, std::string> ProbeAs(const User& user, const std::string& socket,
                                           const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/setpriv",
                                   "--reuid=" + std::to_string(user.uid),
                                   "--regid=" + std::to_string(user.gid),
                                   "--clear-groups",
                                   TENANT_PROBE_BINARY,
                                   socket};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out, err;
  int status = RunProgram(argv, &out, &err);
  EXPECT_EQ(status, 0) << "tenant_probe " << (args.empty() ? "" : args[0]) << ": " << out << err;
  std::map<std::string, std::string> fields;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return fields;
}

RunSpec Spec(std::string name, uint64_t steps, uint64_t bytes_per_step) {
  RunSpec spec;
  spec.name = std::move(name);
  spec.steps = steps;
  spec.bytes_per_step = bytes_per_step;
  return spec;
}

DaemonOptions AdjsnapTest::Options(std::string host_mem, std::vector<std::string> extra_args,
                                 std::vector<std::string> wrapper) const {
  return DaemonOptions{dir_.path(), std::move(host_mem), std::move(extra_args), std::move(wrapper)};
}

Status AdjsnapTest::TryStartDaemon(const DaemonOptions& options) {
  if (daemon_) StopDaemon();
  auto d = DaemonProcess::Start(options);
  if (!d.ok()) return d.status();
  daemon_ = std::move(d).value();
  return Status::Ok();
}

void AdjsnapTest::StartDaemon(const DaemonOptions& options) {
  Status s = TryStartDaemon(options);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void AdjsnapTest::StopDaemon() {
  ReleaseClients();
  if (!daemon_) return;
  EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Log();  // a clean SIGTERM shutdown
  daemon_.reset();
}

void AdjsnapTest::KillDaemon() {
  ReleaseClients();
  if (!daemon_) return;
  daemon_->Kill();
  daemon_.reset();
}

Client* AdjsnapTest::Connect(bool map_host_tier) {
  if (!daemon_) {
    ADD_FAILURE() << "Connect: no daemon is running";
    return nullptr;
  }
  auto c = ConnectClient(*daemon_, map_host_tier);
  if (!c.ok()) {
    ADD_FAILURE() << "Connect: " << c.status().ToString();
    return nullptr;
  }
  clients_.push_back(std::move(c).value());
  return clients_.back().get();
}

RunInfo AdjsnapTest::OpenRun(Client& client, const RunSpec& spec) {
  auto run = client.OpenRun(spec);
  if (!run.ok()) {
    ADD_FAILURE() << "OpenRun '" << spec.name << "': " << run.status().ToString();
    return RunInfo{};
  }
  return std::move(run).value();
}

void AdjsnapTest::ReleaseClients() {
  clients_.clear();
  stub_.reset();
}

v1::Control::Stub& AdjsnapTest::stub() {
  if (!stub_) {
    stub_ = v1::Control::NewStub(
        grpc::CreateChannel("unix:" + daemon_->socket(), grpc::InsecureChannelCredentials()));
  }
  return *stub_;
}

v1::StatsResponse AdjsnapTest::Stats() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatsResponse r;
  grpc::Status s = stub().Stats(&ctx, v1::StatsRequest(), &r);
  EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << daemon_->Log();
  return r;
}

uint64_t AdjsnapTest::RejectionsTotal() {
  const v1::StatsResponse stats = Stats();
  uint64_t n = 0;
  for (const v1::RejectionCount& r : stats.rejections()) n += r.count();
  return n;
}

int64_t AdjsnapTest::Rejections(const std::string& surface, const std::string& reason) {
  const v1::StatsResponse stats = Stats();
  for (const v1::RejectionCount& r : stats.rejections()) {
    if (r.surface() == surface && r.reason() == reason) return static_cast<int64_t>(r.count());
  }
  return -1;
}

void AdjsnapTest::ExpectRoundTrip() {
  ASSERT_NE(daemon_, nullptr) << "no daemon is running";
  auto c = ConnectClient(*daemon_);
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << daemon_->Log();
  RunSpec spec = Spec("round-trip-" + std::to_string(++round_trips_), 1, 4096);
  auto run = (*c)->OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::vector<char> pushed(4096), fetched(4096, 0);
  FillPattern(pushed.data(), pushed.size(), 77, 0);
  auto h = (*c)->Push(run->run_id, 0, pushed.data(), pushed.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Status stored = h->WaitStored();
  ASSERT_TRUE(stored.ok()) << stored.ToString();
  Status got = (*c)->Fetch(run->run_id, 0, fetched.data(), fetched.size());
  ASSERT_TRUE(got.ok()) << got.ToString();
  EXPECT_EQ(pushed, fetched);
}

void AdjsnapTest::TearDown() {
  ReleaseClients();      // clients leave first, as they would in a real shutdown
  if (!daemon_) return;  // the test stopped it, or it never started
  if (!daemon_->Running()) {
    ADD_FAILURE() << "adjsnapd exited during the test (status " << daemon_->Stop() << "):\n"
                  << daemon_->Log();
    daemon_.reset();
    return;
  }
  // Alive and answering: whatever the test sent, the control plane still serves.
  Stats();
  ReleaseClients();
  StopDaemon();
}

}  // namespace adjsnap::testing
