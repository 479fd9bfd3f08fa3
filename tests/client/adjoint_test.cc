// A model solver driven through checkpoint schedules with levels in local memory and in a real
// adjsnapd: every reverse step must see exactly x_{step-1}, every advance must start from the
// state it names, and the forward steps counted must be the schedule's.
#include "adjsnap/adjoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "adjsnap/v1/control.pb.h"
#include "adjsnap_fixture.h"
#include "daemon_process.h"
#include "sanitizer.h"

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

// A plan may keep the same state on two adjsnapd levels at once (MultiLevel's do, with costs
// that favour it): each level is a run of its own, so the second write is no duplicate step,
// and each level's copy reads back.
TEST_F(AdjointTest, AStateOnTwoAdjsnapLevelsAtOnceIsStoredOnceInEach) {
  using K = schedule::ActionKind;
  schedule::Schedule plan;
  plan.steps = 2;
  plan.actions = {{K::kWrite, 0, 0, 0}, {K::kWrite, 0, 0, 1}, {K::kAdvance, 0, 1},
                  {K::kReverse, 2},     {K::kRead, 0, 0, 1},  {K::kReverse, 1},
                  {K::kRead, 0, 0, 0},  {K::kFree, 0, 0, 0},  {K::kFree, 0, 0, 1}};
  ModelSolver solver(64 * 1024);
  AdjointSolver cb = solver.Callbacks();
  Status s = RunAdjoint(plan, {Storage::kAdjsnap, Storage::kAdjsnap}, client_, "twice", cb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectReversedInOrder(solver.reversed, 2);
  auto runs = client_->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty());  // "twice" and "twice.1" are gone
}

// Bytes each disk class has written since adjsnapd started, by spool class.
std::map<std::string, uint64_t> DiskWrites(const v1::StatsResponse& stats) {
  std::map<std::string, uint64_t> out;
  for (const auto& t : stats.tiers()) {
    if (t.tier() == v1::TIER_DISK) out[t.spool_class()] = t.write_bytes();
  }
  return out;
}

