// plan: the checkpoint schedule for an adjoint run on this node's tiers, with the write and read
// costs adjsnapd has measured.
#include "plan.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "plan_calibrate.h"
#include "adjsnap/chunk_frame.h"
#include "adjsnap/schedule.h"
#include "adjsnap/transfer_fit.h"
#include "adjsnap/units.h"

namespace adjsnap::cli {
namespace {

// How the tiers store a step of the planned run. zfp compresses on adjsnapd's CPUs on the way to
// disk: only a disk slot is smaller. The nvCOMP codecs compress on the solver's GPU before
// PCIe: host and disk slots both hold the step's chunk frame.
struct Compression {
  v1::Codec codec = v1::CODEC_NONE;
  double param = 0;
  double ratio = 1;
  bool given = false;  // --codec-ratio
  std::string source = "uncompressed";
  // The nvCOMP codecs (compress::IsGpuCodec, in the daemon's codec library).
  bool InHost() const {
    return codec == v1::CODEC_BITCOMP || codec == v1::CODEC_BITCOMP_LOSSY || codec == v1::CODEC_ANS;
  }
};

// The bytes a step of `raw` bytes takes in a tier that holds it compressed by `c`: raw / ratio,
// and for a chunk frame its header, table and chunk alignment (16 MiB chunks); never more than
// raw, since a step that does not shrink is stored as it was.
uint64_t StoredBytes(uint64_t raw, const Compression& c) {
  auto shrunk = static_cast<uint64_t>(std::ceil(double(raw) / c.ratio));
  uint64_t chunks = (raw + compress::kMaxChunkBytes - 1) / compress::kMaxChunkBytes;
  uint64_t framing = c.InHost()
                         ? sizeof(compress::FrameHeader) +
                               chunks * (sizeof(compress::ChunkEntry) + compress::kChunkAlign)
                         : 0;
  return std::min(raw, shrunk + framing);
}

// --codec and --codec-param checked; false after saying why not. zfp-rate's ratio follows
// from its rate; the other zfp modes depend on the data, so their ratio is the one this node's
// disk tier measured (raw over stored bytes of what it holds), or 1 before it holds any.
bool ParseCompression(const PlanArgs& a, Compression* c) {
  std::string names;
  bool found = false;
  for (int i = v1::Codec_MIN; i <= v1::Codec_MAX; ++i) {
    if (!v1::Codec_IsValid(i)) continue;
    std::string name = CodecLabel(static_cast<v1::Codec>(i));
    names += (names.empty() ? "" : ", ") + name;
    if (name == a.codec) {
      c->codec = static_cast<v1::Codec>(i);
      found = true;
    }
  }
  if (!found) {
    Error("plan", "--codec must be one of " + names + ", got '" + a.codec + "'");
    return false;
  }
  const char* param_is = c->codec == v1::CODEC_ZFP_RATE        ? "bits per value"
                         : c->codec == v1::CODEC_ZFP_PRECISION ? "bit planes kept"
                         : c->codec == v1::CODEC_ZFP_ACCURACY  ? "absolute error tolerance"
                         : c->codec == v1::CODEC_BITCOMP_LOSSY ? "absolute error bound"
                                                               : nullptr;
  if (param_is && a.codec_param.empty()) {
    Error("plan", "--codec " + a.codec + " needs --codec-param (" + param_is + ")");
    return false;
  }
  if (!a.codec_param.empty()) {
    char* end = nullptr;
    c->param = std::strtod(a.codec_param.c_str(), &end);
    if (!param_is || end == a.codec_param.c_str() || *end != '\0' || !(c->param > 0) ||
        !std::isfinite(c->param)) {
      Error("plan", param_is
                        ? "--codec-param must be a finite number > 0, got '" + a.codec_param + "'"
                        : "--codec " + a.codec + " takes no --codec-param");
      return false;
    }
  }
  if (c->codec == v1::CODEC_ZFP_RATE) {
    double bits = a.dtype == "float64" ? 64 : 32;
    c->ratio = c->param < bits ? bits / c->param : 1.0;
    c->source = Format("fixed rate: %g of %g bits per value", c->param, bits);
  }
  if (!a.codec_ratio.empty()) {
    char* end = nullptr;
    double r = std::strtod(a.codec_ratio.c_str(), &end);
    if (c->codec == v1::CODEC_NONE || c->codec == v1::CODEC_ZFP_RATE) {
      Error("plan", "--codec " + a.codec + " takes no --codec-ratio" +
                        (c->codec == v1::CODEC_NONE ? std::string(" (it does not compress)")
                                                    : " (its rate fixes the ratio)"));
      return false;
    }
    if (end == a.codec_ratio.c_str() || *end != '\0' || !(r >= 1) || !std::isfinite(r)) {
      Error("plan",
            "--codec-ratio must be a finite number >= 1 (a step that does not shrink is "
            "stored as it was), got '" +
                a.codec_ratio + "'");
      return false;
    }
    c->ratio = r;
    c->given = true;
    c->source = "given by --codec-ratio";
  }
  return true;
}

// The largest step planned: far past any node, and far enough from 2^64 that a slot's size
// rounds up to 4 KiB, and a chunk count is taken, without wrapping.
constexpr uint64_t kMaxStepBytes = uint64_t{1} << 50;

// Seconds >= 0 from `text`; false after saying why not.
bool ParseSeconds(const char* flag, const std::string& text, double* seconds) {
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(d >= 0)) {
    Error("plan", std::string(flag) + " must be seconds >= 0, got '" + text + "'");
    return false;
  }
  *seconds = d;
  return true;
}

// One --level NAME:SLOTS:WRITE:READ; false after saying why not. NAME is a tier's name as plan
// reports it; SLOTS a count of steps or "unlimited"; WRITE and READ seconds per step.
bool ParseLevel(const std::string& text, schedule::Level* l) {
  std::vector<std::string> f;
  size_t from = 0;
  for (size_t colon; (colon = text.find(':', from)) != std::string::npos; from = colon + 1) {
    f.push_back(text.substr(from, colon - from));
  }
  f.push_back(text.substr(from));
  const char* want = "--level must be NAME:SLOTS:WRITE:READ (NAME host, disk or shared-disk; "
                     "SLOTS a count or unlimited; WRITE and READ seconds per step), got '";
  if (f.size() != 4 || (f[0] != "host" && f[0] != "disk" && f[0] != "shared-disk")) {
    Error("plan", want + text + "'");
    return false;
  }
  l->name = f[0];
  if (f[1] == "unlimited") {
    l->slots = schedule::kUnlimited;
  } else if (!ParseCount(f[1], &l->slots)) {
    Error("plan", want + text + "'");
    return false;
  }
  return ParseSeconds("--level's WRITE", f[2], &l->write) &&
         ParseSeconds("--level's READ", f[3], &l->read);
}

TransferFit FitOf(const v1::TransferFit& f) {
  return {f.latency_seconds(), f.bytes_per_second(), f.samples(), f.min_bytes(), f.max_bytes()};
}

// Both directions' fits speak for transfers of `bytes`.
bool Covers(const v1::TierStats& t, uint64_t bytes) {
  return FitOf(t.write_fit()).Covers(bytes) && FitOf(t.read_fit()).Covers(bytes);
}

// "3 writes of 64.0 MiB, 5 reads of 4.0 KiB to 64.0 MiB": what a tier's fits came from.
std::string Seen(const v1::TierStats& t) {
  auto one = [](const v1::TransferFit& f, const char* what) {
    std::string sizes = FormatBytes(f.min_bytes());
    if (f.max_bytes() != f.min_bytes()) sizes += " to " + FormatBytes(f.max_bytes());
    return Counted(f.samples(), what) + " of " + sizes;
  };
  return one(t.write_fit(), "write") + ", " + one(t.read_fit(), "read");
}

Json FitJson(const v1::TransferFit& f) {
  return {{"latency_seconds", f.latency_seconds()},
          {"bytes_per_second", f.bytes_per_second()},
          {"samples", f.samples()},
          {"min_bytes", f.min_bytes()},
          {"max_bytes", f.max_bytes()}};
}

// A level's costs and where they came from, as plan prints them.
struct CostSource {
  std::string from;  // measured, calibrated, default, given or ignored
  std::string text;  // the COSTS column
  v1::TransferFit write_fit, read_fit;
};

}  // namespace

