// Bad input at every entry point gets a clear error naming the problem, on both data paths,
// and the daemon keeps serving.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "raw_peer.h"
#include "adjsnap/client.h"
#include "adjsnap/kernels.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class BadInputTest : public AdjsnapTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("8M")));
    client_ = Connect(/*map_host_tier=*/GetParam());
    ASSERT_NE(client_, nullptr);
    RunSpec spec = Spec("run", 10, kBytes);
    spec.dtype = Dtype::kFloat32;
    spec.shape = {kBytes / 4};
    run_id_ = OpenRun(*client_, spec).run_id;
    ASSERT_NE(run_id_, 0u);
    buf_.assign(kBytes * 2, 1);
    rejected_at_start_ = RejectionsTotal();
  }
  // The test ended on a rejection: the daemon counted `counted` rejections for it (those of
  // the control plane's refusal codes and malformed data-plane messages; docs/operations.md),
  // and still serves a well-behaved client end to end.
  void ExpectCountedAndServing(uint64_t counted) {
    EXPECT_EQ(RejectionsTotal() - rejected_at_start_, counted);
    ExpectRoundTrip();
  }
  Status Push(uint64_t run, uint64_t step, size_t bytes) {
    auto h = client_->Push(run, step, buf_.data(), bytes);
    if (!h.ok()) return h.status();
    return h->WaitStored();
  }
  static void ExpectError(const Status& s, Code code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(text), std::string::npos)
        << "'" << s.message() << "' should mention '" << text << "'";
  }

  static constexpr size_t kBytes = 64 * 1024;
  Client* client_ = nullptr;  // the fixture's
  uint64_t run_id_ = 0;
  std::vector<char> buf_;
  uint64_t rejected_at_start_ = 0;
};

TEST_P(BadInputTest, UnknownRunIsNotFound) {
  ExpectError(Push(run_id_ + 1000, 0, kBytes), Code::kNotFound, "run id");
  ExpectError(client_->Locate("no-such-run", 0).status(), Code::kNotFound, "'no-such-run'");
  ExpectError(client_->DeleteRun("no-such-run"), Code::kNotFound, "does not exist");
  ExpectCountedAndServing(0);  // answers about state are not rejections
}

TEST_P(BadInputTest, UnknownStepIsNotFound) {
  ASSERT_TRUE(Push(run_id_, 1, kBytes).ok());
  ExpectError(client_->Fetch(run_id_, 2, buf_.data(), kBytes), Code::kNotFound,
              "step 2 of run 'run' was never stored");
  ExpectError(client_->Locate("run", 2).status(), Code::kNotFound, "never stored");
  ExpectCountedAndServing(0);
}

TEST_P(BadInputTest, DuplicateStepIsRejectedAndTheFirstCopyKept) {
  FillPattern(buf_.data(), kBytes, 1, 3);
  ASSERT_TRUE(Push(run_id_, 3, kBytes).ok());
  std::vector<char> original(buf_.begin(), buf_.begin() + kBytes);
  FillPattern(buf_.data(), kBytes, 2, 3);
  ExpectError(Push(run_id_, 3, kBytes), Code::kAlreadyExists, "already stored");
  std::vector<char> got(kBytes);
  ASSERT_TRUE(client_->Fetch(run_id_, 3, got.data(), kBytes).ok());
  EXPECT_EQ(got, original);
}

TEST_P(BadInputTest, WrongSizeNamesBothSizes) {
  ExpectError(Push(run_id_, 0, kBytes + 8), Code::kInvalidArgument, std::to_string(kBytes + 8));
  ExpectError(Push(run_id_, 0, kBytes - 8), Code::kInvalidArgument, std::to_string(kBytes));
  ASSERT_TRUE(Push(run_id_, 0, kBytes).ok());
  ExpectError(client_->Fetch(run_id_, 0, buf_.data(), kBytes / 2), Code::kInvalidArgument,
              "buffer of " + std::to_string(kBytes / 2));
  ExpectCountedAndServing(0);
}

