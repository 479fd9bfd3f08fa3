// What the schedule planners share: Revolve's binomial traversal (RevolveTraverse, with the
// visitors that count and emit it), MultiLevel's candidates and their planner, and the check
// of a schedule against Replay. Internal to libadjsnap; the API is adjsnap/schedule.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "adjsnap/schedule.h"

namespace adjsnap::schedule::detail {

// beta(s, t) = C(s+t, s): the most steps Revolve reverses with s slots (the start's included)
// and repetition number t; 0 for t < 0.
inline uint64_t Beta(uint64_t s, int64_t t) { return t < 0 ? 0 : Binomial(s + uint64_t(t), s); }

// Where Revolve places the next checkpoint in a segment of l >= 2 steps with s >= 2 slots (the
// start's included): with t the least repetition number for which beta(s, t) >= l, any j with
// j in [beta(s, t-2), beta(s, t-1)] and l - j in [beta(s-1, t-1), beta(s-1, t)] keeps both
// parts on the linear pieces of the convex p(., s) and p(., s-1) that sum to the closed form
// p(l, s) = t*l - C(s+t, t-1); the smallest such j is taken.
inline uint64_t BinomialSplit(uint64_t l, uint64_t s) {
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

// MultiLevel's search over one problem (N steps over `levels`, held by reference): the
// searches of each kind of plan (schedule_multilevel.cc) keep the best candidate, costed and
// emitted by schedule_candidates.cc.
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
  void SearchBinomial(const std::vector<int>& allowed, Candidate* best);

  // Segment starts on `outer`, written in the first sweep; each segment reversed by binomial
  // checkpoints over `inner`. The count of segments is searched over a geometric grid and
  // refined around the best point.
  void SearchPeriodic(int outer, const std::vector<int>& inner, Candidate* best);

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
                      Candidate* best);

  // Emits the actions of a binomial, periodic or segmented candidate.
  std::vector<Action> Emit(const Candidate& c) const;

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
                    uint64_t len, bool moved) const;

  // m equal segments. Unmoved: every start on `outer`, each segment's binomial traversal
  // re-reading its start there (depth 0). Moved: the starts but the last on `outer`, each read
  // once and written to an inner level, which the traversal re-reads instead; the last start
  // goes there straight from the first sweep.
  Candidate Periodic(int outer, const std::vector<int>& inner, uint64_t inner_total, uint64_t m,
                     bool moved) const;

  // Maps stack depths first..size-1 to the levels in `allowed` (each level at most cap[k]
  // depths) for the least storage cost: depths by accesses, most first, onto the levels in the
  // best of their priority orders (every order for up to four levels; by write+read cost, and
  // by read cost, beyond). Fills c->level, writes, reads and peak; returns the storage cost,
  // infinite if the depths do not fit.
  double Assign(const std::vector<uint64_t>& writes, const std::vector<uint64_t>& reads,
                size_t first, const std::vector<int>& allowed, const std::vector<uint64_t>& cap,
                Candidate* c) const;

  const uint64_t n_;
  const std::vector<Level>& levels_;
  const StepCosts costs_;
  std::vector<uint64_t> cap_;  // slots of each level worth using: at most N
  std::vector<int> usable_;    // levels with a slot
  // The best cost SearchPeriodic knows, once it knows a plan.
  double bound_ = std::numeric_limits<double>::infinity();
  bool bounded_ = false;
};

// Checks `s`'s actions with Replay and takes its counts from what Replay measured: forward
// steps, writes, reads, peak slots, and the cost too when `with_cost`.
Status TakeReplayedCounts(Schedule* s, const std::vector<Level>& levels, StepCosts costs,
                          bool with_cost);

}  // namespace adjsnap::schedule::detail
