// The catalog: snapd's durable record of runs and snapshots, in RocksDB.
//
// Keys (big-endian integers so RocksDB's order is numeric order):
//   "m:next_run_id"            -> uint64 next run id to hand out
//   "m:format"                 -> uint64 format version (absent: format 1, see catalog.proto)
//   "m:epoch"                  -> uint64 number of daemon starts; a snapshot's record carries
//                                 the epoch that stored it
//   "m:host_tier"              -> snapd.v1.HostTierKept: the host tier was handed to systemd's
//                                 fd store at the last stop
//   "r:" run_id                -> snapd.v1.RunRecord
//   "s:" run_id step           -> snapd.v1.SnapshotRecord
// Deleting a run removes its run key and every "s:" key under it in one atomic write batch.
// Thread-safe: RocksDB serialises writers; the id counter is guarded by a mutex.
#pragma once

#include <rocksdb/db.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "snapd/status.h"
#include "snapd/v1/catalog.pb.h"
#include "snapd/thread_annotations.h"

namespace snapd {

class Catalog {
 public:
  // The format this snapd writes; it reads every older one (catalog.proto lists them).
  static constexpr uint64_t kFormatVersion = 2;

  // Opens (or creates) the catalog and marks it kFormatVersion. FAILED_PRECONDITION, naming
  // both versions, for a catalog of a newer format (written by a newer snapd).
  static Result<std::unique_ptr<Catalog>> Open(const std::string& dir);
  // The format the catalog had when opened (1 for one written before formats were recorded).
  uint64_t opened_format() const { return opened_format_; }

  // Increments and returns the start counter.
  Result<uint64_t> BeginEpoch();
  Result<uint64_t> AllocateRunId() SNAPD_EXCLUDES(mu_);

  Status PutRun(const v1::RunRecord& run);
  Status PutSnapshot(const v1::SnapshotRecord& snapshot);
  Status DeleteRun(uint64_t run_id);
  Status DeleteSnapshot(uint64_t run_id, uint64_t step);

  Status LoadAll(std::vector<v1::RunRecord>* runs, std::vector<v1::SnapshotRecord>* snapshots);

  // The host tier handed to systemd's fd store: `snapshots` (with host_copy) and the marker,
  // in one synced batch, so the next start finds either both or neither.
  Status PutHostTierKept(const v1::HostTierKept& kept,
                         const std::vector<v1::SnapshotRecord>& snapshots);
  // The marker left by the last stop, if any; removed from the catalog.
  Result<std::optional<v1::HostTierKept>> TakeHostTierKept();

 private:
  Catalog(std::unique_ptr<rocksdb::DB> db, uint64_t opened_format)
      : db_(std::move(db)), opened_format_(opened_format) {}
  Result<uint64_t> Increment(const std::string& key);

  std::unique_ptr<rocksdb::DB> db_;
  const uint64_t opened_format_;
  Mutex mu_;  // serialises read-modify-write of counters
};

}  // namespace snapd
