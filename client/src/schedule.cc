#include "adjsnap/schedule.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
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

namespace {

// beta(s, t) = C(s+t, s): the most steps Revolve reverses with s slots (the start's included)
// and repetition number t; 0 for t < 0.
uint64_t Beta(uint64_t s, int64_t t) { return t < 0 ? 0 : Binomial(s + uint64_t(t), s); }

// Where Revolve places the next checkpoint in a segment of l >= 2 steps with s >= 2 slots (the
// start's included): with t the least repetition number for which beta(s, t) >= l, any j with
// j in [beta(s, t-2), beta(s, t-1)] and l - j in [beta(s-1, t-1), beta(s-1, t)] keeps both
// parts on the linear pieces of the convex p(., s) and p(., s-1) that sum to the closed form
// p(l, s) = t*l - C(s+t, t-1); the smallest such j is taken.
uint64_t BinomialSplit(uint64_t l, uint64_t s) {
  int64_t t = 1;
  while (Beta(s, t) < l) ++t;
  const uint64_t right_max = Beta(s - 1, t);
  const uint64_t j = std::max(Beta(s, t - 2), l > right_max ? l - right_max : 0);
  return std::clamp<uint64_t>(j, 1, l - 1);
}

// Revolve's schedule for the segment of l steps starting at x_a, which is current and stored at
// stack depth d; s slots in all from depth d up. Checkpoints are nested: the one written at
// depth d+1 is freed before the start is read back, so each depth holds one state at a time and
// the depths can be mapped to levels. The visitor sees Advance(a, b), Write(x, depth),
// Read(x, depth), Free(x, depth), Reverse(step) and Sweep(a, l, depth) for a segment with no
// slot left but its start's: l >= 2 advances from the start, each followed by the reversal of
// the segment's last step not yet reversed and, but for the last, a read of the start.
// Iterative: the right parts nest s deep, which is N deep for a store-all segment.
template <class Visitor>
void RevolveTraverse(uint64_t a, uint64_t l, uint64_t s, uint64_t d, Visitor& v) {
  struct Pending {
    uint64_t a, j, s, d;  // the segment's left part [a, a+j] once its right part is done
  };
  std::vector<Pending> stack;
  for (;;) {
    for (;;) {
      if (l == 1) {
        v.Reverse(a + 1);
        break;
      }
      if (s <= 1) {
        v.Sweep(a, l, d);
        break;
      }
      const uint64_t j = BinomialSplit(l, s);
      v.Advance(a, a + j);
      v.Write(a + j, d + 1);
      stack.push_back({a, j, s, d});
      a += j;
      l -= j;
      s -= 1;
      d += 1;
    }
    if (stack.empty()) return;
    const Pending p = stack.back();
    stack.pop_back();
    v.Free(p.a + p.j, p.d + 1);
    v.Read(p.a, p.d);
    a = p.a;
    l = p.j;
    s = p.s;
    d = p.d;
  }
}

// Forward steps and per-depth writes and reads of a RevolveTraverse.
struct Counter {
  explicit Counter(uint64_t depths) : writes(depths, 0), reads(depths, 0) {}
  void Advance(uint64_t a, uint64_t b) { forward += b - a; }
  void Write(uint64_t, uint64_t d) { ++writes[d]; }
  void Read(uint64_t, uint64_t d) { ++reads[d]; }
  void Free(uint64_t, uint64_t) {}
  void Reverse(uint64_t) {}
  void Sweep(uint64_t, uint64_t l, uint64_t d) {
    forward += l * (l - 1) / 2;
    reads[d] += l - 1;
  }
  uint64_t forward = 0;
  std::vector<uint64_t> writes, reads;
};

// The actions of a RevolveTraverse, depth d stored on level depth_level[d].
struct Emitter {
  void Advance(uint64_t a, uint64_t b) { out->push_back({ActionKind::kAdvance, a, b, -1}); }
  void Write(uint64_t x, uint64_t d) { out->push_back({ActionKind::kWrite, x, 0, level[d]}); }
  void Read(uint64_t x, uint64_t d) { out->push_back({ActionKind::kRead, x, 0, level[d]}); }
  void Free(uint64_t x, uint64_t d) { out->push_back({ActionKind::kFree, x, 0, level[d]}); }
  void Reverse(uint64_t t) { out->push_back({ActionKind::kReverse, t, 0, -1}); }
  void Sweep(uint64_t a, uint64_t l, uint64_t d) {
    for (uint64_t i = l; i >= 2; --i) {
      Advance(a, a + i - 1);
      Reverse(a + i);
      Read(a, d);
    }
    Reverse(a + 1);
  }
  const std::vector<int>& level;
  std::vector<Action>* out;
};

// A plan found by MultiLevel's search, before its actions are emitted.
struct Candidate {
  std::string method;
  double cost = std::numeric_limits<double>::infinity();
  uint64_t forward = 0;
  uint64_t slots = 0;          // binomial slots, the start's included (per segment: periodic)
  std::vector<int> level;      // stack depth -> level
  int outer = -1;              // periodic: the level of the segment starts
  uint64_t segments = 0;       // periodic: how many
  bool moved = false;          // periodic: each start copied to level[0] before its segment
  std::vector<uint64_t> writes, reads, peak;  // per level
  // segmented: the segments in order, each as a candidate for its own length (method, slots,
  // level, moved); every start is written to `outer` in the first sweep.
  std::vector<uint64_t> lengths;
  std::vector<const Candidate*> parts;
  std::vector<std::shared_ptr<const std::vector<Candidate>>> keep;  // owns what parts point to
};

class Planner {
 public:
  Planner(uint64_t steps, const std::vector<Level>& levels, StepCosts costs)
      : n_(steps), levels_(levels), costs_(costs) {
    for (size_t k = 0; k < levels.size(); ++k) {
      cap_.push_back(std::min<uint64_t>(levels[k].slots, n_));
      if (cap_.back() > 0) usable_.push_back(static_cast<int>(k));
    }
  }