// A plan over three levels priced with this node's own tiers (host memory, local spools, shared
// spools: `adjsnap plan --calibrate`'s costs at the step's size) runs through RunAdjoint exact,
// in the time the plan predicts within 15%. Each step takes 20 ms forward and backward, the
// model solver's own work (filling and comparing 4 MiB) included, at a kept pace (below), so the
// compute the plan counts is what the run spends. The 4 MiB steps' transfers are a few ms each
// (2-10% of the prediction on a 2-core machine): visible, while a loaded machine's noise on
// them stays inside 15%. The plan puts checkpoints on every level; each level is a run of its
// own, which adjsnapd places over host memory and both spool classes.
TEST_F(AdjointTest, ThreeLevelRunIsExactAndTakesThePlannedTimeWithinFifteenPercent) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("64M", {"--spool-dirs", dir() + "/local", "--disk-mem", "32M", "--shared-spool-dirs",
                      dir() + "/shared", "--shared-disk-mem", "128M"})));
  client_ = Connect();
  ASSERT_NE(client_, nullptr);
  constexpr uint64_t kSteps = 48, kBytes = 4 << 20;
  constexpr double kStep = 0.02;
  std::string out, err;
  ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon().socket(), "--json", "plan", "--steps",
                        std::to_string(kSteps), "--bytes-per-step", "4M", "--compute-time",
                        std::to_string(kStep), "--calibrate"},
                       &out, &err),
            0)
      << err;
  nlohmann::json node = nlohmann::json::parse(out);
  ASSERT_EQ(node["tiers"].size(), 3u) << out;
  std::vector<schedule::Level> levels;
  const uint64_t slots[] = {2, 3, 6};  // few enough that every level is needed
  for (size_t k = 0; k < 3; ++k) {
    const auto& t = node["tiers"][k];
    ASSERT_EQ(t["costs_from"], "calibrated") << out;
    levels.push_back({t["tier"].get<std::string>(), slots[k], t["write_seconds"].get<double>(),
                      t["read_seconds"].get<double>()});
  }
  auto plan = schedule::MultiLevel(kSteps, levels, {kStep, kStep});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (size_t k = 0; k < 3; ++k) ASSERT_GT(plan->writes[k], 0u) << "level " << k << ": " << out;

  ModelSolver solver(kBytes);
  AdjointSolver cb = solver.Callbacks();
  // The solver keeps its pace: a step ends kStep after it began, less what the steps before it
  // ran over (a late wake-up on a loaded machine), so the pass spends on compute what the plan
  // counts. Time outside the callbacks (the transfers) is not made up.
  using Clock = std::chrono::steady_clock;
  double behind = 0;  // seconds the callbacks have taken beyond their steps' times
  auto paced = [&behind](double seconds, const std::function<Status()>& work) {
    const Clock::time_point start = Clock::now();
    Status s = work();
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(seconds - behind)));
    behind += std::chrono::duration<double>(Clock::now() - start).count() - seconds;
    return s;
  };
  cb.advance = [&, advance = cb.advance](uint64_t from, uint64_t to) {
    return paced(kStep * static_cast<double>(to - from), [&] { return advance(from, to); });
  };
  cb.reverse = [&, reverse = cb.reverse](uint64_t step) {
    return paced(kStep, [&] { return reverse(step); });
  };
  const auto before = DiskWrites(Stats());
  const auto t0 = std::chrono::steady_clock::now();
  // Each level on the tier its costs came from (a plan level's name is the tier's).
  std::vector<Storage> storage;
  for (const schedule::Level& level : levels) {
    auto where = StorageForTier(level.name);
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    storage.push_back(*where);
  }
  EXPECT_EQ(storage, (std::vector<Storage>{Storage::kAdjsnapHost, Storage::kAdjsnapDisk,
                                           Storage::kAdjsnapSharedDisk}));
  Status s = RunAdjoint(*plan, storage, client_, "three", cb);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(solver.forward_steps, plan->forward_steps);
  ExpectReversedInOrder(solver.reversed, kSteps);
  const auto after = DiskWrites(Stats());
  // The disk levels' checkpoints on their own spools: each write of level k is one step file,
  // of one size, on its class (none moved on, none to the other class).
  const uint64_t local = after.at("local") - before.at("local");
  const uint64_t shared = after.at("shared") - before.at("shared");
  ASSERT_GT(local, 0u) << "no checkpoint reached the local spools";
  ASSERT_GT(shared, 0u) << "no checkpoint reached the shared spools";
  EXPECT_EQ(local % plan->writes[1], 0u) << local << " bytes in " << plan->writes[1] << " files";
  EXPECT_EQ(local / plan->writes[1] * plan->writes[2], shared)
      << "the shared spools took " << shared << " bytes for the plan's " << plan->writes[2]
      << " writes of level 2";
  // In the test's XML report (--gtest_output), for a look at the margin a machine leaves.
  RecordProperty("run_over_plan", std::to_string(seconds / plan->cost));
  // ThreadSanitizer slows every thread several times, each by its own factor, so the costs the
  // plan measured beforehand no longer add up to the run's time (20% over it on a loaded
  // 2-core machine); the plain and ASan builds check the time.
  if (!kThreadSanitizer) {
    EXPECT_NEAR(seconds / plan->cost, 1.0, 0.15)
        << "ran " << seconds << " s, planned " << plan->cost << " s (compute alone "
        << kStep * static_cast<double>(plan->forward_steps + kSteps) << " s); costs: " << out;
  }
  auto runs = client_->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty());  // every level's run is gone afterwards
}

