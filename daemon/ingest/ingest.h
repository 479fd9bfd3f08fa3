// At-ingest compression: a step of a run that compresses at ingest is compressed on an I/O
// thread right after it is stored (its checksum asked of the checksum owner first, while the
// raw bytes are still there), and its raw host block swapped for the smaller copy. A push never
// waits for it: until the copy is swapped in, the step is simply raw.
//
// Threading: everything runs under the store's mutex (store/store_state.h) except the
// compression itself, on an I/O thread.
#pragma once

#include <cstdint>
#include <memory>
#include <set>

#include "ingest/checksums.h"
#include "ingest/packing.h"
#include "store/store_state.h"

namespace snapd {

// A compressed copy made at ingest that could not replace the raw block yet.
struct PendingPack {
  PackedSnapshot packed;
  uint64_t checksum;  // of the raw bytes, taken before compressing
};

class Ingest : protected StoreState {
 protected:
  using StoreState::StoreState;

  // Compresses the committed step on an I/O thread, then swaps its host block for the smaller
  // one (FinishIngestCompression).
  void StartIngestCompression(Run& run, Snapshot& snap) SNAPD_REQUIRES(ix_.mu);
  // Swaps in the compressed copies that had to wait for room or for a holder of the raw bytes.
  void RetryPendingPacks() SNAPD_REQUIRES(ix_.mu);
  // Compressions in flight, or compressed copies waiting to be swapped in: host room is coming.
  int ingests_in_flight() const SNAPD_REQUIRES(ix_.mu) { return ingests_in_flight_; }
  bool packs_pending() const SNAPD_REQUIRES(ix_.mu) { return !pending_packs_.empty(); }
  size_t pending_pack_count() const SNAPD_REQUIRES(ix_.mu) { return pending_packs_.size(); }

 private:
  void FinishIngestCompression(uint64_t run_id, uint64_t step, uint64_t generation,
                               uint64_t checksum, Result<PackedSnapshot> packed)
      SNAPD_EXCLUDES(ix_.mu);
  static bool PackStillApplies(const Snapshot& snap);
  // Swaps the snapshot's raw host block for its compressed copy; false if that must wait (no
  // room beside, and someone still holds the raw block).
  bool ApplyPack(Run& run, Snapshot& snap, const PendingPack& pending) SNAPD_REQUIRES(ix_.mu);

  std::set<Key> pending_packs_ SNAPD_GUARDED_BY(ix_.mu);  // snapshots with a pending_pack
  int ingests_in_flight_ SNAPD_GUARDED_BY(ix_.mu) = 0;
};

}  // namespace snapd