int Plan(const PlanArgs& a, Output& out, const std::function<bool(v1::StatsResponse*)>& stats,
         const Calibrator& calibrate) {
  uint64_t steps = 0;
  if (!ParseCount(a.steps, &steps) || steps == 0) {
    return UsageError("plan", "--steps must be a positive integer, got '" + a.steps + "'");
  }
  Result<uint64_t> parsed_bytes = ParseBytes(a.bytes);
  if (!parsed_bytes.ok() || *parsed_bytes == 0) {
    return UsageError(
        "plan", "--bytes-per-step '" + a.bytes +
                    "': " + (parsed_bytes.ok() ? "must be > 0" : parsed_bytes.status().message()));
  }
  if (*parsed_bytes > kMaxStepBytes) {
    return UsageError("plan", "--bytes-per-step '" + a.bytes + "': over " +
                                  FormatBytes(kMaxStepBytes) + ", more than any node holds");
  }
  const uint64_t bytes = *parsed_bytes;
  double forward = 0;    // 0 = not given
  double backward = -1;  // < 0 = same as forward
  if (!a.forward.empty() && !ParseSeconds("--compute-time", a.forward, &forward)) {
    return kExitUsage;
  }
  if (!a.backward.empty() && !ParseSeconds("--backward-time", a.backward, &backward)) {
    return kExitUsage;
  }
  Compression comp;
  if (!ParseCompression(a, &comp)) return kExitUsage;
  if (backward < 0) backward = forward;
  std::vector<schedule::Level> levels;
  std::vector<CostSource> cost_source;
  for (const std::string& text : a.levels) {
    schedule::Level l;
    if (!ParseLevel(text, &l)) return kExitUsage;
    if (forward == 0) l.write = l.read = 0;
    levels.push_back(l);
    cost_source.push_back(forward > 0
                              ? CostSource{"given", "given by --level", {}, {}}
                              : CostSource{"ignored", "ignored (no --compute-time)", {}, {}});
  }
  if (a.calibrate && !levels.empty()) {
    return UsageError("plan",
                      "--calibrate measures this node's tiers: --level gives the levels "
                      "and their costs instead");
  }
  if (a.calibrate && forward == 0) {
    return UsageError("plan",
                      "--calibrate measures the costs that --compute-time weighs: "
                      "without it the plan minimises forward steps and uses no costs");
  }
  if (!levels.empty() && comp.codec != v1::CODEC_NONE) {
    return UsageError("plan", "--level gives each level's slots in steps: --codec " + a.codec +
                                  " has nothing to shrink");
  }
  v1::StatsResponse r;
  if (levels.empty() && !stats(&r)) return kExitFailed;
  if (comp.InHost() && !comp.given) {
    // The ratio of a GPU codec is the solver's data's: adjsnapd cannot measure it for a run
    // that has not been pushed.
    comp.source = "not given (pass --codec-ratio as measured on the run's data; treated as 1)";
  } else if (comp.codec != v1::CODEC_NONE && comp.codec != v1::CODEC_ZFP_RATE && !comp.given) {
    comp.source = "not measured yet (no compressed step on disk; treated as 1)";
    for (const auto& t : r.tiers()) {
      if (t.tier() == v1::TIER_DISK && t.used_bytes() > 0 && t.raw_bytes() > t.used_bytes()) {
        comp.ratio = double(t.raw_bytes()) / t.used_bytes();
        comp.source = "measured on this node's disk tier";
      }
    }
  }

  // This node's tiers as schedule levels (unless --level gave them): capacity in snapshots,
  // measured costs per snapshot.
  const bool given = !levels.empty();
  // A step's size in each tier: smaller on disk when it is compressed on its way there, and in
  // host memory too when it is compressed on the GPU. Its transfers are smaller alike.
  const uint64_t disk_bytes = comp.codec == v1::CODEC_NONE ? bytes : StoredBytes(bytes, comp);
  const uint64_t host_bytes = comp.InHost() ? disk_bytes : bytes;
  auto held_by = [&](const v1::TierStats& t) {
    return t.tier() == v1::TIER_DISK ? disk_bytes : host_bytes;
  };
  // A fit prices only sizes near those it came from (TransferFit::Covers): a bandwidth taken
  // from tiny steps is mostly their latency. Where one does not cover the step, --calibrate
  // pushes a few steps of its size through the tiers, and plan reads the fits again.
  v1::StatsResponse calibrated;
  bool did_calibrate = false;
  if (!given && a.calibrate) {
    bool covered = true;
    for (const auto& t : r.tiers()) covered = covered && Covers(t, held_by(t));
    if (!covered) {
      if (!calibrate) {
        Error("plan", "--calibrate needs a connection to adjsnapd's data plane");
        return kExitFailed;
      }
      if (Status s = calibrate(bytes, r); !s.ok()) {
        Error("plan", "calibrating at " + FormatBytes(bytes) + ": " + s.ToString());
        return kExitFailed;
      }
      if (!stats(&calibrated)) return kExitFailed;
      did_calibrate = true;
    }
  }
  for (const auto& t : r.tiers()) {
    if (given) break;
    schedule::Level l;
    // A node with shared spools reports them as a disk tier of their own: a third level.
    l.name = TierLabel(t);
    const uint64_t held = held_by(t);
    uint64_t free_bytes = t.budget_bytes() > t.used_bytes() ? t.budget_bytes() - t.used_bytes() : 0;
    l.slots = free_bytes / ((held + 4095) / 4096 * 4096);
    // The fits after a calibration are the same tier's, matched by its label.
    const v1::TierStats* now = &t;
    for (const auto& c : calibrated.tiers()) {
      if (TierLabel(c) == l.name) now = &c;
    }
    CostSource src{"", "", now->write_fit(), now->read_fit()};
    if (forward == 0) {
      src.from = "ignored";
      src.text = "ignored (no --compute-time)";
    } else if (Covers(t, held)) {
      src.from = "measured";
      src.text = "measured: " + Seen(t);
    } else if (did_calibrate && Covers(*now, held)) {
      src.from = "calibrated";
      src.text = "calibrated at " + FormatBytes(held) + ": " + Seen(*now);
    } else {
      src.from = "default";
      const bool seen = t.write_fit().samples() > 0 || t.read_fit().samples() > 0;
      src.text = "default: free (" +
                 (did_calibrate ? std::string("calibration did not reach it")
                  : seen ? "no transfer near " + FormatBytes(held) + " measured; seen " + Seen(t) +
                               "; --calibrate measures it"
                         : std::string("nothing measured yet; --calibrate measures it")) +
                 ")";
    }
    if (src.from == "measured" || src.from == "calibrated") {
      l.write = FitOf(src.write_fit).Seconds(held);
      l.read = FitOf(src.read_fit).Seconds(held);
    }
    cost_source.push_back(src);
    levels.push_back(l);
  }
  schedule::StepCosts costs{forward > 0 ? forward : 1.0, forward > 0 ? backward : 0.0};
  // Counts and cost only: plan prints no actions, and those of a 10^6-step run would be
  // ~100 MB.
  schedule::PlanOptions options;
  options.actions = false;
  Result<schedule::Schedule> plan = schedule::MultiLevel(steps, levels, costs, options);
  if (!plan.ok()) {
    Error("plan", plan.status().message());
    return kExitFailed;
  }
  const schedule::Schedule& p = *plan;
  double baseline = (steps - 1) * costs.forward + steps * costs.backward;
  double overhead = baseline > 0 ? p.cost / baseline - 1.0 : 0.0;
  auto held = [&](size_t i) { return i < p.peak_slots.size() ? p.peak_slots[i] : 0; };
  if (out.json()) {
    Json tiers = Json::array();
    for (size_t i = 0; i < levels.size(); ++i) {
      tiers.push_back({{"tier", levels[i].name},
                       {"slots_available", levels[i].slots},
                       {"snapshots", held(i)},
                       {"write_seconds", levels[i].write},
                       {"read_seconds", levels[i].read},
                       {"costs", cost_source[i].text},
                       {"costs_from", cost_source[i].from},
                       {"write_fit", FitJson(cost_source[i].write_fit)},
                       {"read_fit", FitJson(cost_source[i].read_fit)}});
    }
    out.Print(Json{{"steps", steps},
                   {"bytes_per_step", bytes},
                   {"codec", a.codec},
                   {"codec_param", comp.param},
                   {"compression_ratio", comp.ratio},
                   {"compression", comp.source},
                   {"compressed_in", comp.codec == v1::CODEC_NONE ? Json::array()
                                     : comp.InHost()             ? Json::array({"host", "disk"})
                                                                  : Json::array({"disk"})},
                   {"method", p.method},
                   {"forward_steps", p.forward_steps},
                   {"recomputation_factor", p.RecomputationFactor()},
                   {"predicted_seconds", forward > 0 ? p.cost : 0.0},
                   {"baseline_seconds", forward > 0 ? baseline : 0.0},
                   {"overhead", overhead},
                   {"timed", forward > 0},
                   {"tiers", tiers}});
    return kExitOk;
  }
  out.Line(Format("plan for %s x %s (codec %s)", Counted(steps, "step").c_str(),
                  FormatBytes(bytes).c_str(), a.codec.c_str()));
  if (comp.codec != v1::CODEC_NONE) {
    out.Line(Format("compression   %.2fx %s (%s)", comp.ratio,
                    comp.InHost() ? "in host memory and on disk" : "on disk",
                    comp.source.c_str()));
  }
  out.Line("schedule      " + p.method);
  Table t({{"TIER", 8, true},
           {"SLOTS FREE", 14},
           {"SNAPSHOTS", 12},
           {"WRITE s", 12},
           {"READ s", 12},
           {" COSTS", 0, true}});
  for (size_t i = 0; i < levels.size(); ++i) {
    t.Add({levels[i].name, std::to_string(levels[i].slots), std::to_string(held(i)),
           Format("%.4g", levels[i].write), Format("%.4g", levels[i].read),
           " " + cost_source[i].text});
  }
  out.Print(t);
  out.Line(Format("forward steps %llu (recomputation factor %.3f)",
                  (unsigned long long)p.forward_steps, p.RecomputationFactor()));
  if (forward > 0) {
    out.Line(Format("predicted     %.4g s vs %.4g s without storage limits: overhead %.1f%%",
                    p.cost, baseline, 100.0 * overhead));
  } else {
    out.Line("predicted     pass --compute-time to predict times");
  }
  return kExitOk;
}

