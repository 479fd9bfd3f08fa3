#include "adjsnap/adjoint.h"

#include <cstring>
#include <map>

namespace adjsnap {

Status RunAdjoint(const schedule::Schedule& plan, const std::vector<Storage>& storage,
                  Client* client, const std::string& run_name, AdjointSolver& solver) {
  using schedule::ActionKind;
  bool uses_adjsnap = false;
  for (Storage s : storage) uses_adjsnap |= s == Storage::kAdjsnap;
  if (uses_adjsnap && client == nullptr) {
    return Status::InvalidArgument("a schedule level is kept in adjsnapd but no client was given");
  }
  if (!solver.state || solver.bytes == 0 || !solver.advance || !solver.reverse) {
    return Status::InvalidArgument("the solver needs a state buffer, its size and both callbacks");
  }
  uint64_t run_id = 0;
  if (uses_adjsnap) {
    RunSpec spec;
    spec.name = run_name;
    spec.steps = plan.steps;
    spec.bytes_per_step = solver.bytes;
    spec.keep = true;  // a schedule restores a checkpoint more than once, then deletes it
    ADJSNAP_ASSIGN_OR_RETURN(RunInfo run, client->OpenRun(spec));
    if (!run.created) {
      return Status::AlreadyExists("run '" + run_name + "' already exists; RunAdjoint needs a "
                                   "fresh run name");
    }
    run_id = run.run_id;
  }
  std::map<std::pair<int, uint64_t>, std::vector<char>> local;  // (level, state) -> copy
  std::map<uint64_t, PushHandle> in_adjsnap;                       // state -> its push
  auto level_of = [&](const schedule::Action& a) -> Result<Storage> {
    if (a.level < 0 || static_cast<size_t>(a.level) >= storage.size()) {
      return Status::InvalidArgument("schedule names level " + std::to_string(a.level) +
                                     " but only " + std::to_string(storage.size()) +
                                     " storage levels were given");
    }
    return storage[a.level];
  };
  // Waits until a pushed state is stored, so a later fetch or delete finds it.
  auto stored = [&](uint64_t state) -> Status {
    auto it = in_adjsnap.find(state);
    if (it == in_adjsnap.end()) {
      return Status::Internal("state " + std::to_string(state) + " is not in adjsnapd");
    }
    return it->second.WaitStored();
  };
  Status result;
  for (const schedule::Action& a : plan.actions) {
    switch (a.kind) {
      case ActionKind::kAdvance:
        result = solver.advance(a.a, a.b);
        break;
      case ActionKind::kReverse:
        result = solver.reverse(a.a);
        break;
      case ActionKind::kWrite: {
        ADJSNAP_ASSIGN_OR_RETURN(Storage where, level_of(a));
        if (where == Storage::kLocalMemory) {
          auto& copy = local[{a.level, a.a}];
          copy.assign(static_cast<char*>(solver.state),
                      static_cast<char*>(solver.state) + solver.bytes);
        } else {
          auto h = client->Push(run_id, a.a, solver.state, solver.bytes);
          result = h.ok() ? h->WaitReleased() : h.status();  // the solver reuses its buffer next
          if (result.ok()) in_adjsnap[a.a] = *h;
        }
        break;
      }
      case ActionKind::kRead: {
        ADJSNAP_ASSIGN_OR_RETURN(Storage where, level_of(a));
        if (where == Storage::kLocalMemory) {
          auto it = local.find({a.level, a.a});
          if (it == local.end()) {
            result = Status::Internal("state " + std::to_string(a.a) + " not held locally");
          } else {
            std::memcpy(solver.state, it->second.data(), solver.bytes);
          }
        } else {
          result = stored(a.a);
          if (result.ok()) result = client->Fetch(run_id, a.a, solver.state, solver.bytes);
        }
        break;
      }
      case ActionKind::kFree: {
        ADJSNAP_ASSIGN_OR_RETURN(Storage where, level_of(a));
        if (where == Storage::kLocalMemory) {
          local.erase({a.level, a.a});
        } else {
          result = stored(a.a);
          if (result.ok()) result = client->DeleteSnapshot(run_name, a.a);
          in_adjsnap.erase(a.a);
        }
        break;
      }
    }
    if (!result.ok()) break;
  }
  if (uses_adjsnap) {
    for (auto& [state, h] : in_adjsnap) (void)h.WaitStored();
    Status deleted = client->DeleteRun(run_name);
    if (result.ok()) result = deleted;
  }
  return result;
}

}  // namespace adjsnap
