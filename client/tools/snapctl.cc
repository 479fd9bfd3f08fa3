// snapctl: inspect and manage a running snapd over its gRPC control plane.
// Tables for people; --json (protobuf JSON of the RPC response) for scripts.
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "snapd/checksum.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "snapd/paths.h"
#include "snapd/kernels.h"
#include "snapd/layers.h"
#include "snapd/schedule.h"
#include "snapd/v1/control.grpc.pb.h"
#include "snapd/units.h"

namespace snapd {
namespace {

using snapd::Code;
using snapd::Result;

const char* kUsage =
    "usage: snapctl [--socket PATH | --remote HOST:PORT --tls-ca CA --tls-cert CERT\n"
    "               --tls-key KEY] [--json] COMMAND\n\n"
    "commands:\n"
    "  status             daemon health, tiers, sessions and counters\n"
    "  runs               every run with its snapshot count and bytes\n"
    "  ls RUN             snapshots of RUN: step, tier, bytes, checksum\n"
    "  locate RUN STEP    where one snapshot is\n"
    "  rm RUN             delete RUN and free its snapshots\n"
    "  dump RUN --to DIR [--format npy|raw] [--steps A:B] [--mode 0600]\n"
    "                     write each step of RUN (steps A..B-1) to DIR as a numpy .npy file\n"
    "                     (or raw bytes) plus manifest.json; checksums are verified; files\n"
    "                     get --mode (default 0600: yours only), a DIR it creates the same\n"
    "                     with search bits (0700)\n"
    "  drain              move every host-tier snapshot to disk (before draining the node)\n"
    "  quota [--uid U] [--set BYTES]\n"
    "                     a uid's byte quota and what it stores (default: yours); --set needs\n"
    "                     root, snapd's uid or the admin_group (0 = no limit)\n"
    "  purge [--uid U] [--job J]\n"
    "                     delete every run of a uid (default: yours), or only those of batch\n"
    "                     job J; another uid's runs need an admin (the Slurm epilog runs this)\n"
    "  plan --steps N --bytes-per-step S [--compute-time T] [--backward-time T]\n"
    "       [--codec none]\n"
    "                     checkpoint schedule for an adjoint run of N steps of S bytes on this\n"
    "                     node's tiers, with the write/read costs snapd has measured; T in\n"
    "                     seconds per forward (backward) step\n\n"
    "The socket defaults to $SNAPD_SOCKET, else snapd's default socket. --remote reaches a\n"
    "snapd's admin_listen over mutual TLS (PEM files; $SNAPCTL_REMOTE, $SNAPCTL_TLS_CA,\n"
    "$SNAPCTL_TLS_CERT, $SNAPCTL_TLS_KEY likewise) as an admin.\n";

struct Options {
  std::string socket = ClientSocketPath();
  std::string remote;  // HOST:PORT of an admin_listen; empty: the unix socket
  std::string tls_ca, tls_cert, tls_key;
  bool json = false;
  std::vector<std::string> args;
};

int Fail(const std::string& what, const grpc::Status& s, const Options& o) {
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    msg = o.remote.empty()
              ? "snapd is not reachable at " + o.socket + " (" + msg +
                    "). Start it with `snapd` (or `systemctl start snapd`), or pass --socket"
              : "snapd is not reachable at " + o.remote + " (" + msg +
                    "): check the address, that snapd serves admin_listen there, and that its "
                    "admin_tls_ca signed your certificate";
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
  std::printf("data      %s (wire v%u)\n", r.data_plane_address().c_str(), r.wire_version());
  // The GPU this client (and a solver on this node) could use: found at run time.
  std::printf("gpu       %s\n", kernels::ProbeDevice().description.c_str());
  std::printf("sessions  %llu   runs %llu   pushes %llu   fetches %llu   rejected %llu   "
              "lost %llu\n",
              (unsigned long long)r.sessions(), (unsigned long long)r.runs(),
              (unsigned long long)r.pushes(), (unsigned long long)r.fetches(),
              (unsigned long long)r.rejected_messages(), (unsigned long long)r.lost_snapshots());
  std::printf("%-8s %12s %12s %7s %10s %12s %6s %10s %10s\n", "TIER", "USED", "BUDGET", "USE%",
              "SNAPSHOTS", "RAW", "RATIO", "WRITE GB/s", "READ GB/s");
  for (const auto& t : r.tiers()) {
    double pct = t.budget_bytes() ? 100.0 * t.used_bytes() / t.budget_bytes() : 0.0;
    double ratio = t.used_bytes() ? double(t.raw_bytes()) / t.used_bytes() : 1.0;
    std::printf("%-8s %12s %12s %6.1f%% %10llu %12s %5.2fx %10.2f %10.2f\n",
                TierName(t.tier()).c_str(), FormatBytes(t.used_bytes()).c_str(),
                FormatBytes(t.budget_bytes()).c_str(), pct, (unsigned long long)t.snapshots(),
                FormatBytes(t.raw_bytes()).c_str(), ratio, t.write_bytes_per_second() / 1e9,
                t.read_bytes_per_second() / 1e9);
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
  std::printf("%-24s %6s %6s %-6s %9s %10s %12s %12s\n", "RUN", "ID", "OWNER", "STATE",
              "SNAPSHOTS", "STEPS", "STEP BYTES", "STORED");
  for (const auto& run : r.runs()) {
    std::string steps = run.spec().steps() ? std::to_string(run.spec().steps()) : "?";
    std::printf("%-24s %6llu %6u %-6s %9llu %10s %12s %12s\n", run.spec().name().c_str(),
                (unsigned long long)run.run_id(), run.owner_uid(),
                run.state() == v1::RUN_OPEN ? "open" : "closed",
                (unsigned long long)run.snapshots(), steps.c_str(),
                FormatBytes(run.spec().bytes_per_step()).c_str(),
                FormatBytes(run.stored_bytes()).c_str());
  }
  return 0;
}

// "zfp-reversible", "zfp-rate", ... as `snapd::Codec` names them in messages.
std::string CodecLabel(v1::Codec c) {
  switch (c) {
    case v1::CODEC_NONE: return "none";
    case v1::CODEC_ZFP_REVERSIBLE: return "zfp-reversible";
    case v1::CODEC_ZFP_RATE: return "zfp-rate";
    case v1::CODEC_ZFP_PRECISION: return "zfp-precision";
    case v1::CODEC_ZFP_ACCURACY: return "zfp-accuracy";
    default: return "?";
  }
}

void PrintSnapshotRow(const v1::SnapshotInfo& s) {
  char sum[24] = "pending";
  if (s.device_session()) {
    std::snprintf(sum, sizeof sum, "-");  // in a client's GPU pool: the daemon never saw it
  } else if (s.checksum_state() == v1::CHECKSUM_RECORDED) {
    std::snprintf(sum, sizeof sum, "%016llx", (unsigned long long)s.checksum());
  }
  // A host copy of a disk snapshot was read ahead; the disk copy is the durable one.
  std::string tier = TierName(s.tier());
  if (s.on_disk() && s.tier() == v1::TIER_HOST) tier = "host+disk";
  char ratio[16] = "-";
  if (s.stored_bytes() && s.stored_bytes() != s.raw_bytes()) {
    std::snprintf(ratio, sizeof ratio, "%.2fx", double(s.raw_bytes()) / s.stored_bytes());
  }
  std::string codec = CodecLabel(s.codec());
  std::printf("%8llu %-9s %12s %12s %7s %-15s %-16s\n", (unsigned long long)s.step(),
              tier.c_str(), FormatBytes(s.raw_bytes()).c_str(),
              FormatBytes(s.stored_bytes()).c_str(), ratio, codec.c_str(), sum);
}

void PrintSnapshotHeader() {
  std::printf("%8s %-9s %12s %12s %7s %-15s %-16s\n", "STEP", "TIER", "RAW", "STORED", "RATIO",
              "CODEC", "CHECKSUM");
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
  const v1::RunInfo& run = r.run();
  std::string codec = CodecLabel(run.spec().codec());
  if (run.spec().codec() != v1::CODEC_NONE && run.spec().codec() != v1::CODEC_ZFP_REVERSIBLE) {
    char param[32];
    std::snprintf(param, sizeof param, " %g", run.spec().codec_param());
    codec += param;
  }
  if (run.spec().codec() != v1::CODEC_NONE) {
    codec += run.spec().compress_when() == v1::COMPRESS_AT_INGEST ? " at ingest" : " on demotion";
  }
  std::printf("run %s (id %llu, %s, layers %s%s, codec %s): %llu snapshots, %s stored\n",
              run.spec().name().c_str(), (unsigned long long)run.run_id(),
              run.state() == v1::RUN_OPEN ? "open" : "closed", LayersName(run.spec().layers()),
              run.spec().keep() ? ", keep" : ", read-once", codec.c_str(),
              (unsigned long long)run.snapshots(), FormatBytes(run.stored_bytes()).c_str());
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
    line.back() = '\n';
    std::fputs(line.c_str(), stdout);
  }
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

int Drain(v1::Control::Stub& stub, const Options& o) {
  if (o.args.size() != 1) {
    std::fprintf(stderr, "snapctl drain: takes no arguments\n");
    return 2;
  }
  grpc::ClientContext ctx;  // no deadline: it answers once everything is on disk
  v1::DrainResponse r;
  grpc::Status s = stub.Drain(&ctx, v1::DrainRequest(), &r);
  if (!s.ok()) return Fail("drain", s, o);
  if (o.json) {
    PrintJson(r);
  } else {
    std::printf("moved %llu snapshots (%s) to disk; the host tier holds no snapshot only it has\n",
                (unsigned long long)r.moved(), FormatBytes(r.moved_bytes()).c_str());
  }
  return 0;
}

// `--uid U` and, for quota, `--set BYTES`, for purge `--job J`, after the command; false after
// printing why not.
bool ParseUidArgs(const Options& o, const char* cmd, bool quota, v1::QuotaRequest* req,
                  std::string* job = nullptr) {
  for (size_t i = 1; i < o.args.size(); ++i) {
    const std::string& k = o.args[i];
    bool known = k == "uid" || (quota ? k == "set" : k == "job");
    if (!known || i + 1 == o.args.size()) {
      std::fprintf(stderr, "snapctl %s: expected --uid U or %s, got '%s'\n", cmd,
                   quota ? "--set BYTES" : "--job J", k.c_str());
      return false;
    }
    const std::string& v = o.args[++i];
    if (k == "job") {
      *job = v;
    } else if (k == "uid") {
      char* end = nullptr;
      unsigned long uid = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || uid > UINT32_MAX) {
        std::fprintf(stderr, "snapctl %s: --uid must be a numeric uid, got '%s'\n", cmd, v.c_str());
        return false;
      }
      req->set_uid(static_cast<uint32_t>(uid));
    } else {
      auto bytes = ParseBytes(v);
      if (!bytes.ok()) {
        std::fprintf(stderr, "snapctl %s: --set '%s': %s\n", cmd, v.c_str(),
                     bytes.status().message().c_str());
        return false;
      }
      req->set_set(true);
      req->set_quota_bytes(*bytes);
    }
  }
  return true;
}

int Quota(v1::Control::Stub& stub, const Options& o) {
  v1::QuotaRequest req;
  if (!ParseUidArgs(o, "quota", /*quota=*/true, &req)) return 2;
  v1::QuotaResponse r;
  grpc::Status s = stub.Quota(Context().get(), req, &r);
  if (!s.ok()) return Fail("quota", s, o);
  if (o.json) {
    PrintJson(r);
  } else {
    std::printf("uid %u: quota %s, stored %s in %llu runs\n", r.uid(),
                r.quota_bytes() ? FormatBytes(r.quota_bytes()).c_str() : "none",
                FormatBytes(r.stored_bytes()).c_str(), (unsigned long long)r.runs());
  }
  return 0;
}

int Purge(v1::Control::Stub& stub, const Options& o) {
  v1::QuotaRequest parsed;
  std::string job;
  if (!ParseUidArgs(o, "purge", /*quota=*/false, &parsed, &job)) return 2;
  v1::PurgeRunsRequest req;
  if (parsed.has_uid()) req.set_uid(parsed.uid());
  req.set_job(job);
  v1::PurgeRunsResponse r;
  grpc::Status s = stub.PurgeRuns(Context().get(), req, &r);
  if (!s.ok()) return Fail("purge", s, o);
  if (o.json) {
    PrintJson(r);
  } else {
    std::printf("deleted %llu runs, freed %s\n", (unsigned long long)r.runs(),
                FormatBytes(r.freed_bytes()).c_str());
  }
  return 0;
}

// numpy's dtype string for a snapshot dtype (little-endian, as every snapd host is).
const char* NpyDescr(v1::Dtype d) {
  switch (d) {
    case v1::DTYPE_FLOAT32: return "<f4";
    case v1::DTYPE_FLOAT64: return "<f8";
    case v1::DTYPE_INT32: return "<i4";
    case v1::DTYPE_INT64: return "<i8";
    default: return "|u1";
  }
}

// An .npy v1.0 header: magic, version, little-endian header length, then a Python dict
// literal padded with spaces to a 64-byte boundary and ended by a newline.
std::string NpyHeader(const v1::RunSpec& spec) {
  std::string shape;
  if (spec.shape_size() > 0) {
    for (uint64_t d : spec.shape()) shape += std::to_string(d) + ", ";
  } else {
    uint64_t element = std::strtoull(NpyDescr(spec.dtype()) + 2, nullptr, 10);
    shape = std::to_string(spec.bytes_per_step() / element) + ", ";
  }
  std::string dict = std::string("{'descr': '") + NpyDescr(spec.dtype()) +
                     "', 'fortran_order': False, 'shape': (" + shape + "), }";
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  uint16_t len = static_cast<uint16_t>(dict.size());
  h += static_cast<char>(len & 0xff);
  h += static_cast<char>(len >> 8);
  return h + dict;
}

struct DumpArgs {
  std::string run;
  std::string dir;
  std::string format = "npy";
  uint64_t first = 0;
  uint64_t end = 0;  // 0 = all
  mode_t mode = 0600;  // of the files; a directory dump creates gets it with x where r is set
};

// A file of a dump, created with exactly `mode` whatever the umask.
std::FILE* CreateDumpFile(const std::string& path, mode_t mode, bool exclusive) {
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), mode);
  if (fd < 0) return nullptr;
  if (fchmod(fd, mode) != 0) {
    ::close(fd);
    return nullptr;
  }
  std::FILE* f = fdopen(fd, "wb");
  if (!f) ::close(fd);
  return f;
}

