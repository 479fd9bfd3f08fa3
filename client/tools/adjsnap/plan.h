// adjsnap plan, apart from the connection: the checkpoint schedule for the command line's run
// on the tiers a Stats answer reports (also the entry point of its fuzz target).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "output.h"
#include "adjsnap/status.h"
#include "adjsnap/v1/control.pb.h"

namespace adjsnap::cli {

// The command line of plan, as given.
struct PlanArgs {
  std::string steps;
  std::string bytes;
  std::string forward;   // seconds per forward step; empty = not given
  std::string backward;  // seconds per backward step; empty = same as forward
  std::string codec = "none";
  std::string codec_param;  // empty = not given
  std::string codec_ratio;  // the ratio measured on the run's data; empty = not given
  std::string dtype = "float32";
  // --level NAME:SLOTS:WRITE:READ, in order: plan over these levels instead of this node's
  // tiers (adjsnapd is not asked).
  std::vector<std::string> levels;
  // --calibrate: where adjsnapd's fits do not cover the step's size, measure it first.
  bool calibrate = false;
};

// Runs a calibration at `bytes` per step on the node that `stats` describes (plan_calibrate.h).
using Calibrator = std::function<Status(uint64_t bytes, const v1::StatsResponse& stats)>;

// Checks `a`, asks `stats` for this node's tiers (false: it could not, and said why) unless
// `a.levels` gives the levels, calibrates through `calibrate` when `a.calibrate` asks and a
// tier's fit does not cover the step (then asks `stats` again), and prints the plan to `out`.
// Returns the exit code.
int Plan(const PlanArgs& a, Output& out, const std::function<bool(v1::StatsResponse*)>& stats,
         const Calibrator& calibrate = {});

}  // namespace adjsnap::cli
