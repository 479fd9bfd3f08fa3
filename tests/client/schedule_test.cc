#include "adjsnap/schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <queue>
#include <random>

namespace adjsnap::schedule {
namespace {

TEST(Revolve, ForwardStepCountsMatchPublishedValues) {
  EXPECT_EQ(*RevolveForwardSteps(10, 1), 45u);
  EXPECT_EQ(*RevolveForwardSteps(10, 2), 20u);
  EXPECT_EQ(*RevolveForwardSteps(10, 3), 15u);
  EXPECT_EQ(*RevolveForwardSteps(20, 3), 45u);
  EXPECT_EQ(*RevolveForwardSteps(100, 10), 222u);
  EXPECT_EQ(*RevolveForwardSteps(10, 10), 9u);  // store-all: one sweep of N-1 steps
  EXPECT_FALSE(RevolveForwardSteps(10, 0).ok());
}

TEST(Revolve, ClosedFormEqualsTheRecurrence) {
  auto table = RevolveForwardStepsTable(200, 24);
  for (uint64_t s = 1; s <= 24; ++s) {
    for (uint64_t n = 1; n <= 200; ++n) {
      ASSERT_EQ(*RevolveForwardSteps(n, s), table[s][n]) << "N=" << n << " s=" << s;
    }
  }
}

TEST(Revolve, ReplayedSchedulesCountExactlyTheFormula) {
  for (uint64_t s = 1; s <= 6; ++s) {
    for (uint64_t n = 1; n <= 60; ++n) {
      auto sched = Revolve(n, s);
      ASSERT_TRUE(sched.ok()) << sched.status().ToString();
      Schedule m;
      ASSERT_TRUE(Replay(*sched, {Level{"memory", s, 0, 0}}, {1, 0}, &m).ok());
      EXPECT_EQ(m.forward_steps, *RevolveForwardSteps(n, s)) << "N=" << n << " s=" << s;
      EXPECT_LE(m.peak_slots[0], s);
    }
  }
}

// Least total cost over *every* action sequence (not only nested ones), by Dijkstra over
// solver states: next step to reverse, current state, and what each level holds.
double BruteForce(uint64_t n, const std::vector<Level>& levels, StepCosts c) {
  const int k = static_cast<int>(levels.size());
  struct S {
    uint64_t next;
    int current;  // -1: none
    std::vector<uint32_t> held;  // bitmask of states per level
    bool operator<(const S& o) const {
      return std::tie(next, current, held) < std::tie(o.next, o.current, o.held);
    }
  };
  std::map<S, double> dist;
  using Item = std::pair<double, S>;
  auto cmp = [](const Item& a, const Item& b) { return a.first > b.first; };
  std::priority_queue<Item, std::vector<Item>, decltype(cmp)> q(cmp);
  S start{n, 0, std::vector<uint32_t>(k, 0)};
  dist[start] = 0;
  q.push({0, start});
  auto relax = [&](const S& s, double d) {
    auto it = dist.find(s);
    if (it == dist.end() || d < it->second) {
      dist[s] = d;
      q.push({d, s});
    }
  };
  while (!q.empty()) {
    auto [d, s] = q.top();
    q.pop();
    if (d > dist[s]) continue;
    if (s.next == 0) return d;
    if (s.current >= 0 && static_cast<uint64_t>(s.current) + 1 < s.next) {  // advance one step
      S t = s;
      t.current++;
      relax(t, d + c.forward);
    }
    if (s.current >= 0 && static_cast<uint64_t>(s.current) + 1 == s.next) {  // reverse
      S t = s;
      t.next--;
      t.current = -1;
      // States >= next are useless from now on; drop them so equal situations merge.
      for (auto& m : t.held) m &= (1u << t.next) - 1;
      relax(t, d + c.backward);
    }
    for (int l = 0; l < k; ++l) {
      if (s.current >= 0 && !(s.held[l] >> s.current & 1) &&
          (levels[l].slots == kUnlimited ||
           static_cast<uint64_t>(__builtin_popcount(s.held[l])) < levels[l].slots)) {
        S t = s;
        t.held[l] |= 1u << s.current;
        relax(t, d + levels[l].write);
      }
      for (uint64_t x = 0; x < s.next; ++x) {
        if (!(s.held[l] >> x & 1)) continue;
        S r = s;
        r.current = static_cast<int>(x);
        relax(r, d + levels[l].read);
        S f = s;
        f.held[l] &= ~(1u << x);
        relax(f, d);
      }
    }
  }
  return -1;
}

TEST(HRevolve, MatchesExhaustiveSearchWithAsymmetricCosts) {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> cost(0, 9);
  std::uniform_int_distribution<int> slots(0, 3);
  int checked = 0;
  for (int trial = 0; trial < 120; ++trial) {
    int k = 1 + trial % 3;
    std::vector<Level> levels;
    for (int l = 0; l < k; ++l) {
      levels.push_back(Level{"L" + std::to_string(l), static_cast<uint64_t>(slots(rng)),
                             static_cast<double>(cost(rng)), static_cast<double>(cost(rng))});
    }
    if (trial % 4 == 0) levels.back().slots = kUnlimited;
    StepCosts c{static_cast<double>(1 + cost(rng)), static_cast<double>(cost(rng))};
    uint64_t n = 1 + trial % 6;
    bool any_slot = false;
    for (const auto& l : levels) any_slot |= l.slots > 0;
    auto sched = HRevolve(n, levels, c);
    if (!any_slot && n > 1) {
      EXPECT_FALSE(sched.ok());
      continue;
    }
    ASSERT_TRUE(sched.ok()) << sched.status().ToString();
    Schedule m;
    ASSERT_TRUE(Replay(*sched, levels, c, &m).ok()) << Replay(*sched, levels, c, &m).ToString();
    EXPECT_DOUBLE_EQ(m.cost, sched->cost) << "trial " << trial;
    EXPECT_DOUBLE_EQ(sched->cost, BruteForce(n, levels, c)) << "trial " << trial << " N=" << n;
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(DiskRevolve, SwappingReadAndWriteCostsChangesTheOptimum) {
  // With reads dear and writes cheap the optimum re-reads less; swapped, it writes less. An
  // implementation that swaps the two arguments fails one of these exhaustive comparisons.
  StepCosts c{2, 1};
  auto cheap_write = DiskRevolve(6, 1, /*disk_write=*/1, /*disk_read=*/7, c);
  auto cheap_read = DiskRevolve(6, 1, /*disk_write=*/7, /*disk_read=*/1, c);
  ASSERT_TRUE(cheap_write.ok() && cheap_read.ok());
  std::vector<Level> a = {{"memory", 1, 0, 0}, {"disk", kUnlimited, 1, 7}};
  std::vector<Level> b = {{"memory", 1, 0, 0}, {"disk", kUnlimited, 7, 1}};
  EXPECT_DOUBLE_EQ(cheap_write->cost, BruteForce(6, a, c));
  EXPECT_DOUBLE_EQ(cheap_read->cost, BruteForce(6, b, c));
  EXPECT_NE(cheap_write->cost, cheap_read->cost);
  // Forward and backward step costs are not interchangeable either.
  auto fwd_dear = DiskRevolve(6, 1, 3, 3, {5, 1});
  auto bwd_dear = DiskRevolve(6, 1, 3, 3, {1, 5});
  ASSERT_TRUE(fwd_dear.ok() && bwd_dear.ok());
  EXPECT_DOUBLE_EQ(fwd_dear->cost, BruteForce(6, {{"m", 1, 0, 0}, {"d", kUnlimited, 3, 3}}, {5, 1}));
  EXPECT_DOUBLE_EQ(bwd_dear->cost, BruteForce(6, {{"m", 1, 0, 0}, {"d", kUnlimited, 3, 3}}, {1, 5}));
}

TEST(DiskRevolve, UsesTheDiskOnlyWhenItPays) {
  // Free disk: never recompute. Prohibitive disk: Revolve within memory.
  auto free_disk = DiskRevolve(30, 2, 0, 0, {1, 0});
  ASSERT_TRUE(free_disk.ok());
  EXPECT_EQ(free_disk->forward_steps, 29u);
  auto dear_disk = DiskRevolve(30, 2, 1e9, 1e9, {1, 0});
  ASSERT_TRUE(dear_disk.ok());
  EXPECT_EQ(dear_disk->forward_steps, *RevolveForwardSteps(30, 2));
  EXPECT_EQ(dear_disk->writes[1], 0u);
}

TEST(StoreAll, ReplaysWithOneSweep) {
  Level host{"host", kUnlimited, 2, 3};
  Schedule s = StoreAll(7, host, 0, {1, 1});
  Schedule m;
  ASSERT_TRUE(Replay(s, {host}, {1, 1}, &m).ok());
  EXPECT_EQ(m.forward_steps, 6u);
  EXPECT_DOUBLE_EQ(m.cost, s.cost);
  EXPECT_DOUBLE_EQ(s.RecomputationFactor(), 1.0);
}

// Forward steps computed over those a run without storage limits computes (x_1 .. x_{N-1}):
// 1 when nothing is recomputed, the average number of times a step is computed otherwise.
TEST(RecomputationFactor, IsOneWithoutRecomputationAndNeverBelowIt) {
  EXPECT_DOUBLE_EQ(StoreAll(2000, Level{"host", kUnlimited, 0, 0}, 0, {1, 0}).RecomputationFactor(),
                   1.0);
  EXPECT_DOUBLE_EQ(StoreAll(1, Level{"host", kUnlimited, 0, 0}, 0, {1, 0}).RecomputationFactor(),
                   1.0);
  // One slot, 10 steps: p(10, 1) = 45 forward steps, step t computed 10 - t times, 5 on average.
  auto one_slot = Revolve(10, 1);
  ASSERT_TRUE(one_slot.ok());
  EXPECT_EQ(one_slot->forward_steps, 45u);
  EXPECT_DOUBLE_EQ(one_slot->RecomputationFactor(), 5.0);
  for (uint64_t n : {2, 3, 10, 57, 200}) {
    for (uint64_t s : {1, 2, 5, 24}) {
      auto r = Revolve(n, s);
      ASSERT_TRUE(r.ok()) << n << " " << s;
      EXPECT_GE(r->RecomputationFactor(), 1.0) << n << " steps, " << s << " slots";
    }
  }
}

TEST(Replay, RejectsASchedulethatReversesFromTheWrongState) {
  Schedule bad;
  bad.steps = 2;
  bad.actions = {{ActionKind::kWrite, 0, 0, 0},
                 {ActionKind::kReverse, 2, 0, -1}};  // step 2 needs x_1, the solver holds x_0
  Schedule m;
  Status s = Replay(bad, {Level{"memory", 4, 0, 0}}, {1, 0}, &m);
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("action 1"), std::string::npos) << s.message();
}

TEST(HRevolve, RefusesTablesTooLargeToCompute) {
  auto s = HRevolve(100000, {{"a", 50, 0, 0}, {"b", 50, 1, 1}, {"c", kUnlimited, 2, 2}}, {1, 0});
  EXPECT_EQ(s.status().code(), Code::kResourceExhausted);
  // 200 steps over two 198-slot levels: ~3e9 table operations, 18 s when it was admitted.
  auto slow = HRevolve(200, {{"a", 198, 1, 1}, {"b", 198, 5, 5}}, {1, 2});
  EXPECT_EQ(slow.status().code(), Code::kResourceExhausted);
  EXPECT_NE(slow.status().message().find("use fewer steps per segment"), std::string::npos)
      << slow.status().message();
  // A table whose work is past 2^64 is refused the same way (its work was once converted to an
  // integer it does not fit).
  auto huge = HRevolve(uint64_t{1} << 31, {{"a", 1u << 30, 1, 1}, {"b", kUnlimited, 5, 5}}, {1, 2});
  EXPECT_EQ(huge.status().code(), Code::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("needs ~"), std::string::npos) << huge.status().message();
  EXPECT_NE(huge.status().message().find("e+"), std::string::npos) << huge.status().message();
  // Four levels of 2^16 tracked slots: 2^64 slot combinations, which wrapped to 0 as an integer
  // count and made the table look empty.
  const uint64_t s16 = (uint64_t{1} << 16) - 1;
  auto wrapped = HRevolve(
      1u << 17, {{"a", s16, 1, 1}, {"b", s16, 2, 2}, {"c", s16, 3, 3}, {"d", s16, 4, 4}}, {1, 2});
  EXPECT_EQ(wrapped.status().code(), Code::kResourceExhausted) << wrapped.status().ToString();
  // A third of the bound is still planned.
  EXPECT_TRUE(HRevolve(200, {{"a", 60, 1, 1}, {"b", 60, 5, 5}}, {1, 2}).ok());
}

// Levels with random slots and costs; the first free and small, the rest dearer and larger, as
// host, local disk and shared disk are.
std::vector<Level> RandomLevels(std::mt19937& rng, int k, uint64_t max_slots) {
  std::uniform_real_distribution<double> cost(0, 3);
  std::vector<Level> levels;
  for (int l = 0; l < k; ++l) {
    uint64_t slots = 1 + rng() % (l == 0 ? std::max<uint64_t>(max_slots / 8, 1) : max_slots);
    levels.push_back(Level{"L" + std::to_string(l), slots, l == 0 ? 0.0 : cost(rng) * l,
                           l == 0 ? 0.0 : cost(rng) * l});
  }
  return levels;
}

PlanOptions FastOnly() {
  PlanOptions o;
  o.exact = false;
  return o;
}

TEST(MultiLevel, BinomialCheckpointsReachRevolvesForwardStepCount) {
  // With free storage the plan's forward steps are p(N, s) over all slots: the split rule keeps
  // every segment on the closed form's linear pieces.
  for (uint64_t s = 1; s <= 12; ++s) {
    for (uint64_t n = 2; n <= 150; ++n) {
      auto plan = MultiLevel(n, {Level{"memory", s, 0, 0}}, {1, 0}, FastOnly());
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->forward_steps, *RevolveForwardSteps(n, s)) << "N=" << n << " s=" << s;
    }
  }
  for (uint64_t n : {1000u, 2000u, 12345u}) {
    auto plan = MultiLevel(n, {{"host", 16, 0, 0}, {"disk", 100, 0, 0}}, {1, 0}, FastOnly());
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->forward_steps, *RevolveForwardSteps(n, 116)) << "N=" << n;
  }
}

TEST(MultiLevel, EveryPlanReplaysAndItsCountsMatchTheReplay) {
  std::mt19937 rng(60);
  std::uniform_real_distribution<double> step(0.5, 2);
  int planned = 0;
  for (int trial = 0; trial < 110; ++trial) {
    const int k = 1 + trial % 3;
    const uint64_t n = trial < 100 ? 2 + rng() % 300 : 1000 + rng() % 5000;
    std::vector<Level> levels = RandomLevels(rng, k, trial < 100 ? 40 : 600);
    StepCosts c{step(rng), step(rng)};
    {
      auto plan = MultiLevel(n, levels, c, FastOnly());
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      Schedule m;
      Status replayed = Replay(*plan, levels, c, &m);
      ASSERT_TRUE(replayed.ok()) << "trial " << trial << " " << plan->method << ": "
                                 << replayed.ToString();
      EXPECT_NEAR(m.cost, plan->cost, 1e-9 * plan->cost) << "trial " << trial;
      EXPECT_EQ(m.forward_steps, plan->forward_steps);
      for (int l = 0; l < k; ++l) EXPECT_LE(m.peak_slots[l], levels[l].slots);
      // Counted without actions, the same plan: same method, cost and per-level counts.
      auto counted = MultiLevel(n, levels, c, [] {
        PlanOptions q = FastOnly();
        q.actions = false;
        return q;
      }());
      ASSERT_TRUE(counted.ok());
      EXPECT_TRUE(counted->actions.empty());
      EXPECT_EQ(counted->method, plan->method) << "trial " << trial;
      EXPECT_EQ(counted->forward_steps, m.forward_steps) << "trial " << trial;
      EXPECT_NEAR(counted->cost, m.cost, 1e-9 * m.cost) << "trial " << trial;
      EXPECT_EQ(counted->writes, m.writes) << "trial " << trial << " " << plan->method;
      EXPECT_EQ(counted->reads, m.reads) << "trial " << trial << " " << plan->method;
      EXPECT_EQ(counted->peak_slots, m.peak_slots) << "trial " << trial << " " << plan->method;
      ++planned;
    }
  }
  EXPECT_EQ(planned, 110);
}

TEST(MultiLevel, IsWithinOnePercentOfTheExactTableWhereItIsComputable) {
  std::mt19937 rng(2060);
  std::uniform_real_distribution<double> step(0.2, 2);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int k = 1 + trial % 3;
    const uint64_t n = 2 + rng() % (k == 3 ? 60 : 300);
    std::vector<Level> levels = RandomLevels(rng, k, k == 3 ? 6 : 20);
    StepCosts c{step(rng), step(rng)};
    auto exact = HRevolve(n, levels, c);
    if (!exact.ok()) continue;
    auto plan = MultiLevel(n, levels, c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_LE(plan->cost, exact->cost * 1.01) << "trial " << trial << " N=" << n;
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

// Revolve's schedule of least forward steps on one level, and store-all where it fits, each
// costed on that level by Replay: the plan over all the levels is never dearer.
TEST(MultiLevel, NeverCostsMoreThanRevolveOnAnyOneLevelOrStoreAll) {
  std::mt19937 rng(6060);
  std::uniform_real_distribution<double> step(0.2, 2);
  int compared = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const int k = 2 + trial % 2;
    const uint64_t n = 200 + rng() % 600;
    std::vector<Level> levels = RandomLevels(rng, k, n + n / 4);
    StepCosts c{step(rng), step(rng)};
    auto plan = MultiLevel(n, levels, c);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (int l = 0; l < k; ++l) {
      if (levels[l].slots >= n) {
        Schedule all = StoreAll(n, levels[l], l, c);
        EXPECT_LE(plan->cost, all.cost * (1 + 1e-12)) << "trial " << trial << " level " << l;
        continue;
      }
      auto revolve = Revolve(n, levels[l].slots);
      ASSERT_TRUE(revolve.ok()) << revolve.status().ToString();
      Schedule m;
      ASSERT_TRUE(Replay(*revolve, {levels[l]}, c, &m).ok());
      EXPECT_LE(plan->cost, m.cost * (1 + 1e-12)) << "trial " << trial << " level " << l;
      ++compared;
    }
    // No plan recomputes less than Revolve with every slot.
    uint64_t slots = 0;
    for (const auto& l : levels) slots = std::min<uint64_t>(slots + l.slots, n);
    EXPECT_GE(plan->forward_steps, *RevolveForwardSteps(n, slots));
  }
  EXPECT_GT(compared, 16);
}

TEST(MultiLevel, TheDocsExampleUsesTheDiskTierWithinOneAndAHalfRecomputation) {
  // 2000 steps of 64 MiB; 4 GiB of host tier (64 slots) and 60 GiB of disk (960).
  auto plan = MultiLevel(2000, {{"host", 64, 0, 0}, {"disk", 960, 0, 0}}, {1, 0});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->method, "multistage");
  EXPECT_EQ(plan->forward_steps, *RevolveForwardSteps(2000, 64 + 960));
  EXPECT_GT(plan->peak_slots[1], 0u);
  EXPECT_LE(plan->RecomputationFactor(), 1.5);
  // Disk dearer than recomputation: the plan weighs it rather than filling it.
  auto dear = MultiLevel(2000, {{"host", 64, 0, 0}, {"disk", 960, 50, 50}}, {1, 1});
  ASSERT_TRUE(dear.ok());
  EXPECT_LT(dear->writes[1], plan->writes[1]);
}

TEST(MultiLevel, PlansOneHundredThousandStepsOverThreeLevels) {
  // Host, local disk and shared disk with asymmetric costs; the schedule is emitted and replayed
  // (docs/schedules.md gives the time this takes).
  const std::vector<Level> levels = {
      {"host", 64, 0.01, 0.01}, {"disk", 960, 0.3, 0.2}, {"shared-disk", 5000, 1, 0.8}};
  auto plan = MultiLevel(100000, levels, {0.5, 1});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  Schedule m;
  ASSERT_TRUE(Replay(*plan, levels, {0.5, 1}, &m).ok());
  EXPECT_NEAR(m.cost, plan->cost, 1e-9 * plan->cost);
  int used = 0;
  for (size_t l = 0; l < levels.size(); ++l) {
    EXPECT_LE(m.peak_slots[l], levels[l].slots);
    used += m.peak_slots[l] > 0;
  }
  EXPECT_GE(used, 2) << plan->method;
  // Cheaper than Revolve on the host tier alone: p(N, 64) steps and nothing else.
  EXPECT_LT(plan->cost, 0.5 * *RevolveForwardSteps(100000, 64) + 100000 * 1.0);
  // With free storage, every slot of the three levels: Revolve's count over all of them.
  auto free_storage = MultiLevel(
      100000, {{"host", 64, 0, 0}, {"disk", 960, 0, 0}, {"shared-disk", 5000, 0, 0}}, {1, 0});
  ASSERT_TRUE(free_storage.ok());
  EXPECT_EQ(free_storage->forward_steps, *RevolveForwardSteps(100000, 64 + 960 + 5000));
  EXPECT_EQ(free_storage->method, "multistage");
}

TEST(MultiLevel, StoresAllWhereALevelHoldsEveryState) {
  // The exact table and binomial checkpoints tie with store-all here; store-all names the plan.
  auto host = MultiLevel(100, {{"host", 100, 0, 0}, {"disk", kUnlimited, 0, 0}}, {1, 0});
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->method, "store-all");
  EXPECT_EQ(host->forward_steps, 99u);
  EXPECT_EQ(host->peak_slots, (std::vector<uint64_t>{100, 0}));
  // Only the disk holds them all, and its traffic costs less than recomputing.
  auto disk = MultiLevel(100, {{"host", 4, 0, 0}, {"disk", kUnlimited, 0.1, 0.1}}, {1, 0});
  ASSERT_TRUE(disk.ok());
  EXPECT_EQ(disk->forward_steps, 99u);
  EXPECT_GT(disk->peak_slots[1], 0u);
}

TEST(MultiLevel, RefusesPlansWithoutASlotOrSteps) {
  EXPECT_EQ(MultiLevel(10, {{"host", 0, 0, 0}}, {1, 0}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(MultiLevel(0, {{"host", 4, 0, 0}}, {1, 0}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(MultiLevel(10, {}, {1, 0}).status().code(), Code::kInvalidArgument);
  // One step needs no slot.
  auto one = MultiLevel(1, {{"host", 0, 0, 0}}, {1, 2});
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->cost, 2);
}

}  // namespace
}  // namespace adjsnap::schedule
