// MultiLevel, the fast planner: store-all, binomial checkpoints over each subset of the levels,
// periodic and segmented plans with each level outermost, searched (Planner's Search*) and
// compared, with the exact table's plan where it is computable. What a candidate costs and
// its actions are in schedule_candidates.cc.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "adjsnap/schedule.h"
#include "schedule_internal.h"

namespace adjsnap::schedule {
namespace detail {

void Planner::SearchBinomial(const std::vector<int>& allowed, Candidate* best) {
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

void Planner::SearchPeriodic(int outer, const std::vector<int>& inner, Candidate* best) {
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

void Planner::SearchSegments(int outer, const std::vector<int>& inner, uint64_t budget,
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

}  // namespace detail

using detail::Candidate;
using detail::Planner;
using detail::TakeReplayedCounts;

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

}  // namespace adjsnap::schedule
