// The device tier's bookkeeping: which steps of which runs libadjsnap keeps in its pool of the
// solver's GPU memory, and where in the pool. No CUDA here (client.cc moves the bytes with
// device_copy.h), so the placement logic is tested on any machine.
//
// Reverse-order placement, extended to the device: the backward pass reads step N-1 first, so
// a run with a device layer keeps its newest steps [k, N) in the pool, k = N - DeviceSteps(..),
// and sends [0, k) to the daemon (which splits them between host and disk the same way). With
// N unknown the run reserves every slot the pool has left and keeps the newest steps pushed so
// far: a push that finds the slots full first moves the oldest device step to the daemon.
//
// Thread-safety: every method is thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "op_state.h"
#include "adjsnap/range_allocator.h"
#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"

namespace adjsnap::detail {

// Pool bytes: `bytes` when nonzero, else `fraction` (0, 1] of the device's free memory.
uint64_t DevicePoolBudget(double fraction, uint64_t bytes, uint64_t free_bytes);
// Parses ADJSNAP_DEVICE_MEM: a fraction of free device memory ("0.5") or a size ("8G", "512M").
Status ParseDeviceMem(const std::string& text, double* fraction, uint64_t* bytes);
// How many of a run's newest steps fit `room` bytes of pool in slots of `slot_bytes`: all N
// when they fit, else as many as fit; with N unknown (0), as many as fit.
uint64_t DeviceSteps(uint64_t steps, uint64_t slot_bytes, uint64_t room);

class DevicePool {
 public:
  static constexpr uint64_t kSlotAlignment = 256;  // cudaMalloc's alignment
  explicit DevicePool(uint64_t capacity);
  uint64_t capacity() const { return capacity_; }

  struct RunPlan {
    uint64_t slots = 0;        // device steps: N - k with N declared
    uint64_t bytes_per_step = 0;
    uint64_t slot_bytes = 0;
    uint64_t region = 0;       // offset of the run's slots in the pool
  };
  // Reserves the slots a run of `steps` steps of `bytes_per_step` gets (none when nothing
  // fits). Undo with FreeRegion when the daemon refuses the run or it already existed.
  RunPlan ReserveRun(uint64_t steps, uint64_t bytes_per_step) ADJSNAP_EXCLUDES(mu_);
  // The daemon created the run (`steps` declared, 0 = unknown): its pushes of steps
  // >= steps - plan.slots go to the pool.
  void AddRun(uint64_t run_id, const std::string& name, const RunPlan& plan, uint64_t steps,
              bool keep, bool device_only) ADJSNAP_EXCLUDES(mu_);

  // Where a push of `step` goes. On the device: `offset` is its slot, which the caller fills
  // once `busy` (the last copy out of the slot) completes, and then Commit()s or Undo()es.
  // `evict`: with N unknown and the slots full, the oldest device step, whose slot this is:
  // the caller moves it to the daemon first.
  struct Evict {
    uint64_t step = 0;
    uint64_t bytes = 0;
    std::shared_ptr<OpState> filled;  // the copy that put it there
  };
  struct Placement {
    bool on_device = false;
    uint64_t offset = 0;
    std::shared_ptr<OpState> busy;
    std::optional<Evict> evict;
  };
  // INVALID_ARGUMENT for `bytes` other than the run's step size; RESOURCE_EXHAUSTED for a
  // Device-only run whose slots are all taken. A step outside the declared range, or pushed
  // twice, goes to the daemon, which refuses it.
  Result<Placement> Place(uint64_t run_id, uint64_t step, uint64_t bytes) ADJSNAP_EXCLUDES(mu_);
  // The copy into the slot is enqueued: the step is held, `filled` completes when it landed.
  void Commit(uint64_t run_id, uint64_t step, uint64_t offset, uint64_t bytes,
              std::shared_ptr<OpState> filled) ADJSNAP_EXCLUDES(mu_);
  // The push failed: the slot is free again.
  void Undo(uint64_t run_id, uint64_t offset) ADJSNAP_EXCLUDES(mu_);

  struct Held {
    uint64_t offset = 0;
    uint64_t bytes = 0;
    std::shared_ptr<OpState> filled;
    bool keep = false;  // the run's: a fetch leaves the step where it is
  };
  std::optional<Held> Find(uint64_t run_id, uint64_t step) const ADJSNAP_EXCLUDES(mu_);
  // Forgets a held step; its slot is reused once `busy` (a copy out of it) completes.
  bool Drop(uint64_t run_id, uint64_t step, std::shared_ptr<OpState> busy) ADJSNAP_EXCLUDES(mu_);
  // Forgets a run by name. Returns the copies still touching its slots: the caller waits for
  // them, then calls FreeRegion (which also undoes a ReserveRun).
  struct Dropped {
    bool found = false;
    RunPlan plan;
    std::vector<std::shared_ptr<OpState>> busy;
  };
  Dropped DropRun(const std::string& name) ADJSNAP_EXCLUDES(mu_);
  void FreeRegion(const RunPlan& plan) ADJSNAP_EXCLUDES(mu_);
  // Steps held, in step order (tests, diagnostics).
  std::vector<uint64_t> HeldSteps(uint64_t run_id) const ADJSNAP_EXCLUDES(mu_);
  bool HasRun(uint64_t run_id) const ADJSNAP_EXCLUDES(mu_);
  // The run id of a run this pool serves, by name.
  std::optional<uint64_t> RunIdOf(const std::string& name) const ADJSNAP_EXCLUDES(mu_);
  uint64_t reserved_bytes() const ADJSNAP_EXCLUDES(mu_);
  uint64_t held_steps() const ADJSNAP_EXCLUDES(mu_);

 private:
  struct Slot {
    uint64_t offset;
    std::shared_ptr<OpState> busy;
  };
  struct Run {
    std::string name;
    RunPlan plan;
    uint64_t steps = 0;     // N; 0 = unknown
    uint64_t boundary = 0;  // first device step (N declared)
    bool unknown_steps = false;
    bool keep = false;
    bool device_only = false;
    std::vector<Slot> free;
    std::map<uint64_t, Held> held;  // by step
  };
  const uint64_t capacity_;
  mutable Mutex mu_;
  RangeAllocator ranges_ ADJSNAP_GUARDED_BY(mu_);
  std::map<uint64_t, Run> runs_ ADJSNAP_GUARDED_BY(mu_);
};

}  // namespace adjsnap::detail
