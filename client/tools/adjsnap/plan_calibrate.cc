#include "plan_calibrate.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/units.h"

namespace adjsnap::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One throwaway run of `count` steps starting at step 0, declared as `declared` steps, of
// `layers` (Disk or Host): pushed, waited for in the tier the layers name, fetched and
// compared, then deleted.
Status CalibrateRun(Client& client, const std::string& name, const std::string& layers,
                    uint64_t bytes, uint64_t count, uint64_t declared, Clock::time_point deadline) {
  const Tier want = layers == "Disk" ? Tier::kDisk : Tier::kHost;
  (void)client.DeleteRun(name);  // a calibration killed before it deleted its run
  RunSpec spec;
  spec.name = name;
  spec.steps = declared;
  spec.bytes_per_step = bytes;
  spec.layers = layers;
  // A run declared larger than the local spools (to reach the shared ones) would be refused as
  // one that can never fit; it pushes only `count` steps. Any other is refused at once when
  // its steps cannot fit, rather than waiting for room.
  spec.block_when_full = declared > count;
  ADJSNAP_ASSIGN_OR_RETURN(RunInfo run, client.OpenRun(spec));
  auto result = [&]() -> Status {
    std::vector<char> out(bytes), in(bytes);
    uint64_t pushed = 0;
    for (; pushed < count && (pushed == 0 || Clock::now() < deadline); ++pushed) {
      // Each step's bytes differ, so that a fetch that returned another step would be seen.
      std::memset(out.data(), static_cast<int>(pushed + 1), bytes);
      ADJSNAP_ASSIGN_OR_RETURN(PushHandle h, client.Push(run.run_id, pushed, out.data(), bytes));
      ADJSNAP_RETURN_IF_ERROR(h.WaitStored());
    }
    // A step is fetched once its demotion is done, so that the fetch reads it from disk.
    for (;;) {
      ADJSNAP_ASSIGN_OR_RETURN(std::vector<Location> where, client.ListSnapshots(name));
      bool all = where.size() == pushed;
      for (const Location& l : where) all = all && l.tier == want;
      if (all) break;
      if (Clock::now() > deadline + std::chrono::seconds(30)) {
        return Status(Code::kDeadlineExceeded,
                      "calibration steps of run '" + name +
                          "' still not on disk after 30 s past the calibration's "
                          "time: adjsnapd's disk tier is stalled");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (uint64_t t = pushed; t-- > 0;) {
      ADJSNAP_RETURN_IF_ERROR(client.Fetch(run.run_id, t, in.data(), bytes));
      std::memset(out.data(), static_cast<int>(t + 1), bytes);
      if (std::memcmp(in.data(), out.data(), bytes) != 0) {
        return Status::DataLoss("calibration step " + std::to_string(t) + " of run '" + name +
                                "' came back different from what was pushed");
      }
    }
    return Status::Ok();
  }();
  Status deleted = client.DeleteRun(name);
  return result.ok() ? deleted : result;
}

}  // namespace

Status Calibrate(const std::string& socket, uint64_t bytes, const v1::StatsResponse& stats) {
  uint64_t local_budget = 0, local_used = 0;
  bool local = false, shared = false;
  for (const auto& t : stats.tiers()) {
    if (t.tier() != v1::TIER_DISK) continue;
    if (t.spool_class() == "shared") {
      shared = true;
    } else {
      local = true;
      local_budget = t.budget_bytes();
      local_used = t.used_bytes();
    }
  }
  ClientOptions options;
  options.socket_path = socket;
  options.client_name = "adjsnap plan --calibrate";
  options.reconnect_timeout_s = 0;
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  const std::string prefix = "adjsnap-plan-calibration-" + std::to_string(getpid());
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(kCalibrationSeconds));
  // Placement puts a disk step on the local spools when they hold it and every newer step of
  // the run still to come (docs/architecture.md, "Three levels"): a run of kCalibrationSteps
  // goes local, and one declared past the local room goes to the shared spools.
  if (!local && !shared) {  // the host tier alone
    return CalibrateRun(*client, prefix + "-host", "Host", bytes, kCalibrationSteps,
                        kCalibrationSteps, deadline);
  }
  if (local) {
    ADJSNAP_RETURN_IF_ERROR(CalibrateRun(*client, prefix + "-local", "Disk", bytes,
                                         kCalibrationSteps, kCalibrationSteps, deadline));
  }
  if (shared) {
    const uint64_t file = (bytes + 4095) / 4096 * 4096;
    const uint64_t room = local_budget > local_used ? local_budget - local_used : 0;
    const uint64_t declared = room / file + kCalibrationSteps + 1;
    ADJSNAP_RETURN_IF_ERROR(CalibrateRun(*client, prefix + "-shared", "Disk", bytes,
                                         kCalibrationSteps, declared, deadline));
  }
  return Status::Ok();
}

}  // namespace adjsnap::cli