  const std::vector<int>& Usable() const { return usable_; }

  // Binomial checkpoints over the levels in `allowed`, for each total slot count worth trying.
  void SearchBinomial(const std::vector<int>& allowed, Candidate* best) {
    uint64_t total = 0;
    for (int k : allowed) total += cap_[k];
    total = std::min(total, n_);
    std::vector<uint64_t> tries = {total};
    // Fewer slots cost more forward steps but may keep checkpoints off dear levels: the least
    // slot count for each repetition number, and each cheapest-first prefix of the levels.
    for (int64_t t = 1; t <= 4096; ++t) {
      if (Beta(total, t) < n_) continue;
      uint64_t lo = 1, hi = total;
      while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (Beta(mid, t) >= n_) hi = mid; else lo = mid + 1;
      }
      tries.push_back(lo);
      if (lo == 1) break;
    }
    std::vector<int> by_cost = allowed;
    std::stable_sort(by_cost.begin(), by_cost.end(), [&](int a, int b) {
      return levels_[a].write + levels_[a].read < levels_[b].write + levels_[b].read;
    });
    uint64_t prefix = 0;
    for (int k : by_cost) {
      prefix += cap_[k];
      tries.push_back(std::min(prefix, total));
    }
    std::sort(tries.begin(), tries.end(), std::greater<>());
    tries.erase(std::unique(tries.begin(), tries.end()), tries.end());
    for (uint64_t s : tries) {
      if (s == 0) continue;
      const uint64_t forward = *RevolveForwardSteps(n_, s);
      if (!best->method.empty() && costs_.forward * forward + costs_.backward * n_ >= best->cost) {
        continue;
      }
      Counter c(s);
      c.writes[0] = 1;  // x_0
      RevolveTraverse(0, n_, s, 0, c);
      Candidate cand;
      cand.slots = s;
      cand.forward = c.forward;
      double storage = Assign(c.writes, c.reads, 0, allowed, cap_, &cand);
      if (!std::isfinite(storage)) continue;
      cand.cost = costs_.forward * c.forward + costs_.backward * n_ + storage;
      int used = 0;
      for (uint64_t p : cand.peak) used += p > 0;
      cand.method = used > 1 ? "multistage" : "revolve";
      if (Better(cand, *best)) *best = std::move(cand);
    }
  }

