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
  MutexLock lock(ix_.mu);
  --ix_.ingest.in_flight;
  deps_.wake();
  StoreIndex::Snapshot* snap = ix_.FindSnapshot(run_id, step, generation);
  if (!snap || !packed.ok() || !StillApplies(*snap)) return;  // not worth it: stays raw
  auto pending = std::make_shared<PendingPack>(PendingPack{std::move(packed).value(), checksum});
  if (!Apply(ix_, ix_.runs.at(run_id), *snap, *pending)) {
    snap->pending_pack = std::move(pending);  // retried by RetryPending
    ix_.ingest.pending_packs.insert({run_id, step});
  }
}

bool Ingest::StillApplies(const StoreIndex::Snapshot& snap) {
  // Gone to disk or being written there (the demotion compresses by itself): too late.
  return !snap.writing && snap.block && snap.record.tier() == v1::TIER_HOST &&
         snap.record.codec() == v1::CODEC_NONE;
}

bool Ingest::Apply(StoreIndex&, StoreIndex::Run& run, StoreIndex::Snapshot& snap,
                   const PendingPack& pending) {
  const PackedSnapshot& packed = pending.packed;
  // The compressed copy goes into a block of its own, so the whole raw block comes free (room
  // for the next raw push). With no room for it, and nobody reading the raw bytes, it goes over
  // the raw bytes and the tail comes free: a smaller hole, but the next copy fits in it.
  std::shared_ptr<HostBlock> block;
  if (auto beside = deps_.allocate(run, packed.size); beside.ok()) {
    block = std::move(beside).value();
  } else if (snap.block.use_count() == 1) {
    block = snap.block;
  } else {
    return false;  // a push or fetch still holds the raw bytes and there is no room: later
  }
  v1::SnapshotRecord updated = snap.record;
  updated.set_checksum(pending.checksum);
  updated.set_checksum_state(v1::CHECKSUM_RECORDED);
  updated.set_stored_bytes(packed.size);
  updated.set_codec(packed.codec);
  updated.set_codec_param(run.record.spec().codec_param());
  updated.set_stored_checksum(packed.checksum);
  if (Status s = deps_.record(updated); !s.ok()) {
    ADJSNAP_LOG_ERROR("recording a compressed step: %s", s.ToString().c_str());
    return true;  // stays raw
  }
  std::memcpy(block->data(), packed.bytes.get(), packed.size);
  block->ShrinkTo(packed.size);  // the tail is free; the caller wakes the tiering thread
  run.stored_bytes -= snap.record.stored_bytes() - packed.size;
  snap.record = std::move(updated);
  snap.block = std::move(block);  // a raw block beside is freed once nobody holds it
  return true;
}

void Ingest::RetryPending(StoreIndex& ix) {
  auto& pending = ix.ingest.pending_packs;
  for (auto it = pending.begin(); it != pending.end();) {
    auto [run, snap] = ix.FindSnapshot(*it);
    if (snap && !snap->pending_pack) snap = nullptr;
    if (!snap || !StillApplies(*snap) || Apply(ix, *run, *snap, *snap->pending_pack)) {
      if (snap) snap->pending_pack.reset();
      it = pending.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace adjsnap