TEST_P(BadInputTest, ACheckedRunRefusesAPushWithANaNNamingTheStepAndElement) {
  RunSpec spec;
  spec.name = "checked";
  spec.steps = 4;
  spec.bytes_per_step = 1000 * sizeof(float);
  spec.dtype = Dtype::kFloat32;
  spec.check_finite = true;
  auto run = client_->OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::vector<float> u(1000, 1.5f);
  ASSERT_TRUE(client_->Push(run->run_id, 0, u.data(), u.size() * sizeof(float))->WaitStored().ok());
  u[613] = std::numeric_limits<float>::quiet_NaN();
  auto refused = client_->Push(run->run_id, 1, u.data(), u.size() * sizeof(float));
  ExpectError(refused.status(), Code::kInvalidArgument, "step 1");
  EXPECT_NE(refused.status().message().find("element 613"), std::string::npos);
  EXPECT_EQ(client_->Locate("checked", 1).status().code(), Code::kNotFound);  // nothing stored
  u[613] = 2.0f;
  EXPECT_TRUE(client_->Push(run->run_id, 1, u.data(), u.size() * sizeof(float))->WaitStored().ok());
  // A second client attaching to the run checks too; a non-float run cannot ask for it.
  Client* other = Connect(GetParam());
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->OpenRun(spec).ok());
  u[0] = -std::numeric_limits<float>::infinity();
  ExpectError(other->Push(run->run_id, 2, u.data(), u.size() * sizeof(float)).status(),
              Code::kInvalidArgument, "element 0");
  RunSpec ints = spec;
  ints.name = "ints";
  ints.dtype = Dtype::kInt32;
  ExpectError(client_->OpenRun(ints).status(), Code::kInvalidArgument, "float32 or float64");
  ExpectCountedAndServing(0);  // the NaN scan and the dtype check are the client's own
}

TEST_P(BadInputTest, DevicePushesSayWhatTheyNeedWithoutAGpu) {
  if (kernels::ProbeDevice().usable) GTEST_SKIP() << "a GPU is usable here";
  auto h = client_->PushDevice(run_id_, 0, buf_.data(), kBytes);
  ExpectError(h.status(), Code::kFailedPrecondition, "no GPU is usable here");
  ExpectError(client_->FetchDeviceAsync(run_id_, 0, buf_.data(), kBytes).status(),
              Code::kFailedPrecondition, "device fetch of step 0 needs CUDA");
  EXPECT_EQ(client_->Locate("run", 0).status().code(), Code::kNotFound);
  ASSERT_TRUE(Push(run_id_, 0, kBytes).ok());  // the client and daemon carry on
}

TEST_P(BadInputTest, DeviceLayersNeedAUsableGpu) {
  if (kernels::ProbeDevice().usable) GTEST_SKIP() << "a GPU is usable here";
  for (const char* layers : {"DiskHostDevice", "HostDevice", "Device"}) {
    RunSpec spec;
    spec.name = std::string("gpu-") + layers;
    spec.steps = 4;
    spec.bytes_per_step = kBytes;
    spec.layers = layers;
    ExpectError(client_->OpenRun(spec).status(), Code::kFailedPrecondition,
                "no GPU is usable here");
    EXPECT_EQ(client_->Locate(spec.name, 0).status().code(), Code::kNotFound);  // no run made
  }
  ASSERT_TRUE(Push(run_id_, 0, kBytes).ok());
}