  // Segment starts on `outer`, written in the first sweep; each segment reversed by binomial
  // checkpoints over `inner`. The count of segments is searched over a geometric grid and
  // refined around the best point.
  void SearchPeriodic(int outer, const std::vector<int>& inner, Candidate* best) {
    bound_ = best->method.empty() ? std::numeric_limits<double>::infinity() : best->cost;
    bounded_ = !best->method.empty();
    const uint64_t max_segments = std::min(cap_[outer], n_);
    uint64_t inner_total = 0;
    for (int k : inner) inner_total += cap_[k];
    Candidate local;
    uint64_t best_m = 0;
    auto eval = [&](uint64_t m) {
      if (m < 2 || m > max_segments + 1) return;  // one segment is a binomial candidate
      for (bool moved : {false, true}) {
        if (m > max_segments && !moved) continue;
        if (moved && inner.empty()) continue;
        Candidate c = Periodic(outer, inner, inner_total, m, moved);
        if (Better(c, local)) {
          local = std::move(c);
          best_m = m;
          bound_ = bounded_ ? std::min(bound_, local.cost) : local.cost;
          bounded_ = true;
        }
      }
    };
    std::vector<uint64_t> grid;
    for (double m = 2; m < static_cast<double>(max_segments); m = std::ceil(m * 1.05)) {
      grid.push_back(static_cast<uint64_t>(m));
    }
    grid.push_back(max_segments);
    grid.push_back(max_segments + 1);
    for (uint64_t m : grid) eval(m);
    if (best_m == 0) return;
    const uint64_t centre = best_m;
    for (uint64_t m = centre > 40 ? centre - 40 : 2; m <= centre + 40; ++m) eval(m);
    if (Better(local, *best)) *best = std::move(local);
  }

  // Segment starts on `outer`, written in the first sweep, and segments of any lengths up to a
  // bound, chosen by a dynamic program over the steps left: F(l), the least cost of reversing
  // l steps whose start is current, is either one last segment, or a first segment of j steps:
  // write the start to `outer`, advance j, F(l - j), read the start back, reverse the segment.
  // A segment is a binomial traversal over `inner` that re-reads its start on `outer` or
  // copies it to an inner level first (then the last segment's start never goes to `outer`),
  // whichever costs less. This is Disk-Revolve's recursion (Aupy, Herrmann, Hovland & Robert)
  // with costed inner levels. Segments held at once never exceed `outer`'s slots: past them,
  // each outer write is charged a multiplier found by bisection (a Lagrangian relaxation of the
  // slot bound). Work: N * jmax per pass, jmax = budget / N.
  void SearchSegments(int outer, const std::vector<int>& inner, uint64_t budget,
                      Candidate* best) {
    const uint64_t cap_o = cap_[outer];
    const uint64_t least = (n_ + cap_o - 1) / cap_o;  // the longest segment is at least this
    const uint64_t jmax = std::min<uint64_t>(n_, budget / n_);
    if (jmax < 2 || jmax < least) return;
    uint64_t inner_total = 0;
    for (int k : inner) inner_total += cap_[k];
    const Level& o = levels_[outer];
    // seg[2 * len + moved]
    auto seg = std::make_shared<std::vector<Candidate>>(2 * (jmax + 1));
    std::vector<double> any(jmax + 1), last(jmax + 1);
    std::vector<uint8_t> any_moved(jmax + 1), last_moved(jmax + 1);
    for (uint64_t len = 1; len <= jmax; ++len) {
      for (bool moved : {false, true}) {
        (*seg)[2 * len + moved] = Segment(outer, inner, inner_total, len, moved);
      }
      const double unmoved = (*seg)[2 * len].cost, moved = (*seg)[2 * len + 1].cost;
      any_moved[len] = moved < unmoved;
      any[len] = std::min(unmoved, moved);
      last_moved[len] = moved < unmoved + o.write;
      last[len] = std::min(unmoved + o.write, moved);
    }
    std::vector<double> f(n_ + 1);
    std::vector<uint32_t> first(n_ + 1), count(n_ + 1);
    auto solve = [&](double penalty) {
      const double split = o.write + penalty + o.read;
      for (uint64_t l = 1; l <= n_; ++l) {
        double v = std::numeric_limits<double>::infinity();
        uint32_t how = 0;
        if (l <= jmax) v = last[l] + (last_moved[l] ? 0 : penalty);
        for (uint64_t j = 1; j < l && j <= jmax; ++j) {
          const double w = j * costs_.forward + split + any[j] + f[l - j];
          if (w < v) {
            v = w;
            how = static_cast<uint32_t>(j);
          }
        }
        f[l] = v;
        first[l] = how;
        count[l] = how ? 1 + count[l - how] : (l <= jmax && last_moved[l] ? 0 : 1);
      }
      return count[n_];
    };
    if (solve(0) > cap_o) {
      // More segments than slots: the least multiplier that fits, by bisection.
      double lo = 0, hi = costs_.forward + o.write + o.read + 1;
      int rounds = 0;
      while (solve(hi) > cap_o && rounds++ < 60) hi *= 2;
      if (count[n_] > cap_o) return;
      for (int i = 0; i < 16; ++i) {
        const double mid = (lo + hi) / 2;
        if (solve(mid) > cap_o) lo = mid; else hi = mid;
      }
      solve(hi);
    }
    if (!std::isfinite(f[n_])) return;
    Candidate c;
    c.method = "segmented";
    c.outer = outer;
    c.writes.assign(levels_.size(), 0);
    c.reads.assign(levels_.size(), 0);
    c.peak.assign(levels_.size(), 0);
    c.keep.push_back(seg);
    // Each part's cost holds its traversal; a split adds the write of its start, its first
    // sweep and one read of its start; a last segment left on `outer` the write of its start.
    c.cost = 0;
    uint64_t forward = 0;
    for (uint64_t l = n_; l > 0;) {
      const bool split = first[l] != 0;
      const uint64_t len = split ? first[l] : l;
      const bool moved = split ? any_moved[len] : last_moved[len];
      const Candidate& part = (*seg)[2 * len + moved];
      c.lengths.push_back(len);
      c.parts.push_back(&part);
      forward += part.forward + (split ? len : 0);
      c.cost += part.cost + (split ? len * costs_.forward + o.write + o.read
                                   : (moved ? 0 : o.write));
      for (size_t k = 0; k < levels_.size(); ++k) {
        c.writes[k] += part.writes[k];
        c.reads[k] += part.reads[k];
        if (static_cast<int>(k) != outer) c.peak[k] = std::max(c.peak[k], part.peak[k]);
      }
      if (split || !moved) {
        c.writes[outer] += 1;
        c.peak[outer] += 1;
      }
      c.reads[outer] += split ? 1 : 0;
      l -= len;
    }
    c.forward = forward;
    if (Better(c, *best)) *best = std::move(c);
  }

