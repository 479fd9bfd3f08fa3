#include "adjsnap/adjoint.h"

#include <cstring>
#include <map>

namespace adjsnap {

namespace {

// Carries out schedule actions one at a time over the solver and the storage levels; shared by
// the planned and the online modes. Thread-safety: none (one driver, the calling thread).
class Executor {
 public:
  Executor(const std::vector<Storage>& storage, Client* client, const std::string& run_name,
           AdjointSolver& solver)
      : storage_(storage), client_(client), run_name_(run_name), solver_(solver) {
    for (Storage s : storage) uses_adjsnap_ |= InAdjsnap(s);
  }

  static bool InAdjsnap(Storage s) { return s != Storage::kLocalMemory; }

  // The adjsnapd run of level `level`: `run_name` for the first kAdjsnap level, `run_name.k`
  // for level k after it. A run per level, since a plan may hold the same state on two levels
  // at once (a run stores a step once).
  std::string RunName(size_t level) const {
    for (size_t k = 0; k < storage_.size(); ++k) {
      if (!InAdjsnap(storage_[k])) continue;
      return k == level ? run_name_ : run_name_ + "." + std::to_string(level);
    }
    return run_name_;
  }

  // Checks the arguments and creates the adjsnapd run (`steps` 0: unknown).
  Status Open(uint64_t steps) {
    if (uses_adjsnap_ && client_ == nullptr) {
      return Status::InvalidArgument(
          "a schedule level is kept in adjsnapd but no client was given");
    }
    if (!solver_.state || solver_.bytes == 0 || !solver_.advance || !solver_.reverse) {
      return Status::InvalidArgument(
          "the solver needs a state buffer, its size and both callbacks");
    }
    if (!uses_adjsnap_) return Status::Ok();
    for (size_t k = 0; k < storage_.size(); ++k) {
      if (!InAdjsnap(storage_[k])) continue;
      RunSpec spec;
      spec.name = RunName(k);
      // A level bound to a tier holds at most its slots at once, whatever N is: declared with
      // N, its run would be refused by a tier smaller than N states, and it places nothing by
      // N. A kAdjsnap level declares N for adjsnapd's reverse-order placement.
      spec.steps = storage_[k] == Storage::kAdjsnap ? steps : 0;
      spec.bytes_per_step = solver_.bytes;
      spec.keep = true;  // a schedule restores a checkpoint more than once, then deletes it
      switch (storage_[k]) {  // a level bound to a tier: the run's layers and spools say it
        case Storage::kAdjsnapHost:
          spec.layers = "Host";
          break;
        case Storage::kAdjsnapDisk:
          spec.layers = "Disk";
          spec.spool_class = "local";
          break;
        case Storage::kAdjsnapSharedDisk:
          spec.layers = "Disk";
          spec.spool_class = "shared";
          break;
        default:
          break;
      }
      ADJSNAP_ASSIGN_OR_RETURN(RunInfo run, client_->OpenRun(spec));
      if (!run.created) {
        return Status::AlreadyExists("run '" + spec.name +
                                     "' already exists; RunAdjoint needs a "
                                     "fresh run name");
      }
      runs_[k] = run.run_id;
    }
    return Status::Ok();
  }

  Status Execute(const schedule::Action& a) {
    using schedule::ActionKind;
    switch (a.kind) {
      case ActionKind::kAdvance:
        return solver_.advance(a.a, a.b);
      case ActionKind::kReverse:
        return solver_.reverse(a.a);
      case ActionKind::kWrite: {
        ADJSNAP_ASSIGN_OR_RETURN(Storage where, LevelOf(a));
        if (where == Storage::kLocalMemory) {
          auto& copy = local_[{a.level, a.a}];
          copy.assign(static_cast<char*>(solver_.state),
                      static_cast<char*>(solver_.state) + solver_.bytes);
          return Status::Ok();
        }
        auto h = client_->Push(runs_.at(a.level), a.a, solver_.state, solver_.bytes);
        if (!h.ok()) return h.status();
        ADJSNAP_RETURN_IF_ERROR(h->WaitReleased());  // the solver reuses its buffer next
        in_adjsnap_[{a.level, a.a}] = *h;
        return Status::Ok();
      }
      case ActionKind::kRead: {
        ADJSNAP_ASSIGN_OR_RETURN(Storage where, LevelOf(a));
        if (where == Storage::kLocalMemory) {
          auto it = local_.find({a.level, a.a});
          if (it == local_.end()) {
            return Status::Internal("state " + std::to_string(a.a) + " not held locally");
          }
          std::memcpy(solver_.state, it->second.data(), solver_.bytes);
          return Status::Ok();
        }
        ADJSNAP_RETURN_IF_ERROR(Stored(a.level, a.a));
        return client_->Fetch(runs_.at(a.level), a.a, solver_.state, solver_.bytes);
      }
      case ActionKind::kFree: {
        ADJSNAP_ASSIGN_OR_RETURN(Storage where, LevelOf(a));
        if (where == Storage::kLocalMemory) {
          local_.erase({a.level, a.a});
          return Status::Ok();
        }
        Status result = Stored(a.level, a.a);
        if (result.ok()) result = client_->DeleteSnapshot(RunName(a.level), a.a);
        in_adjsnap_.erase({a.level, a.a});
        return result;
      }
    }
    return Status::Internal("unknown schedule action");
  }

  // Deletes the adjsnapd runs; returns `result`, or the first deletion's error when `result`
  // is OK.
  Status Close(Status result) {
    for (auto& [state, h] : in_adjsnap_) (void)h.WaitStored();
    for (const auto& [level, run_id] : runs_) {
      Status deleted = client_->DeleteRun(RunName(level));
      if (result.ok()) result = deleted;
    }
    runs_.clear();
    return result;
  }

