// Malformed and unauthenticated data-plane messages from a raw UCX peer are rejected with a
// clear error, counted, and do not disturb the daemon.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "raw_peer.h"
#include "adjsnap/client.h"
#include "adjsnap/ucx.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap/wire.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class WireTest : public AdjsnapTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
    std::string error;
    peer_ = RawPeer::Open(stub(), &error);
    ASSERT_NE(peer_, nullptr) << error;
    session_ = peer_->session();
  }
  void TearDown() override {
    peer_.reset();  // the raw peer leaves with the other clients
    AdjsnapTest::TearDown();
  }
  uint64_t Rejected() { return Stats().rejected_messages(); }
  void Hello(uint64_t request_id) {
    wire::HelloRequest h{wire::MakeHeader(wire::kHello, session_.token(), request_id),
                         session_.session_id()};
    peer_->Send(wire::kHello, &h, sizeof h);
    auto r = peer_->WaitReply(request_id);
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->code, 0) << Message(*r);
  }

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
  EXPECT_EQ(Rejections("data_plane", "malformed"), 1);
  ExpectRoundTrip();
}

TEST_F(WireTest, WrongVersionIsRejectedNamingTheVersion) {
  wire::PushRequest p{wire::MakeHeader(wire::kPush, session_.token(), 41), 1, 0, 0, 0, 0, 0};
  p.header.version = 99;
  peer_->Send(wire::kPush, &p, sizeof p);
  auto r = peer_->WaitReply(41);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(Message(*r).find("version 99"), std::string::npos) << Message(*r);
  EXPECT_EQ(Rejections("data_plane", "unsupported_wire_format"), 1);
  ExpectRoundTrip();
}

TEST_F(WireTest, WrongHeaderSizeForOpIsRejected) {
  Hello(1);
  wire::HelloRequest short_fetch{wire::MakeHeader(wire::kFetch, session_.token(), 42), 0};
  peer_->Send(wire::kFetch, &short_fetch, sizeof short_fetch);
  auto r = peer_->WaitReply(42);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kInvalidArgument));
  const std::string expected = "expected " + std::to_string(sizeof(wire::FetchRequest)) + " bytes";
  EXPECT_NE(Message(*r).find(expected), std::string::npos) << Message(*r);
  EXPECT_EQ(Rejections("data_plane", "malformed"), 1);
  ExpectRoundTrip();
}

TEST_F(WireTest, PushWithoutHelloIsUnauthenticated) {
  wire::PushRequest p{wire::MakeHeader(wire::kReserve, session_.token(), 43), 1, 0, 4096, 0, 0, 0};
  peer_->Send(wire::kReserve, &p, sizeof p);
  auto r = peer_->WaitReply(43);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kUnauthenticated));
  EXPECT_NE(Message(*r).find("has not said Hello"), std::string::npos) << Message(*r);
  EXPECT_EQ(Rejections("data_plane", "before_hello"), 1);
  ExpectRoundTrip();
}

TEST_F(WireTest, HelloWithWrongTokenIsUnauthenticated) {
  wire::HelloRequest h{wire::MakeHeader(wire::kHello, session_.token() ^ 1, 44),
                       session_.session_id()};
  peer_->Send(wire::kHello, &h, sizeof h);
  auto r = peer_->WaitReply(44);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kUnauthenticated));
  EXPECT_NE(Message(*r).find("token does not match"), std::string::npos) << Message(*r);
  EXPECT_EQ(Rejections("data_plane", "wrong_token"), 1);
  ExpectRoundTrip();
}

TEST_F(WireTest, RequestWithAnotherTokenAfterHelloIsUnauthenticated) {
  Hello(1);
  wire::FetchRequest f{wire::MakeHeader(wire::kFetch, session_.token() + 1, 45), 1, 0, 4096};
  peer_->Send(wire::kFetch, &f, sizeof f);
  auto r = peer_->WaitReply(45);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kUnauthenticated));
  EXPECT_NE(Message(*r).find("token does not match"), std::string::npos) << Message(*r);
  EXPECT_EQ(Rejections("data_plane", "wrong_token"), 1);
  ExpectRoundTrip();
}