  // Emits the actions of a binomial, periodic or segmented candidate.
  std::vector<Action> Emit(const Candidate& c) const {
    std::vector<Action> out;
    if (!c.parts.empty()) {
      // Every start on `outer` but a moved last segment's.
      const size_t last = c.lengths.size() - 1;
      std::vector<uint64_t> start(c.lengths.size(), 0);
      for (size_t i = 1; i < start.size(); ++i) start[i] = start[i - 1] + c.lengths[i - 1];
      auto on_outer = [&](size_t i) { return i < last || !c.parts[i]->moved; };
      for (size_t i = 0; i < start.size(); ++i) {
        if (i > 0) out.push_back({ActionKind::kAdvance, start[i - 1], start[i], -1});
        if (on_outer(i)) out.push_back({ActionKind::kWrite, start[i], 0, c.outer});
      }
      for (size_t i = start.size(); i-- > 0;) {
        const Candidate& part = *c.parts[i];
        if (i < last) out.push_back({ActionKind::kRead, start[i], 0, c.outer});
        if (part.moved) out.push_back({ActionKind::kWrite, start[i], 0, part.level[0]});
        Emitter e{part.level, &out};
        RevolveTraverse(start[i], c.lengths[i], part.slots, 0, e);
        if (part.moved) out.push_back({ActionKind::kFree, start[i], 0, part.level[0]});
        if (on_outer(i)) out.push_back({ActionKind::kFree, start[i], 0, c.outer});
      }
      return out;
    }
    if (c.outer < 0) {
      Emitter e{c.level, &out};
      out.push_back({ActionKind::kWrite, 0, 0, c.level[0]});
      RevolveTraverse(0, n_, c.slots, 0, e);
      out.push_back({ActionKind::kFree, 0, 0, c.level[0]});
      return out;
    }
    std::vector<uint64_t> start = SegmentStarts(c.segments);
    const size_t last = start.size() - 1;
    for (size_t i = 0; i < start.size(); ++i) {
      if (i > 0) out.push_back({ActionKind::kAdvance, start[i - 1], start[i], -1});
      if (i < last || !c.moved) out.push_back({ActionKind::kWrite, start[i], 0, c.outer});
    }
    Emitter e{c.level, &out};
    for (size_t i = start.size(); i-- > 0;) {
      const uint64_t end = i < last ? start[i + 1] : n_;
      if (i < last) out.push_back({ActionKind::kRead, start[i], 0, c.outer});
      if (c.moved) {
        if (i < last) out.push_back({ActionKind::kFree, start[i], 0, c.outer});
        out.push_back({ActionKind::kWrite, start[i], 0, c.level[0]});
      }
      RevolveTraverse(start[i], end - start[i], std::min(c.slots, end - start[i]), 0, e);
      out.push_back({ActionKind::kFree, start[i], 0, c.moved ? c.level[0] : c.outer});
    }
    return out;
  }

