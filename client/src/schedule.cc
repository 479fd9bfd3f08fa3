#include "adjsnap/schedule.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

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

namespace {

// The exact dynamic program. G(l, c, k): least cost to reverse l steps when the first state
// of the segment is current, is stored on level k, and `c` holds the free slots of every level
// (that state's slot excluded). Choices at the start of a segment:
//   kReverseOne  l == 1: reverse it.
//   kSweep       advance l-1 steps without storing, reverse the last, read the start back,
//                then G(l-1, c, k).
//   kSplit       advance j steps, write x_j to level k2, G(l-j, c - e_k2, k2) for the right
//                part, free x_j, read the start back, G(j, c, k) for the left part.
//   kMove        write the start to level k2 whose reads are cheaper, free it on k:
//                G(l, c - e_k2 + e_k, k2).
// Levels with at least steps-1 slots never run out and are not tracked in `c`.
enum Choice : uint8_t { kNone, kReverseOne, kSweep, kSplit, kMove };

class Table {
 public:
  Table(uint64_t steps, const std::vector<Level>& levels, StepCosts costs)
      : n_(steps), levels_(levels), costs_(costs), k_(static_cast<int>(levels.size())) {
    radix_.assign(k_, 1);
    stride_.assign(k_, 0);
    size_t combos = 1;
    for (int i = 0; i < k_; ++i) {
      bool tracked = levels[i].slots != kUnlimited && levels[i].slots + 1 < n_;
      radix_[i] = tracked ? levels[i].slots + 1 : 1;
      stride_[i] = combos;
      combos *= radix_[i];  // wraps for a table far past the work bound: see combos_estimate_
      combos_estimate_ *= static_cast<double>(radix_[i]);
    }
    combos_ = combos;
    // Levels by read cost, so a segment's kMove targets are computed before it.
    order_.resize(k_);
    for (int i = 0; i < k_; ++i) order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](int a, int b) { return levels_[a].read < levels_[b].read; });
  }

  // From the slot combinations counted in floating point: the integer count wraps past 2^64
  // (four levels of 10^5 tracked slots), and a wrapped count could look small enough to fill.
  double EstimatedWork() const {
    return static_cast<double>(n_) * n_ * combos_estimate_ * k_ * k_ / 2.0;
  }

  void Fill() {
    size_t total = (n_ + 1) * k_ * combos_;
    cost_.assign(total, kInf);
    choice_.assign(total, kNone);
    arg_j_.assign(total, 0);
    arg_k_.assign(total, 0);
    std::vector<uint64_t> c(k_);
    for (uint64_t l = 1; l <= n_; ++l) {
      for (int k : order_) {
        for (size_t ci = 0; ci < combos_; ++ci) {
          Decode(ci, &c);
          Solve(l, k, ci, c);
        }
      }
    }
  }

  // Best cost with x_0 current and nothing stored.
  double Top(int* first_level) const {
    if (n_ == 1) {
      *first_level = -1;
      return costs_.backward;
    }
    double best = kInf;
    *first_level = -1;
    for (int k = 0; k < k_; ++k) {
      if (levels_[k].slots == 0) continue;
      size_t ci = Full() - (radix_[k] > 1 ? stride_[k] : 0);
      double v = levels_[k].write + cost_[Index(n_, k, ci)];
      if (v < best) {
        best = v;
        *first_level = k;
      }
    }
    return best;
  }

  // Appends the actions of G(l, c, k) for the segment starting at state a; returns the level
  // where x_a is stored when the segment is done (a kMove relocates it).
  int Emit(uint64_t l, int k, size_t ci, uint64_t a, std::vector<Action>* out) const {
    size_t i = Index(l, k, ci);
    switch (choice_[i]) {
      case kReverseOne:
        out->push_back({ActionKind::kReverse, a + 1, 0, -1});
        return k;
      case kSweep:
        out->push_back({ActionKind::kAdvance, a, a + l - 1, -1});
        out->push_back({ActionKind::kReverse, a + l, 0, -1});
        out->push_back({ActionKind::kRead, a, 0, k});
        return Emit(l - 1, k, ci, a, out);
      case kSplit: {
        uint64_t j = arg_j_[i];
        int k2 = arg_k_[i];
        out->push_back({ActionKind::kAdvance, a, a + j, -1});
        out->push_back({ActionKind::kWrite, a + j, 0, k2});
        int where = Emit(l - j, k2, Take(ci, k2), a + j, out);
        out->push_back({ActionKind::kFree, a + j, 0, where});
        out->push_back({ActionKind::kRead, a, 0, k});
        return Emit(j, k, ci, a, out);
      }
      case kMove: {
        int k2 = arg_k_[i];
        out->push_back({ActionKind::kWrite, a, 0, k2});
        out->push_back({ActionKind::kFree, a, 0, k});
        return Emit(l, k2, Give(Take(ci, k2), k), a, out);
      }
      default:
        return k;  // unreachable for a filled, feasible table
    }
  }

  size_t Full() const {
    size_t ci = 0;
    for (int i = 0; i < k_; ++i) ci += (radix_[i] - 1) * stride_[i];
    return ci;
  }
  size_t Take(size_t ci, int k) const { return radix_[k] > 1 ? ci - stride_[k] : ci; }
  size_t Give(size_t ci, int k) const { return radix_[k] > 1 ? ci + stride_[k] : ci; }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  size_t Index(uint64_t l, int k, size_t ci) const { return (l * k_ + k) * combos_ + ci; }
  void Decode(size_t ci, std::vector<uint64_t>* c) const {
    // Untracked levels never run out (1); a level without slots never has one (0).
    for (int i = 0; i < k_; ++i) {
      (*c)[i] = radix_[i] > 1 ? (ci / stride_[i]) % radix_[i] : (levels_[i].slots ? 1 : 0);
    }
  }

  void Solve(uint64_t l, int k, size_t ci, const std::vector<uint64_t>& c) {
    size_t i = Index(l, k, ci);
    const double uf = costs_.forward, ub = costs_.backward, rk = levels_[k].read;
    // The segment's first state occupies a slot of level k, so k cannot have all its slots free.
    if (radix_[k] > 1 && c[k] + 1 >= radix_[k]) return;  // unreachable: stays infinite
    if (l == 1) {
      cost_[i] = ub;
      choice_[i] = kReverseOne;
      return;
    }
    double best = (l - 1) * uf + ub + rk + cost_[Index(l - 1, k, ci)];
    Choice how = kSweep;
    uint64_t best_j = 0;
    int best_k = 0;
    for (int k2 = 0; k2 < k_; ++k2) {
      if (c[k2] == 0) continue;
      size_t right_ci = Take(ci, k2);
      double w2 = levels_[k2].write;
      for (uint64_t j = 1; j + 2 <= l; ++j) {
        double v = j * uf + w2 + cost_[Index(l - j, k2, right_ci)] + rk + cost_[Index(j, k, ci)];
        if (v < best) {
          best = v;
          how = kSplit;
          best_j = j;
          best_k = k2;
        }
      }
      if (levels_[k2].read < rk) {
        double v = w2 + cost_[Index(l, k2, Give(right_ci, k))];
        if (v < best) {
          best = v;
          how = kMove;
          best_k = k2;
        }
      }
    }
    cost_[i] = best;
    choice_[i] = how;
    arg_j_[i] = best_j;
    arg_k_[i] = static_cast<int8_t>(best_k);
  }

  const uint64_t n_;
  const std::vector<Level>& levels_;
  const StepCosts costs_;
  const int k_;
  std::vector<uint64_t> radix_;
  std::vector<size_t> stride_;
  size_t combos_ = 1;  // meaningful only when EstimatedWork() is within the bound
  double combos_estimate_ = 1;
  std::vector<int> order_;
  std::vector<double> cost_;
  std::vector<Choice> choice_;
  std::vector<uint32_t> arg_j_;
  std::vector<int8_t> arg_k_;
};