// `adjsnap plan`'s level names map to the storage each is bound to; any other name is refused
// naming it and the names there are (a level would otherwise land in the wrong tier).
TEST(StorageForTier, MapsThePlansTierNamesAndRefusesAnyOtherNamingIt) {
  EXPECT_EQ(StorageForTier("host").value(), Storage::kAdjsnapHost);
  EXPECT_EQ(StorageForTier("disk").value(), Storage::kAdjsnapDisk);
  EXPECT_EQ(StorageForTier("shared-disk").value(), Storage::kAdjsnapSharedDisk);
  for (const char* wrong : {"", "Host", "device", "shared_disk", "disk "}) {
    Result<Storage> got = StorageForTier(wrong);
    ASSERT_FALSE(got.ok()) << "'" << wrong << "' was taken";
    EXPECT_EQ(got.status().code(), Code::kInvalidArgument);
    EXPECT_NE(got.status().message().find("'" + std::string(wrong) + "'"), std::string::npos)
        << got.status().ToString();
    EXPECT_NE(got.status().message().find("host, disk or shared-disk"), std::string::npos)
        << got.status().ToString();
  }
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

// x_t = f(x_{t-1}) with f(x)_i = x_i + h sin(x_{i+1}) x_i (indices cyclic), J = |x_N|^2 / 2.
// The adjoint of step t maps lambda_t to lambda_{t-1} = Df(x_{t-1})^T lambda_t, seeded with
// lambda_N = x_N inside reverse step N. The same floating-point operations in the same order as
// the store-all reference below, so a correct schedule gives a bit-identical gradient.
class ToyModel {
 public:
  static constexpr double kH = 0.01;

  explicit ToyModel(size_t values) : x_(values), lambda_(values) {
    for (size_t i = 0; i < values; ++i) x_[i] = 0.1 + 0.01 * static_cast<double>(i % 97);
    x0_ = x_;
  }

  static void Step(std::vector<double>& x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] + kH * std::sin(x[(i + 1) % x.size()]) * x[i];
    std::copy(y.begin(), y.end(), x.begin());  // in place: the driver holds x's buffer
  }
  // lambda <- Df(x)^T lambda.
  static void Adjoint(const std::vector<double>& x, std::vector<double>& lambda) {
    const size_t n = x.size();
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t next = (i + 1) % n, prev = (i + n - 1) % n;
      out[i] =
          lambda[i] * (1 + kH * std::sin(x[next])) + lambda[prev] * kH * std::cos(x[i]) * x[prev];
    }
    lambda.swap(out);
  }

  // The gradient dJ/dx_0 for N steps with every state kept.
  std::vector<double> StoreAllGradient(uint64_t n) const {
    std::vector<std::vector<double>> xs{x0_};
    for (uint64_t t = 1; t <= n; ++t) {
      xs.push_back(xs.back());
      Step(xs.back());
    }
    std::vector<double> lambda = xs[n];
    for (uint64_t t = n; t >= 1; --t) Adjoint(xs[t - 1], lambda);
    return lambda;
  }

  AdjointSolver Callbacks() {
    AdjointSolver s;
    s.state = x_.data();
    s.bytes = x_.size() * sizeof(double);
    s.advance = [this](uint64_t from, uint64_t to) {
      for (uint64_t t = from; t < to; ++t) Step(x_);
      forward_steps += to - from;
      return Status::Ok();
    };
    s.reverse = [this](uint64_t step) {
      if (reversed.empty()) {  // step N: seed with x_N = f(x_{N-1})
        lambda_ = x_;
        Step(lambda_);
      }
      Adjoint(x_, lambda_);
      reversed.push_back(step);
      return Status::Ok();
    };
    return s;
  }

  const std::vector<double>& gradient() const { return lambda_; }
  uint64_t forward_steps = 0;
  std::vector<uint64_t> reversed;

 private:
  std::vector<double> x_, x0_, lambda_;
};

// Ends the forward pass at step n.
OnlineCheckpointing StopAt(uint64_t n, Storage storage, uint64_t slots) {
  OnlineCheckpointing online;
  online.storage = storage;
  online.slots = slots;
  online.is_last = [n](uint64_t step) -> Result<bool> { return step == n; };
  return online;
}

