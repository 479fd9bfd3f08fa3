// Fuzzes what a start of adjsnapd reads from its catalog: the format version ("m:format"), the
// counters, the kept-host-tier marker and every run and snapshot record, through the real
// start-up (fuzz::StartFrom: Catalog::Open, TakeHostTierKept, Store::Open's Load, then a scrub
// of every run and a fetch of every step). The catalog is a real RocksDB written here, key by
// key, with the input's values.
//
// Input: one flags byte (0x01: the start took the kept host tier back), then records, each
//   u8 kind, u16 length, that many bytes
// kind (mod 7): 0 m:format, 1 m:epoch, 2 m:next_run_id, 3 m:host_tier: the bytes are the
// value; 4 "r:" + the first 8 bytes as the key's run id, the rest the RunRecord; 5 "s:" + the
// first 16 bytes (run id, step), the rest the SnapshotRecord; 6 the first byte is a key
// length, then the key, then the value.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstdio>

#include "fuzz_node.h"
#include "seeds.h"

namespace {

using namespace adjsnap;

std::string Span(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// The catalog in `dir`, key by key, as this target's input: each key the catalog wrote becomes
// the record kind that writes it back.
std::string CatalogAsInput(const std::string& dir, bool adopted) {
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir + "/catalog", &raw).ok()) std::abort();
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string input(1, adopted ? '\x01' : '\x00');
  auto add = [&input](int kind, const std::string& bytes) {
    input += std::string(1, char(kind)) + fuzz::U16(bytes.size()) + bytes;
  };
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString(), value = it->value().ToString();
    static const char* const kMeta[] = {"m:format", "m:epoch", "m:next_run_id", "m:host_tier"};
    int kind = -1;
    for (int k = 0; k < 4; ++k) {
      if (key == kMeta[k]) kind = k;
    }
    if (kind >= 0) {
      add(kind, value);
    } else if (key.rfind("r:", 0) == 0 && key.size() == 10) {
      add(4, key.substr(2) + value);
    } else if (key.rfind("s:", 0) == 0 && key.size() == 18) {
      add(5, key.substr(2) + value);
    } else {
      add(6, std::string(1, char(key.size())) + key + value);
    }
  }
  return input;
}

// Seeds: catalogs written by a real store. A run of each placement (host, disk, zfp on disk)
// with steps stored, then either closed as a plain stop leaves it or with the host tier kept.
void WriteSeeds() {
  for (bool keep : {false, true}) {
    std::string dir = fuzz::MakeTempDir("catalog-seed");
    {
      fuzz::NodeOptions o;
      o.dir = dir;
      o.disk = true;
      o.host_bytes = 8ull << 20;
      auto node = fuzz::Node::Start(o);
      Store* store = node->store();
      struct RunSeed {
        const char* name;
        v1::Layers layers;
        v1::Codec codec;
        double param;
      };
      for (const RunSeed& r : {RunSeed{"host", v1::LAYERS_HOST, v1::CODEC_NONE, 0},
                               RunSeed{"disk", v1::LAYERS_DISK, v1::CODEC_NONE, 0},
                               RunSeed{"zfp", v1::LAYERS_DISK, v1::CODEC_ZFP_RATE, 8}}) {
        v1::RunSpec spec;
        spec.set_name(r.name);
        spec.set_steps(2);
        spec.set_dtype(v1::DTYPE_FLOAT32);
        spec.add_shape(8);
        spec.add_shape(16);
        spec.set_bytes_per_step(8 * 16 * 4);
        spec.set_layers(r.layers);
        spec.set_keep(true);
        spec.set_codec(r.codec);
        spec.set_codec_param(r.param);
        spec.set_job("4242");
        bool created = false;
        v1::RunInfo info = fuzz::Take(store->OpenRun(spec, 0, &created), "OpenRun");
        for (uint64_t step = 0; step < 2; ++step) {
          fuzz::PushStep(store, info.run_id(), step, fuzz::Field(v1::DTYPE_FLOAT32, 8, 16, step));
        }
        if (r.layers == v1::LAYERS_DISK) fuzz::WaitOnDisk(store, std::string("0:") + r.name, 2);
      }
      if (keep) {
        store->BeginStop();
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        (void)store->KeepHostTier(deadline);
      }
    }
    fuzz::WriteSeed(keep ? "kept_host_tier" : "host_disk_zfp_runs", CatalogAsInput(dir, keep));
    fuzz::RemoveTree(dir);
  }
  // A fresh catalog: only what Open and BeginEpoch write.
  std::string dir = fuzz::MakeTempDir("catalog-seed");
  {
    auto catalog = fuzz::Take(Catalog::Open(dir + "/catalog"), "Catalog::Open");
    (void)fuzz::Take(catalog->BeginEpoch(), "BeginEpoch");
  }
  fuzz::WriteSeed("fresh", CatalogAsInput(dir, false));
  fuzz::RemoveTree(dir);
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
  if (size == 0) return 0;
  const bool adopted = bytes[0] & 1;
  std::string dir = fuzz::MakeTempDir("catalog");
  {
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    if (!rocksdb::DB::Open(options, dir + "/catalog", &raw).ok()) {
      std::fprintf(stderr, "fuzz harness: cannot create a RocksDB in %s\n", dir.c_str());
      std::abort();
    }
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::WriteBatch batch;
    size_t at = 1;
    while (at + 3 <= size) {
      const uint8_t kind = bytes[at] % 7;
      size_t length = bytes[at + 1] | (size_t{bytes[at + 2]} << 8);
      at += 3;
      length = std::min(length, size - at);
      const uint8_t* v = bytes + at;
      at += length;
      static const char* const kMeta[] = {"m:format", "m:epoch", "m:next_run_id", "m:host_tier"};
      if (kind < 4) {
        batch.Put(kMeta[kind], Span(v, length));
      } else if (kind == 4 || kind == 5) {
        size_t key = kind == 4 ? 8 : 16;
        if (length < key) continue;
        batch.Put((kind == 4 ? "r:" : "s:") + Span(v, key), Span(v + key, length - key));
      } else if (length > 0) {
        size_t key = std::min<size_t>(v[0], length - 1);
        batch.Put(Span(v + 1, key), Span(v + 1 + key, length - 1 - key));
      }
    }
    if (!db->Write(rocksdb::WriteOptions(), &batch).ok()) std::abort();
  }
  (void)fuzz::StartFrom(dir, adopted);
  fuzz::RemoveTree(dir);
  return 0;
}
