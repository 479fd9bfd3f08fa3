// adjsnap plan --calibrate: transfers of the planned step's size through this node's real tiers,
// so that adjsnapd's fits (TierStats.write_fit, read_fit) cover that size.
#pragma once

#include <cstdint>
#include <string>

#include "adjsnap/status.h"
#include "adjsnap/v1/control.pb.h"

namespace adjsnap::cli {

// Bounds of one calibration: at most kCalibrationSteps steps per disk class, each pushed and
// fetched back once, and no new step begun past kCalibrationSeconds (each class gets at least
// one).
inline constexpr uint64_t kCalibrationSteps = 3;
inline constexpr double kCalibrationSeconds = 2.0;

// Pushes steps of `bytes` through throwaway runs of layers Disk (staged through host memory,
// demoted, read back from disk into host memory, fetched): one run whose steps the placement
// puts on the local spools, and, when `stats` reports shared spools, one whose steps it puts on
// the shared ones; on a node without a disk tier, one run of layers Host. Each run is deleted
// after, also on failure. `socket` is adjsnapd's control
// socket (empty: the client's default). The samples land in adjsnapd, which fits them; the
// caller asks Stats again.
Status Calibrate(const std::string& socket, uint64_t bytes, const v1::StatsResponse& stats);

}  // namespace adjsnap::cli
