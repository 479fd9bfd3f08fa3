// snapctl: inspect and manage a running snapd over its gRPC control plane.
// Tables for people; --json (protobuf JSON of the RPC response) for scripts.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "paths.h"
#include "snapd/v1/control.grpc.pb.h"
#include "units.h"

namespace snapd {
namespace {

const char* kUsage =
    "usage: snapctl [--socket PATH] [--json] COMMAND\n\n"
    "commands:\n"
    "  status             daemon health, tiers, sessions and counters\n"
    "  runs               every run with its snapshot count and bytes\n"
    "  ls RUN             snapshots of RUN: step, tier, bytes, checksum\n"
    "  locate RUN STEP    where one snapshot is\n"
    "  rm RUN             delete RUN and free its snapshots\n\n"
    "The socket defaults to $SNAPD_SOCKET, else snapd's default socket.\n";

struct Options {
  std::string socket = DefaultSocketPath();
  bool json = false;
  std::vector<std::string> args;
};

int Fail(const std::string& what, const grpc::Status& s, const Options& o) {
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    msg = "snapd is not reachable at " + o.socket + " (" + msg +
          "). Start it with `snapd` (or `systemctl start snapd`), or pass --socket";
  }
  std::fprintf(stderr, "snapctl %s: %s\n", what.c_str(), msg.c_str());
  return 1;
}

void PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  std::fputs(out.c_str(), stdout);
}

std::string TierName(v1::Tier t) {
  switch (t) {
    case v1::TIER_DEVICE: return "device";
    case v1::TIER_HOST: return "host";
    case v1::TIER_DISK: return "disk";
    case v1::TIER_LOST: return "LOST";
    default: return "-";
  }
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

bool ParseStep(const std::string& text, uint64_t* step) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || text[0] == '-') return false;
  *step = v;
  return true;
}

int Status(v1::Control::Stub& stub, grpc::Channel& channel, const Options& o) {
  auto health = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::health::v1::HealthCheckRequest hreq;
  hreq.set_service("snapd.v1.Control");
  grpc::health::v1::HealthCheckResponse hresp;
  grpc::Status hs = health->Check(Context().get(), hreq, &hresp);
  if (!hs.ok()) return Fail("status", hs, o);
  v1::StatsResponse r;
  grpc::Status s = stub.Stats(Context().get(), v1::StatsRequest(), &r);
  if (!s.ok()) return Fail("status", s, o);
  if (o.json) {
    PrintJson(r);
    return 0;
  }
  std::printf("snapd %s  %s  up %.1f s\n", r.version().c_str(),
              grpc::health::v1::HealthCheckResponse::ServingStatus_Name(hresp.status()).c_str(),
              static_cast<double>(r.uptime_ms()) / 1000.0);
  std::printf("control   unix:%s\n", o.socket.c_str());
  std::printf("data      ucx %s (wire v%u)\n", r.data_plane_address().c_str(), r.wire_version());
  std::printf("sessions  %llu   runs %llu   pushes %llu   fetches %llu   rejected %llu   "
              "lost %llu\n",
              (unsigned long long)r.sessions(), (unsigned long long)r.runs(),
              (unsigned long long)r.pushes(), (unsigned long long)r.fetches(),
              (unsigned long long)r.rejected_messages(), (unsigned long long)r.lost_snapshots());
  std::printf("%-8s %12s %12s %7s %10s\n", "TIER", "USED", "BUDGET", "USE%", "SNAPSHOTS");
  for (const auto& t : r.tiers()) {
    double pct = t.budget_bytes() ? 100.0 * t.used_bytes() / t.budget_bytes() : 0.0;
    std::printf("%-8s %12s %12s %6.1f%% %10llu\n", TierName(t.tier()).c_str(),
                FormatBytes(t.used_bytes()).c_str(), FormatBytes(t.budget_bytes()).c_str(), pct,
                (unsigned long long)t.snapshots());
  }
  return 0;
}

int Runs(v1::Control::Stub& stub, const Options& o) {
  v1::ListRunsResponse r;
  grpc::Status s = stub.ListRuns(Context().get(), v1::ListRunsRequest(), &r);
  if (!s.ok()) return Fail("runs", s, o);
  if (o.json) {
    PrintJson(r);
    return 0;
  }
  std::printf("%-24s %6s %-6s %9s %10s %12s %12s\n", "RUN", "ID", "STATE", "SNAPSHOTS", "STEPS",
              "STEP BYTES", "STORED");
  for (const auto& run : r.runs()) {
    std::string steps = run.spec().steps() ? std::to_string(run.spec().steps()) : "?";
    std::printf("%-24s %6llu %-6s %9llu %10s %12s %12s\n", run.spec().name().c_str(),
                (unsigned long long)run.run_id(), run.state() == v1::RUN_OPEN ? "open" : "closed",
                (unsigned long long)run.snapshots(), steps.c_str(),
                FormatBytes(run.spec().bytes_per_step()).c_str(),
                FormatBytes(run.stored_bytes()).c_str());
  }
  return 0;
}

