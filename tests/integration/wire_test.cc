// Malformed and unauthenticated data-plane messages from a raw UCX peer are rejected with a
// clear error, counted, and do not disturb the daemon.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "daemon_process.h"
#include "raw_peer.h"
#include "snapd/client.h"
#include "snapd/v1/control.grpc.pb.h"
#include "snapd/wire.h"
#include "snapd/ucx.h"

namespace snapd::testing {
namespace {

class WireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = DaemonProcess::Start({dir_.path(), "64M", {}, {}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(d).value();
    stub_ = v1::Control::NewStub(
        grpc::CreateChannel("unix:" + daemon_->socket(), grpc::InsecureChannelCredentials()));
    std::string error;
    peer_ = RawPeer::Open(*stub_, &error);
    ASSERT_NE(peer_, nullptr) << error;
    session_ = peer_->session();
  }
  void TearDown() override {
    peer_.reset();
    stub_.reset();  // clients leave first, as they would in a real shutdown
    if (daemon_) {
      EXPECT_EQ(daemon_->Stop(), 0) << daemon_->Log();
    }
  }
  uint64_t Rejected() {
    grpc::ClientContext ctx;
    v1::StatsResponse r;
    EXPECT_TRUE(stub_->Stats(&ctx, v1::StatsRequest(), &r).ok());
    return r.rejected_messages();
  }
  void Hello(uint64_t request_id) {
    wire::HelloRequest h{wire::MakeHeader(wire::kHello, session_.token(), request_id),
                         session_.session_id()};
    peer_->Send(wire::kHello, &h, sizeof h);
    auto r = peer_->WaitReply(request_id);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->code, 0) << Message(*r);
  }
  // The daemon still serves a well-behaved client end to end.
  void ExpectDaemonServes() {
    auto c = ConnectClient(*daemon_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    RunSpec spec;
    spec.name = "healthy";
    spec.bytes_per_step = 4096;
    auto run = (*c)->OpenRun(spec);
    ASSERT_TRUE(run.ok());
    std::vector<char> a(4096, 5), b(4096, 0);
    auto h = (*c)->Push(run->run_id, 0, a.data(), a.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
    ASSERT_TRUE((*c)->Fetch(run->run_id, 0, b.data(), b.size()).ok());
    EXPECT_EQ(a, b);
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<v1::Control::Stub> stub_;
  v1::OpenSessionResponse session_;
  std::unique_ptr<RawPeer> peer_;
};

TEST_F(WireTest, TruncatedHeaderIsRejected) {
  char junk[5] = {1, 2, 3, 4, 5};
  peer_->Send(wire::kPush, junk, sizeof junk);
  auto r = peer_->WaitReply(0);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(Message(*r).find("malformed message: header of 5 bytes"), std::string::npos)
      << Message(*r);
  EXPECT_EQ(Rejected(), 1u);
  ExpectDaemonServes();
}

TEST_F(WireTest, WrongVersionIsRejectedNamingTheVersion) {
  wire::PushRequest p{wire::MakeHeader(wire::kPush, session_.token(), 41), 1, 0, 0, 0};
  p.header.version = 99;
  peer_->Send(wire::kPush, &p, sizeof p);
  auto r = peer_->WaitReply(41);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(Message(*r).find("version 99"), std::string::npos) << Message(*r);
  ExpectDaemonServes();
}

TEST_F(WireTest, WrongHeaderSizeForOpIsRejected) {
  Hello(1);
  wire::HelloRequest short_fetch{wire::MakeHeader(wire::kFetch, session_.token(), 42), 0};
  peer_->Send(wire::kFetch, &short_fetch, sizeof short_fetch);
  auto r = peer_->WaitReply(42);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(Message(*r).find("expected 48 bytes"), std::string::npos) << Message(*r);
}

TEST_F(WireTest, PushWithoutHelloIsUnauthenticated) {
  wire::PushRequest p{wire::MakeHeader(wire::kReserve, session_.token(), 43), 1, 0, 4096, 0};
  peer_->Send(wire::kReserve, &p, sizeof p);
  auto r = peer_->WaitReply(43);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kUnauthenticated));
  EXPECT_NE(Message(*r).find("has not said Hello"), std::string::npos) << Message(*r);
}

TEST_F(WireTest, HelloWithWrongTokenIsUnauthenticated) {
  wire::HelloRequest h{wire::MakeHeader(wire::kHello, session_.token() ^ 1, 44),
                       session_.session_id()};
  peer_->Send(wire::kHello, &h, sizeof h);
  auto r = peer_->WaitReply(44);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kUnauthenticated));
  EXPECT_NE(Message(*r).find("token does not match"), std::string::npos) << Message(*r);
  ExpectDaemonServes();
}

