// Drives a solver through a checkpoint schedule (adjsnap/schedule.h), keeping each storage level
// either in the client's own memory or in adjsnapd.
//
//   adjsnap::AdjointSolver solver{u, bytes,
//       [&](uint64_t from, uint64_t to) { for (t = from; t < to; ++t) step(u); return Ok; },
//       [&](uint64_t step) { adjoint_step(step, u); return Ok; }};
//   auto plan = adjsnap::schedule::DiskRevolve(nt, 4, w, r, {tf, tb}).value();
//   adjsnap::RunAdjoint(plan, {adjsnap::Storage::kLocalMemory, adjsnap::Storage::kAdjsnap},
//                     client.get(), "shot-17", solver);
//
// A run whose length is known only when it ends (adaptive time stepping, a stopping criterion)
// uses the online mode instead of a plan:
//
//   adjsnap::OnlineCheckpointing online;
//   online.is_last = [&](uint64_t step) -> adjsnap::Result<bool> { return t + dt >= t_end; };
//   adjsnap::RunAdjoint(online, client.get(), "shot-17", solver);
//
// Thread-safety: one call drives one solver on the calling thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/online_schedule.h"
#include "adjsnap/schedule.h"

namespace adjsnap {

struct AdjointSolver {
  void* state = nullptr;  // the solver's current state, `bytes` long
  size_t bytes = 0;
  // Runs forward steps from+1 .. to, turning *state from x_from into x_to.
  std::function<Status(uint64_t from, uint64_t to)> advance;
  // Runs the adjoint of step `step`; *state holds x_{step-1}.
  std::function<Status(uint64_t step)> reverse;
};

enum class Storage {
  kLocalMemory,        // buffers allocated by the driver in this process
  kAdjsnap,            // snapshots of a run in adjsnapd (its placement picks the tier)
  kAdjsnapHost,        // adjsnapd's host memory (a run with layers Host)
  kAdjsnapDisk,        // adjsnapd's local spools (layers Disk, spool_class "local")
  kAdjsnapSharedDisk,  // adjsnapd's shared spools (layers Disk, spool_class "shared")
};

// The Storage that keeps a plan level named as `adjsnap plan` names tiers ("host", "disk",
// "shared-disk"; schedule::Level::name): each level on the tier its costs were taken from.
// INVALID_ARGUMENT for another name.
Result<Storage> StorageForTier(const std::string& tier);

// Executes every action of `plan`. `storage[k]` says where level k lives; `client` may be null
// when every level is kLocalMemory. Each adjsnapd level has a run of its own, created for the
// call and deleted afterwards: `run_name` for the first, `run_name.k` for level k after it (a
// plan may hold the same state on two levels at once).
// Errors from the solver's callbacks or from adjsnapd stop the run and are returned as they are.
Status RunAdjoint(const schedule::Schedule& plan, const std::vector<Storage>& storage,
                  Client* client, const std::string& run_name, AdjointSolver& solver);

// Checkpointing for a forward pass of unknown length (adjsnap/online_schedule.h): dynamic
// checkpointing while the solver steps forward, the offline optimum per segment backwards.
struct OnlineCheckpointing {
  // Called with x_{step-1} in the solver's state before forward step `step` would run: true
  // when `step` is the run's last step N. The forward pass then stops without running it, and
  // the reverse pass starts with reverse(N) on x_{N-1}, as it does for a planned schedule. An
  // error stops the run and is returned.
  std::function<Result<bool>(uint64_t step)> is_last;
  // Where the checkpoints live (one level).
  Storage storage = Storage::kAdjsnap;
  // Checkpoint slots, x_0's included. 0: with kAdjsnap or kAdjsnapHost, as many states as
  // adjsnapd's host tier has free room for when the call starts (RESOURCE_EXHAUSTED if not
  // one); with another storage, INVALID_ARGUMENT. More slots never cost more forward steps.
  uint64_t slots = 0;
  // Forward steps after which the run is stopped with OUT_OF_RANGE if is_last never said so;
  // 0: no limit.
  uint64_t max_steps = 0;
};

// Runs the solver forward until `online.is_last` says the step is the last, storing checkpoints
// as the online schedule decides, then reverses every step N..1. `*done`, when given, receives
// the schedule carried out (its steps, forward_steps and actions), also after an error, as far
// as it got. `client` may be null with kLocalMemory; the adjsnapd run is created for the call
// (with an unknown step count) and deleted afterwards.
Status RunAdjoint(const OnlineCheckpointing& online, Client* client, const std::string& run_name,
                  AdjointSolver& solver, schedule::Schedule* done = nullptr);

}  // namespace adjsnap
