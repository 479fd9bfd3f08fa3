// dump: a run's steps as numpy .npy (or raw) files plus manifest.json, checksums verified.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "adjsnap/checksum.h"
#include "adjsnap/nvcomp_codec.h"
#include "adjsnap/units.h"

namespace adjsnap::cli {
namespace {

// numpy's dtype string for a snapshot dtype (little-endian, as every adjsnapd host is).
const char* NpyDescr(v1::Dtype d) {
  switch (d) {
    case v1::DTYPE_FLOAT32:
      return "<f4";
    case v1::DTYPE_FLOAT64:
      return "<f8";
    case v1::DTYPE_INT32:
      return "<i4";
    case v1::DTYPE_INT64:
      return "<i8";
    default:
      return "|u1";
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

// The command line of dump, as given.
struct DumpArgs {
  std::string run;
  std::string dir;
  std::string format = "npy";
  std::string steps;  // "A:B"; empty: all
  std::string mode = "0600";
};

// DumpArgs checked.
struct DumpPlan {
  std::string run;
  std::string dir;
  std::string format;
  uint64_t first = 0;
  uint64_t end = 0;    // 0 = all
  mode_t mode = 0600;  // of the files; a directory dump creates gets it with x where r is set
};

int Check(const DumpArgs& a, DumpPlan* d) {
  d->run = a.run;
  d->dir = a.dir;
  d->format = a.format;
  char* end = nullptr;
  unsigned long m = std::strtoul(a.mode.c_str(), &end, 8);
  if (a.mode.empty() || *end != '\0' || m > 0777 || a.mode[0] == '-') {
    return UsageError(
        "dump", "--mode must be octal permission bits such as 0600 or 0644, got '" + a.mode + "'");
  }
  d->mode = static_cast<mode_t>(m);
  if (!a.steps.empty()) {
    size_t colon = a.steps.find(':');
    if (colon == std::string::npos || !ParseCount(a.steps.substr(0, colon), &d->first) ||
        !ParseCount(a.steps.substr(colon + 1), &d->end) || d->end <= d->first) {
      return UsageError("dump", "--steps must be A:B with A < B, got '" + a.steps + "'");
    }
  }
  return kExitOk;
}

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

int Dump(Session& s, const DumpArgs& args) {
  DumpPlan d;
  if (int rc = Check(args, &d); rc != kExitOk) return rc;
  v1::ListSnapshotsRequest lreq;
  lreq.set_name(d.run);
  v1::ListSnapshotsResponse list;
  grpc::Status ls = s.stub().ListSnapshots(ShortContext().get(), lreq, &list);
  if (!ls.ok()) return s.Fail("dump", ls);
  const v1::RunSpec& spec = list.run().spec();
  // Steps stored as chunk frames (an nvCOMP codec) are decoded here, on the CPU: refused before
  // anything is written when this adjsnap cannot.
  const compress::CodecSpec frame_codec{spec.codec(), spec.codec_param()};
  const compress::FieldSpec field{spec.dtype(),
                                  std::vector<uint64_t>(spec.shape().begin(), spec.shape().end()),
                                  spec.bytes_per_step()};
  for (const auto& snap : list.snapshots()) {
    bool in_range = snap.step() >= d.first && (d.end == 0 || snap.step() < d.end);
    if (!in_range || !compress::IsGpuCodec(snap.codec()) || snap.tier() == v1::TIER_LOST) continue;
    Status decodable = compress::ValidateGpuCodec(frame_codec, field);
    if (decodable.ok() && snap.codec() == v1::CODEC_ANS) {
      decodable = Status::FailedPrecondition(
          "nvCOMP has no CPU decoder for ans, and adjsnap decodes on the CPU; read the run "
          "with libadjsnap on a GPU node instead");
    }
    if (!decodable.ok()) {
      Error("dump", "step " + std::to_string(snap.step()) + " of run '" + d.run +
                        "' is stored as a chunk frame of codec " +
                        compress::CodecName(frame_codec) +
                        " (compressed where the solver ran) and cannot be decoded here: " +
                        decodable.message() + "; nothing was written");
      return kExitFailed;
    }
  }
  std::vector<char> decoded;  // a framed step's raw bytes
  std::error_code ec;
  bool created = std::filesystem::create_directories(d.dir, ec);
  // A directory the dump creates is as private as its files; an existing one is left as it is.
  mode_t dir_mode = d.mode | ((d.mode & 0444) >> 2);
  if (!ec && created && chmod(d.dir.c_str(), dir_mode) != 0) {
    ec = std::error_code(errno, std::generic_category());
  }
  if (ec) {
    Error("dump", "creating " + d.dir + ": " + ec.message());
    return kExitFailed;
  }
  std::string manifest_path = d.dir + "/manifest.json";
  if (std::filesystem::exists(manifest_path)) {
    Error("dump", d.dir + " already holds a dump (manifest.json); pick an empty directory");
    return kExitFailed;
  }
  uint64_t expected = 0;
  for (const auto& snap : list.snapshots()) {
    if (snap.step() >= d.first && (d.end == 0 || snap.step() < d.end)) ++expected;
  }
  bool progress = isatty(STDERR_FILENO) && !s.out().json();
  std::string header = d.format == "npy" ? NpyHeader(spec) : "";

  grpc::ClientContext ctx;  // no deadline: a dump takes as long as the bytes take
  v1::DumpRequest req;
  req.set_name(d.run);
  req.set_first_step(d.first);
  req.set_end_step(d.end);
  auto reader = s.stub().Dump(&ctx, req);
  struct Entry {
    uint64_t step;
    std::string file;
    uint64_t checksum;
    bool lost;
    bool framed = false;  // its bytes come as a chunk frame, written once decoded
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
      std::string name =
          Format("step-%08llu.%s", (unsigned long long)chunk.step(), d.format.c_str());
      entries.push_back(
          {chunk.step(), name, chunk.checksum(), false, compress::IsGpuCodec(chunk.codec())});
      out = CreateDumpFile(d.dir + "/" + name, d.mode, /*exclusive=*/true);
      if (!out) {
        failure = "creating " + d.dir + "/" + name + ": " + std::strerror(errno);
        break;
      }
      if (!header.empty()) std::fwrite(header.data(), 1, header.size(), out);
      step_bytes.clear();
      step_bytes.reserve(chunk.step_bytes());
      if (!chunk.checksum_recorded()) entries.back().checksum = 0;  // 0: nothing to verify
    }
    step_bytes += chunk.data();
    if (!entries.back().framed &&
        std::fwrite(chunk.data().data(), 1, chunk.data().size(), out) != chunk.data().size()) {
      failure = "writing " + entries.back().file + ": " + std::strerror(errno);
      break;
    }
    total += chunk.data().size();
    if (step_bytes.size() == chunk.step_bytes()) {
      uint64_t sum = Checksum(step_bytes.data(), step_bytes.size());
      if (entries.back().checksum && sum != entries.back().checksum) {
        failure = "step " + std::to_string(chunk.step()) +
                  " arrived with bytes that do not match its recorded checksum";
      }
      if (failure.empty() && entries.back().framed) {  // checked as stored, then decoded
        decoded.resize(spec.bytes_per_step());
        Status s = compress::DecompressFrameOnHost(frame_codec, field, step_bytes.data(),
                                                   step_bytes.size(), decoded.data());
        if (!s.ok()) {
          failure = "step " + std::to_string(chunk.step()) + ": " + s.message();
        } else if (std::fwrite(decoded.data(), 1, decoded.size(), out) != decoded.size()) {
          failure = "writing " + entries.back().file + ": " + std::strerror(errno);
        }
        sum = Checksum(decoded.data(), decoded.size());  // the manifest's: of the raw bytes
      }
      if (std::fclose(out) != 0 && failure.empty()) failure = "closing " + entries.back().file;
      out = nullptr;
      entries.back().checksum = sum;
      if (progress) {  // stderr: stdout is the result
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\rdump %s: %zu/%llu steps, %s, %.2f GB/s   ", d.run.c_str(),
                     entries.size(), (unsigned long long)expected, FormatBytes(total).c_str(),
                     secs > 0 ? total / secs / 1e9 : 0.0);
      }
    }
  }
  if (out) std::fclose(out);
  if (!failure.empty()) ctx.TryCancel();
  grpc::Status st = reader->Finish();
  if (progress) std::fputc('\n', stderr);
  if (!failure.empty()) {
    Error("dump", failure);
    return kExitFailed;
  }
  if (!st.ok()) return s.Fail("dump", st);

  Json manifest = {{"run", d.run},
                   {"format", d.format},
                   {"dtype", EnumJson(*v1::Dtype_descriptor()->FindValueByNumber(spec.dtype()))},
                   {"numpy_dtype", NpyDescr(spec.dtype())},
                   {"shape", Json::array()},
                   {"bytes_per_step", spec.bytes_per_step()},
                   {"checksum", "adjsnapd block checksum v1 of the raw bytes (hex)"},
                   {"steps", Json::array()}};
  for (uint64_t dim : spec.shape()) manifest["shape"].push_back(dim);
  uint64_t lost = 0;
  for (const Entry& e : entries) {
    lost += e.lost;
    if (e.lost) {
      manifest["steps"].push_back({{"step", e.step}, {"lost", true}});
    } else {
      manifest["steps"].push_back(
          {{"step", e.step},
           {"file", e.file},
           {"checksum", Format("%016llx", (unsigned long long)e.checksum)}});
    }
  }
  std::FILE* m = CreateDumpFile(manifest_path, d.mode, /*exclusive=*/false);
  std::string text =
      manifest.dump(2, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
  bool written = m && std::fwrite(text.data(), 1, text.size(), m) == text.size();
  if (!m || std::fclose(m) != 0 || !written) {
    Error("dump", "writing " + manifest_path + ": " + std::strerror(errno));
    return kExitFailed;
  }
  if (s.out().json()) {
    s.out().Print(Json{{"steps", entries.size() - lost},
                       {"lost", lost},
                       {"bytes", total},
                       {"manifest", manifest_path}});
  } else {
    s.out().Line(Format("dumped %s of %s (%s) to %s", Counted(entries.size() - lost, "step").c_str(),
                        d.run.c_str(), FormatBytes(total).c_str(), d.dir.c_str()) +
                 (lost ? ", " + Counted(lost, "lost step") + " listed in the manifest" : ""));
  }
  return lost ? kExitFailed : kExitOk;
}

}  // namespace

void AddDumpCommand(CLI::App& app, Action* action) {
  auto a = std::make_shared<DumpArgs>();
  CLI::App* dump = app.add_subcommand(
      "dump", "write RUN's steps to DIR as numpy .npy (or raw) files plus manifest.json");
  dump->footer(
      "Each step is checked against its recorded checksum on the way. The files get\n"
      "--mode whatever the umask; a DIR the dump creates gets it with search bits.");
  dump->add_option("RUN", a->run, "the run")->type_name("")->required();
  dump->add_option("--to", a->dir,
                   "the directory to write (created if missing; must hold no "
                   "earlier dump)")
      ->type_name("DIR")
      ->required();
  dump->add_option("--format", a->format, "npy or raw")
      ->type_name("FORMAT")
      ->capture_default_str()
      ->check(CLI::IsMember({"npy", "raw"}));
  dump->add_option("--steps", a->steps, "only steps A..B-1")->type_name("A:B");
  dump->add_option("--mode", a->mode, "octal permission bits of the files (0600: yours only)")
      ->type_name("OCTAL")
      ->capture_default_str();
  dump->callback([action, a] { *action = [a](Session& s) { return Dump(s, *a); }; });
}

}  // namespace adjsnap::cli