TEST_F(WireTest, RequestWithAnotherTokenAfterHelloIsUnauthenticated) {
  Hello(1);
  wire::FetchRequest f{wire::MakeHeader(wire::kFetch, session_.token() + 1, 45), 1, 0, 4096};
  peer_->Send(wire::kFetch, &f, sizeof f);
  auto r = peer_->WaitReply(45);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kUnauthenticated));
  EXPECT_NE(Message(*r).find("token does not match"), std::string::npos) << Message(*r);
}

TEST_F(WireTest, CommitWithoutReservationIsRefused) {
  Hello(1);
  wire::PushRequest p{wire::MakeHeader(wire::kCommit, session_.token(), 46), 1, 0, 4096, 0};
  peer_->Send(wire::kCommit, &p, sizeof p);
  auto r = peer_->WaitReply(46);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kFailedPrecondition));
  EXPECT_NE(Message(*r).find("without a reservation"), std::string::npos) << Message(*r);
}

// A client whose copy into the arena could not start (a device copy that failed to enqueue)
// gives its reservation back: the step and the tier memory are free at once.
TEST_F(WireTest, AnAbortedReservationFreesTheStepAndItsMemory) {
  Hello(1);
  grpc::ClientContext ctx;
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("aborted");
  open.mutable_spec()->set_bytes_per_step(4096);
  v1::OpenRunResponse run;
  ASSERT_TRUE(stub_->OpenRun(&ctx, open, &run).ok());
  uint64_t id = run.run().run_id();
  wire::PushRequest reserve{wire::MakeHeader(wire::kReserve, session_.token(), 50), id, 0, 4096,
                            0};
  peer_->Send(wire::kReserve, &reserve, sizeof reserve);
  auto r = peer_->WaitReply(50);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->code, 0) << Message(*r);
  auto used = [&] {
    grpc::ClientContext sctx;
    v1::StatsResponse stats;
    EXPECT_TRUE(stub_->Stats(&sctx, v1::StatsRequest(), &stats).ok());
    return stats.tiers(0).used_bytes();
  };
  EXPECT_GT(used(), 0u);
  wire::PushRequest abort{wire::MakeHeader(wire::kAbort, session_.token(), 51), id, 0, 4096, 0};
  peer_->Send(wire::kAbort, &abort, sizeof abort);
  r = peer_->WaitReply(51);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, 0) << Message(*r);
  EXPECT_EQ(used(), 0u);
  // The step can be reserved again; an abort without a reservation is refused.
  reserve.header.request_id = 52;
  peer_->Send(wire::kReserve, &reserve, sizeof reserve);
  r = peer_->WaitReply(52);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, 0) << Message(*r);
  abort.header.request_id = 53;
  peer_->Send(wire::kAbort, &abort, sizeof abort);
  ASSERT_TRUE(peer_->WaitReply(53).has_value());
  abort.header.request_id = 54;
  peer_->Send(wire::kAbort, &abort, sizeof abort);
  r = peer_->WaitReply(54);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kFailedPrecondition));
  EXPECT_NE(Message(*r).find("without a reservation"), std::string::npos) << Message(*r);
  grpc::ClientContext lctx;
  v1::LocateRequest where;
  where.set_name("aborted");
  where.set_step(0);
  v1::LocateResponse located;
  EXPECT_EQ(stub_->Locate(&lctx, where, &located).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectDaemonServes();
}

TEST_F(WireTest, ReservationsBeyondThePerEndpointCapAreRefused) {
  Hello(1);
  grpc::ClientContext ctx;
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("pinned");
  open.mutable_spec()->set_bytes_per_step(4096);
  v1::OpenRunResponse run;
  ASSERT_TRUE(stub_->OpenRun(&ctx, open, &run).ok());
  const uint64_t cap = 64;  // DataPlane::kMaxReservationsPerEndpoint
  for (uint64_t step = 0; step <= cap; ++step) {
    wire::PushRequest p{wire::MakeHeader(wire::kReserve, session_.token(), 100 + step),
                        run.run().run_id(), step, 4096, 0};
    peer_->Send(wire::kReserve, &p, sizeof p);
    auto r = peer_->WaitReply(100 + step);
    ASSERT_TRUE(r.has_value());
    if (step < cap) {
      ASSERT_EQ(r->code, 0) << Message(*r);
    } else {
      EXPECT_EQ(r->code, static_cast<int>(Code::kResourceExhausted));
      EXPECT_NE(Message(*r).find("already reserved"), std::string::npos) << Message(*r);
    }
  }
  peer_.reset();  // disconnecting releases every reservation
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    grpc::ClientContext sctx;
    v1::StatsResponse stats;
    ASSERT_TRUE(stub_->Stats(&sctx, v1::StatsRequest(), &stats).ok());
    if (stats.tiers(0).used_bytes() == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << stats.tiers(0).used_bytes();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ExpectDaemonServes();
}

TEST_F(WireTest, UnknownMessageIdLeavesTheDaemonServing) {
  char junk[64] = {};
  peer_->Send(77, junk, sizeof junk);
  ExpectDaemonServes();
}

}  // namespace
}  // namespace snapd::testing
