#include "adjsnap/online_schedule.h"

#include <algorithm>
#include <limits>

namespace adjsnap::schedule {

namespace {

constexpr uint64_t kX0Level = std::numeric_limits<uint64_t>::max();

// beta(s, t) = C(s + t, s): the most steps s slots reverse with each step computed at most t
// times (Griewank's binomial bound); 0 for negative t.
uint64_t Beta(uint64_t s, int64_t t) {
  if (t < 0) return 0;
  return Binomial(s + static_cast<uint64_t>(t), s);
}

}  // namespace

uint64_t RevolveSplit(uint64_t l, uint64_t s) {
  int64_t t = 0;
  while (Beta(s, t) < l) ++t;
  // At l == beta(s, t) the only optimal split is j = beta(s, t-1), leaving beta(s-1, t) to the
  // right (Pascal's rule); below it the left part may shrink as long as neither part exceeds
  // what its slots reverse within the same repetition number.
  uint64_t right_max = Beta(s - 1, t);
  uint64_t j = l > right_max ? l - right_max : 1;
  j = std::max<uint64_t>(j, Beta(s, t - 2));
  j = std::min<uint64_t>(j, std::min<uint64_t>(Beta(s, t - 1), l - 1));
  return std::max<uint64_t>(j, 1);
}

Result<OnlineSchedule> OnlineSchedule::Create(uint64_t slots, int level) {
  if (slots == 0) {
    return Status::InvalidArgument("online checkpointing needs at least one slot, for x_0");
  }
  if (level < 0) return Status::InvalidArgument("level " + std::to_string(level) + " < 0");
  OnlineSchedule s(slots, level);
  s.schedule_.method = "online";
  return s;
}

std::vector<uint64_t> OnlineSchedule::Checkpoints() const {
  std::vector<uint64_t> out;
  for (const Checkpoint& c : held_) out.push_back(c.state);
  return out;
}

void OnlineSchedule::Emit(Action a, std::vector<Action>* out) {
  if (a.kind == ActionKind::kAdvance) schedule_.forward_steps += a.b - a.a;
  out->push_back(a);
  schedule_.actions.push_back(a);
}

void OnlineSchedule::StartOnce(std::vector<Action>* out) {
  if (started_) return;
  started_ = true;
  held_.push_back({0, kX0Level});
  Emit({ActionKind::kWrite, 0, 0, level_}, out);
}

void OnlineSchedule::Store(std::vector<Action>* out) {
  const uint64_t i = current_;
  if (held_.size() < slots_) {
    held_.push_back({i, 0});
    Emit({ActionKind::kWrite, i, 0, level_}, out);
    return;
  }
  // The latest dispensable checkpoint: one with a higher level somewhere after it.
  uint64_t higher_after = 0;
  bool any_after = false;
  for (size_t k = held_.size(); k-- > 1;) {
    if (any_after && held_[k].level < higher_after) {
      Emit({ActionKind::kFree, held_[k].state, 0, level_}, out);
      held_.erase(held_.begin() + static_cast<ptrdiff_t>(k));
      held_.push_back({i, 0});
      Emit({ActionKind::kWrite, i, 0, level_}, out);
      return;
    }
    higher_after = any_after ? std::max(higher_after, held_[k].level) : held_[k].level;
    any_after = true;
  }
  if (held_.size() == 1) return;  // one slot: only x_0 is ever held
  // Levels never rise towards the present: x_{i-1} (always the newest) moves up a level to i.
  Checkpoint last = held_.back();
  Emit({ActionKind::kFree, last.state, 0, level_}, out);
  held_.back() = {i, last.level + 1};
  Emit({ActionKind::kWrite, i, 0, level_}, out);
}

Result<std::vector<Action>> OnlineSchedule::Advance() {
  if (finished_) return Status::FailedPrecondition("the online schedule has finished");
  std::vector<Action> out;
  StartOnce(&out);
  Emit({ActionKind::kAdvance, current_, current_ + 1, -1}, &out);
  ++current_;
  Store(&out);
  return out;
}

void OnlineSchedule::ReverseSegment(uint64_t a, uint64_t l, uint64_t s, std::vector<Action>* out) {
  while (l > 1) {
    if (s == 1) {
      Emit({ActionKind::kAdvance, a, a + l - 1, -1}, out);
      Emit({ActionKind::kReverse, a + l, 0, -1}, out);
      Emit({ActionKind::kRead, a, 0, level_}, out);
      --l;
      continue;
    }
    const uint64_t j = RevolveSplit(l, s);
    Emit({ActionKind::kAdvance, a, a + j, -1}, out);
    if (l - j == 1) {
      Emit({ActionKind::kReverse, a + j + 1, 0, -1}, out);  // x_{a+j} in hand: no need to store it
    } else {
      Emit({ActionKind::kWrite, a + j, 0, level_}, out);
      ReverseSegment(a + j, l - j, s - 1, out);
      Emit({ActionKind::kFree, a + j, 0, level_}, out);
    }
    Emit({ActionKind::kRead, a, 0, level_}, out);
    l = j;
  }
  if (l == 1) Emit({ActionKind::kReverse, a + 1, 0, -1}, out);
}

Result<std::vector<Action>> OnlineSchedule::Finish() {
  if (finished_) return Status::FailedPrecondition("the online schedule has finished");
  finished_ = true;
  std::vector<Action> out;
  StartOnce(&out);
  const uint64_t n = current_ + 1;
  schedule_.steps = n;
  Emit({ActionKind::kReverse, n, 0, -1}, &out);  // x_{N-1} is in hand
  // Segment k runs from checkpoint k to the next (the last one to x_{N-1}, whose step is done);
  // while it is reversed, checkpoints 0 .. k-1 hold k slots.
  uint64_t end = n - 1;
  for (size_t k = held_.size(); k-- > 0;) {
    const uint64_t a = held_[k].state;
    if (end > a) {
      Emit({ActionKind::kRead, a, 0, level_}, &out);
      ReverseSegment(a, end - a, slots_ - k, &out);
    }
    Emit({ActionKind::kFree, a, 0, level_}, &out);
    end = a;
  }
  held_.clear();
  return out;
}

}  // namespace adjsnap::schedule
