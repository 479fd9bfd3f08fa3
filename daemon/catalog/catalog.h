// The catalog: adjsnapd's durable record of runs and snapshots, in RocksDB.
//
// Keys (big-endian integers so RocksDB's order is numeric order):
//   "m:next_run_id"            -> uint64 next run id to hand out
//   "m:format"                 -> uint64 format version (absent: format 1, see catalog.proto)
//   "m:epoch"                  -> uint64 number of daemon starts; a snapshot's record carries
//                                 the epoch that stored it
//   "m:host_tier"              -> adjsnap.v1.HostTierKept: the host tier was handed to systemd's
//                                 fd store at the last stop
//   "r:" run_id                -> adjsnap.v1.RunRecord
//   "s:" run_id step           -> adjsnap.v1.SnapshotRecord
// Deleting a run removes its run key and every "s:" key under it in one atomic write batch.
//
// Record writes (runs, snapshots, the kept host tier) are applied in the order they are made,
// through one writer thread: it applies everything queued as one RocksDB write batch (group
// commit), so many solvers' commits cost one write and the threads that make them need not
// wait. The `...Then` forms return at once and call `done` on the writer thread once the batch
// is written (as durable as every record write here: in RocksDB's write-ahead log, not
// fsynced). The plain forms wait for their batch; one that finds nothing queued nor being
// written makes its write itself. `done` must not block, nor take a lock that a caller of this
// catalog may hold while it waits: a lock that plays kCatalogCompletionLock's role (the
// store's index mutex) is never held across a call that waits for the writer, so `done` may
// take it. Thread-safe; the id counter is guarded by a mutex of its own.
#pragma once

#include <rocksdb/db.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/v1/catalog.pb.h"

namespace adjsnap {

// The role of a lock that a write's `done` may take (the store's index mutex): held across a
// call that waits for the writer, it would keep the writer waiting for the lock while the
// lock's holder waits for the writer. Not a lock, only a name for clang's thread-safety
// analysis: whoever takes such a lock acquires this role with it (store/store_index.h's
// IndexLock), and every call here that waits for the writer or for RocksDB EXCLUDES it, so
// making one with the lock held does not compile.
class ADJSNAP_CAPABILITY("role") CatalogCompletionLock {};
inline constexpr CatalogCompletionLock kCatalogCompletionLock{};

class Catalog {
 public:
  // The format this adjsnapd writes; it reads every older one (catalog.proto lists them).
  static constexpr uint64_t kFormatVersion = 2;

  // Opens (or creates) the catalog and marks it kFormatVersion. FAILED_PRECONDITION, naming
  // both versions, for a catalog of a newer format (written by a newer adjsnapd).
  // PERMISSION_DENIED, naming the directory or file and its owner, when this process may not
  // write the catalog (one left by an adjsnapd run as another user); UNAVAILABLE otherwise,
  // asking whether another adjsnapd holds it when RocksDB's lock is taken.
  static Result<std::unique_ptr<Catalog>> Open(const std::string& dir);
  // The format the catalog had when opened (1 for one written before formats were recorded).
  uint64_t opened_format() const { return opened_format_; }

  // Increments and returns the start counter.
  Result<uint64_t> BeginEpoch() ADJSNAP_EXCLUDES(kCatalogCompletionLock);
  Result<uint64_t> AllocateRunId() ADJSNAP_EXCLUDES(mu_, kCatalogCompletionLock);

  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // The waiting forms: each returns once its write is made.
  Status PutRun(const v1::RunRecord& run) ADJSNAP_EXCLUDES(kCatalogCompletionLock);
  Status PutSnapshot(const v1::SnapshotRecord& snapshot) ADJSNAP_EXCLUDES(kCatalogCompletionLock);
  Status DeleteRun(uint64_t run_id) ADJSNAP_EXCLUDES(kCatalogCompletionLock);

  using Done = std::function<void(Status)>;
  // One RocksDB operation of a write.
  struct Op {
    enum Kind { kPut, kDelete, kDeleteRange } kind;
    std::string key;
    std::string value;  // kPut: the value; kDeleteRange: the end key (exclusive)
  };
  void PutRunThen(const v1::RunRecord& run, Done done);
  void PutSnapshotThen(const v1::SnapshotRecord& snapshot, Done done);
  void DeleteSnapshotThen(uint64_t run_id, uint64_t step, Done done);
  void DeleteRunThen(uint64_t run_id, Done done);
  // Returns once every write queued before the call is written and its `done` has run.
  void Flush() ADJSNAP_EXCLUDES(kCatalogCompletionLock);
  // Writes queued, and written in how many RocksDB write batches, since Open.
  struct WriterCounts {
    uint64_t queued = 0;
    uint64_t written = 0;
    uint64_t batches = 0;
  };
  WriterCounts writer_counts() ADJSNAP_EXCLUDES(writer_mu_);

  Status LoadAll(std::vector<v1::RunRecord>* runs, std::vector<v1::SnapshotRecord>* snapshots)
      ADJSNAP_EXCLUDES(kCatalogCompletionLock);

  // The host tier handed to systemd's fd store: `snapshots` (with host_copy) and the marker,
  // in one synced batch, so the next start finds either both or neither.
  Status PutHostTierKept(const v1::HostTierKept& kept,
                         const std::vector<v1::SnapshotRecord>& snapshots)
      ADJSNAP_EXCLUDES(kCatalogCompletionLock);
  // The marker left by the last stop, if any; removed from the catalog.
  Result<std::optional<v1::HostTierKept>> TakeHostTierKept()
      ADJSNAP_EXCLUDES(kCatalogCompletionLock);

 private:
  Catalog(std::unique_ptr<rocksdb::DB> db, uint64_t opened_format);
  Result<uint64_t> Increment(const std::string& key);

  // One queued write: its operations, whether it must be fsynced, what it is (for errors) and
  // whom to tell.
  struct Write {
    std::vector<Op> ops;
    bool sync = false;
    std::string what;
    Done done;
  };
  void Enqueue(Write w) ADJSNAP_EXCLUDES(writer_mu_);
  Status Apply(std::vector<Op> ops, bool sync, std::string what) ADJSNAP_EXCLUDES(writer_mu_);
  void WriterLoop() ADJSNAP_EXCLUDES(writer_mu_);

  std::unique_ptr<rocksdb::DB> db_;
  const uint64_t opened_format_;
  Mutex mu_;  // serialises read-modify-write of counters
  Mutex writer_mu_;
  CondVar writer_cv_;
  std::deque<Write> queue_ ADJSNAP_GUARDED_BY(writer_mu_);
  WriterCounts counts_ ADJSNAP_GUARDED_BY(writer_mu_);  // `written`: and answered
  bool writing_ ADJSNAP_GUARDED_BY(writer_mu_) = false;  // a batch, or a waiting form's own write
  bool stopping_ ADJSNAP_GUARDED_BY(writer_mu_) = false;
  std::thread writer_;  // last: started once the queue exists
};

}  // namespace adjsnap