// The daemon's half of the device tier, driven as libadjsnap drives it: a step recorded in a
// session's GPU pool is listed as TIER_DEVICE, is never served or pushed again, can be recorded
// only with the session's token, and is reported lost once that session ends.
TEST_P(BadInputTest, DeviceStepRecordsBelongToTheirSession) {
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    grpc::Status s = (stub().*method)(&ctx, req, resp);
    return Status(static_cast<Code>(s.error_code()), s.error_message());
  };
  std::string error;
  auto peer = RawPeer::Open(stub(), &error);  // a session with a live UCX worker, as libadjsnap has
  ASSERT_NE(peer, nullptr) << error;
  const v1::OpenSessionResponse& session = peer->session();
  v1::OpenRunRequest open_run;
  open_run.mutable_spec()->set_name("pool");
  open_run.mutable_spec()->set_steps(8);
  open_run.mutable_spec()->set_bytes_per_step(kBytes);
  open_run.mutable_spec()->set_layers(v1::LAYERS_HOST_DEVICE);
  open_run.set_device_steps(3);
  v1::OpenRunResponse run;
  ASSERT_TRUE(call(&v1::Control::Stub::OpenRun, open_run, &run).ok());
  EXPECT_EQ(run.run().device_boundary(), 5u);
  v1::HoldDeviceStepRequest hold;
  hold.set_session_id(session.session_id());
  hold.set_token(session.token() + 1);
  hold.set_run_id(run.run().run_id());
  hold.set_step(7);
  hold.set_bytes(kBytes);
  hold.set_held(true);
  v1::HoldDeviceStepResponse held;
  ExpectError(call(&v1::Control::Stub::HoldDeviceStep, hold, &held), Code::kUnauthenticated,
              "is not open");
  hold.set_token(session.token());
  ASSERT_TRUE(call(&v1::Control::Stub::HoldDeviceStep, hold, &held).ok());
  auto where = client_->Locate("pool", 7);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(where->tier, Tier::kDevice);
  EXPECT_EQ(where->device_session, session.session_id());
  std::vector<char> out(kBytes);
  ExpectError(client_->Fetch(run.run().run_id(), 7, out.data(), kBytes),
              Code::kFailedPrecondition, "GPU memory of session");
  ExpectError(Push(run.run().run_id(), 7, kBytes), Code::kAlreadyExists, "already stored");
  ASSERT_TRUE(Push(run.run().run_id(), 0, kBytes).ok());  // older steps go to the daemon
  v1::CloseSessionRequest close;
  close.set_session_id(session.session_id());
  close.set_token(session.token());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(call(&v1::Control::Stub::CloseSession, close, &closed).ok());
  EXPECT_EQ(client_->Locate("pool", 7)->tier, Tier::kLost);
  ExpectError(client_->Fetch(run.run().run_id(), 7, out.data(), kBytes), Code::kDataLoss,
              "which ended");
  EXPECT_EQ(client_->Locate("pool", 0)->tier, Tier::kHost);
  ExpectCountedAndServing(1);  // the wrong token: an unauthenticated request
}

TEST_P(BadInputTest, StepOutsideDeclaredRangeIsOutOfRange) {
  ExpectError(Push(run_id_, 10, kBytes), Code::kOutOfRange, "declared steps 0..9");
  ExpectCountedAndServing(0);
}