  // Whether `a` is a plan and cheaper than `b`, or `b` is none (no method). Costs may be
  // infinite (plan takes "inf" seconds): then the first plan found stands.
  static bool Better(const Candidate& a, const Candidate& b) {
    if (a.method.empty()) return false;
    if (b.method.empty()) return true;
    if (!std::isfinite(b.cost)) return std::isfinite(a.cost);
    // A relative margin: the same plan reached by two routes sums its costs in other orders.
    return a.cost < b.cost - 1e-12 * std::abs(b.cost);
  }

 private:
  // m segments: the first m - N%m of N/m steps, the rest one longer, so that the first sweep
  // stops as early as it can.
  std::vector<uint64_t> SegmentStarts(uint64_t m) const {
    std::vector<uint64_t> start(m);
    const uint64_t q = n_ / m, longer = n_ % m;
    for (uint64_t i = 1; i < m; ++i) start[i] = start[i - 1] + q + (i > m - longer ? 1 : 0);
    return start;
  }

  // One segment of `len` steps whose start is current, reversed by a binomial traversal over
  // `inner` that re-reads the start on `outer` (depth 0; unmoved) or first copies it to an
  // inner level (moved). Its cost counts the segment's forward and reverse steps and every
  // access but the outer write and first read of its start.
  Candidate Segment(int outer, const std::vector<int>& inner, uint64_t inner_total,
                    uint64_t len, bool moved) const {
    Candidate best;
    {
      const uint64_t s = moved ? std::min(inner_total, len) : std::min(inner_total, len - 1) + 1;
      if (s == 0) return best;
      Counter k(s);
      RevolveTraverse(0, len, s, 0, k);
      Candidate c;
      double storage;
      if (moved) {
        k.writes[0] += 1;
        storage = Assign(k.writes, k.reads, 0, inner, cap_, &c);
      } else {
        const uint64_t start_reads = k.reads[0];
        k.writes[0] = k.reads[0] = 0;
        storage = Assign(k.writes, k.reads, 1, inner, cap_, &c);
        if (!std::isfinite(storage)) return best;
        c.level[0] = outer;
        c.reads[outer] += start_reads;
        storage += start_reads * levels_[outer].read;
      }
      if (!std::isfinite(storage)) return best;
      c.cost = costs_.forward * k.forward + costs_.backward * len + storage;
      c.method = "segment";  // a part of a segmented candidate
      c.forward = k.forward;
      c.slots = s;
      c.moved = moved;
      if (Better(c, best)) best = std::move(c);
    }
    return best;
  }

