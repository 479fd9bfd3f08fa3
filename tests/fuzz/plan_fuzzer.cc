// Fuzzes `snapctl plan`'s inputs: its command-line values (--steps, --bytes-per-step,
// --compute-time, --backward-time, --codec, --codec-param, --dtype) and the Stats answer whose
// tiers become the schedule's levels, through snapctl's own Plan (client/tools/snapctl/plan.cc)
// and the schedule library it calls (client/src/schedule.cc: StoreAll, HRevolve, Revolve's
// closed form). Output goes to /dev/null; --json is chosen by the input.
//
// Input: u16 text length, then that much text: the seven values, one a line, in the order
// above (missing ones are empty, --codec defaults to none, --dtype to float32); the rest is a
// snapd.v1.StatsResponse (an input whose rest does not parse is skipped). Steps are capped at
// 10^6 and each tier's budget at 2^40 so that one input stays a fraction of a second: larger
// values only make the same tables longer.
#include <cstdio>
#include <sstream>

#include "plan.h"
#include "snapd/units.h"

namespace {

using namespace snapd;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!std::freopen("/dev/null", "w", stdout)) return 1;
  if (!std::getenv("SNAPD_FUZZ_VERBOSE") && !std::freopen("/dev/null", "w", stderr)) return 1;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size < 2) return 0;
  size_t text = std::min<size_t>(bytes[0] | (size_t{bytes[1]} << 8), size - 2);
  std::istringstream lines(std::string(reinterpret_cast<const char*>(bytes + 2), text));
  snapctl::PlanArgs a;
  std::string json;
  for (std::string* field : {&a.steps, &a.bytes, &a.forward, &a.backward, &a.codec,
                             &a.codec_param, &a.dtype, &json}) {
    std::string line;
    if (!std::getline(lines, line)) break;
    *field = line;
  }
  if (a.codec.empty()) a.codec = "none";
  if (a.dtype.empty()) a.dtype = "float32";
  if (a.dtype != "float32" && a.dtype != "float64") return 0;  // CLI11 refuses other values
  uint64_t steps = 0;
  if (ParseCount(a.steps, &steps) && steps > 1000000) return 0;
  v1::StatsResponse stats;
  if (!stats.ParseFromArray(bytes + 2 + text, static_cast<int>(size - 2 - text))) return 0;
  for (const auto& t : stats.tiers()) {
    if (t.budget_bytes() > (1ull << 40)) return 0;
  }
  snapctl::Output out(!json.empty());
  (void)snapctl::Plan(a, out, [&stats](v1::StatsResponse* r) {
    *r = stats;
    return true;
  });
  return 0;
}