TEST_P(BadInputTest, RequestAboveHostBudgetIsResourceExhausted) {
  RunSpec big;
  big.name = "too-big";
  big.bytes_per_step = 16 << 20;  // the daemon's host tier is 8 MiB
  ExpectError(client_->OpenRun(big).status(), Code::kResourceExhausted,
              "exceeds the whole host tier");
  // Filling the tier: the push that does not fit fails, the stored ones stay.
  RunSpec fill;
  fill.name = "fill";
  fill.bytes_per_step = 3 << 20;
  fill.layers = "Host";  // no disk to spill to
  fill.keep = true;
  auto run = client_->OpenRun(fill);
  ASSERT_TRUE(run.ok());
  std::vector<char> b(3 << 20, 7);
  for (uint64_t t = 0; t < 2; ++t) {
    auto h = client_->Push(run->run_id, t, b.data(), b.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  auto h = client_->Push(run->run_id, 2, b.data(), b.size());
  ASSERT_TRUE(h.ok());
  ExpectError(h->WaitStored(), Code::kResourceExhausted, "no room for 3.0 MiB: host tier");
  std::vector<char> got(b.size());
  EXPECT_TRUE(client_->Fetch(run->run_id, 1, got.data(), got.size()).ok());
  EXPECT_EQ(got, b);
  // The run says it is broken, naming the refused step; the run that lost nothing says nothing.
  auto runs = client_->ListRuns();
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  std::map<std::string, RunInfo> by_name;
  for (const RunInfo& r : *runs) by_name[r.spec.name] = r;
  ASSERT_EQ(by_name.count("fill"), 1u);
  EXPECT_NE(by_name["fill"].failure.find("step 2 of run 'fill' was refused: no room for 3.0 MiB"),
            std::string::npos)
      << by_name["fill"].failure;
  EXPECT_EQ(by_name["fill"].lost_snapshots, 0u);
  EXPECT_EQ(by_name["run"].failure, "");
  ASSERT_TRUE(client_->DeleteRun("fill").ok());  // frees the tier for the next push
  ASSERT_TRUE(Push(run_id_, 0, kBytes).ok());
  ExpectCountedAndServing(2);  // the run larger than the node, the push with no room
}

TEST_P(BadInputTest, ClosedRunTakesNoMorePushes) {
  ASSERT_TRUE(client_->CloseRun("run").ok());
  ExpectError(Push(run_id_, 0, kBytes), Code::kFailedPrecondition, "closed");
  ExpectCountedAndServing(0);
}

TEST_P(BadInputTest, ReopeningWithAnotherSpecNamesTheField) {
  RunSpec spec;
  spec.name = "run";
  spec.steps = 11;
  spec.bytes_per_step = kBytes;
  ExpectError(client_->OpenRun(spec).status(), Code::kAlreadyExists, "steps (10 vs 11)");
  ExpectCountedAndServing(0);
}

TEST_P(BadInputTest, MalformedSpecsAreInvalid) {
  RunSpec spec;
  spec.name = "bad name!";
  spec.bytes_per_step = 4;
  ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument, "may contain only");
  for (std::string name : {std::string("a/b"), std::string("tab\there"), std::string("nul\0x", 5),
                           std::string("esc\x1b[2J")}) {
    spec.name = name;
    ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument, "may contain only");
  }
  spec.name = "huge";
  spec.bytes_per_step = 4;
  spec.steps = UINT64_MAX;
  ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument,
              "18446744073709551615 steps of 4 bytes is more than 2^64 bytes");
  spec.steps = 0;
  spec.shape = {1ull << 40, 1ull << 40};
  ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument,
              "shape has more than 2^64 elements");
  spec.shape.clear();
  for (std::string name : {".", "..", "-rf", "--all", ".hidden"}) {
    spec.name = name;
    ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument,
                "must begin with a letter, a digit or '_'");
  }
  spec.name = "shape";
  spec.bytes_per_step = 400;
  spec.dtype = Dtype::kFloat64;
  spec.shape = {10, 10};
  ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument, "shape holds 800 bytes");
  spec.shape.clear();
  spec.bytes_per_step = 0;
  ExpectError(client_->OpenRun(spec).status(), Code::kInvalidArgument, "bytes_per_step");
  ExpectCountedAndServing(14);  // every spec above, refused by the daemon
}

INSTANTIATE_TEST_SUITE_P(DataPaths, BadInputTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "mapped" : "ucx"; });

TEST(DaemonNotRunning, ConnectSaysHowToStartIt) {
  TempDir dir;
  ClientOptions o;
  o.socket_path = dir.path() + "/absent.sock";
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnavailable);
  EXPECT_NE(c.status().message().find("adjsnapd is not running at " + o.socket_path),
            std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("Start it with `adjsnapd`"), std::string::npos);
}

// Start-up refusals; one starts a daemon to refuse a second.
class DaemonStartup : public AdjsnapTest {};

TEST_F(DaemonStartup, BadConfigurationExitsWithTheReason) {
  std::string err;
  int rc = RunProgram({ADJSNAPD_BINARY, "--host-mem", "12Q"}, nullptr, &err);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("flag --host-mem: expected a size like 64G, got \"12Q\""), std::string::npos)
      << err;
}

TEST_F(DaemonStartup, SecondDaemonOnTheSameSocketRefusesToStart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("8M")));
  std::string err;
  int rc = RunProgram({ADJSNAPD_BINARY, "--socket", daemon().socket(), "--state-dir",
                       dir() + "/state2", "--host-mem", "8M"},
                      nullptr, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("another adjsnapd is already serving"), std::string::npos) << err;
}

}  // namespace
}  // namespace adjsnap::testing