TEST_F(AdjointTest, OnlineRunStoppedAtARandomStepGetsExactAdjoints) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const uint64_t n = std::uniform_int_distribution<uint64_t>(20, 400)(rng);
  const uint64_t slots = std::uniform_int_distribution<uint64_t>(2, 8)(rng);
  SCOPED_TRACE("seed " + std::to_string(seed) + ": N=" + std::to_string(n) +
               " slots=" + std::to_string(slots));
  ToyModel model(2048);
  AdjointSolver cb = model.Callbacks();
  schedule::Schedule done;
  Status s = RunAdjoint(StopAt(n, Storage::kAdjsnap, slots), client_, "online", cb, &done);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectReversedInOrder(model.reversed, n);
  EXPECT_EQ(model.gradient(), model.StoreAllGradient(n));
  EXPECT_EQ(done.steps, n);
  EXPECT_EQ(model.forward_steps, done.forward_steps);
  schedule::Schedule m;
  ASSERT_TRUE(schedule::Replay(done, {{"adjsnap", slots, 0, 0}}, {1, 0}, &m).ok());
  EXPECT_LE(model.forward_steps, *schedule::RevolveForwardSteps(n, slots) + (n - 1));
  auto runs = client_->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty());
}

TEST_F(AdjointTest, OnlineRunTakesItsSlotsFromTheHostTier) {
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t n = std::uniform_int_distribution<uint64_t>(30, 120)(rng);
  ToyModel model(512 * 1024);  // 4 MiB states: at most 16 fit the 64 MiB host tier
  AdjointSolver cb = model.Callbacks();
  schedule::Schedule done;
  Status s = RunAdjoint(StopAt(n, Storage::kAdjsnap, 0), client_, "online-host", cb, &done);
  ASSERT_TRUE(s.ok()) << "N=" << n << ": " << s.ToString();
  EXPECT_EQ(model.gradient(), model.StoreAllGradient(n)) << "N=" << n;
  schedule::Schedule m;
  EXPECT_TRUE(schedule::Replay(done, {{"host", 16, 0, 0}}, {1, 0}, &m).ok()) << "N=" << n;
}

TEST_F(AdjointTest, OnlineRunInLocalMemoryNeedsNoDaemon) {
  const uint64_t n = 57;
  ToyModel model(64);
  AdjointSolver cb = model.Callbacks();
  schedule::Schedule done;
  Status s = RunAdjoint(StopAt(n, Storage::kLocalMemory, 3), nullptr, "local", cb, &done);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectReversedInOrder(model.reversed, n);
  EXPECT_EQ(model.gradient(), model.StoreAllGradient(n));
  EXPECT_EQ(model.forward_steps, done.forward_steps);
}

TEST_F(AdjointTest, OnlineRunStopsOnIsLastErrorsAndStepLimit) {
  ToyModel model(64);
  AdjointSolver cb = model.Callbacks();
  OnlineCheckpointing online = StopAt(0, Storage::kAdjsnap, 4);
  online.is_last = [](uint64_t step) -> Result<bool> {
    if (step == 9) return Status::Aborted("criterion failed at 9");
    return false;
  };
  EXPECT_EQ(RunAdjoint(online, client_, "online-err", cb).code(), Code::kAborted);
  online.is_last = [](uint64_t) -> Result<bool> { return false; };
  online.max_steps = 25;
  EXPECT_EQ(RunAdjoint(online, client_, "online-long", cb).code(), Code::kOutOfRange);
  EXPECT_EQ(model.forward_steps, 8u + 25u);
  EXPECT_TRUE(model.reversed.empty());
  EXPECT_TRUE(client_->ListRuns()->empty());
  OnlineCheckpointing no_slots = StopAt(5, Storage::kLocalMemory, 0);
  EXPECT_EQ(RunAdjoint(no_slots, nullptr, "x", cb).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace adjsnap::testing
