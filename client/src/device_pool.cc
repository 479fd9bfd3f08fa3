#include "device_pool.h"

#include <algorithm>
#include <cstdlib>

#include "adjsnap/units.h"

namespace adjsnap::detail {

uint64_t DevicePoolBudget(double fraction, uint64_t bytes, uint64_t free_bytes) {
  if (bytes != 0) return bytes;
  return static_cast<uint64_t>(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(free_bytes));
}

Status ParseDeviceMem(const std::string& text, double* fraction, uint64_t* bytes) {
  char* end = nullptr;
  double f = std::strtod(text.c_str(), &end);
  if (!text.empty() && end && *end == '\0' && text.find('.') != std::string::npos) {
    if (!(f > 0 && f <= 1)) {
      return Status::InvalidArgument("ADJSNAP_DEVICE_MEM '" + text +
                                     "': a fraction of free device memory is in (0, 1]");
    }
    *fraction = f;
    *bytes = 0;
    return Status::Ok();
  }
  Result<uint64_t> b = ParseBytes(text);
  if (!b.ok() || *b == 0) {
    return Status::InvalidArgument("ADJSNAP_DEVICE_MEM '" + text +
                                   "': give a fraction of free device memory (0.7) or a size "
                                   "(8G)");
  }
  *bytes = *b;
  return Status::Ok();
}

uint64_t DeviceSteps(uint64_t steps, uint64_t slot_bytes, uint64_t room) {
  if (slot_bytes == 0) return 0;
  uint64_t fit = room / slot_bytes;
  return steps == 0 ? fit : std::min(steps, fit);
}

DevicePool::DevicePool(uint64_t capacity) : capacity_(capacity), ranges_(capacity) {}

DevicePool::RunPlan DevicePool::ReserveRun(uint64_t steps, uint64_t bytes_per_step) {
  MutexLock lock(mu_);
  RunPlan plan;
  plan.bytes_per_step = bytes_per_step;
  plan.slot_bytes = (bytes_per_step + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
  uint64_t slots = DeviceSteps(steps, plan.slot_bytes, ranges_.largest_free());
  if (slots == 0) return plan;
  std::optional<uint64_t> region = ranges_.Allocate(slots * plan.slot_bytes);
  if (!region) return plan;
  plan.slots = slots;
  plan.region = *region;
  return plan;
}

void DevicePool::FreeRegion(const RunPlan& plan) {
  MutexLock lock(mu_);
  ranges_.Free(plan.region, plan.slots * plan.slot_bytes);
}

void DevicePool::AddRun(uint64_t run_id, const std::string& name, const RunPlan& plan,
                        uint64_t steps, bool keep, bool device_only) {
  MutexLock lock(mu_);
  Run run;
  run.name = name;
  run.plan = plan;
  run.steps = steps;
  run.boundary = steps - std::min(steps, plan.slots);
  run.unknown_steps = steps == 0;
  run.keep = keep;
  run.device_only = device_only;
  for (uint64_t i = plan.slots; i-- > 0;) {  // popped from the back: slot 0 first
    run.free.push_back(Slot{plan.region + i * plan.slot_bytes, nullptr});
  }
  runs_[run_id] = std::move(run);
}

Result<DevicePool::Placement> DevicePool::Place(uint64_t run_id, uint64_t step,
                                                uint64_t bytes) {
  MutexLock lock(mu_);
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return Placement{};
  Run& run = it->second;
  if (bytes != run.plan.bytes_per_step) {
    return Status::InvalidArgument("push of step " + std::to_string(step) + " of run '" +
                                   run.name + "' carries " + std::to_string(bytes) +
                                   " bytes; its steps are " +
                                   std::to_string(run.plan.bytes_per_step) + " bytes");
  }
  if (step < run.boundary && !run.device_only) return Placement{};  // older steps: the daemon
  if (!run.unknown_steps && step >= run.steps) return Placement{};  // out of range: refused
  if (run.held.count(step)) return Placement{};  // pushed twice: the daemon refuses it
  if (!run.free.empty()) {
    Slot slot = run.free.back();
    run.free.pop_back();
    return Placement{true, slot.offset, std::move(slot.busy), std::nullopt};
  }
  // Slots full. With N unknown the pool keeps the newest steps: the oldest one older than
  // this step makes room.
  if (run.unknown_steps && !run.device_only && !run.held.empty() &&
      run.held.begin()->first < step) {
    auto oldest = run.held.begin();
    Placement p{true, oldest->second.offset, oldest->second.filled,
                Evict{oldest->first, oldest->second.bytes, oldest->second.filled}};
    run.held.erase(oldest);
    return p;
  }
  if (run.device_only) {
    return Status::ResourceExhausted(
        "step " + std::to_string(step) + " of run '" + run.name +
        "': layers Device keep every step in this client's GPU pool, and its " +
        std::to_string(run.plan.slots) +
        " slots are taken; use HostDevice or DiskHostDevice, or raise ADJSNAP_DEVICE_MEM");
  }
  return Placement{};  // a slot is still busy with a step pushed out of order: the daemon
}

void DevicePool::Commit(uint64_t run_id, uint64_t step, uint64_t offset, uint64_t bytes,
                        std::shared_ptr<OpState> filled) {
  MutexLock lock(mu_);
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return;
  it->second.held[step] = Held{offset, bytes, std::move(filled), it->second.keep};
}

void DevicePool::Undo(uint64_t run_id, uint64_t offset) {
  MutexLock lock(mu_);
  auto it = runs_.find(run_id);
  if (it != runs_.end()) it->second.free.push_back(Slot{offset, nullptr});
}

std::optional<DevicePool::Held> DevicePool::Find(uint64_t run_id, uint64_t step) const {
  MutexLock lock(mu_);
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return std::nullopt;
  auto h = it->second.held.find(step);
  if (h == it->second.held.end()) return std::nullopt;
  return h->second;
}

bool DevicePool::Drop(uint64_t run_id, uint64_t step, std::shared_ptr<OpState> busy) {
  MutexLock lock(mu_);
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return false;
  auto h = it->second.held.find(step);
  if (h == it->second.held.end()) return false;
  it->second.free.push_back(Slot{h->second.offset, busy ? std::move(busy) : h->second.filled});
  it->second.held.erase(h);
  return true;
}

DevicePool::Dropped DevicePool::DropRun(const std::string& name) {
  MutexLock lock(mu_);
  for (auto it = runs_.begin(); it != runs_.end(); ++it) {
    if (it->second.name != name) continue;
    Dropped d{true, it->second.plan, {}};
    for (const auto& s : it->second.free) {
      if (s.busy) d.busy.push_back(s.busy);
    }
    for (const auto& [step, h] : it->second.held) {
      if (h.filled) d.busy.push_back(h.filled);
    }
    runs_.erase(it);
    return d;
  }
  return Dropped{};
}

std::vector<uint64_t> DevicePool::HeldSteps(uint64_t run_id) const {
  MutexLock lock(mu_);
  std::vector<uint64_t> out;
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return out;
  for (const auto& [step, h] : it->second.held) out.push_back(step);
  return out;
}

bool DevicePool::HasRun(uint64_t run_id) const {
  MutexLock lock(mu_);
  return runs_.count(run_id) != 0;
}

std::optional<uint64_t> DevicePool::RunIdOf(const std::string& name) const {
  MutexLock lock(mu_);
  for (const auto& [id, run] : runs_) {
    if (run.name == name) return id;
  }
  return std::nullopt;
}

uint64_t DevicePool::reserved_bytes() const {
  MutexLock lock(mu_);
  return capacity_ - ranges_.free_bytes();
}

uint64_t DevicePool::held_steps() const {
  MutexLock lock(mu_);
  uint64_t n = 0;
  for (const auto& [id, run] : runs_) n += run.held.size();
  return n;
}

}  // namespace adjsnap::detail
