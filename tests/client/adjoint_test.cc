// A model solver driven through checkpoint schedules with levels in local memory and in a real
// adjsnapd: every reverse step must see exactly x_{step-1}, every advance must start from the
// state it names, and the forward steps counted must be the schedule's.
#include "adjsnap/adjoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class ModelSolver {
 public:
  explicit ModelSolver(size_t bytes) : state_(bytes) { FillPattern(state_.data(), bytes, 9, 0); }

  AdjointSolver Callbacks() {
    AdjointSolver s;
    s.state = state_.data();
    s.bytes = state_.size();
    s.advance = [this](uint64_t from, uint64_t to) {
      if (!Holds(from)) return Status::Internal("advance from x_" + std::to_string(from) +
                                                " with another state in hand");
      forward_steps += to - from;
      FillPattern(state_.data(), state_.size(), 9, to);
      return Status::Ok();
    };
    s.reverse = [this](uint64_t step) {
      if (!Holds(step - 1)) {
        return Status::Internal("reverse of step " + std::to_string(step) + " without x_" +
                                std::to_string(step - 1));
      }
      reversed.push_back(step);
      return Status::Ok();
    };
    return s;
  }

  uint64_t forward_steps = 0;
  std::vector<uint64_t> reversed;

 private:
  bool Holds(uint64_t i) {
    std::vector<char> want(state_.size());
    FillPattern(want.data(), want.size(), 9, i);
    return want == state_;
  }
  std::vector<char> state_;
};

void ExpectReversedInOrder(const std::vector<uint64_t>& reversed, uint64_t n) {
  ASSERT_EQ(reversed.size(), n);
  for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(reversed[i], n - i);
}

class AdjointTest : public AdjsnapTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
  }
  Client* client_ = nullptr;  // the fixture's
};

TEST_F(AdjointTest, RevolveWithCheckpointsInAdjsnap) {
  const uint64_t n = 40, slots = 4;
  auto plan = schedule::Revolve(n, slots);
  ASSERT_TRUE(plan.ok());
  ModelSolver solver(64 * 1024);
  AdjointSolver cb = solver.Callbacks();
  Status s = RunAdjoint(*plan, {Storage::kAdjsnap}, client_, "revolve", cb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(solver.forward_steps, *schedule::RevolveForwardSteps(n, slots));
  ExpectReversedInOrder(solver.reversed, n);
  auto runs = client_->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty());  // the checkpoint run is gone afterwards
}

TEST_F(AdjointTest, DiskRevolveWithMemoryLocalAndDiskInAdjsnap) {
  const uint64_t n = 30;
  auto plan = schedule::DiskRevolve(n, 2, /*disk_write=*/3, /*disk_read=*/2, {1, 2});
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->writes[1], 0u);  // the plan does use adjsnap
  ModelSolver solver(16 * 1024);
  AdjointSolver cb = solver.Callbacks();
  Status s = RunAdjoint(*plan, {Storage::kLocalMemory, Storage::kAdjsnap}, client_, "disk", cb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(solver.forward_steps, plan->forward_steps);
  ExpectReversedInOrder(solver.reversed, n);
}

TEST_F(AdjointTest, SolverErrorsStopTheRunAndAreReturned) {
  auto plan = schedule::Revolve(10, 2);
  ASSERT_TRUE(plan.ok());
  ModelSolver solver(4096);
  AdjointSolver cb = solver.Callbacks();
  cb.reverse = [](uint64_t step) {
    return step == 7 ? Status::Aborted("adjoint blew up at 7") : Status::Ok();
  };
  Status s = RunAdjoint(*plan, {Storage::kAdjsnap}, client_, "fails", cb);
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_TRUE(client_->ListRuns()->empty());
}

}  // namespace
}  // namespace adjsnap::testing
