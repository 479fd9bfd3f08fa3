// Fuzzes `adjsnap plan`'s inputs: its command-line values (--steps, --bytes-per-step,
// --compute-time, --backward-time, --codec, --codec-param, --dtype, --codec-ratio) and the Stats
// answer whose tiers become the schedule's levels, through adjsnap's own Plan
// (client/tools/adjsnap/plan.cc) and the schedule library it calls (client/src/schedule.cc:
// MultiLevel, and through it StoreAll, HRevolve and the binomial and periodic candidates), and
// --level, whose levels replace the tiers. Its output and errors go to /dev/null; --json is
// chosen by the input.
//
// Input: u16 text length, then that much text, one value a line: the first seven values in the
// order above (missing ones are empty, --codec defaults to none, --dtype to float32), a line that
// asks for --json when it is not empty, then --codec-ratio, then the --level values separated by
// spaces; the rest is a adjsnap.v1.StatsResponse (an input whose rest does not parse is
// skipped). Steps are capped at 10^5 and each tier's budget at 2^40 so that one input stays a
// fraction of a second: larger values take the planner's same paths, longer (10^6 steps over
// three levels of unlimited slots take seconds under the sanitizers).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "fuzz_node.h"
#include "plan.h"
#include "seeds.h"
#include "adjsnap/units.h"
#include "adjsnap/v1/control.grpc.pb.h"

