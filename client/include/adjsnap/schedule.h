// Checkpoint schedules for reversing a chain of time steps when not every state can be kept.
//
// States x_0 .. x_N; forward step t (1 <= t <= N) maps x_{t-1} to x_t; the reverse (adjoint)
// step t needs x_{t-1} and runs in the order N, N-1, ..., 1. A schedule is a sequence of
// actions over a solver that holds one "current" state:
//
//   kAdvance {from, to}    run forward steps from+1 .. to; current goes from x_from to x_to
//   kWrite   {level, state} store the current state (x_state) on storage level `level`
//   kRead    {level, state} make x_state, stored on `level`, the current state
//   kFree    {level, state} drop that stored copy
//   kReverse {step}         reverse step `step`; needs current == x_{step-1}
//
// Costs: every forward step costs `forward`, every reverse step `backward`, a write to level k
// `levels[k].write`, a read from it `levels[k].read`. Level k holds at most `levels[k].slots`
// states at once.
//
// HRevolve computes a schedule of minimal total cost for any number of levels (H-Revolve,
// Herrmann & Pallez, TOMS 46(2) 2020, in this cost model); DiskRevolve is its two-level case
// (free memory slots + a costly disk, Aupy, Herrmann, Hovland & Robert 2016); Revolve is the
// one-level, free-storage case (Griewank & Walther, TOMS Algorithm 799). The optimality of the
// dynamic program is checked against an exhaustive search over all action sequences in the
// tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "adjsnap/status.h"

