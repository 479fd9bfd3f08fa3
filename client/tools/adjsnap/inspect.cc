// status, runs, ls, locate: what adjsnapd holds, read-only.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "adjsnap/kernels.h"
#include "adjsnap/layers.h"
#include "adjsnap/units.h"
#include "adjsnap/zfp_codec.h"

namespace adjsnap::cli {
namespace {

// What waits in the daemon now (nothing waits forever in silence): the counts, then each wait
// the caller may see, oldest first, with what it waits for.
void PrintWaits(Output& out, const v1::StatsResponse& r) {
  out.Line(Format("waiting   %s, %s; oldest %.1f s",
                  Counted(r.waiting_pushes(), "push", "pushes").c_str(),
                  Counted(r.waiting_fetches(), "fetch", "fetches").c_str(),
                  r.oldest_wait_seconds()));
  if (r.waits_size() == 0) return;
  Table t({{"WAITS", 6, true},
           {"RUN", 24, true},
           {"STEP", 8},
           {"FOR", 8},
           {"WAITING FOR", 0, true}});
  for (const v1::Wait& w : r.waits()) {
    t.Add({w.kind(), w.run(), std::to_string(w.step()), Format("%.1f s", w.seconds()),
           w.waiting_for()});
  }
  out.Print(t);
}

int ShowStatus(Session& s) {
  auto health = grpc::health::v1::Health::NewStub(s.channel());
  grpc::health::v1::HealthCheckRequest hreq;
  hreq.set_service("adjsnap.v1.Control");
  grpc::health::v1::HealthCheckResponse hresp;
  grpc::Status hs = health->Check(ShortContext().get(), hreq, &hresp);
  if (!hs.ok()) return s.Fail("status", hs);
  v1::StatsResponse r;
  grpc::Status st = s.stub().Stats(ShortContext().get(), v1::StatsRequest(), &r);
  if (!st.ok()) return s.Fail("status", st);
  Output& out = s.out();
  const GlobalOptions& o = s.options();
  // The address this adjsnap reached the daemon at: its admin_listen with --remote.
  const std::string control = o.remote.empty() ? "unix:" + o.socket : "tls:" + o.remote;
  if (out.json()) {
    Json j = ProtoJson(r);
    j["serving"] = EnumJson(
        *grpc::health::v1::HealthCheckResponse::ServingStatus_descriptor()->FindValueByNumber(
            hresp.status()));
    j["control_address"] = control;
    out.Print(j);
    return kExitOk;
  }
  out.Line(Format("adjsnapd %s  %s  up %.1f s", r.version().c_str(),
                  grpc::health::v1::HealthCheckResponse::ServingStatus_Name(hresp.status()).c_str(),
                  static_cast<double>(r.uptime_ms()) / 1000.0));
  // With --remote, also the daemon's own socket on its node (where its solvers connect).
  out.Line("control   " + control +
           (o.remote.empty() ? "" : "   (on its node: " + r.control_socket() + ")"));
  out.Line(Format("data      %s (wire v%u)", r.data_plane_address().c_str(), r.wire_version()));
  // The GPU this client (and a solver on this node) could use: found at run time.
  out.Line("gpu       " + kernels::ProbeDevice().description);
  out.Line(
      Format("sessions  %llu   runs %llu   pushes %llu   fetches %llu   rejected %llu   "
             "lost %llu",
             (unsigned long long)r.sessions(), (unsigned long long)r.runs(),
             (unsigned long long)r.pushes(), (unsigned long long)r.fetches(),
             (unsigned long long)r.rejected_messages(), (unsigned long long)r.lost_snapshots()));
  Table t({{"TIER", 8, true},
           {"USED", 12},
           {"BUDGET", 12},
           {"USE%", 7},
           {"SNAPSHOTS", 10},
           {"RAW", 12},
           {"RATIO", 6},
           {"WRITE GB/s", 10},
           {"READ GB/s", 10}});
  for (const auto& tier : r.tiers()) {
    double pct = tier.budget_bytes() ? 100.0 * tier.used_bytes() / tier.budget_bytes() : 0.0;
    double ratio = tier.used_bytes() ? double(tier.raw_bytes()) / tier.used_bytes() : 1.0;
    t.Add({TierLabel(tier), FormatBytes(tier.used_bytes()), FormatBytes(tier.budget_bytes()),
           Format("%.1f%%", pct), std::to_string(tier.snapshots()), FormatBytes(tier.raw_bytes()),
           Format("%.2fx", ratio), Format("%.2f", tier.write_bytes_per_second() / 1e9),
           Format("%.2f", tier.read_bytes_per_second() / 1e9)});
  }
  out.Print(t);
  for (const auto& tier : r.tiers()) {  // what backs the host tier (docs/architecture.md)
    if (tier.tier() != v1::TIER_HOST) continue;
    std::string prefault =
        tier.prefaulted_bytes() == 0 ? "not prefaulted"
        : tier.prefaulted_bytes() >= tier.budget_bytes()
            ? "prefaulted"
            : "populated in the background: " + FormatBytes(tier.prefaulted_bytes());
    out.Line("host pages  " + tier.pages() + "; " + prefault + "; " +
             FormatBytes(tier.resident_bytes()) + " resident");
  }
  if (r.spools_size() > 0) {
    out.Line("");
    PrintSpools(out, r.spools());
  }
  PrintWaits(out, r);
  return kExitOk;
}

// What a person should know about `run` beyond its counts: why it is broken, or that its codec
// was asked for and never applied; empty when neither.
std::string RunProblem(const v1::RunInfo& run) {
  if (!run.failure().empty()) return "failed: " + run.failure();
  if (compress::IsGpuCodec(run.spec().codec()) && run.compressed_snapshots() == 0 &&
      run.snapshots() > run.lost_snapshots()) {
    return "codec " + CodecLabel(run.spec().codec()) +
           " never applied: every step came raw (an nvCOMP codec compresses where the solver "
           "is, before the push; libadjsnap does not yet compress device snapshots)";
  }
  // Compressed at ingest, a step stays raw only where the codec did not shrink it.
  if (run.spec().codec() != v1::CODEC_NONE && !compress::IsGpuCodec(run.spec().codec()) &&
      run.spec().compress_when() == v1::COMPRESS_ON_DEMOTION && run.compressed_snapshots() == 0 &&
      run.snapshots() > run.lost_snapshots()) {
    return "codec " + EnumJson(*v1::Codec_descriptor()->FindValueByNumber(run.spec().codec())) +
           " never applied: no step has been compressed (it compresses steps as they leave host "
           "memory, and none has)";
  }
  return "";
}

// "2p 1f 3.4s": the run's pushes and fetches that wait now and the oldest one's age; "-" if none.
std::string RunWaits(const v1::RunInfo& run) {
  if (run.waiting_pushes() == 0 && run.waiting_fetches() == 0) return "-";
  std::string w;
  if (run.waiting_pushes()) w += std::to_string(run.waiting_pushes()) + "p ";
  if (run.waiting_fetches()) w += std::to_string(run.waiting_fetches()) + "f ";
  return w + Format("%.1fs", run.oldest_wait_seconds());
}

int Runs(Session& s) {
  v1::ListRunsResponse r;
  grpc::Status st = s.stub().ListRuns(ShortContext().get(), v1::ListRunsRequest(), &r);
  if (!st.ok()) return s.Fail("runs", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
    return kExitOk;
  }
  Table t({{"RUN", 24, true},
           {"ID", 6},
           {"OWNER", 6},
           {"STATE", 6, true},
           {"SNAPSHOTS", 9},
           {"LOST", 5},
           {"COMPRESSED", 10},
           {"STEPS", 10},
           {"STEP BYTES", 12},
           {"STORED", 12},
           {"WAITING", 12},
           {"PROBLEM", 0, true}});
  for (const v1::RunInfo& run : r.runs()) {
    t.Add({run.spec().name(), std::to_string(run.run_id()), std::to_string(run.owner_uid()),
           run.state() == v1::RUN_OPEN ? "open" : "closed", std::to_string(run.snapshots()),
           std::to_string(run.lost_snapshots()),
           run.spec().codec() == v1::CODEC_NONE ? "-" : std::to_string(run.compressed_snapshots()),
           run.spec().steps() ? std::to_string(run.spec().steps()) : "?",
           FormatBytes(run.spec().bytes_per_step()), FormatBytes(run.stored_bytes()),
           RunWaits(run), RunProblem(run)});
  }
  s.out().Print(t);
  return kExitOk;
}

Table SnapshotTable() {
  return Table({{"STEP", 8},
                {"TIER", 9, true},
                {"RAW", 12},
                {"STORED", 12},
                {"RATIO", 7},
                {"CODEC", 15, true},
                {"CHECKSUM", 16, true}});
}

void AddSnapshotRow(Table& t, const v1::SnapshotInfo& snap) {
  std::string sum = "pending";
  if (snap.device_session()) {
    sum = "-";  // in a client's GPU pool: the daemon never saw it
  } else if (snap.checksum_state() == v1::CHECKSUM_RECORDED) {
    sum = Format("%016llx", (unsigned long long)snap.checksum());
  }
  // A host copy of a disk snapshot was read ahead; the disk copy is the durable one.
  std::string tier = TierName(snap.tier());
  if (snap.on_disk() && snap.tier() == v1::TIER_HOST) tier = "host+disk";
  std::string ratio = "-";
  if (snap.stored_bytes() && snap.stored_bytes() != snap.raw_bytes()) {
    ratio = Format("%.2fx", double(snap.raw_bytes()) / snap.stored_bytes());
  }
  t.Add({std::to_string(snap.step()), tier, FormatBytes(snap.raw_bytes()),
         FormatBytes(snap.stored_bytes()), ratio, CodecLabel(snap.codec()), sum});
}

int Ls(Session& s, const std::string& name) {
  v1::ListSnapshotsRequest req;
  req.set_name(name);
  v1::ListSnapshotsResponse r;
  grpc::Status st = s.stub().ListSnapshots(ShortContext().get(), req, &r);
  if (!st.ok()) return s.Fail("ls", st);
  Output& out = s.out();
  if (out.json()) {
    out.Print(ProtoJson(r));
    return kExitOk;
  }
  const v1::RunInfo& run = r.run();
  std::string codec = CodecLabel(run.spec().codec());
  v1::Codec c = run.spec().codec();
  if (c == v1::CODEC_ZFP_RATE || c == v1::CODEC_ZFP_PRECISION || c == v1::CODEC_ZFP_ACCURACY ||
      c == v1::CODEC_BITCOMP_LOSSY) {  // the codecs that take a parameter
    codec += Format(" %g", run.spec().codec_param());
  }
  if (compress::IsGpuCodec(run.spec().codec())) {
    codec += " before the push";
  } else if (run.spec().codec() != v1::CODEC_NONE) {
    codec += run.spec().compress_when() == v1::COMPRESS_AT_INGEST ? " at ingest" : " on demotion";
  }
  const std::string spools =
      run.spec().spool_class().empty() ? "" : " on " + run.spec().spool_class() + " spools";
  out.Line(Format("run %s (id %llu, %s, layers %s%s%s, codec %s): %s, %s stored",
                  run.spec().name().c_str(), (unsigned long long)run.run_id(),
                  run.state() == v1::RUN_OPEN ? "open" : "closed", LayersName(run.spec().layers()),
                  spools.c_str(), run.spec().keep() ? ", keep" : ", read-once", codec.c_str(),
                  Counted(run.snapshots(), "snapshot").c_str(),
                  FormatBytes(run.stored_bytes()).c_str()));
  uint64_t steps = run.spec().steps();
  uint64_t device = steps && run.device_boundary() < steps ? run.device_boundary() : steps;
  if (run.host_boundary() || device < steps) {
    std::string line = "placement: steps";
    if (run.host_boundary()) {
      line += " 0.." + std::to_string(run.host_boundary() - 1) + " on disk,";
    }
    if (run.host_boundary() < device) {
      line += " " + std::to_string(run.host_boundary()) + ".." + std::to_string(device - 1) +
              " in host memory,";
    }
    if (device < steps) {
      line += " " + std::to_string(device) + ".." + std::to_string(steps - 1) +
              " in the creating client's GPU pool,";
    }
    line.pop_back();
    out.Line(line);
  }
  Table t = SnapshotTable();
  for (const auto& snap : r.snapshots()) AddSnapshotRow(t, snap);
  out.Print(t);
  return kExitOk;
}

int Locate(Session& s, const std::string& name, const std::string& step_text) {
  uint64_t step = 0;
  if (!ParseCount(step_text, &step)) {
    return UsageError("locate", "STEP must be a non-negative integer, got '" + step_text + "'");
  }
  v1::LocateRequest req;
  req.set_name(name);
  req.set_step(step);
  v1::LocateResponse r;
  grpc::Status st = s.stub().Locate(ShortContext().get(), req, &r);
  if (!st.ok()) return s.Fail("locate", st);
  if (s.out().json()) {
    s.out().Print(ProtoJson(r));
    return kExitOk;
  }
  Table t = SnapshotTable();
  AddSnapshotRow(t, r.snapshot());
  s.out().Print(t);
  return kExitOk;
}

}  // namespace

void AddInspectCommands(CLI::App& app, Action* action) {
  app.add_subcommand("status", "daemon health, tiers, sessions and counters")->callback([action] {
    *action = ShowStatus;
  });
  app.add_subcommand("runs", "every run with its snapshot count and bytes")->callback([action] {
    *action = Runs;
  });

  auto run = std::make_shared<std::string>();
  CLI::App* ls = app.add_subcommand("ls", "snapshots of RUN: step, tier, bytes, checksum");
  ls->add_option("RUN", *run, "the run (an admin names another uid's run as UID:name)")
      ->type_name("")
      ->required();
  ls->callback([action, run] { *action = [run](Session& s) { return Ls(s, *run); }; });

  auto where = std::make_shared<std::pair<std::string, std::string>>();  // RUN, STEP
  CLI::App* locate = app.add_subcommand("locate", "where one snapshot is");
  locate->add_option("RUN", where->first, "the run")->type_name("")->required();
  locate->add_option("STEP", where->second, "the step, an integer >= 0")->type_name("")->required();
  locate->callback([action, where] {
    *action = [where](Session& s) { return Locate(s, where->first, where->second); };
  });
}

}  // namespace adjsnap::cli