int ParseDumpArgs(const Options& o, DumpArgs* d) {
  for (size_t i = 1; i < o.args.size(); ++i) {
    const std::string& k = o.args[i];
    if (k != "to" && k != "format" && k != "steps" && k != "mode") {
      if (!d->run.empty() || k.rfind("--", 0) == 0) {
        std::fprintf(stderr, "snapctl dump: unexpected argument '%s'\n", k.c_str());
        return 2;
      }
      d->run = k;
      continue;
    }
    if (i + 1 >= o.args.size()) {
      std::fprintf(stderr, "snapctl dump: --%s needs a value\n", k.c_str());
      return 2;
    }
    const std::string& v = o.args[++i];
    if (k == "to") {
      d->dir = v;
    } else if (k == "mode") {
      char* end = nullptr;
      unsigned long m = std::strtoul(v.c_str(), &end, 8);
      if (v.empty() || *end != '\0' || m > 0777) {
        std::fprintf(stderr,
                     "snapctl dump: --mode must be octal permission bits such as 0600 or "
                     "0644, got '%s'\n",
                     v.c_str());
        return 2;
      }
      d->mode = static_cast<mode_t>(m);
    } else if (k == "format") {
      if (v != "npy" && v != "raw") {
        std::fprintf(stderr, "snapctl dump: --format must be npy or raw, got '%s'\n", v.c_str());
        return 2;
      }
      d->format = v;
    } else {
      size_t colon = v.find(':');
      if (colon == std::string::npos || !ParseStep(v.substr(0, colon), &d->first) ||
          !ParseStep(v.substr(colon + 1), &d->end) || d->end <= d->first) {
        std::fprintf(stderr, "snapctl dump: --steps must be A:B with A < B, got '%s'\n",
                     v.c_str());
        return 2;
      }
    }
  }
  if (d->run.empty() || d->dir.empty()) {
    std::fprintf(stderr, "snapctl dump: expected RUN --to DIR\n");
    return 2;
  }
  return 0;
}