void PrintSnapshotRow(const v1::SnapshotInfo& s) {
  char sum[24] = "pending";
  if (s.checksum_state() == v1::CHECKSUM_RECORDED) {
    std::snprintf(sum, sizeof sum, "%016llx", (unsigned long long)s.checksum());
  }
  std::printf("%8llu %-7s %12s %12s %-16s\n", (unsigned long long)s.step(),
              TierName(s.tier()).c_str(), FormatBytes(s.raw_bytes()).c_str(),
              FormatBytes(s.stored_bytes()).c_str(), sum);
}

void PrintSnapshotHeader() {
  std::printf("%8s %-7s %12s %12s %-16s\n", "STEP", "TIER", "RAW", "STORED", "CHECKSUM");
}

int Ls(v1::Control::Stub& stub, const Options& o) {
  if (o.args.size() != 2) {
    std::fprintf(stderr, "snapctl ls: expected RUN\n%s", kUsage);
    return 2;
  }
  v1::ListSnapshotsRequest req;
  req.set_name(o.args[1]);
  v1::ListSnapshotsResponse r;
  grpc::Status s = stub.ListSnapshots(Context().get(), req, &r);
  if (!s.ok()) return Fail("ls", s, o);
  if (o.json) {
    PrintJson(r);
    return 0;
  }
  std::printf("run %s (id %llu, %s): %llu snapshots, %s stored\n", r.run().spec().name().c_str(),
              (unsigned long long)r.run().run_id(),
              r.run().state() == v1::RUN_OPEN ? "open" : "closed",
              (unsigned long long)r.run().snapshots(),
              FormatBytes(r.run().stored_bytes()).c_str());
  PrintSnapshotHeader();
  for (const auto& snap : r.snapshots()) PrintSnapshotRow(snap);
  return 0;
}

int Locate(v1::Control::Stub& stub, const Options& o) {
  uint64_t step = 0;
  if (o.args.size() != 3 || !ParseStep(o.args[2], &step)) {
    std::fprintf(stderr, "snapctl locate: expected RUN STEP (STEP a non-negative integer)\n");
    return 2;
  }
  v1::LocateRequest req;
  req.set_name(o.args[1]);
  req.set_step(step);
  v1::LocateResponse r;
  grpc::Status s = stub.Locate(Context().get(), req, &r);
  if (!s.ok()) return Fail("locate", s, o);
  if (o.json) {
    PrintJson(r);
    return 0;
  }
  PrintSnapshotHeader();
  PrintSnapshotRow(r.snapshot());
  return 0;
}

int Rm(v1::Control::Stub& stub, const Options& o) {
  if (o.args.size() != 2) {
    std::fprintf(stderr, "snapctl rm: expected RUN\n");
    return 2;
  }
  v1::DeleteRunRequest req;
  req.set_name(o.args[1]);
  v1::DeleteRunResponse r;
  grpc::Status s = stub.DeleteRun(Context().get(), req, &r);
  if (!s.ok()) return Fail("rm", s, o);
  if (o.json) {
    PrintJson(r);
  } else {
    std::printf("deleted run %s, freed %s\n", o.args[1].c_str(),
                FormatBytes(r.freed_bytes()).c_str());
  }
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      o.json = true;
    } else if (a == "--socket" && i + 1 < argc) {
      o.socket = argv[++i];
    } else if (a.rfind("--socket=", 0) == 0) {
      o.socket = a.substr(9);
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "snapctl: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      o.args.push_back(a);
    }
  }
  if (o.args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  auto channel = grpc::CreateChannel("unix:" + o.socket, grpc::InsecureChannelCredentials());
  auto stub = v1::Control::NewStub(channel);
  const std::string& cmd = o.args[0];
  if (cmd == "status") return Status(*stub, *channel, o);
  if (cmd == "runs") return Runs(*stub, o);
  if (cmd == "ls") return Ls(*stub, o);
  if (cmd == "locate") return Locate(*stub, o);
  if (cmd == "rm") return Rm(*stub, o);
  std::fprintf(stderr, "snapctl: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}

}  // namespace
}  // namespace snapd

int main(int argc, char** argv) { return snapd::Main(argc, argv); }
