// A run after it opens: closing it, the changes of its record (RecordRun: written first, then
// taken into the index), the sessions attached to it and the orphans they leave.
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "log.h"
#include "adjsnap/units.h"
#include "store/store.h"

namespace adjsnap {

Result<v1::RunInfo> Store::CloseRun(const std::string& name, const Tenant& who) {
  auto written = std::make_shared<std::promise<Status>>();
  std::future<Status> closed = written->get_future();
  uint64_t id = 0;
  {
    IndexLock lock(ix_);
    ADJSNAP_ASSIGN_OR_RETURN(Run * run, FindByName(name, who));
    if (run->record.state() == v1::RUN_CLOSED) return Info(*run);
    id = run->record.run_id();
    RecordRun(*run, [](v1::RunRecord& r) { r.set_state(v1::RUN_CLOSED); },
              [written](Status s) { written->set_value(std::move(s)); });
  }
  // The answer waits for the catalog, the index does not.
  ADJSNAP_RETURN_IF_ERROR(closed.get());
  IndexLock lock(ix_);
  auto run = ix_.runs.find(id);
  if (run == ix_.runs.end()) {
    return Status::NotFound("run '" + name + "' was deleted while it was being closed");
  }
  return Info(run->second);
}

void Store::RecordRun(Run& run, const std::function<void(v1::RunRecord&)>& change,
                      std::function<void(Status)> done) {
  // Built on the newest record, one still being written included: two changes in flight
  // both reach the catalog, in order.
  v1::RunRecord updated = run.record_writes ? run.queued_record : run.record;
  change(updated);
  ++run.record_writes;
  run.queued_record = updated;
  catalog_->PutRunThen(updated, [this, updated, done = std::move(done)](Status s) {
    IndexLock lock(ix_);
    // Deleted meanwhile: its delete follows this record in the catalog.
    if (auto it = ix_.runs.find(updated.run_id()); it != ix_.runs.end()) {
      --it->second.record_writes;
      if (s.ok()) it->second.record = updated;
    }
    if (done) done(std::move(s));
  });
}

void Store::EndSession(uint64_t session_id, bool died) {
  IndexLock lock(ix_);
  for (auto& [id, run] : ix_.runs) {
    for (auto& [step, held] : run.device) {
      if (held.session_id == session_id) held.lost = true;
    }
    if (!run.sessions.erase(session_id) || !run.sessions.empty()) continue;
    if (died && !run.record.spec().keep()) {
      run.orphaned_at = std::chrono::steady_clock::now();
    } else if (!died && !closing_ && run.record.awaiting_clients()) {
      // Its last client closed cleanly: a start after a crash must not await it (the record
      // is otherwise written at a clean stop only). Not while stopping: the stop ends every
      // session, and has just recorded which runs await their clients.
      RecordRun(
          run, [](v1::RunRecord& r) { r.set_awaiting_clients(false); },
          [](Status s) {
            if (!s.ok()) {
              ADJSNAP_LOG_WARN("recording a run's clients gone: %s", s.ToString().c_str());
            }
          });
    }
  }
}

size_t Store::AttachSession(const std::vector<uint64_t>& run_ids, const Tenant& who) {
  IndexLock lock(ix_);
  size_t attached = 0;
  for (uint64_t id : run_ids) {
    auto run = FindById(id, who);
    if (!run.ok()) continue;  // deleted while adjsnapd was down, or not the caller's
    Attach(**run, who);
    ++attached;
  }
  return attached;
}

void Store::RemoveOrphans(std::chrono::seconds grace) {
  IndexLock lock(ix_);
  // A stop disconnects every client, which then waits to reconnect: a stop slower than the
  // grace (its drain on a loaded node) must not remove their runs (the soak saw four go in a
  // 21 s stop). They are kept, as every run is across a restart.
  if (closing_) return;
  auto now = std::chrono::steady_clock::now();
  std::vector<uint64_t> expired;
  for (const auto& [id, run] : ix_.runs) {
    if (run.orphaned_at && now - *run.orphaned_at >= grace) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    std::string name = ix_.runs.at(id).record.spec().name();
    // On the data plane's loop (its sweep): the catalog's delete is not waited for.
    uint64_t freed = DeleteRunLocked(&ix_.runs.at(id));
    ADJSNAP_LOG_INFO(
        "run '%s' removed (run id %llu), %s freed: every client that opened it died (or did "
        "not come back after a restart) %lld s ago and it is not kept (orphan_grace)",
        name.c_str(), static_cast<unsigned long long>(id), FormatBytes(freed).c_str(),
        static_cast<long long>(grace.count()));
  }
}

}  // namespace adjsnap