int Dump(v1::Control::Stub& stub, const Options& o) {
  DumpArgs d;
  if (int rc = ParseDumpArgs(o, &d); rc != 0) return rc;
  v1::ListSnapshotsRequest lreq;
  lreq.set_name(d.run);
  v1::ListSnapshotsResponse list;
  grpc::Status ls = stub.ListSnapshots(Context().get(), lreq, &list);
  if (!ls.ok()) return Fail("dump", ls, o);
  const v1::RunSpec& spec = list.run().spec();
  std::error_code ec;
  bool created = std::filesystem::create_directories(d.dir, ec);
  // A directory the dump creates is as private as its files; an existing one is left as it is.
  mode_t dir_mode = d.mode | ((d.mode & 0444) >> 2);
  if (!ec && created && chmod(d.dir.c_str(), dir_mode) != 0) {
    ec = std::error_code(errno, std::generic_category());
  }
  if (ec) {
    std::fprintf(stderr, "snapctl dump: creating %s: %s\n", d.dir.c_str(), ec.message().c_str());
    return 1;
  }
  std::string manifest_path = d.dir + "/manifest.json";
  if (std::filesystem::exists(manifest_path)) {
    std::fprintf(stderr, "snapctl dump: %s already holds a dump (manifest.json); pick an empty "
                 "directory\n", d.dir.c_str());
    return 1;
  }
  uint64_t expected = 0;
  for (const auto& s : list.snapshots()) {
    if (s.step() >= d.first && (d.end == 0 || s.step() < d.end)) ++expected;
  }
  bool progress = isatty(STDERR_FILENO) && !o.json;
  std::string header = d.format == "npy" ? NpyHeader(spec) : "";

  grpc::ClientContext ctx;  // no deadline: a dump takes as long as the bytes take
  v1::DumpRequest req;
  req.set_name(d.run);
  req.set_first_step(d.first);
  req.set_end_step(d.end);
  auto reader = stub.Dump(&ctx, req);
  struct Entry {
    uint64_t step;
    std::string file;
    uint64_t checksum;
    bool lost;
  };
  std::vector<Entry> entries;
  std::FILE* out = nullptr;
  std::string step_bytes;
  v1::DumpChunk chunk;
  auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0;
  std::string failure;
  while (failure.empty() && reader->Read(&chunk)) {
    if (chunk.lost()) {
      entries.push_back({chunk.step(), "", 0, true});
      continue;
    }
    if (chunk.offset() == 0) {
      char name[64];
      std::snprintf(name, sizeof name, "step-%08llu.%s", (unsigned long long)chunk.step(),
                    d.format.c_str());
      entries.push_back({chunk.step(), name, chunk.checksum(), false});
      out = CreateDumpFile(d.dir + "/" + name, d.mode, /*exclusive=*/true);
      if (!out) {
        failure = std::string("creating ") + d.dir + "/" + name + ": " + std::strerror(errno);
        break;
      }
      if (!header.empty()) std::fwrite(header.data(), 1, header.size(), out);
      step_bytes.clear();
      step_bytes.reserve(chunk.step_bytes());
      if (!chunk.checksum_recorded()) entries.back().checksum = 0;  // 0: nothing to verify
    }
    step_bytes += chunk.data();
    if (std::fwrite(chunk.data().data(), 1, chunk.data().size(), out) != chunk.data().size()) {
      failure = std::string("writing ") + entries.back().file + ": " + std::strerror(errno);
      break;
    }
    total += chunk.data().size();
    if (step_bytes.size() == chunk.step_bytes()) {
      if (std::fclose(out) != 0) failure = "closing " + entries.back().file;
      out = nullptr;
      uint64_t sum = Checksum(step_bytes.data(), step_bytes.size());
      if (entries.back().checksum && sum != entries.back().checksum) {
        failure = "step " + std::to_string(chunk.step()) +
                  " arrived with bytes that do not match its recorded checksum";
      }
      entries.back().checksum = sum;
      if (progress) {
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\rdump %s: %zu/%llu steps, %s, %.2f GB/s   ", d.run.c_str(),
                     entries.size(), (unsigned long long)expected, FormatBytes(total).c_str(),
                     secs > 0 ? total / secs / 1e9 : 0.0);
      }
    }
  }
  if (out) std::fclose(out);
  if (!failure.empty()) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  if (progress) std::fputc('\n', stderr);
  if (!failure.empty()) {
    std::fprintf(stderr, "snapctl dump: %s\n", failure.c_str());
    return 1;
  }
  if (!s.ok()) return Fail("dump", s, o);

  std::string shape;
  for (int i = 0; i < spec.shape_size(); ++i) shape += (i ? ", " : "") + std::to_string(spec.shape(i));
  std::FILE* m = CreateDumpFile(manifest_path, d.mode, /*exclusive=*/false);
  if (!m) {
    std::fprintf(stderr, "snapctl dump: creating %s: %s\n", manifest_path.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::fprintf(m,
               "{\n  \"run\": \"%s\",\n  \"format\": \"%s\",\n  \"dtype\": \"%s\",\n  "
               "\"numpy_dtype\": \"%s\",\n  \"shape\": [%s],\n  \"bytes_per_step\": %llu,\n  "
               "\"checksum\": \"snapd block checksum v1 of the raw bytes (hex)\",\n  "
               "\"steps\": [",
               d.run.c_str(), d.format.c_str(), v1::Dtype_Name(spec.dtype()).c_str(),
               NpyDescr(spec.dtype()), shape.c_str(), (unsigned long long)spec.bytes_per_step());
  uint64_t lost = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    lost += e.lost;
    if (e.lost) {
      std::fprintf(m, "%s\n    {\"step\": %llu, \"lost\": true}", i ? "," : "",
                   (unsigned long long)e.step);
    } else {
      std::fprintf(m, "%s\n    {\"step\": %llu, \"file\": \"%s\", \"checksum\": \"%016llx\"}",
                   i ? "," : "", (unsigned long long)e.step, e.file.c_str(),
                   (unsigned long long)e.checksum);
    }
  }
  std::fprintf(m, "\n  ]\n}\n");
  std::fclose(m);
  if (!o.json) {
    std::printf("dumped %zu steps of %s (%s) to %s%s\n", entries.size() - lost, d.run.c_str(),
                FormatBytes(total).c_str(), d.dir.c_str(),
                lost ? (", " + std::to_string(lost) + " lost steps listed in the manifest").c_str()
                     : "");
  } else {
    std::printf("{\"steps\": %llu, \"lost\": %llu, \"bytes\": %llu, \"manifest\": \"%s\"}\n",
                (unsigned long long)(entries.size() - lost), (unsigned long long)lost,
                (unsigned long long)total, manifest_path.c_str());
  }
  return lost ? 1 : 0;
}

