// H-Revolve: the exact dynamic program over every storage level's free slots (Table), bounded
// to about a second of work, and Revolve and Disk-Revolve as its one- and two-level cases.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include "adjsnap/schedule.h"
#include "schedule_internal.h"

namespace adjsnap::schedule {

using detail::TakeReplayedCounts;

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
  // where x_a is stored when the segment is done (a kMove relocates it). Iterative: sweeps
  // and left parts continue the same segment, right parts nest as deep as the slots, and each
  // was a stack frame (N deep overflowed the stack under ASan).
  int Emit(uint64_t l, int k, size_t ci, uint64_t a, std::vector<Action>* out) const {
    struct Pending {
      uint64_t a, j;  // after the right part from x_{a+j}: free it, read x_a, solve [a, a+j]
      int k;
      size_t ci;
    };
    std::vector<Pending> stack;
    int where = k;
    for (;;) {
      for (bool done = false; !done;) {
        size_t i = Index(l, k, ci);
        switch (choice_[i]) {
          case kSweep:
            out->push_back({ActionKind::kAdvance, a, a + l - 1, -1});
            out->push_back({ActionKind::kReverse, a + l, 0, -1});
            out->push_back({ActionKind::kRead, a, 0, k});
            l -= 1;
            break;
          case kSplit: {
            uint64_t j = arg_j_[i];
            int k2 = arg_k_[i];
            out->push_back({ActionKind::kAdvance, a, a + j, -1});
            out->push_back({ActionKind::kWrite, a + j, 0, k2});
            stack.push_back({a, j, k, ci});
            a += j;
            l -= j;
            k = k2;
            ci = Take(ci, k2);
            break;
          }
          case kMove: {
            int k2 = arg_k_[i];
            out->push_back({ActionKind::kWrite, a, 0, k2});
            out->push_back({ActionKind::kFree, a, 0, k});
            ci = Give(Take(ci, k2), k);
            k = k2;
            break;
          }
          case kReverseOne:
            out->push_back({ActionKind::kReverse, a + 1, 0, -1});
            [[fallthrough]];
          default:  // kNone: unreachable for a filled, feasible table
            where = k;
            done = true;
        }
      }
      if (stack.empty()) return where;
      const Pending p = stack.back();
      stack.pop_back();
      out->push_back({ActionKind::kFree, p.a + p.j, 0, where});
      out->push_back({ActionKind::kRead, p.a, 0, p.k});
      a = p.a;
      l = p.j;
      k = p.k;
      ci = p.ci;
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
  // The cost stays the table's.
  ADJSNAP_RETURN_IF_ERROR(TakeReplayedCounts(&s, levels, costs, /*with_cost=*/false));
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

}  // namespace adjsnap::schedule