namespace adjsnap::schedule {

enum class ActionKind { kAdvance, kWrite, kRead, kFree, kReverse };

struct Action {
  ActionKind kind;
  uint64_t a = 0;  // kAdvance: from; kWrite/kRead/kFree: state; kReverse: step
  uint64_t b = 0;  // kAdvance: to
  int level = -1;  // kWrite/kRead/kFree
};

struct Level {
  std::string name;
  uint64_t slots = 0;  // states it can hold at once; kUnlimited for "as many as needed"
  double write = 0;    // cost of storing one state
  double read = 0;     // cost of restoring one state
};
inline constexpr uint64_t kUnlimited = ~uint64_t{0};

struct StepCosts {
  double forward = 1;   // one forward step
  double backward = 0;  // one reverse (adjoint) step
};

struct Schedule {
  std::string method;  // "store-all", "revolve", "disk-revolve", "h-revolve", "multistage",
                       // "periodic", "segmented" (see MultiLevel)
  uint64_t steps = 0;
  std::vector<Action> actions;
  uint64_t forward_steps = 0;          // every advance, the first sweep included
  double cost = 0;                     // total cost under the given costs
  std::vector<uint64_t> writes;        // per level
  std::vector<uint64_t> reads;         // per level
  std::vector<uint64_t> peak_slots;    // per level: most states held at once
  // How many times each forward step is computed on average: forward_steps over the N-1
  // forward steps (x_1 .. x_{N-1}) that a run without storage limits computes, since the
  // reverse steps never need x_N. 1 for store-all (and for N <= 1); never below 1.
  double RecomputationFactor() const;
};

// C(n, k) saturating at UINT64_MAX.
uint64_t Binomial(uint64_t n, uint64_t k);

// Revolve's minimal number of forward steps p(N, s) to reverse N steps with s checkpoint slots
// (the slot holding x_0 included; first sweep included), by the closed form
// t*N - C(s+t, t-1) with t the smallest integer such that C(s+t, s) >= N.
// INVALID_ARGUMENT for s == 0 and N > 1.
Result<uint64_t> RevolveForwardSteps(uint64_t steps, uint64_t slots);

// The same number by the dynamic-programming recurrence, for all N <= max_steps and
// s <= max_slots: table[s][N]. Used to check the closed form.
std::vector<std::vector<uint64_t>> RevolveForwardStepsTable(uint64_t max_steps,
                                                            uint64_t max_slots);

// Optimal single-level schedule: `slots` free checkpoint slots, forward steps cost 1.
Result<Schedule> Revolve(uint64_t steps, uint64_t slots);

// Optimal schedule over `levels` (fastest first is customary, not required).
// RESOURCE_EXHAUSTED if the exact table would be too large to compute (the message says how
// large); INVALID_ARGUMENT if no level has a slot and steps > 1.
Result<Schedule> HRevolve(uint64_t steps, const std::vector<Level>& levels, StepCosts costs);

// Two levels: `memory_slots` free slots, and an unlimited disk with the given costs.
Result<Schedule> DiskRevolve(uint64_t steps, uint64_t memory_slots, double disk_write,
                             double disk_read, StepCosts costs);

// What MultiLevel computes besides the plan's counts and cost.
struct PlanOptions {
  // Emit the action list (and check it with Replay). Without it the Schedule has no actions;
  // its forward_steps, cost, writes, reads and peak_slots are those the actions would have,
  // counted by the same traversal that emits them. Actions run to about five per step: the
  // N = 100,000 three-level plan of the tests holds 500,066 (16 MB; 19 MB peak RSS with the
  // Replay check).
  bool actions = true;
  // Consider the exact H-Revolve table where its work is within HRevolve's bound.
  bool exact = true;
};

// The least-cost schedule found among these candidates, for any number of steps and levels;
// Schedule::method names the one chosen:
//   "store-all"   StoreAll on a level that holds every state;
//   "h-revolve"   the exact table (HRevolve), where it is computable and options.exact;
//   "revolve"     binomial (Revolve) checkpoints on one level;
//   "multistage"  binomial checkpoints over several levels: checkpoints form a stack, and each
//                 stack position goes to a level by how often it is written and read, the most
//                 used on the cheapest (Stumm & Walther's multistage scheme, cost-aware);
//   "periodic"    one level holds the starts of equal segments, written in the first sweep;
//                 each segment is reversed by binomial checkpoints on the other levels (the
//                 structure of Disk-Revolve, Aupy, Herrmann, Hovland & Robert, and of its
//                 periodic asymptote, Aupy & Herrmann); the number of segments is searched;
//   "segmented"   the same with segments of any lengths up to a bound, by Disk-Revolve's
//                 recursion over the steps left, the outer level's slots kept by a Lagrangian
//                 multiplier on its writes.
// Candidates are tried for every subset of the levels (every level alone and all together, for
// more than four; segmented for up to four) and binomial ones for total slot counts where
// Revolve's repetition number changes, so no single-level Revolve or store-all schedule is
// cheaper. Costs are compared exactly as Replay counts them; with free storage and forward = 1,
// backward = 0 the cost is the forward-step count. Work: O(N * t) per binomial or periodic
// candidate (t: Revolve's repetition number), pruned by the closed-form forward-step bound, and
// about 10^6 per segmented pass; N = 100,000 over three levels plans in 0.12-0.2 s of CPU. INVALID_ARGUMENT for no levels, steps == 0 or past 2^31, or
// no slot anywhere with steps > 1.
Result<Schedule> MultiLevel(uint64_t steps, const std::vector<Level>& levels, StepCosts costs,
                            PlanOptions options = {});

// Every state x_0 .. x_{N-1} written once to `level` during one forward sweep, read once.
Schedule StoreAll(uint64_t steps, const Level& level, int level_index, StepCosts costs);

// Executes `schedule` against a model solver and checks it: every reverse step sees exactly
// x_{step-1}, steps are reversed N..1 once each, reads find what was written, no level exceeds
// its slots. Recomputes forward_steps, cost, writes, reads and peak_slots from the actions
// into `*measured`. INTERNAL with the offending action index when a check fails.
Status Replay(const Schedule& schedule, const std::vector<Level>& levels, StepCosts costs,
              Schedule* measured);

}  // namespace adjsnap::schedule