  // m equal segments. Unmoved: every start on `outer`, each segment's binomial traversal
  // re-reading its start there (depth 0). Moved: the starts but the last on `outer`, each read
  // once and written to an inner level, which the traversal re-reads instead; the last start
  // goes there straight from the first sweep.
  Candidate Periodic(int outer, const std::vector<int>& inner, uint64_t inner_total, uint64_t m,
                     bool moved) const {
    Candidate c;
    const uint64_t q = n_ / m, longer = n_ % m;
    // Inner depths beyond the longest segment's needs are never used.
    const uint64_t s = moved ? std::min(inner_total, q + 1) : std::min(inner_total, q) + 1;
    const Level& o = levels_[outer];
    const uint64_t held = moved ? m - 1 : m;
    {
      // Forward steps by the closed form, and the outer level's least traffic: a bound that
      // spares the count of a candidate that cannot win.
      uint64_t forward = n_ - (q + (longer ? 1 : 0));
      for (uint64_t len : {q, q + 1}) {
        const uint64_t count = len == q ? m - longer : longer;
        if (count > 0) forward += count * *RevolveForwardSteps(len, std::min(s, len));
      }
      const double bound = costs_.forward * forward + costs_.backward * n_ + held * o.write +
                            (m - 1) * o.read;
      if (bounded_ && bound >= bound_) return Candidate();
    }
    std::vector<uint64_t> writes(s, 0), reads(s, 0);
    uint64_t forward = n_ - (q + (longer ? 1 : 0));  // the first sweep, to the last start
    for (uint64_t len : {q, q + 1}) {
      const uint64_t count = len == q ? m - longer : longer;
      if (count == 0) continue;
      Counter k(s);
      RevolveTraverse(0, len, std::min(s, len), 0, k);
      forward += count * k.forward;
      for (uint64_t d = 0; d < s; ++d) {
        writes[d] += count * k.writes[d];
        reads[d] += count * k.reads[d];
      }
    }
    const uint64_t start_reads = m - 1 + (moved ? 0 : reads[0]);
    const double storage = held * o.write + start_reads * o.read;
    double inner_storage;
    if (moved) {
      writes[0] += m;
      inner_storage = Assign(writes, reads, 0, inner, cap_, &c);
    } else {
      writes[0] = reads[0] = 0;
      inner_storage = Assign(writes, reads, 1, inner, cap_, &c);
      if (std::isfinite(inner_storage)) c.level[0] = outer;
    }
    if (!std::isfinite(inner_storage)) return Candidate();
    c.writes[outer] += held;
    c.reads[outer] += start_reads;
    c.peak[outer] = held;
    c.cost = costs_.forward * forward + costs_.backward * n_ + storage + inner_storage;
    c.forward = forward;
    c.slots = s;
    c.outer = outer;
    c.segments = m;
    c.moved = moved;
    c.method = "periodic";
    return c;
  }

  // Maps stack depths first..size-1 to the levels in `allowed` (each level at most cap[k]
  // depths) for the least storage cost: depths by accesses, most first, onto the levels in the
  // best of their priority orders (every order for up to four levels; by write+read cost, and
  // by read cost, beyond). Fills c->level, writes, reads and peak; returns the storage cost,
  // infinite if the depths do not fit.
  double Assign(const std::vector<uint64_t>& writes, const std::vector<uint64_t>& reads,
                size_t first, const std::vector<int>& allowed, const std::vector<uint64_t>& cap,
                Candidate* c) const {
    const size_t depths = writes.size();
    std::vector<size_t> order;
    for (size_t d = first; d < depths; ++d) order.push_back(d);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return writes[a] + reads[a] > writes[b] + reads[b];
    });
    std::vector<std::vector<int>> priorities;
    std::vector<int> p = allowed;
    if (p.size() <= 4) {
      std::sort(p.begin(), p.end());
      do priorities.push_back(p);
      while (std::next_permutation(p.begin(), p.end()));
    } else {
      std::stable_sort(p.begin(), p.end(), [&](int a, int b) {
        return levels_[a].write + levels_[a].read < levels_[b].write + levels_[b].read;
      });
      priorities.push_back(p);
      std::stable_sort(p.begin(), p.end(),
                       [&](int a, int b) { return levels_[a].read < levels_[b].read; });
      priorities.push_back(p);
    }
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> level(depths, -1), best_level;
    for (const auto& prio : priorities) {
      double cost = 0;
      size_t next = 0;
      uint64_t left = prio.empty() ? 0 : cap[prio[0]];
      bool fits = true;
      for (size_t d : order) {
        while (next < prio.size() && left == 0) {
          if (++next < prio.size()) left = cap[prio[next]];
        }
        if (next >= prio.size()) {
          fits = false;
          break;
        }
        const Level& l = levels_[prio[next]];
        level[d] = prio[next];
        cost += writes[d] * l.write + reads[d] * l.read;
        --left;
      }
      if (fits && cost < best) {
        best = cost;
        best_level = level;
      }
    }
    if (!std::isfinite(best)) return best;
    const size_t k = levels_.size();
    c->level = std::move(best_level);
    c->writes.assign(k, 0);
    c->reads.assign(k, 0);
    c->peak.assign(k, 0);
    for (size_t d = first; d < depths; ++d) {
      const int l = c->level[d];
      c->writes[l] += writes[d];
      c->reads[l] += reads[d];
      c->peak[l] += writes[d] > 0;
    }
    return best;
  }

  const uint64_t n_;
  const std::vector<Level>& levels_;
  const StepCosts costs_;
  std::vector<uint64_t> cap_;  // slots of each level worth using: at most N
  std::vector<int> usable_;    // levels with a slot
  // The best cost SearchPeriodic knows, once it knows a plan.
  double bound_ = std::numeric_limits<double>::infinity();
  bool bounded_ = false;
};

}  // namespace

