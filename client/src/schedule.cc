// Closed-form Revolve (Binomial, RevolveForwardSteps and its table), store-all, and Replay,
// which checks a schedule's actions and measures what they cost. The planners: the exact
// H-Revolve table in schedule_hrevolve.cc, the fast multi-level one in schedule_multilevel.cc
// and schedule_candidates.cc.
#include "adjsnap/schedule.h"

#include <algorithm>
#include <limits>
#include <set>

#include "schedule_internal.h"

namespace adjsnap::schedule {

double Schedule::RecomputationFactor() const {
  // Over steps - 1, not steps: forward_steps counts only the advances the reverse pass needs
  // (store-all advances N-1 times), so dividing by N put store-all below 1.
  if (steps <= 1) return 1.0;
  return static_cast<double>(forward_steps) / static_cast<double>(steps - 1);
}

uint64_t Binomial(uint64_t n, uint64_t k) {
  if (k > n) return 0;
  k = std::min(k, n - k);
  unsigned __int128 r = 1;
  for (uint64_t i = 1; i <= k; ++i) {
    r = r * (n - k + i) / i;  // exact: r is C(n-k+i, i) after this step
    if (r > std::numeric_limits<uint64_t>::max()) return std::numeric_limits<uint64_t>::max();
  }
  return static_cast<uint64_t>(r);
}

Result<uint64_t> RevolveForwardSteps(uint64_t steps, uint64_t slots) {
  if (steps <= 1) return uint64_t{0};
  if (slots == 0) {
    return Status::InvalidArgument("reversing " + std::to_string(steps) +
                                   " steps needs at least one checkpoint slot");
  }
  uint64_t t = 0;
  while (Binomial(slots + t, slots) < steps) ++t;
  // beta(s+1, t-1) = C(s+t, s+1) = C(s+t, t-1)
  return t * steps - Binomial(slots + t, t - 1);
}

std::vector<std::vector<uint64_t>> RevolveForwardStepsTable(uint64_t max_steps,
                                                            uint64_t max_slots) {
  // p[s][l] = min_{1<=j<l} j + p[s-1][l-j] + p[s][j]; p[s][1] = 0; p[1][l] = l(l-1)/2.
  std::vector<std::vector<uint64_t>> p(max_slots + 1, std::vector<uint64_t>(max_steps + 1, 0));
  for (uint64_t s = 1; s <= max_slots; ++s) {
    for (uint64_t l = 2; l <= max_steps; ++l) {
      if (s == 1) {
        p[s][l] = l * (l - 1) / 2;
        continue;
      }
      uint64_t best = std::numeric_limits<uint64_t>::max();
      for (uint64_t j = 1; j < l; ++j) best = std::min(best, j + p[s - 1][l - j] + p[s][j]);
      p[s][l] = best;
    }
  }
  return p;
}
Schedule StoreAll(uint64_t steps, const Level& level, int level_index, StepCosts costs) {
  Schedule s;
  s.method = "store-all";
  s.steps = steps;
  for (uint64_t t = 0; t < steps; ++t) {
    s.actions.push_back({ActionKind::kWrite, t, 0, level_index});
    if (t + 1 < steps) s.actions.push_back({ActionKind::kAdvance, t, t + 1, -1});
  }
  for (uint64_t t = steps; t-- > 0;) {
    s.actions.push_back({ActionKind::kRead, t, 0, level_index});
    s.actions.push_back({ActionKind::kReverse, t + 1, 0, -1});
    s.actions.push_back({ActionKind::kFree, t, 0, level_index});
  }
  s.forward_steps = steps ? steps - 1 : 0;
  s.cost = s.forward_steps * costs.forward + steps * costs.backward +
           steps * (level.write + level.read);
  s.writes.assign(level_index + 1, 0);
  s.reads.assign(level_index + 1, 0);
  s.peak_slots.assign(level_index + 1, 0);
  s.writes[level_index] = s.reads[level_index] = s.peak_slots[level_index] = steps;
  return s;
}

Status Replay(const Schedule& schedule, const std::vector<Level>& levels, StepCosts costs,
              Schedule* m) {
  const size_t k = levels.size();
  *m = Schedule();
  m->steps = schedule.steps;
  m->writes.assign(k, 0);
  m->reads.assign(k, 0);
  m->peak_slots.assign(k, 0);
  std::vector<std::multiset<uint64_t>> stored(k);
  bool have = true;  // the solver starts holding x_0
  uint64_t current = 0;
  uint64_t next_reverse = schedule.steps;
  for (size_t i = 0; i < schedule.actions.size(); ++i) {
    const Action& a = schedule.actions[i];
    auto fail = [&](const std::string& why) {
      return Status::Internal("action " + std::to_string(i) + ": " + why);
    };
    bool needs_level = a.kind == ActionKind::kWrite || a.kind == ActionKind::kRead ||
                       a.kind == ActionKind::kFree;
    if (needs_level && (a.level < 0 || static_cast<size_t>(a.level) >= k)) {
      return fail("level " + std::to_string(a.level) + " does not exist");
    }
    switch (a.kind) {
      case ActionKind::kAdvance:
        if (!have || current != a.a || a.b <= a.a || a.b >= next_reverse) {
          return fail("advance " + std::to_string(a.a) + "->" + std::to_string(a.b) +
                      " from state " + (have ? std::to_string(current) : "none"));
        }
        m->forward_steps += a.b - a.a;
        m->cost += (a.b - a.a) * costs.forward;
        current = a.b;
        break;
      case ActionKind::kWrite: {
        if (!have || current != a.a) return fail("write of a state not current");
        auto& s = stored[a.level];
        if (levels[a.level].slots != kUnlimited && s.size() >= levels[a.level].slots) {
          return fail("level " + levels[a.level].name + " is full");
        }
        s.insert(a.a);
        m->writes[a.level]++;
        m->peak_slots[a.level] = std::max<uint64_t>(m->peak_slots[a.level], s.size());
        m->cost += levels[a.level].write;
        break;
      }
      case ActionKind::kRead:
        if (!stored[a.level].count(a.a)) return fail("read of a state not stored there");
        have = true;
        current = a.a;
        m->reads[a.level]++;
        m->cost += levels[a.level].read;
        break;
      case ActionKind::kFree: {
        auto it = stored[a.level].find(a.a);
        if (it == stored[a.level].end()) return fail("free of a state not stored there");
        stored[a.level].erase(it);
        break;
      }
      case ActionKind::kReverse:
        if (a.a != next_reverse) {
          return fail("reverse of step " + std::to_string(a.a) + " when step " +
                      std::to_string(next_reverse) + " is next");
        }
        if (!have || current + 1 != a.a) {
          return fail("reverse of step " + std::to_string(a.a) + " from state " +
                      (have ? std::to_string(current) : "none"));
        }
        --next_reverse;
        have = false;  // the adjoint step consumes it
        m->cost += costs.backward;
        break;
    }
  }
  if (next_reverse != 0) {
    return Status::Internal("schedule ends with step " + std::to_string(next_reverse) +
                            " not reversed");
  }
  for (size_t l = 0; l < k; ++l) {
    if (!stored[l].empty()) return Status::Internal("level " + levels[l].name + " not freed");
  }
  return Status::Ok();
}

namespace detail {

// Checks `s`'s actions with Replay and takes its counts from what Replay measured: forward
// steps, writes, reads, peak slots, and the cost too when `with_cost`.
Status TakeReplayedCounts(Schedule* s, const std::vector<Level>& levels, StepCosts costs,
                          bool with_cost) {
  Schedule measured;
  ADJSNAP_RETURN_IF_ERROR(Replay(*s, levels, costs, &measured));
  s->forward_steps = measured.forward_steps;
  if (with_cost) s->cost = measured.cost;
  s->writes = std::move(measured.writes);
  s->reads = std::move(measured.reads);
  s->peak_slots = std::move(measured.peak_slots);
  return Status::Ok();
}

}  // namespace detail

}  // namespace adjsnap::schedule
