// MultiLevel's candidates: what one segment and a periodic plan cost (Segment, Periodic), the
// levels their stack depths go to (Assign), and the actions of the plan chosen (Emit).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "adjsnap/schedule.h"
#include "schedule_internal.h"

namespace adjsnap::schedule::detail {

std::vector<Action> Planner::Emit(const Candidate& c) const {
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

Candidate Planner::Segment(int outer, const std::vector<int>& inner, uint64_t inner_total,
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

Candidate Planner::Periodic(int outer, const std::vector<int>& inner, uint64_t inner_total,
                            uint64_t m, bool moved) const {
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

double Planner::Assign(const std::vector<uint64_t>& writes, const std::vector<uint64_t>& reads,
                       size_t first, const std::vector<int>& allowed,
                       const std::vector<uint64_t>& cap, Candidate* c) const {
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

}  // namespace adjsnap::schedule::detail
