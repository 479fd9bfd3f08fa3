// The catalog: snapd's durable record of runs and snapshots, in RocksDB.
//
// Keys (big-endian integers so RocksDB's order is numeric order):
//   "m:next_run_id"            -> uint64 next run id to hand out
//   "m:epoch"                  -> uint64 number of daemon starts; a snapshot's record carries
//                                 the epoch that stored it
//   "r:" run_id                -> snapd.v1.RunRecord
//   "s:" run_id step           -> snapd.v1.SnapshotRecord
// Deleting a run removes its run key and every "s:" key under it in one atomic write batch.
// Thread-safe: RocksDB serialises writers; the id counter is guarded by a mutex.
#pragma once

#include <rocksdb/db.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "snapd/status.h"
#include "snapd/v1/catalog.pb.h"
#include "snapd/thread_annotations.h"

namespace snapd {

class Catalog {
 public:
  static Result<std::unique_ptr<Catalog>> Open(const std::string& dir);

  // Increments and returns the start counter.
  Result<uint64_t> BeginEpoch();
  Result<uint64_t> AllocateRunId() SNAPD_EXCLUDES(mu_);

  Status PutRun(const v1::RunRecord& run);
  Status PutSnapshot(const v1::SnapshotRecord& snapshot);
  Status DeleteRun(uint64_t run_id);
  Status DeleteSnapshot(uint64_t run_id, uint64_t step);

  Status LoadAll(std::vector<v1::RunRecord>* runs, std::vector<v1::SnapshotRecord>* snapshots);

 private:
  explicit Catalog(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}
  Result<uint64_t> Increment(const std::string& key);

  std::unique_ptr<rocksdb::DB> db_;
  Mutex mu_;  // serialises read-modify-write of counters
};

}  // namespace snapd
