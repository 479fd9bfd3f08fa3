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
// Thread-safety: one call drives one solver on the calling thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "adjsnap/client.h"
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
  kLocalMemory,  // buffers allocated by the driver in this process
  kAdjsnap,        // snapshots of run `run_name` in adjsnapd (its placement picks the tier)
};

// Executes every action of `plan`. `storage[k]` says where level k lives; `client` may be null
// when no level is kAdjsnap. The adjsnapd run is created for the call and deleted afterwards.
// Errors from the solver's callbacks or from adjsnapd stop the run and are returned as they are.
Status RunAdjoint(const schedule::Schedule& plan, const std::vector<Storage>& storage,
                  Client* client, const std::string& run_name, AdjointSolver& solver);

}  // namespace adjsnap
