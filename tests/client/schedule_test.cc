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

}  // namespace
}  // namespace adjsnap::schedule