TEST_F(WireTest, CommitWithoutReservationIsRefused) {
  Hello(1);
  wire::PushRequest p{wire::MakeHeader(wire::kCommit, session_.token(), 46), 1, 0, 4096, 0, 0, 0};
  peer_->Send(wire::kCommit, &p, sizeof p);
  auto r = peer_->WaitReply(46);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kFailedPrecondition));
  EXPECT_NE(Message(*r).find("without a reservation"), std::string::npos) << Message(*r);
  ExpectRoundTrip();
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
  ASSERT_TRUE(stub().OpenRun(&ctx, open, &run).ok());
  uint64_t id = run.run().run_id();
  wire::PushRequest reserve{wire::MakeHeader(wire::kReserve, session_.token(), 50), id, 0, 4096,
                            0, 0, 0};
  peer_->Send(wire::kReserve, &reserve, sizeof reserve);
  auto r = peer_->WaitReply(50);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->code, 0) << Message(*r);
  auto used = [&] {
    grpc::ClientContext sctx;
    v1::StatsResponse stats;
    EXPECT_TRUE(stub().Stats(&sctx, v1::StatsRequest(), &stats).ok());
    return stats.tiers(0).used_bytes();
  };
  EXPECT_GT(used(), 0u);
  wire::PushRequest abort{
      wire::MakeHeader(wire::kAbort, session_.token(), 51), id, 0, 4096, 0, 0, 0};
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
  EXPECT_EQ(stub().Locate(&lctx, where, &located).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectRoundTrip();
}

