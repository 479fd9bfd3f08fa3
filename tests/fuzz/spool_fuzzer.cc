// Fuzzes the spool files a start of adjsnapd adopts: their names (in the records and in the spool
// directories) and their contents, which are read back and checked, and for compressed runs
// decoded (zfp streams), by the real start-up (fuzz::StartFrom: Store::Open's Load with
// DiskTier::Adopt, Quarantine and RemoveOrphans, then a scrub of the run and a fetch of every
// step). The catalog holds one run and a record per file, written with the real Catalog.
//
// Input: u8 codec (mod 5), u8 dtype (mod 4: float32, float64, int32, int64), u8 codec_param,
// u8 nx, u8 ny (the field is (ny % 16 + 1) x (nx % 16 + 1)), then entries, each
//   u8 kind, u8 name length, name, u16 length, content
// kind (mod 3): 0 a step's spool file: run-1/<name> holds the content and the next step's
// record names it (stored bytes: the content's length when the run compresses, with its
// checksum; raw bytes: the run's, with the checksum of the content when it does not); 1 a
// directory <name> in the spool with the content as a file in it; 2 a file run-1/<name> no
// record names. A name that is not one plain path component (empty, ".", "..", or with '/')
// is recorded as it is but nothing is created under it: adjsnapd only ever writes plain names,
// and the harness must not touch files outside its directory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_node.h"
#include "seeds.h"
#include "adjsnap/checksum.h"

namespace {

using namespace adjsnap;

bool PlainName(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\0') == std::string::npos;
}

void WriteFile(const std::string& path, const uint8_t* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "seed: cannot read %s\n", path.c_str());
    std::abort();
  }
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// One seed: the spool files of a real run (a real store with a disk tier, every step pushed
// and written to disk as a demotion writes it), with the names its catalog records give them.
// `codec_byte`..`dtype_byte` are this target's encoding of the run's spec (see the top).
void WriteRunSeed(const char* seed, v1::Codec codec, uint8_t param_byte, uint8_t dtype_byte,
                  uint64_t nx, uint64_t ny, uint64_t steps, bool orphan) {
  static const v1::Dtype kDtypes[] = {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64, v1::DTYPE_INT32,
                                      v1::DTYPE_INT64};
  const v1::Dtype dtype = kDtypes[dtype_byte];
  const double param =
      codec == v1::CODEC_ZFP_ACCURACY ? (param_byte + 1) / 256.0 : param_byte % 64 + 1;
  std::string dir = fuzz::MakeTempDir("spool-seed");
  uint64_t run_id = 0;
  {
    fuzz::NodeOptions o;
    o.dir = dir;
    o.disk = true;
    o.host_bytes = 8ull << 20;
    auto node = fuzz::Node::Start(o);
    v1::RunSpec spec;
    spec.set_name("spool-seed");
    spec.set_steps(steps);
    spec.set_dtype(dtype);
    spec.set_bytes_per_step(nx * ny * DtypeBytes(dtype));
    spec.add_shape(ny);
    spec.add_shape(nx);
    spec.set_layers(v1::LAYERS_DISK);
    spec.set_keep(true);
    spec.set_codec(codec);
    spec.set_codec_param(codec == v1::CODEC_NONE || codec == v1::CODEC_ZFP_REVERSIBLE ? 0 : param);
    bool created = false;
    v1::RunInfo info = fuzz::Take(node->store()->OpenRun(spec, 0, &created), "OpenRun");
    run_id = info.run_id();
    for (uint64_t step = 0; step < steps; ++step) {
      fuzz::PushStep(node->store(), run_id, step, fuzz::Field(dtype, ny, nx, step));
    }
    fuzz::WaitOnDisk(node->store(), "0:spool-seed", steps);
  }
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snapshots;
  {
    auto catalog = fuzz::Take(Catalog::Open(dir + "/catalog"), "Catalog::Open");
    fuzz::Check(catalog->LoadAll(&runs, &snapshots), "LoadAll");
  }
  std::string input{char(codec), char(dtype_byte), char(param_byte), char(nx - 1), char(ny - 1)};
  const std::string run_dir = dir + "/spool/run-" + std::to_string(run_id);
  auto entry = [&input](int kind, const std::string& name, const std::string& content) {
    input += std::string(1, char(kind)) + std::string(1, char(name.size())) + name +
             fuzz::U16(content.size()) + content;
  };
  std::string last;
  for (const v1::SnapshotRecord& r : snapshots) {
    if (r.tier() != v1::TIER_DISK) continue;
    last = ReadFile(run_dir + "/" + r.disk_name());
    entry(0, r.disk_name(), last);
  }
  // A file left in the run's directory that no record names (a write a crash cut short).
  if (orphan) entry(2, "orphan.tmp", last.substr(0, last.size() / 2));
  fuzz::WriteSeed(seed, input);
  fuzz::RemoveTree(dir);
}

