// Fuzzes what a start of snapd reads from its catalog: the format version ("m:format"), the
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

namespace {

using namespace snapd;

std::string Span(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
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