void AddPlanCommand(CLI::App& app, Action* action) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan", "checkpoint schedule for an adjoint run of N steps of S bytes on this node");
  plan->footer(
      "Capacities are this node's free tier space; write and read costs are per-transfer\n"
      "latency + bytes / bandwidth, fitted by adjsnapd from its transfers near the step's size\n"
      "(or each --level's); with no fit near it, a tier is free unless --calibrate measures it.\n"
      "Without --compute-time it minimises forward steps.\n"
      "The schedule is store-all, h-revolve, revolve, multistage, periodic or segmented\n"
      "(docs/schedules.md).");
  plan->add_option("--steps", a->steps, "steps of the run (N > 0)")->type_name("N")->required();
  plan->add_option("--bytes-per-step", a->bytes, "bytes of one step: 64M, 1G, ...")
      ->type_name("S")
      ->required();
  plan->add_option("--compute-time", a->forward, "seconds per forward step (predicts times)")
      ->type_name("T");
  plan->add_option("--backward-time", a->backward,
                   "seconds per backward step (default: the forward time)")
      ->type_name("T");
  plan->add_option("--codec", a->codec,
                   "none, zfp-reversible, zfp-rate, zfp-precision, zfp-accuracy (on adjsnapd's "
                   "CPUs, on the way to disk), bitcomp, bitcomp-lossy or ans (on the GPU)")
      ->type_name("CODEC")
      ->capture_default_str();
  plan->add_option("--codec-param", a->codec_param,
                   "zfp-rate: bits per value; zfp-precision: bit planes; zfp-accuracy: "
                   "tolerance; bitcomp-lossy: absolute error bound")
      ->type_name("X");
  plan->add_option("--codec-ratio", a->codec_ratio,
                   "the compression ratio measured on the run's data (R >= 1; not zfp-rate)")
      ->type_name("R");
  plan->add_option("--level", a->levels,
                   "NAME:SLOTS:WRITE:READ, once per level: plan over these instead of this "
                   "node's tiers (NAME host, disk or shared-disk; SLOTS in steps or unlimited; "
                   "WRITE and READ seconds per step)")
      ->type_name("LEVEL");
  plan->add_flag("--calibrate", a->calibrate,
                 "where adjsnapd has measured no transfers near the step's size, push and "
                 "fetch a few steps of it through throwaway runs on disk (at most 3 per disk "
                 "class, about 2 s) and plan with what they measured");
  plan->add_option("--dtype", a->dtype, "float32 or float64 (zfp-rate's ratio)")
      ->type_name("DTYPE")
      ->capture_default_str()
      ->check(CLI::IsMember({"float32", "float64"}));
  plan->callback([action, a] {
    *action = [a](Session& s) {
      auto stats = [&s](v1::StatsResponse* r) {
        grpc::Status gs = s.stub().Stats(ShortContext().get(), v1::StatsRequest(), r);
        if (!gs.ok()) s.Fail("plan", gs);
        return gs.ok();
      };
      auto calibrate = [&s](uint64_t bytes, const v1::StatsResponse& r) -> Status {
        if (!s.options().remote.empty()) {
          return Status::InvalidArgument(
              "--calibrate pushes steps through this node's data plane: not with --remote");
        }
        return Calibrate(s.options().socket, bytes, r);
      };
      return Plan(*a, s.out(), stats, calibrate);
    };
  });
}

}  // namespace adjsnap::cli
