// The checksum owner: the one place where a stored step's bytes are hashed, whether to record
// its checksum or to verify a copy against it. The checksum thread records the checksum of each
// pushed step off the push path; a job that is about to write or compress the raw bytes asks for
// it (ChecksumOf) instead of hashing them itself, so each stored copy of a step is hashed once
// however many jobs need its checksum. Disk reads, decodes and the recovery scrub verify
// through Hash and Verify as well (ingest/packing.h, tiering/snapshot_io.h).
//
// Threading: Hash and Verify are thread-safe and take no lock. The rest runs under the store's
// mutex (store/store_state.h) except ChecksumOf, which may wait for another thread's hash and
// hashes without the mutex held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

#include "store/store_state.h"

namespace snapd {

class Checksums : protected StoreState {
 public:
  // Computes the checksum of a stored step's bytes (raw or compressed), counted and seen by
  // StoreOptions::on_hash. Two checks outside the push path use Checksum() directly: a kept
  // host tier's copies, taken back at start and handed over at stop (store.cc).
  uint64_t Hash(const void* data, uint64_t bytes) const;
  // DATA_LOSS naming `what` ("bytes", "compressed bytes") when Hash(data, bytes) != expected.
  Status Verify(const void* data, uint64_t bytes, uint64_t expected, const char* what) const;
  // Checksums computed since the store opened (tests: a block is hashed once).
  uint64_t hashes() const { return hashes_.load(std::memory_order_relaxed); }

 protected:
  using StoreState::StoreState;

  void StartChecksums();
  // Stops and joins the checksum thread; stopping_ is set already.
  void StopChecksums();
  // Queues the checksum of this just-stored copy of the step (`block` holds its raw bytes).
  void QueueChecksum(uint64_t run_id, const Snapshot& snap, uint64_t bytes) SNAPD_REQUIRES(mu_);
  // The checksum of the raw bytes of this copy of the step, which `block` holds, for a job
  // about to write or compress them (on an I/O thread): the recorded one; or the result of
  // the hash another thread is computing now; or else it is computed here, once (a queued job
  // for it is dropped), and recorded. 0 if the step is gone (nothing needs it).
  uint64_t ChecksumOf(uint64_t run_id, uint64_t step, uint64_t generation, const HostBlock& block,
                      uint64_t bytes) SNAPD_EXCLUDES(mu_);
  // Drops queued checksums of steps that were deleted or whose checksum is recorded, so their
  // blocks go back to the host tier now instead of when the checksum thread gets to them.
  void PruneChecksumQueue() SNAPD_REQUIRES(mu_);
  // Host bytes the checksum thread holds that the store has let go of (freed when it is done).
  uint64_t ChecksumHeldBytes() SNAPD_REQUIRES(mu_);
  // Waits until every queued checksum is recorded (the quiet gate below is lifted meanwhile).
  void WaitChecksumsIdle() SNAPD_EXCLUDES(mu_);
  // A push or fetch began or ended. The checksum thread holds off while a push is in flight
  // and until the data plane has been quiet for kQuiet, so its reads do not compete with a
  // solver's copies for memory bandwidth (on a 2-core node they cost a burst of pushes a
  // fifth of its rate). A job waits at most kMaxDelay, so a node that never pauses still
  // gets its checksums. Nothing needs one sooner: a demotion or compression asks for it
  // (ChecksumOf), a stop waits for all.
  void NoteDataPlaneActivity() SNAPD_REQUIRES(mu_) {
    last_data_activity_ = std::chrono::steady_clock::now();
  }
  static constexpr std::chrono::milliseconds kQuiet{20};
  static constexpr std::chrono::milliseconds kMaxDelay{10000};

 private:
  struct ChecksumJob {
    uint64_t run_id;
    uint64_t step;
    uint64_t generation;
    uint64_t bytes;
    std::shared_ptr<HostBlock> block;
    std::chrono::steady_clock::time_point queued;
  };
  using CopyKey = std::tuple<uint64_t, uint64_t, uint64_t>;  // (run_id, step, generation)
  // A hash in progress on some thread; others needing the same copy's checksum wait for it.
  struct Hashing {
    bool done = false;
    uint64_t sum = 0;
  };

  void ChecksumLoop() SNAPD_EXCLUDES(mu_);
  // The job's step was deleted, its checksum is recorded, or another thread is hashing it:
  // nothing to hash.
  bool Moot(const ChecksumJob& job) SNAPD_REQUIRES(mu_);
  // Marks the copy as being hashed by the calling thread.
  std::shared_ptr<Hashing> BeginHash(const CopyKey& key) SNAPD_REQUIRES(mu_);
  // Publishes the result to whoever waits for it and records it, if this copy of the step is
  // still stored and its checksum still unrecorded.
  void FinishHash(const CopyKey& key, Hashing& hashing, uint64_t sum) SNAPD_REQUIRES(mu_);

  std::deque<ChecksumJob> checksum_queue_ SNAPD_GUARDED_BY(mu_);
  bool checksum_busy_ SNAPD_GUARDED_BY(mu_) = false;
  ChecksumJob checksum_current_ SNAPD_GUARDED_BY(mu_);  // while busy; its block is not held
  std::map<CopyKey, std::shared_ptr<Hashing>> hashing_ SNAPD_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_data_activity_ SNAPD_GUARDED_BY(mu_);
  int idle_waiters_ SNAPD_GUARDED_BY(mu_) = 0;  // threads in WaitChecksumsIdle
  CondVar checksum_cv_;  // the queue, the busy flag, hashing_ or idle_waiters_ changed
  mutable std::atomic<uint64_t> hashes_{0};
  std::thread checksum_thread_;
};

}  // namespace snapd