namespace {

using namespace adjsnap;

int real_stderr = -1;  // fd 2 as the fuzzer started, for libFuzzer and the sanitizers
int null_fd = -1;      // /dev/null, fd 2 while Plan runs

// The Stats answer of a real node (host and disk tier, the control plane on its unix socket),
// asked for over gRPC as adjsnap asks. With `zfp`, a zfp-rate run has two steps on disk first,
// so the disk tier reports a measured compression ratio.
v1::StatsResponse RealStats(bool zfp) {
  fuzz::NodeOptions o;
  o.control = true;
  o.disk = true;
  o.host_bytes = 16ull << 20;
  o.disk_bytes = 64ull << 20;
  auto node = fuzz::Node::Start(o);
  if (zfp) {
    v1::RunSpec spec;
    spec.set_name("wave");
    spec.set_steps(2);
    spec.set_dtype(v1::DTYPE_FLOAT32);
    spec.add_shape(32);
    spec.add_shape(64);
    spec.set_bytes_per_step(32 * 64 * 4);
    spec.set_layers(v1::LAYERS_DISK);
    spec.set_keep(true);
    spec.set_codec(v1::CODEC_ZFP_RATE);
    spec.set_codec_param(8);
    bool created = false;
    v1::RunInfo info = fuzz::Take(node->store()->OpenRun(spec, 0, &created), "OpenRun");
    for (uint64_t step = 0; step < 2; ++step) {
      fuzz::PushStep(node->store(), info.run_id(), step,
                     fuzz::Field(v1::DTYPE_FLOAT32, 32, 64, step));
    }
    fuzz::WaitOnDisk(node->store(), "0:wave", 2);
  }
  auto stub = v1::Control::NewStub(
      grpc::CreateChannel("unix:" + node->control_socket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatsResponse stats;
  grpc::Status s = stub->Stats(&ctx, v1::StatsRequest(), &stats);
  if (!s.ok()) fuzz::Check(Status::Internal(s.error_message()), "Stats");
  // The node's temporary paths, which plan does not read, as a root adjsnapd's defaults: a seed
  // must not depend on where it was made.
  stats.clear_spool_dirs();
  stats.add_spool_dirs("/var/lib/adjsnap/spool");
  stats.set_control_socket("/run/adjsnap/adjsnap.sock");
  for (v1::SpoolState& spool : *stats.mutable_spools()) spool.set_dir("/var/lib/adjsnap/spool");
  return stats;
}

// One input: the seven values, the --json line and --codec-ratio, then the Stats answer.
std::string PlanInput(std::initializer_list<const char*> lines, const v1::StatsResponse& stats) {
  std::string text;
  for (const char* line : lines) text += std::string(line) + "\n";
  return fuzz::U16(text.size()) + text + stats.SerializeAsString();
}

// Seeds: the command lines of adjsnap plan's tests and its documentation, against the Stats
// answers of a fresh node and of one with zfp steps on disk.
void WriteSeeds() {
  const v1::StatsResponse fresh = RealStats(false);
  const v1::StatsResponse measured = RealStats(true);
  fuzz::WriteSeed("steps_bytes", PlanInput({"200", "1M", "", "", "none", "", "float32", ""}, fresh));
  fuzz::WriteSeed("times_json",
                  PlanInput({"100", "1M", "0.5", "1.5", "none", "", "float32", "json"}, fresh));
  fuzz::WriteSeed("zfp_rate", PlanInput({"200", "1M", "", "", "zfp-rate", "8", "float32", ""},
                                        fresh));
  fuzz::WriteSeed("zfp_rate_float64_json",
                  PlanInput({"20", "64M", "0.02", "", "zfp-rate", "16", "float64", "json"}, fresh));
  fuzz::WriteSeed("zfp_accuracy_measured",
                  PlanInput({"1000", "8M", "0.1", "0.2", "zfp-accuracy", "1e-3", "float32", ""},
                            measured));
  fuzz::WriteSeed("zfp_reversible_measured_json",
                  PlanInput({"5000", "1G", "", "", "zfp-reversible", "", "float32", "json"},
                            measured));
  fuzz::WriteSeed(
      "bitcomp_ratio_json",
      PlanInput({"2000", "64M", "0.05", "", "bitcomp", "", "float32", "json", "3.4"}, fresh));
  fuzz::WriteSeed("zero_steps", PlanInput({"0", "1M", "", "", "none", "", "float32", ""}, fresh));
  fuzz::WriteSeed("levels_json",
                  PlanInput({"2000", "64M", "0.05", "0.1", "none", "", "float32", "json", "",
                             "host:64:0.005:0.005 disk:960:0.3:0.2 shared-disk:unlimited:1:0.8"},
                            fresh));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (fuzz::SeedDir()) {
    fuzz::QuietLogs();
    WriteSeeds();
    std::exit(0);
  }
  if (!std::freopen("/dev/null", "w", stdout)) return 1;
  if (!std::getenv("ADJSNAP_FUZZ_VERBOSE")) {
    // adjsnap's errors go to fd 2, and so do libFuzzer's and the sanitizers' reports: fd 2 is
    // /dev/null only while Plan runs, and the sanitizers report to the real stderr always.
    real_stderr = dup(STDERR_FILENO);
    null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (real_stderr < 0 || null_fd < 0) return 1;
    __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(real_stderr)));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size < 2) return 0;
  size_t text = std::min<size_t>(bytes[0] | (size_t{bytes[1]} << 8), size - 2);
  std::istringstream lines(std::string(reinterpret_cast<const char*>(bytes + 2), text));
  cli::PlanArgs a;
  std::string json, levels;
  for (std::string* field : {&a.steps, &a.bytes, &a.forward, &a.backward, &a.codec, &a.codec_param,
                             &a.dtype, &json, &a.codec_ratio, &levels}) {
    std::string line;
    if (!std::getline(lines, line)) break;
    *field = line;
  }
  std::istringstream level_words(levels);
  for (std::string level; level_words >> level;) a.levels.push_back(level);
  if (a.codec.empty()) a.codec = "none";
  if (a.dtype.empty()) a.dtype = "float32";
  if (a.dtype != "float32" && a.dtype != "float64") return 0;  // CLI11 refuses other values
  uint64_t steps = 0;
  if (ParseCount(a.steps, &steps) && steps > 100000) return 0;
  v1::StatsResponse stats;
  if (!stats.ParseFromArray(bytes + 2 + text, static_cast<int>(size - 2 - text))) return 0;
  for (const auto& t : stats.tiers()) {
    if (t.budget_bytes() > (1ull << 40)) return 0;
  }
  cli::Output out(!json.empty());
  if (null_fd >= 0) dup2(null_fd, STDERR_FILENO);
  (void)cli::Plan(a, out, [&stats](v1::StatsResponse* r) {
    *r = stats;
    return true;
  });
  if (null_fd >= 0) dup2(real_stderr, STDERR_FILENO);
  return 0;
}