 private:
  Result<Storage> LevelOf(const schedule::Action& a) const {
    if (a.level < 0 || static_cast<size_t>(a.level) >= storage_.size()) {
      return Status::InvalidArgument("schedule names level " + std::to_string(a.level) +
                                     " but only " + std::to_string(storage_.size()) +
                                     " storage levels were given");
    }
    return storage_[a.level];
  }

  // Waits until a pushed state is stored, so a later fetch or delete finds it.
  Status Stored(int level, uint64_t state) {
    auto it = in_adjsnap_.find({level, state});
    if (it == in_adjsnap_.end()) {
      return Status::Internal("state " + std::to_string(state) + " is not in adjsnapd at level " +
                              std::to_string(level));
    }
    return it->second.WaitStored();
  }

  const std::vector<Storage>& storage_;
  Client* const client_;
  const std::string& run_name_;
  AdjointSolver& solver_;
  bool uses_adjsnap_ = false;
  std::map<size_t, uint64_t> runs_;  // kAdjsnap level -> its run's id, once opened
  std::map<std::pair<int, uint64_t>, std::vector<char>> local_;  // (level, state) -> copy
  std::map<std::pair<int, uint64_t>, PushHandle> in_adjsnap_;    // (level, state) -> its push
};

// Slots for an online run in adjsnapd: the host tier's free room in whole states, so that every
// checkpoint stays in host memory.
Result<uint64_t> HostSlots(Client* client, size_t bytes) {
  ADJSNAP_ASSIGN_OR_RETURN(std::vector<TierInfo> tiers, client->Tiers());
  for (const TierInfo& t : tiers) {
    if (t.tier != Tier::kHost) continue;
    uint64_t free_bytes = t.budget_bytes > t.used_bytes ? t.budget_bytes - t.used_bytes : 0;
    uint64_t slots = free_bytes / bytes;
    if (slots == 0) {
      return Status::ResourceExhausted("adjsnapd's host tier has room for no state of " +
                                       std::to_string(bytes) + " bytes");
    }
    return slots;
  }
  return Status::FailedPrecondition("adjsnapd reports no host tier");
}

}  // namespace

Result<Storage> StorageForTier(const std::string& tier) {
  if (tier == "host") return Storage::kAdjsnapHost;
  if (tier == "disk") return Storage::kAdjsnapDisk;
  if (tier == "shared-disk") return Storage::kAdjsnapSharedDisk;
  return Status::InvalidArgument("no adjsnapd tier is named '" + tier +
                                 "' (host, disk or shared-disk, as `adjsnap plan` names them)");
}

Status RunAdjoint(const schedule::Schedule& plan, const std::vector<Storage>& storage,
                  Client* client, const std::string& run_name, AdjointSolver& solver) {
  Executor run(storage, client, run_name, solver);
  if (Status opened = run.Open(plan.steps); !opened.ok()) return run.Close(opened);
  Status result;
  for (const schedule::Action& a : plan.actions) {
    result = run.Execute(a);
    if (!result.ok()) break;
  }
  return run.Close(result);
}

Status RunAdjoint(const OnlineCheckpointing& online, Client* client, const std::string& run_name,
                  AdjointSolver& solver, schedule::Schedule* done) {
  if (!online.is_last) return Status::InvalidArgument("the online mode needs is_last");
  uint64_t slots = online.slots;
  if (slots == 0) {
    if (online.storage != Storage::kAdjsnap && online.storage != Storage::kAdjsnapHost) {
      return Status::InvalidArgument(
          "online checkpoints need a slot count, unless they live in adjsnapd's host memory "
          "(kAdjsnap or kAdjsnapHost: its free room gives it)");
    }
    if (client == nullptr) return Status::InvalidArgument("checkpoints in adjsnapd need a client");
    if (solver.bytes == 0) return Status::InvalidArgument("the solver's state has no size");
    ADJSNAP_ASSIGN_OR_RETURN(slots, HostSlots(client, solver.bytes));
  }
  ADJSNAP_ASSIGN_OR_RETURN(schedule::OnlineSchedule sched,
                           schedule::OnlineSchedule::Create(slots, 0));
  const std::vector<Storage> storage = {online.storage};
  Executor run(storage, client, run_name, solver);
  if (Status opened = run.Open(0); !opened.ok()) return run.Close(opened);
  auto execute = [&](const std::vector<schedule::Action>& actions) -> Status {
    for (const schedule::Action& a : actions) ADJSNAP_RETURN_IF_ERROR(run.Execute(a));
    return Status::Ok();
  };
  Status result;
  while (result.ok()) {
    const uint64_t step = sched.current() + 1;
    Result<bool> last = online.is_last(step);
    if (!last.ok()) {
      result = last.status();
      break;
    }
    if (*last) break;
    if (online.max_steps != 0 && step > online.max_steps) {
      result = Status::OutOfRange("the forward pass ran " + std::to_string(online.max_steps) +
                                  " steps and is_last never said the run ended");
      break;
    }
    Result<std::vector<schedule::Action>> actions = sched.Advance();
    result = actions.ok() ? execute(*actions) : actions.status();
  }
  if (result.ok()) {
    Result<std::vector<schedule::Action>> actions = sched.Finish();
    result = actions.ok() ? execute(*actions) : actions.status();
  }
  if (done != nullptr) *done = sched.schedule();
  return run.Close(result);
}

}  // namespace adjsnap