// Table work the planner accepts: about a second on one core. 4e9 admitted a 200-step table
// over two 198-slot levels that took 18 s (350 MB of table) in a release build, minutes under
// the sanitizers (plan_fuzzer's timeout found it).
constexpr double kMaxWork = 4e8;

}  // namespace

Result<Schedule> HRevolve(uint64_t steps, const std::vector<Level>& levels, StepCosts costs) {
  if (levels.empty() || levels.size() > 8) {
    return Status::InvalidArgument("H-Revolve needs 1 to 8 storage levels, got " +
                                   std::to_string(levels.size()));
  }
  if (steps == 0) return Status::InvalidArgument("nothing to reverse: 0 steps");
  if (steps > (uint64_t{1} << 31)) {
    return Status::InvalidArgument(std::to_string(steps) + " steps is beyond this planner");
  }
  Table table(steps, levels, costs);
  if (const double work = table.EstimatedWork(); work > kMaxWork) {
    // As a double: the work of a table past the bound may be past 2^64 too (plan_fuzzer
    // found 8.6e20, which no integer type holds).
    char ops[32];
    std::snprintf(ops, sizeof ops, "%.2g", work);
    return Status::ResourceExhausted("the exact H-Revolve table for " + std::to_string(steps) +
                                     " steps over these levels needs ~" + ops +
                                     " operations; use fewer steps per segment or fewer "
                                     "tracked slots");
  }
  table.Fill();
  Schedule s;
  s.method = "h-revolve";
  s.steps = steps;
  int first = -1;
  s.cost = table.Top(&first);
  if (steps == 1) {
    s.actions.push_back({ActionKind::kReverse, 1, 0, -1});
  } else {
    if (first < 0 || s.cost == std::numeric_limits<double>::infinity()) {
      return Status::InvalidArgument("no storage level has a slot; reversing " +
                                     std::to_string(steps) + " steps needs at least one");
    }
    s.actions.push_back({ActionKind::kWrite, 0, 0, first});
    size_t ci = table.Take(table.Full(), first);
    int where = table.Emit(steps, first, ci, 0, &s.actions);
    s.actions.push_back({ActionKind::kFree, 0, 0, where});
  }
  Schedule measured;
  ADJSNAP_RETURN_IF_ERROR(Replay(s, levels, costs, &measured));
  s.forward_steps = measured.forward_steps;
  s.writes = measured.writes;
  s.reads = measured.reads;
  s.peak_slots = measured.peak_slots;
  return s;
}

Result<Schedule> Revolve(uint64_t steps, uint64_t slots) {
  ADJSNAP_ASSIGN_OR_RETURN(Schedule s, HRevolve(steps, {Level{"memory", slots, 0, 0}}, {1, 0}));
  s.method = "revolve";
  return s;
}

Result<Schedule> DiskRevolve(uint64_t steps, uint64_t memory_slots, double disk_write,
                             double disk_read, StepCosts costs) {
  ADJSNAP_ASSIGN_OR_RETURN(
      Schedule s, HRevolve(steps,
                           {Level{"memory", memory_slots, 0, 0},
                            Level{"disk", kUnlimited, disk_write, disk_read}},
                           costs));
  s.method = "disk-revolve";
  return s;
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

}  // namespace adjsnap::schedule
