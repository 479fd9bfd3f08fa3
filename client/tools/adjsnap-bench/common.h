// What adjsnap-bench's benchmarks share (main.cc says what each measures): the command line, the
// clock, the physical references measured in the same run (memcpy, a raw UCX put, O_DIRECT
// I/O on the spool's filesystem), adjsnapd's Stats, and each benchmark's entry point.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/status.h"
#include "adjsnap/v1/control.grpc.pb.h"

namespace adjsnap_bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Args {
  uint64_t steps = 32;
  uint64_t bytes = 64ull << 20;
  std::string socket;
  bool cold = false;
  bool in_process = false;  // both passes in this process (warm pages) instead of fresh ones
  bool json = false;
  bool spill = false;
  bool codec = false;
  bool copy = false;  // the checksumming copy against memcpy; no daemon
  bool device = false;
  bool fill = false;      // push a kept run for the restart benchmark, then exit
  bool n_unknown = false;  // --fill: open the run without declaring its number of steps
  bool verify = false;    // fetch that run back and check every byte
  int workers = 0;        // codec: 0 = the daemon's default (cores minus one)
  int many = 0;           // many: solver processes at once
  int kill = 0;           // many: how many of them are killed mid-run
  bool uniform = false;   // many: every solver --steps x --bytes, mapped (not mixed sizes)
  double compute_ms = 0;  // spill: simulated compute per backward step; 0 = 1.25x read time
};

// Best of `reps` runs of `f`, in seconds.
template <typename F>
double BestSeconds(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  return best;
}

// References (common.cc): best of `reps` single-thread memcpy runs of `bytes`, in bytes per
// second; a raw UCX put between two workers of this process (negative with `error` set when
// UCX cannot); O_DIRECT sequential write then read of `steps` x `bytes` in `dir`.
double MemcpyRate(uint64_t bytes, int reps);
double UcxPutRate(uint64_t bytes, int reps, std::string* error);
adjsnap::Status DirectIoRates(const std::string& dir, uint64_t steps, uint64_t bytes,
                            double* write_rate, double* read_rate);
// The solver's two alternating field buffers, each page marked so a fetch can be checked.
std::vector<std::vector<char>> SourceBuffers(uint64_t bytes);
// adjsnapd's Stats over its control socket, and one tier's figures in them (null if absent).
adjsnap::Result<adjsnap::v1::StatsResponse> DaemonStats(const std::string& socket);
const adjsnap::v1::TierStats* FindTier(const adjsnap::v1::StatsResponse& r, adjsnap::v1::Tier tier);
// Prints "adjsnap-bench: WHAT STATUS" to stderr; returns the exit code 1.
int Fail(const std::string& what, const adjsnap::Status& s);

// The command line (args.cc): nullopt to run, or the exit code (--help, a bad argument).
std::optional<int> ParseArgs(int argc, char** argv, Args* a);

// The benchmarks, one file each.
int HostBench(const Args& a);                     // host.cc: the default mode
int Spill(adjsnap::Client& c, const Args& a);       // spill.cc: --spill
int Many(const Args& a);                          // many.cc: --many
int Codec(const Args& a);                         // codec.cc: --codec
int CopyBench(const Args& a);                     // copy.cc: --copy
int RestartRun(adjsnap::Client& c, const Args& a);  // restart.cc: --fill, --verify

}  // namespace adjsnap_bench