Result<Schedule> MultiLevel(uint64_t steps, const std::vector<Level>& levels, StepCosts costs,
                            PlanOptions options) {
  if (levels.empty()) return Status::InvalidArgument("a plan needs at least one storage level");
  if (steps == 0) return Status::InvalidArgument("nothing to reverse: 0 steps");
  if (steps > (uint64_t{1} << 31)) {
    return Status::InvalidArgument(std::to_string(steps) + " steps is beyond this planner");
  }
  if (steps == 1) return HRevolve(steps, {levels[0]}, costs);
  Planner planner(steps, levels, costs);
  const std::vector<int>& usable = planner.Usable();
  if (usable.empty()) {
    return Status::InvalidArgument("no storage level has a slot; reversing " +
                                   std::to_string(steps) + " steps needs at least one");
  }
  Candidate best;
  // Store-all on a level that holds every state.
  int store_all = -1;
  for (int k : usable) {
    if (levels[k].slots < steps) continue;
    Candidate c;
    c.method = "store-all";
    c.cost = StoreAll(steps, levels[k], k, costs).cost;
    if (Planner::Better(c, best)) {
      best = c;
      store_all = k;
    }
  }
  // Binomial over each subset of the levels (each alone and all together, past four), and
  // periodic with each level outermost over each subset of the others.
  std::vector<std::vector<int>> subsets;
  if (usable.size() <= 4) {
    for (unsigned mask = 1; mask < (1u << usable.size()); ++mask) {
      std::vector<int> s;
      for (size_t i = 0; i < usable.size(); ++i) {
        if (mask & (1u << i)) s.push_back(usable[i]);
      }
      subsets.push_back(s);
    }
  } else {
    for (int k : usable) subsets.push_back({k});
    subsets.push_back(usable);
  }
  for (const auto& s : subsets) {
    planner.SearchBinomial(s, &best);
  }
  for (int outer : usable) {
    std::vector<std::vector<int>> inners = {{}};
    for (const auto& s : subsets) {
      if (std::find(s.begin(), s.end(), outer) == s.end()) inners.push_back(s);
    }
    for (const auto& inner : inners) {
      planner.SearchPeriodic(outer, inner, &best);
    }
  }
  // Segments of any length: each level outermost over each subset of the others (no subset
  // past four levels, where the budget would buy too short segments).
  if (usable.size() <= 4) {
    const uint64_t budget = 1000000;
    for (int outer : usable) {
      std::vector<std::vector<int>> inners = {{}};
      for (const auto& s : subsets) {
        if (std::find(s.begin(), s.end(), outer) == s.end()) inners.push_back(s);
      }
      for (const auto& inner : inners) {
        planner.SearchSegments(outer, inner, budget, &best);
      }
    }
  }
  if (best.method != "store-all") store_all = -1;
  // The exact table where it is computable: on a tie it names the plan, but for store-all,
  // which is the simpler schedule to run and to read.
  if (options.exact) {
    Result<Schedule> exact = HRevolve(steps, levels, costs);
    if (exact.ok()) {
      const double margin = 1e-12 * std::abs(best.cost);
      if (store_all >= 0 ? exact->cost < best.cost - margin : exact->cost <= best.cost + margin) {
        if (!options.actions) exact->actions.clear();
        return exact;
      }
    }
    // Else too large, or no finite plan in it (infinite costs): the fast plan stands.
  }
  if (best.method.empty()) return Status::Internal("no plan found for " + std::to_string(steps) + " steps");
  Schedule s;
  if (store_all >= 0) {
    s = StoreAll(steps, levels[store_all], store_all, costs);
    s.writes.resize(levels.size(), 0);
    s.reads.resize(levels.size(), 0);
    s.peak_slots.resize(levels.size(), 0);
    if (!options.actions) s.actions.clear();
    return s;
  }
  s.method = best.method;
  s.steps = steps;
  s.forward_steps = best.forward;
  s.cost = best.cost;
  s.writes = best.writes;
  s.reads = best.reads;
  s.peak_slots = best.peak;
  if (options.actions) {
    s.actions = planner.Emit(best);
    ADJSNAP_RETURN_IF_ERROR(TakeReplayedCounts(&s, levels, costs, /*with_cost=*/true));
  }
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
