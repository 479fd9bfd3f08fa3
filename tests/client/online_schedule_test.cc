#include "adjsnap/online_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace adjsnap::schedule {
namespace {

// Feeds the schedule n-1 forward steps, then ends the run (N = n).
Schedule RunOnline(uint64_t n, uint64_t slots) {
  auto os = OnlineSchedule::Create(slots);
  EXPECT_TRUE(os.ok());
  for (uint64_t t = 1; t < n; ++t) EXPECT_TRUE(os->Advance().ok());
  EXPECT_TRUE(os->Finish().ok());
  return os->schedule();
}

TEST(RevolveSplit, GivesAnOptimalFirstCheckpoint) {
  for (uint64_t s = 2; s <= 12; ++s) {
    for (uint64_t l = 2; l <= 2000; ++l) {
      const uint64_t j = RevolveSplit(l, s);
      ASSERT_GE(j, 1u);
      ASSERT_LT(j, l);
      EXPECT_EQ(j + *RevolveForwardSteps(l - j, s - 1) + *RevolveForwardSteps(j, s),
                *RevolveForwardSteps(l, s))
          << "l=" << l << " s=" << s << " j=" << j;
    }
  }
}

// Wang et al.'s repetition number with delta = s - 1 checkpoints beside x_0 (with none, x_0
// alone: step k is computed N - k times).
uint64_t RepetitionBound(uint64_t n, uint64_t s) {
  if (s == 1) return n;
  uint64_t t = 0;
  while (Binomial(s - 1 + t, t) < n) ++t;
  return t;
}

// The most times any forward step is computed.
uint64_t MostRepetitions(const Schedule& sched) {
  std::vector<int64_t> starts(sched.steps + 2, 0);  // advances computing step k: prefix sums
  for (const Action& a : sched.actions) {
    if (a.kind != ActionKind::kAdvance) continue;
    ++starts[a.a + 1];
    --starts[a.b + 1];
  }
  int64_t running = 0, most = 0;
  for (int64_t d : starts) most = std::max(most, running += d);
  return static_cast<uint64_t>(most);
}

// The bounds of online_schedule.h, and exact states for every reverse step (Replay), for every
// N a run could stop at up to 600 (the worst ratios to the offline optimum lie below
// C(s + 2, 2): N = 559 for 32 slots), then every seventh N up to 2000 (each Replay is O(N t);
// every N there took half a minute under the sanitizers). One forward pass per slot count: a
// copy of the schedule at step N-1 is finished there.
TEST(OnlineSchedule, EveryStopWithinThePublishedAndTheOneSweepBounds) {
  for (uint64_t s : {1, 2, 3, 4, 5, 8, 10, 16, 32, 64}) {
    auto os = OnlineSchedule::Create(s);
    ASSERT_TRUE(os.ok());
    for (uint64_t n = 1; n <= 2000; ++n) {
      if (n > 600 && n % 7 != 0 && n != 2000) {
        ASSERT_TRUE(os->Advance().ok());
        continue;
      }
      OnlineSchedule stopped = *os;
      ASSERT_TRUE(stopped.Finish().ok());
      Schedule m;
      Status replayed = Replay(stopped.schedule(), {Level{"memory", s, 0, 0}}, {1, 0}, &m);
      ASSERT_TRUE(replayed.ok()) << "N=" << n << " s=" << s << ": " << replayed.ToString();
      EXPECT_EQ(stopped.schedule().steps, n);
      EXPECT_EQ(stopped.schedule().forward_steps, m.forward_steps);
      EXPECT_LE(m.peak_slots[0], s);
      const uint64_t offline = *RevolveForwardSteps(n, s);
      EXPECT_GE(m.forward_steps, offline) << "N=" << n << " s=" << s;
      EXPECT_LE(m.forward_steps, offline + (n - 1)) << "N=" << n << " s=" << s;
      const uint64_t t = RepetitionBound(n, s);
      EXPECT_LE(MostRepetitions(stopped.schedule()), t) << "N=" << n << " s=" << s;
      EXPECT_LE(m.forward_steps, t * n) << "N=" << n << " s=" << s;
      ASSERT_TRUE(os->Advance().ok());
    }
  }
}

TEST(OnlineSchedule, StoresEveryStateWhileSlotsLast) {
  for (uint64_t s = 1; s <= 20; ++s) {
    for (uint64_t n = 1; n <= s; ++n) {
      Schedule sched = RunOnline(n, s);
      Schedule m;
      ASSERT_TRUE(Replay(sched, {Level{"memory", s, 0, 0}}, {1, 0}, &m).ok());
      EXPECT_EQ(m.forward_steps, n - 1);
    }
  }
}

TEST(OnlineSchedule, RunStoppedAtRandomStepsReversesExactly) {
  std::mt19937_64 rng(60);
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t s = std::uniform_int_distribution<uint64_t>(1, 40)(rng);
    const uint64_t n = std::uniform_int_distribution<uint64_t>(1, 5000)(rng);
    Schedule sched = RunOnline(n, s);
    Schedule m;
    Status replayed = Replay(sched, {Level{"memory", s, 0, 0}}, {1, 0}, &m);
    ASSERT_TRUE(replayed.ok()) << "N=" << n << " s=" << s << ": " << replayed.ToString();
    EXPECT_LE(m.forward_steps, *RevolveForwardSteps(n, s) + (n - 1)) << "N=" << n << " s=" << s;
    EXPECT_LE(MostRepetitions(sched), RepetitionBound(n, s)) << "N=" << n << " s=" << s;
  }
}

TEST(OnlineSchedule, HoldsNoMoreThanItsSlotsDuringTheForwardPass) {
  auto os = OnlineSchedule::Create(6);
  ASSERT_TRUE(os.ok());
  for (int t = 0; t < 500; ++t) {
    ASSERT_TRUE(os->Advance().ok());
    std::vector<uint64_t> held = os->Checkpoints();
    ASSERT_LE(held.size(), 6u);
    EXPECT_EQ(held.front(), 0u);  // x_0 is never dropped
    EXPECT_TRUE(std::is_sorted(held.begin(), held.end()));
  }
}

TEST(OnlineSchedule, LevelIsTheOneGiven) {
  auto os = OnlineSchedule::Create(3, 2);
  ASSERT_TRUE(os.ok());
  for (int t = 0; t < 10; ++t) ASSERT_TRUE(os->Advance().ok());
  ASSERT_TRUE(os->Finish().ok());
  for (const Action& a : os->schedule().actions) {
    if (a.kind == ActionKind::kWrite || a.kind == ActionKind::kRead ||
        a.kind == ActionKind::kFree) {
      EXPECT_EQ(a.level, 2);
    }
  }
}

TEST(OnlineSchedule, RejectsNoSlotsAndUseAfterFinish) {
  EXPECT_EQ(OnlineSchedule::Create(0).status().code(), Code::kInvalidArgument);
  auto os = OnlineSchedule::Create(2);
  ASSERT_TRUE(os.ok());
  ASSERT_TRUE(os->Finish().ok());
  EXPECT_EQ(os->Advance().status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(os->Finish().status().code(), Code::kFailedPrecondition);
}

}  // namespace
}  // namespace adjsnap::schedule
