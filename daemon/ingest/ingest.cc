#include "ingest/ingest.h"

#include <cstring>
#include <utility>

#include "log.h"

namespace adjsnap {

Ingest::Ingest(StoreIndex& ix, Checksums& checksums, Deps deps)
    : ix_(ix), checksums_(checksums), deps_(std::move(deps)) {}

void Ingest::Start(StoreIndex& ix, StoreIndex::Run& run, StoreIndex::Snapshot& snap) {
  ++ix.ingest.in_flight;
  deps_.submit([this, run_id = run.record.run_id(), step = snap.record.step(),
                gen = snap.generation, codec = CodecOf(run.record.spec()),
                field = FieldOf(run.record.spec()), block = snap.block]() mutable {
    // The checksum of the pushed bytes is taken now: the raw bytes are about to go.
    uint64_t sum = checksums_.ChecksumOf(ix_, run_id, step, gen, *block, field.bytes);
    auto packed = deps_.pack(codec, field, block->data());
    block.reset();
    Finish(run_id, step, gen, sum, std::move(packed));
  });
}

void Ingest::Finish(uint64_t run_id, uint64_t step, uint64_t generation, uint64_t checksum,
                    Result<PackedSnapshot> packed) {
  IndexLock lock(ix_);
  --ix_.ingest.in_flight;
  deps_.wake();
  StoreIndex::Snapshot* snap = ix_.FindSnapshot(run_id, step, generation);
  if (!snap || !packed.ok() || !StillApplies(*snap)) return;  // not worth it: stays raw
  auto pending = std::make_shared<PendingPack>(PendingPack{std::move(packed).value(), checksum});
  if (!Apply(ix_, ix_.runs.at(run_id), *snap, pending)) {
    snap->pending_pack = std::move(pending);  // retried by RetryPending
    ix_.ingest.pending_packs.insert({run_id, step});
  }
}

bool Ingest::StillApplies(const StoreIndex::Snapshot& snap) {
  // Gone to disk or being written there (the demotion compresses by itself): too late.
  return !snap.writing && snap.block && snap.record.tier() == v1::TIER_HOST &&
         snap.record.codec() == v1::CODEC_NONE;
}

bool Ingest::Apply(StoreIndex& ix, StoreIndex::Run& run, StoreIndex::Snapshot& snap,
                   std::shared_ptr<PendingPack> pending) {
  const StoreIndex::CopyKey copy{run.record.run_id(), snap.record.step(), snap.generation};
  if (ix.Recording(copy)) return false;  // another change of its record first: later
  const PackedSnapshot& packed = pending->packed;
  // The compressed copy goes into a block of its own, so the whole raw block comes free (room
  // for the next raw push). With no room for it, and nobody reading the raw bytes, it goes over
  // the raw bytes and the tail comes free: a smaller hole, but the next copy fits in it.
  std::shared_ptr<HostBlock> block;
  if (auto beside = deps_.allocate(run, packed.size); beside.ok()) {
    block = std::move(beside).value();
    std::memcpy(block->data(), packed.bytes.get(), packed.size);  // nobody sees it yet
  } else if (snap.block.use_count() != 1) {
    return false;  // a push or fetch still holds the raw bytes and there is no room: later
  }
  v1::SnapshotRecord updated = snap.record;
  updated.set_checksum(pending->checksum);
  updated.set_checksum_state(v1::CHECKSUM_RECORDED);
  updated.set_stored_bytes(packed.size);
  updated.set_codec(packed.codec);
  updated.set_codec_param(run.record.spec().codec_param());
  updated.set_stored_checksum(packed.checksum);
  // Record first, then the index: the block is swapped in the write's completion. A demotion
  // may start meanwhile (it writes the raw bytes, which stay until then).
  ++ix.ingest.in_flight;  // host room is coming (Tiering::Settling)
  ix.RecordThen(deps_.record, copy, updated,
                [this, copy, updated, pending, block](Status s) ADJSNAP_REQUIRES_INDEX(ix_) {
                  Swap(copy, updated, *pending, block, s);
                });
  return true;
}

void Ingest::Swap(const StoreIndex::CopyKey& copy, v1::SnapshotRecord updated,
                  const PendingPack& pending, std::shared_ptr<HostBlock> block, Status recorded) {
  --ix_.ingest.in_flight;
  deps_.wake();
  StoreIndex::Snapshot* snap = ix_.FindSnapshot(copy);
  if (!recorded.ok()) {
    ADJSNAP_LOG_ERROR("recording a compressed step: %s", recorded.ToString().c_str());
    return;  // stays raw
  }
  if (!snap) return;  // deleted: its delete follows this record
  const bool over_raw = !block;
  if (!StillApplies(*snap) || (over_raw && snap->block.use_count() != 1)) {
    // Changed while the record was written (a demotion began, a fetch holds the raw bytes): it
    // stays raw, and the catalog is told so again, after this record.
    if (snap->record.tier() == v1::TIER_LOST) return;
    ix_.RecordThen(deps_.record, copy, snap->record, [](Status s) {
      if (!s.ok()) ADJSNAP_LOG_ERROR("recording a step as raw again: %s", s.ToString().c_str());
    });
    return;
  }
  if (over_raw) {
    block = snap->block;
    std::memcpy(block->data(), pending.packed.bytes.get(), pending.packed.size);
  }
  block->ShrinkTo(pending.packed.size);  // the tail is free; the wake above lets it be used
  StoreIndex::Run& run = ix_.runs.at(std::get<0>(copy));
  run.stored_bytes -= snap->record.stored_bytes() - pending.packed.size;
  run.SetRecord(*snap, std::move(updated));
  snap->block = std::move(block);  // a raw block beside is freed once nobody holds it
}

void Ingest::RetryPending(StoreIndex& ix) {
  auto& pending = ix.ingest.pending_packs;
  for (auto it = pending.begin(); it != pending.end();) {
    auto [run, snap] = ix.FindSnapshot(*it);
    if (snap && !snap->pending_pack) snap = nullptr;
    if (!snap || !StillApplies(*snap) || Apply(ix, *run, *snap, snap->pending_pack)) {
      if (snap) snap->pending_pack.reset();
      it = pending.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace adjsnap
