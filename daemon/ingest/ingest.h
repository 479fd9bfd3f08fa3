// At-ingest compression: a step of a run that compresses at ingest is compressed on an I/O
// thread right after it is stored (its checksum asked of the checksum owner first, while the
// raw bytes are still there), and its raw host block swapped for the smaller copy. A push never
// waits for it: until the copy is swapped in, the step is simply raw.
//
// A component of the store (store/store_state.h), as Checksums is: its state lives in the
// store's index (StoreIndex::ingest, under the index's mutex), and each method that touches it
// takes the index, `ix`, which must be the one it was made with. What it needs of the store
// (host room, the catalog, an I/O thread, the compressor) comes in as Deps, so a test makes it
// with an index, a host tier and a recorder: no Store, no RocksDB (tests/daemon/ingest/ingest_test.cc).
//
// Threading: everything runs under the index's mutex except the compression itself, on the
// thread `Deps::submit` runs it on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "ingest/checksums.h"
#include "ingest/packing.h"
#include "store/store_index.h"

namespace adjsnap {

// A compressed copy made at ingest that could not replace the raw block yet.
struct PendingPack {
  PackedSnapshot packed;
  uint64_t checksum;  // of the raw bytes, taken before compressing
};

class Ingest {
 public:
  struct Deps {
    // Host memory for a compressed copy of `bytes` beside the raw block, in the run's arena
    // (from its top, away from the raw pushes); an error when there is no room.
    std::function<Result<std::shared_ptr<HostBlock>>(const StoreIndex::Run&, uint64_t bytes)>
        allocate;
    // Writes the step's updated record to the catalog, never waiting (StoreIndex::RecordThen).
    Checksums::Record record;
    // Runs `job` on an I/O thread (never on the caller's: it takes the index's mutex).
    std::function<void(std::function<void()> job)> submit;
    // Compresses the raw snapshot at `data` with the run's codec (PackSnapshot).
    std::function<Result<PackedSnapshot>(const compress::CodecSpec&, const compress::FieldSpec&,
                                         const void* data)>
        pack;
    // Host room came free, or work the tiering policy waits for ended.
    std::function<void()> wake;
  };
  Ingest(StoreIndex& ix, Checksums& checksums, Deps deps);
  Ingest(const Ingest&) = delete;
  Ingest& operator=(const Ingest&) = delete;

  // Compresses the committed step (its raw bytes in snap.block) on an I/O thread, then swaps
  // its host block for the smaller one.
  void Start(StoreIndex& ix, StoreIndex::Run& run, StoreIndex::Snapshot& snap)
      ADJSNAP_REQUIRES_INDEX(ix);
  // Swaps in the compressed copies that had to wait for room or for a holder of the raw bytes.
  void RetryPending(StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix);
  // Compressions in flight, and compressed copies waiting to be swapped in: host room is coming.
  static int InFlight(const StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix) {
    return ix.ingest.in_flight;
  }
  static size_t Pending(const StoreIndex& ix) ADJSNAP_REQUIRES_INDEX(ix) {
    return ix.ingest.pending_packs.size();
  }

 private:
  void Finish(uint64_t run_id, uint64_t step, uint64_t generation, uint64_t checksum,
              Result<PackedSnapshot> packed) ADJSNAP_EXCLUDES(ix_.mu);
  static bool StillApplies(const StoreIndex::Snapshot& snap);
  // Records the compressed copy, and swaps it for the snapshot's raw host block once recorded
  // (Swap); false if that must wait (no room beside and someone still holds the raw block, or
  // another write of its record in flight).
  bool Apply(StoreIndex& ix, StoreIndex::Run& run, StoreIndex::Snapshot& snap,
             std::shared_ptr<PendingPack> pending) ADJSNAP_REQUIRES_INDEX(ix);
  // The record's completion: the swap, if the step is still as it was; else the record of the
  // raw step again. `block`: the copy beside; null: over the raw bytes.
  void Swap(const StoreIndex::CopyKey& copy, v1::SnapshotRecord updated, const PendingPack& pending,
            std::shared_ptr<HostBlock> block, Status recorded) ADJSNAP_REQUIRES_INDEX(ix_);

  StoreIndex& ix_;  // the I/O jobs' (Finish)
  Checksums& checksums_;
  const Deps deps_;
};

}  // namespace adjsnap
