// Checkpointing for a forward pass whose number of steps is not known until it ends.
//
// The driver feeds the schedule one forward step at a time; after each it learns which state to
// store and which stored state to drop. When the forward pass ends (the driver learns N only
// then), the schedule produces the reverse pass. All actions are those of adjsnap/schedule.h,
// over one storage level of `slots` slots (x_0's slot included), so `schedule::Replay` checks a
// finished run like any planned one.
//
// Forward pass: dynamic checkpointing after Wang, Moin and Iaccarino ("Minimal repetition
// dynamic checkpointing algorithm for unsteady adjoint calculation", SIAM J. Sci. Comput.
// 31(4), 2009). Every checkpoint carries a level; x_0's is infinite. A checkpoint is
// dispensable when a later checkpoint has a higher level. A new state x_i is stored at level 0
// in a free slot, else in place of the latest dispensable checkpoint; when none is dispensable
// (levels never rise towards the present) x_i replaces x_{i-1} one level higher. Levels make
// old checkpoints sparse and recent ones dense in the binomial pattern an offline Revolve plan
// would have chosen, without knowing where the run ends.
//
// Reverse pass: N is known by then, so each segment between consecutive checkpoints, newest
// first, is reversed by the offline optimum (Revolve, Griewank and Walther) with the slots the
// older checkpoints leave free; a segment's slot is freed once it is reversed.
//
// Cost, in forward steps counted as schedule::Replay counts them (the first sweep included),
// for a run stopped at any N, with s slots:
//  - the published bound (Wang et al., the optimal repetition number of their dynamic
//    checkpointing): no forward step is computed more than t times, t the least integer with
//    C(s - 1 + t, t) >= N; hence forward_steps <= t * N. Their delta checkpoints are kept beside
//    x_0, which here takes one of the s slots: delta = s - 1 (s >= 2; with one slot every
//    reverse step recomputes from x_0, which is p(N, 1), the optimum). The level rule above is
//    this file's reading of the paper, not its text: the bound is checked, not proved, here.
//  - against the offline optimum that knows N in advance, p(N, s) = RevolveForwardSteps:
//    p(N, s) <= forward_steps <= p(N, s) + (N - 1), at most one forward sweep more than the
//    best plan made with hindsight; equal to p(N, s) (store-all) while N <= s.
// The tests check both for every N <= 600 and every seventh N up to 2000 over a range of slot
// counts, with Replay (tests/client/online_schedule_table.cc replays every N <= 2000);
// docs/schedules.md gives measured ratios.
//
// Thread-safety: none; one driver owns an OnlineSchedule. Copies are independent.
#pragma once

#include <cstdint>
#include <vector>

#include "adjsnap/schedule.h"
#include "adjsnap/status.h"

namespace adjsnap::schedule {

class OnlineSchedule {
 public:
  // INVALID_ARGUMENT for 0 slots: x_0 must be kept.
  static Result<OnlineSchedule> Create(uint64_t slots, int level = 0);

  // One more forward step: the actions that run it (kAdvance current -> current+1) and store
  // or drop checkpoints after it. The first call's actions start with the write of x_0.
  // FAILED_PRECONDITION after Finish.
  Result<std::vector<Action>> Advance();

  // The forward pass ends with x_current in hand and N = current + 1 steps to reverse (the
  // last forward step, N, runs inside reverse step N, as in every planned schedule). Returns
  // the reverse pass, which frees every checkpoint. FAILED_PRECONDITION when called twice.
  Result<std::vector<Action>> Finish();

  // Every action returned so far; after Finish, a complete schedule with steps = N and
  // forward_steps counted (method "online").
  const Schedule& schedule() const { return schedule_; }
  uint64_t current() const { return current_; }
  uint64_t slots() const { return slots_; }
  // States held now, oldest first.
  std::vector<uint64_t> Checkpoints() const;

 private:
  struct Checkpoint {
    uint64_t state;
    uint64_t level;
  };
  OnlineSchedule(uint64_t slots, int level) : slots_(slots), level_(level) {}
  void Emit(Action a, std::vector<Action>* out);
  void StartOnce(std::vector<Action>* out);
  void Store(std::vector<Action>* out);
  // Reverses steps a+1 .. a+l with x_a current and stored, using at most s slots including
  // x_a's: Revolve's optimal nesting, p(l, s) forward steps.
  void ReverseSegment(uint64_t a, uint64_t l, uint64_t s, std::vector<Action>* out);

  uint64_t slots_;
  int level_;
  uint64_t current_ = 0;
  bool started_ = false;
  bool finished_ = false;
  std::vector<Checkpoint> held_;  // by state, ascending
  Schedule schedule_;
};

// Revolve's first split for reversing l steps with s slots (the start's included, s >= 2,
// l >= 2): an advance of j steps before the next checkpoint such that
// j + p(l - j, s - 1) + p(j, s) == p(l, s). Exposed for its test.
uint64_t RevolveSplit(uint64_t l, uint64_t s);

}  // namespace adjsnap::schedule
