// The checksum owner: the one place where a stored step's bytes are hashed, whether to record
// its checksum or to verify a copy against it. Its thread records the checksum of each pushed
// step off the push path; a job that is about to write or compress the raw bytes asks for it
// (ChecksumOf) instead of hashing them itself, so each stored copy of a step is hashed once
// however many jobs need its checksum. Disk reads, decodes and the recovery scrub verify
// through Hash and Verify as well (ingest/packing.h, tiering/snapshot_io.h).
//
// A component of the store (store/store_state.h): its state lives in the store's index
// (StoreIndex::checksums, under the index's mutex), and each method that touches it takes the
// index, `ix`, which must be the one it was made with.
//
// Threading: Hash and Verify are thread-safe and take no lock. The methods that take the index
// run under its mutex, except ChecksumOf, which may wait for another thread's hash and hashes
// without the mutex held, and WaitIdle. A checksum is recorded first, then put in the index:
// the thread that computed it (the checksum thread, or ChecksumOf's caller) waits for the
// catalog's write with the mutex released.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "store/store_index.h"

namespace adjsnap {

class Checksums {
 public:
  // Writes a snapshot's updated record to the catalog, never waiting (the store's index
  // applies the change once it is written).
  using Record = StoreIndex::RecordWriter;
  // `on_hash` (tests; may be empty): called on the hashing thread just before each hash, and
  // may block. `wake`: something the tiering policy waits for changed (a checksum recorded).
  Checksums(StoreIndex& ix, Record record,
            std::function<void(const void* data, uint64_t bytes)> on_hash,
            std::function<void()> wake);
  Checksums(const Checksums&) = delete;
  Checksums& operator=(const Checksums&) = delete;
  // Stops the checksum thread if Stop was not called (setting the index's `stopping`).
  ~Checksums();

  // Computes the checksum of a stored step's bytes (raw or compressed), counted and seen by
  // `on_hash`. Two checks outside the push path use Checksum() directly: a kept host tier's
  // copies, taken back at start and handed over at stop (store_open.cc, store_stop.cc).
  uint64_t Hash(const void* data, uint64_t bytes) const;
  // DATA_LOSS naming `what` ("bytes", "compressed bytes") when Hash(data, bytes) != expected.
  Status Verify(const void* data, uint64_t bytes, uint64_t expected, const char* what) const;
  // Checksums computed since it was made (tests: a block is hashed once).
  uint64_t hashes() const { return hashes_.load(std::memory_order_relaxed); }

  void Start();
  // Stops and joins the checksum thread; the index's `stopping` is set already.
  void Stop();
  // Queues the checksum of this just-stored copy of the step (`snap.block` holds its raw bytes).
  void Queue(StoreIndex& ix, uint64_t run_id, const StoreIndex::Snapshot& snap, uint64_t bytes)
      ADJSNAP_REQUIRES_INDEX(ix);
  // The checksum of the raw bytes of this copy of the step, which `block` holds, for a job
  // about to write or compress them (on an I/O thread): the recorded one; or the result of
  // the hash another thread is computing now; or else it is computed here, once (a queued job
  // for it is dropped), and recorded. 0 if the step is gone (nothing needs it).
  uint64_t ChecksumOf(StoreIndex& ix, uint64_t run_id, uint64_t step, uint64_t generation,
                      const HostBlock& block, uint64_t bytes) ADJSNAP_EXCLUDES(ix.mu);
  // Drops queued checksums of steps that were deleted or whose checksum is recorded, so their
  // blocks go back to the host tier now instead of when the checksum thread gets to them.
  void Prune(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // Host bytes the checksum thread holds that the store has let go of (freed when it is done).
  static uint64_t HeldBytes(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // Marks `rec` as carrying checksum `sum` of its stored bytes: recorded, and for a frame (an
  // nvCOMP codec, IsFramed) the stored checksum too, since a frame is hashed as stored.
  static void SetRecorded(v1::SnapshotRecord& rec, uint64_t sum);
  // Waits until every queued checksum is recorded (the quiet gate below is lifted meanwhile).
  void WaitIdle(StoreIndex& ix) ADJSNAP_EXCLUDES(ix.mu);
  // A push or fetch began or ended. The checksum thread holds off while a push is in flight
  // and until the data plane has been quiet for kQuiet, so its reads do not compete with a
  // solver's copies for memory bandwidth (on a 2-core node they cost a burst of pushes a
  // fifth of its rate). A job waits at most kMaxDelay, so a node that never pauses still
  // gets its checksums. Nothing needs one sooner: a demotion or compression asks for it
  // (ChecksumOf), a stop waits for all.
  static void NoteDataPlaneActivity(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix) {
    ix.checksums.last_data_activity = std::chrono::steady_clock::now();
  }
  static constexpr std::chrono::milliseconds kQuiet{20};
  static constexpr std::chrono::milliseconds kMaxDelay{10000};

 private:
  using Job = StoreIndex::ChecksumJob;
  using CopyKey = StoreIndex::CopyKey;
  using Hashing = StoreIndex::Hashing;

  void Loop() ADJSNAP_EXCLUDES(ix_.mu);
  // The job's step was deleted, its checksum is recorded, or another thread is hashing it:
  // nothing to hash.
  static bool Moot(StoreIndex& ix, const Job& job) ADJSNAP_REQUIRES_INDEX(ix);
  // Marks the copy as being hashed by the calling thread.
  static std::shared_ptr<Hashing> BeginHash(StoreIndex& ix, const CopyKey& key)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Publishes the result to whoever waits for it and records it, if this copy of the step is
  // still stored and its checksum still unrecorded; waits for the record with the mutex
  // released (the caller is the checksum thread, or a job that may wait, in ChecksumOf).
  void FinishHash(StoreIndex& ix, const CopyKey& key, Hashing& hashing, uint64_t sum)
      ADJSNAP_REQUIRES_INDEX(ix);

  StoreIndex& ix_;  // the checksum thread's (Loop)
  const Record record_;
  const std::function<void(const void*, uint64_t)> on_hash_;
  const std::function<void()> wake_;
  // The queue, the busy flag, the hashes in progress or the idle waiters changed.
  CondVar cv_;
  mutable std::atomic<uint64_t> hashes_{0};
  std::thread thread_;
};

}  // namespace adjsnap