// Options of `plan`, parsed from the arguments after the command.
struct PlanArgs {
  uint64_t steps = 0;
  uint64_t bytes = 0;
  double forward = 0;   // seconds per forward step; 0 = not given
  double backward = -1; // seconds per backward step; < 0 = same as forward
  std::string codec = "none";
};

int Plan(v1::Control::Stub& stub, const Options& o) {
  PlanArgs p;
  for (size_t i = 1; i < o.args.size(); ++i) {
    const std::string& k = o.args[i];
    if (i + 1 >= o.args.size()) {
      std::fprintf(stderr, "snapctl plan: %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string& v = o.args[++i];
    if (k == "steps") {
      if (!ParseStep(v, &p.steps) || p.steps == 0) {
        std::fprintf(stderr, "snapctl plan: --steps must be a positive integer, got '%s'\n",
                     v.c_str());
        return 2;
      }
    } else if (k == "bytes-per-step") {
      auto b = ParseBytes(v);
      if (!b.ok() || *b == 0) {
        std::fprintf(stderr, "snapctl plan: --bytes-per-step '%s': %s\n", v.c_str(),
                     b.ok() ? "must be > 0" : b.status().message().c_str());
        return 2;
      }
      p.bytes = *b;
    } else if (k == "compute-time" || k == "backward-time") {
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || d < 0) {
        std::fprintf(stderr, "snapctl plan: --%s must be seconds >= 0, got '%s'\n", k.c_str(),
                     v.c_str());
        return 2;
      }
      (k == "compute-time" ? p.forward : p.backward) = d;
    } else if (k == "codec") {
      p.codec = v;
    } else {
      std::fprintf(stderr, "snapctl plan: unknown option --%s\n", k.c_str());
      return 2;
    }
  }
  if (p.steps == 0 || p.bytes == 0) {
    std::fprintf(stderr, "snapctl plan: --steps and --bytes-per-step are required\n");
    return 2;
  }
  if (p.codec != "none") {
    std::fprintf(stderr,
                 "snapctl plan: codec '%s' is not available: this snapd stores snapshots "
                 "uncompressed (use --codec none)\n",
                 p.codec.c_str());
    return 2;
  }
  if (p.backward < 0) p.backward = p.forward;
  v1::StatsResponse r;
  grpc::Status gs = stub.Stats(Context().get(), v1::StatsRequest(), &r);
  if (!gs.ok()) return Fail("plan", gs, o);

  // This node's tiers as schedule levels: capacity in snapshots, measured costs per snapshot.
  std::vector<schedule::Level> levels;
  std::vector<std::string> cost_source;
  uint64_t slot_bytes = (p.bytes + 4095) / 4096 * 4096;
  for (const auto& t : r.tiers()) {
    schedule::Level l;
    l.name = TierName(t.tier());
    uint64_t free_bytes = t.budget_bytes() > t.used_bytes() ? t.budget_bytes() - t.used_bytes() : 0;
    l.slots = free_bytes / slot_bytes;
    bool measured = t.write_bytes_per_second() > 0 && t.read_bytes_per_second() > 0;
    if (measured && p.forward > 0) {
      l.write = p.bytes / t.write_bytes_per_second();
      l.read = p.bytes / t.read_bytes_per_second();
    }
    cost_source.push_back(!measured ? "not measured yet (treated as free)"
                          : p.forward > 0 ? "measured by snapd"
                                          : "ignored (no --compute-time)");
    levels.push_back(l);
  }
  schedule::StepCosts costs{p.forward > 0 ? p.forward : 1.0, p.forward > 0 ? p.backward : 0.0};
  std::string note;
  Result<schedule::Schedule> plan = schedule::Schedule();
  uint64_t total_slots = 0;
  for (const auto& l : levels) total_slots += l.slots;
  if (!levels.empty() && levels[0].slots >= p.steps) {
    plan = schedule::StoreAll(p.steps, levels[0], 0, costs);
  } else {
    plan = schedule::HRevolve(p.steps, levels, costs);
    if (!plan.ok() && plan.status().code() == Code::kResourceExhausted && total_slots > 0) {
      // Too large for the exact table: Revolve's closed form on the fastest tier.
      auto fwd = schedule::RevolveForwardSteps(p.steps, levels[0].slots);
      if (fwd.ok()) {
        schedule::Schedule s;
        s.method = "revolve (closed form; storage costs not optimised)";
        s.steps = p.steps;
        s.forward_steps = *fwd;
        s.cost = *fwd * costs.forward + p.steps * costs.backward;
        s.peak_slots = {std::min(levels[0].slots, p.steps)};
        plan = s;
        note = "exact multi-level table too large for this size";
      }
    }
  }
  if (!plan.ok()) {
    std::fprintf(stderr, "snapctl plan: %s\n", plan.status().message().c_str());
    return 1;
  }
  const schedule::Schedule& s = *plan;
  double baseline = (p.steps - 1) * costs.forward + p.steps * costs.backward;
  double overhead = baseline > 0 ? s.cost / baseline - 1.0 : 0.0;
  if (o.json) {
    std::printf("{\"steps\": %llu, \"bytes_per_step\": %llu, \"codec\": \"%s\",\n",
                (unsigned long long)p.steps, (unsigned long long)p.bytes, p.codec.c_str());
    std::printf(" \"method\": \"%s\", \"forward_steps\": %llu, \"recomputation_factor\": %.4f,\n",
                s.method.c_str(), (unsigned long long)s.forward_steps, s.RecomputationFactor());
    std::printf(" \"predicted_seconds\": %.6g, \"baseline_seconds\": %.6g, "
                "\"overhead\": %.4f, \"timed\": %s,\n",
                p.forward > 0 ? s.cost : 0.0, p.forward > 0 ? baseline : 0.0, overhead,
                p.forward > 0 ? "true" : "false");
    std::printf(" \"tiers\": [");
    for (size_t i = 0; i < levels.size(); ++i) {
      std::printf("%s{\"tier\": \"%s\", \"slots_available\": %llu, \"snapshots\": %llu, "
                  "\"write_seconds\": %.6g, \"read_seconds\": %.6g, \"costs\": \"%s\"}",
                  i ? ", " : "", levels[i].name.c_str(), (unsigned long long)levels[i].slots,
                  (unsigned long long)(i < s.peak_slots.size() ? s.peak_slots[i] : 0),
                  levels[i].write, levels[i].read, cost_source[i].c_str());
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("plan for %llu steps x %s (codec %s)\n", (unsigned long long)p.steps,
              FormatBytes(p.bytes).c_str(), p.codec.c_str());
  std::printf("schedule      %s%s%s\n", s.method.c_str(), note.empty() ? "" : "  -- ",
              note.c_str());
  std::printf("%-8s %14s %12s %12s %12s  %s\n", "TIER", "SLOTS FREE", "SNAPSHOTS", "WRITE s",
              "READ s", "COSTS");
  for (size_t i = 0; i < levels.size(); ++i) {
    std::printf("%-8s %14llu %12llu %12.4g %12.4g  %s\n", levels[i].name.c_str(),
                (unsigned long long)levels[i].slots,
                (unsigned long long)(i < s.peak_slots.size() ? s.peak_slots[i] : 0),
                levels[i].write, levels[i].read, cost_source[i].c_str());
  }
  std::printf("forward steps %llu (recomputation factor %.3f)\n",
              (unsigned long long)s.forward_steps, s.RecomputationFactor());
  if (p.forward > 0) {
    std::printf("predicted     %.4g s vs %.4g s without storage limits: overhead %.1f%%\n",
                s.cost, baseline, 100.0 * overhead);
  } else {
    std::printf("predicted     pass --compute-time to predict times\n");
  }
  return 0;
}

int Main(int argc, char** argv) {
  Options o;
  auto env = [](const char* name) { return std::getenv(name) ? std::getenv(name) : ""; };
  o.remote = env("SNAPCTL_REMOTE");
  o.tls_ca = env("SNAPCTL_TLS_CA");
  o.tls_cert = env("SNAPCTL_TLS_CERT");
  o.tls_key = env("SNAPCTL_TLS_KEY");
  const std::pair<const char*, std::string*> kValued[] = {
      {"--socket", &o.socket},     {"--remote", &o.remote},     {"--tls-ca", &o.tls_ca},
      {"--tls-cert", &o.tls_cert}, {"--tls-key", &o.tls_key}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool global = false;
    for (const auto& [flag, value] : kValued) {
      std::string eq = std::string(flag) + "=";
      if (!o.args.empty()) break;  // after the command, options are the command's
      if (a == flag && i + 1 < argc) {
        *value = argv[++i];
        global = true;
      } else if (a.rfind(eq, 0) == 0) {
        *value = a.substr(eq.size());
        global = true;
      }
    }
    if (global) continue;
    if (a == "--json") {
      o.json = true;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!o.args.empty() &&
               (o.args[0] == "plan" || o.args[0] == "dump" || o.args[0] == "quota" ||
                o.args[0] == "purge") &&
               a.rfind("--", 0) == 0) {
      o.args.push_back(a.substr(2));  // the command's own options, parsed by it
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
  std::shared_ptr<grpc::Channel> channel;
  if (o.remote.empty()) {
    channel = grpc::CreateChannel("unix:" + o.socket, grpc::InsecureChannelCredentials());
  } else {
    grpc::SslCredentialsOptions tls;
    for (auto [flag, path, out] : {std::tuple{"--tls-ca", &o.tls_ca, &tls.pem_root_certs},
                                   std::tuple{"--tls-cert", &o.tls_cert, &tls.pem_cert_chain},
                                   std::tuple{"--tls-key", &o.tls_key, &tls.pem_private_key}}) {
      Result<std::string> text = path->empty() ? Status::NotFound("") : ReadTextFile(*path);
      if (!text.ok()) {
        std::fprintf(stderr, "snapctl: --remote needs %s FILE (a readable PEM file)%s%s\n", flag,
                     path->empty() ? "" : "; cannot read ", path->c_str());
        return 2;
      }
      *out = *std::move(text);
    }
    channel = grpc::CreateChannel(o.remote, grpc::SslCredentials(tls));
  }
  auto stub = v1::Control::NewStub(channel);
  const std::string& cmd = o.args[0];
  if (cmd == "status") return Status(*stub, *channel, o);
  if (cmd == "runs") return Runs(*stub, o);
  if (cmd == "ls") return Ls(*stub, o);
  if (cmd == "locate") return Locate(*stub, o);
  if (cmd == "rm") return Rm(*stub, o);
  if (cmd == "plan") return Plan(*stub, o);
  if (cmd == "dump") return Dump(*stub, o);
  if (cmd == "drain") return Drain(*stub, o);
  if (cmd == "quota") return Quota(*stub, o);
  if (cmd == "purge") return Purge(*stub, o);
  std::fprintf(stderr, "snapctl: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}

}  // namespace
}  // namespace snapd

int main(int argc, char** argv) { return snapd::Main(argc, argv); }