// A commit's flags say what else it carries (kPushChecksum); one this adjsnapd does not know is
// refused by name, and the push is abandoned with nothing left behind.
TEST_F(WireTest, ACommitWithUnknownFlagsIsRefusedAndLeavesNothingBehind) {
  Hello(1);
  grpc::ClientContext ctx;
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("flagged");
  open.mutable_spec()->set_bytes_per_step(4096);
  v1::OpenRunResponse run;
  ASSERT_TRUE(stub().OpenRun(&ctx, open, &run).ok());
  uint64_t id = run.run().run_id();
  wire::PushRequest reserve{wire::MakeHeader(wire::kReserve, session_.token(), 60), id, 0, 4096,
                            0, 0, 0};
  peer_->Send(wire::kReserve, &reserve, sizeof reserve);
  auto r = peer_->WaitReply(60);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->code, 0) << Message(*r);
  wire::PushRequest commit{
      wire::MakeHeader(wire::kCommit, session_.token(), 61), id, 0, 4096, 0, 0, 0};
  commit.checksum = 12345;
  commit.flags = wire::kPushChecksum | 4;
  peer_->Send(wire::kCommit, &commit, sizeof commit);
  r = peer_->WaitReply(61);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->code, static_cast<int>(Code::kInvalidArgument));
  EXPECT_NE(Message(*r).find("unknown flags 5"), std::string::npos) << Message(*r);
  grpc::ClientContext sctx;
  v1::StatsResponse stats;
  ASSERT_TRUE(stub().Stats(&sctx, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.tiers(0).used_bytes(), 0u);
  grpc::ClientContext lctx;
  v1::LocateRequest where;
  where.set_name("flagged");
  where.set_step(0);
  v1::LocateResponse located;
  EXPECT_EQ(stub().Locate(&lctx, where, &located).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectRoundTrip();
}

// Over a session socket, the mapped path's link: closing it ends the session at once.
TEST_F(WireTest, ReservationsBeyondThePerEndpointCapAreRefused) {
  std::string error;
  auto mapped = RawPeer::OpenSocket(stub(), &error);
  ASSERT_NE(mapped, nullptr) << error;
  grpc::ClientContext ctx;
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("pinned");
  open.mutable_spec()->set_bytes_per_step(4096);
  v1::OpenRunResponse run;
  ASSERT_TRUE(stub().OpenRun(&ctx, open, &run).ok());
  // Reserve until refused: the refusal names the cap, which is how many were granted.
  uint64_t granted = 0;
  for (uint64_t step = 0;; ++step) {
    ASSERT_LT(step, 4096u) << "no cap on reservations";
    wire::PushRequest p{wire::MakeHeader(wire::kReserve, mapped->session().token(), 100 + step),
                        run.run().run_id(), step, 4096, 0, 0, 0};
    mapped->Send(wire::kReserve, &p, sizeof p);
    auto r = mapped->WaitReply(100 + step);
    ASSERT_TRUE(r.has_value());
    if (r->code == 0) {
      ++granted;
      continue;
    }
    EXPECT_EQ(r->code, static_cast<int>(Code::kResourceExhausted)) << Message(*r);
    EXPECT_EQ(Message(*r).rfind(std::to_string(granted) + " pushes are already reserved", 0), 0u)
        << "after " << granted << " reservations: " << Message(*r);
    break;
  }
  EXPECT_GT(granted, 1u);
  mapped.reset();  // disconnecting releases every reservation
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    grpc::ClientContext sctx;
    v1::StatsResponse stats;
    ASSERT_TRUE(stub().Stats(&sctx, v1::StatsRequest(), &stats).ok());
    if (stats.tiers(0).used_bytes() == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << stats.tiers(0).used_bytes();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ExpectRoundTrip();
}

TEST_F(WireTest, UnknownMessageIdLeavesTheDaemonServing) {
  char junk[64] = {};
  peer_->Send(77, junk, sizeof junk);
  // Dropped unanswered; counted once it arrives.
  EXPECT_TRUE(WaitUntil([&] { return Rejections("data_plane", "unknown_am_id") == 1; },
                        std::chrono::seconds(30)))
      << daemon().Log();
  ExpectRoundTrip();
}

// Two kinds of rejection, each counted under its own reason (Stats.rejections, the source of
// adjsnap_rejections_total) and logged: an AM id outside the wire format on the data plane, and
// an OpenRun whose enum value is outside the schema on the control plane.
TEST_F(WireTest, EachRejectionIsCountedUnderItsOwnReason) {
  auto count = [&](const std::string& surface, const std::string& reason) {
    return Rejections(surface, reason);  // -1: not reported at all
  };
  auto total = [&] { return RejectionsTotal(); };
  EXPECT_EQ(count("data_plane", "unknown_am_id"), 0);  // reported from the start, at 0
  EXPECT_EQ(count("control_plane", "invalid_argument"), 0);
  EXPECT_EQ(total(), 0u);

  char junk[64] = {};
  peer_->Send(77, junk, sizeof junk);
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("enums");
  open.mutable_spec()->set_bytes_per_step(4);
  open.mutable_spec()->set_compress_when(static_cast<v1::CompressWhen>(99));
  grpc::ClientContext ctx;
  v1::OpenRunResponse run;
  EXPECT_EQ(stub().OpenRun(&ctx, open, &run).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The unknown id is dropped unanswered: wait for it to be counted.
  EXPECT_TRUE(WaitUntil([&] { return count("data_plane", "unknown_am_id") == 1; },
                        std::chrono::seconds(10)))
      << daemon().Log();
  EXPECT_EQ(count("control_plane", "invalid_argument"), 1);
  EXPECT_EQ(total(), 2u);  // each under its own reason, nowhere else
  EXPECT_EQ(Rejected(), 1u);
  // The count comes before the log line (RejectionLog::Reject counts, then logs): wait for it.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return daemon().Log().find(
                   "data plane: rejected (AM id that is not part of the wire format)") !=
               std::string::npos;
      },
      std::chrono::seconds(10)))
      << daemon().Log();
  const std::string log = daemon().Log();
  EXPECT_NE(
      log.find("control plane: rejected (invalid argument): uid " + std::to_string(geteuid()) +
               ": INVALID_ARGUMENT: run 'enums': unknown compress_when 99"),
      std::string::npos)
      << log;
  ExpectRoundTrip();
}

}  // namespace
}  // namespace adjsnap::testing