void WriteSeeds() {
  WriteRunSeed("raw_float32", v1::CODEC_NONE, 0, 0, 16, 8, 3, false);
  WriteRunSeed("raw_int64_orphan", v1::CODEC_NONE, 0, 3, 4, 4, 2, true);
  WriteRunSeed("zfp_rate_float32", v1::CODEC_ZFP_RATE, 7, 0, 16, 16, 3, false);
  WriteRunSeed("zfp_accuracy_float64", v1::CODEC_ZFP_ACCURACY, 15, 1, 16, 12, 2, false);
  WriteRunSeed("zfp_precision_float32", v1::CODEC_ZFP_PRECISION, 15, 0, 9, 7, 2, true);
  WriteRunSeed("zfp_reversible_float64", v1::CODEC_ZFP_REVERSIBLE, 0, 1, 8, 8, 2, false);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  if (fuzz::SeedDir()) {
    WriteSeeds();
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size < 5) return 0;
  static const v1::Dtype kDtypes[] = {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64, v1::DTYPE_INT32,
                                      v1::DTYPE_INT64};
  const auto codec = static_cast<v1::Codec>(bytes[0] % 5);
  const v1::Dtype dtype = kDtypes[bytes[1] % 4];
  const double param = codec == v1::CODEC_ZFP_ACCURACY ? (bytes[2] + 1) / 256.0 : bytes[2] % 64 + 1;
  const uint64_t nx = bytes[3] % 16 + 1, ny = bytes[4] % 16 + 1;
  v1::RunSpec spec;
  spec.set_name("spool-fuzz");
  spec.set_dtype(dtype);
  spec.set_bytes_per_step(nx * ny * DtypeBytes(dtype));
  spec.add_shape(ny);
  spec.add_shape(nx);
  spec.set_layers(v1::LAYERS_DISK_HOST);
  spec.set_keep(true);
  spec.set_codec(codec);
  spec.set_codec_param(codec == v1::CODEC_NONE || codec == v1::CODEC_ZFP_REVERSIBLE ? 0 : param);
  if (!ValidateRunSpec(spec).ok()) return 0;

  std::string dir = fuzz::MakeTempDir("spool");
  const std::string spool = dir + "/spool";
  const std::string run_dir = spool + "/run-1";
  mkdir(spool.c_str(), 0700);
  mkdir(run_dir.c_str(), 0700);
  {
    auto catalog = fuzz::Take(Catalog::Open(dir + "/catalog"), "Catalog::Open");
    uint64_t epoch = fuzz::Take(catalog->BeginEpoch(), "BeginEpoch");
    uint64_t id = fuzz::Take(catalog->AllocateRunId(), "AllocateRunId");
    v1::RunRecord run;
    run.set_run_id(id);
    *run.mutable_spec() = spec;
    run.set_state(v1::RUN_CLOSED);
    run.set_owner_uid(0);
    fuzz::Check(catalog->PutRun(run), "PutRun");
    size_t at = 5;
    uint64_t step = 0;
    while (at + 2 <= size) {
      const uint8_t kind = bytes[at] % 3;
      size_t name_length = std::min<size_t>(bytes[at + 1], size - at - 2);
      std::string name(reinterpret_cast<const char*>(bytes + at + 2), name_length);
      at += 2 + name_length;
      size_t length = 0;
      if (at + 2 <= size) length = bytes[at] | (size_t{bytes[at + 1]} << 8);
      at = std::min(at + 2, size);
      length = std::min(length, size - at);
      const uint8_t* content = bytes + at;
      at += length;
      const bool plain = PlainName(name);
      if (kind == 0) {
        v1::SnapshotRecord r;
        r.set_run_id(id);
        r.set_step(step++);
        r.set_tier(v1::TIER_DISK);
        r.set_spool(0);
        r.set_disk_name(name);
        r.set_raw_bytes(spec.bytes_per_step());
        r.set_daemon_epoch(epoch);
        r.set_checksum_state(v1::CHECKSUM_RECORDED);
        if (codec == v1::CODEC_NONE) {
          r.set_stored_bytes(spec.bytes_per_step());
          r.set_checksum(length >= spec.bytes_per_step() ? Checksum(content, spec.bytes_per_step())
                                                         : 0);
        } else {
          r.set_stored_bytes(length);
          r.set_codec(codec);
          r.set_codec_param(spec.codec_param());
          r.set_stored_checksum(Checksum(content, length));
        }
        fuzz::Check(catalog->PutSnapshot(r), "PutSnapshot");
        if (plain) WriteFile(run_dir + "/" + name, content, length);
      } else if (plain && kind == 1) {
        std::string sub = spool + "/" + name;
        mkdir(sub.c_str(), 0700);
        WriteFile(sub + "/data", content, length);
      } else if (plain) {
        WriteFile(run_dir + "/" + name, content, length);
      }
    }
  }
  (void)fuzz::StartFrom(dir, /*host_adopted=*/false);
  fuzz::RemoveTree(dir);
  return 0;
}
