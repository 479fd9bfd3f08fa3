#include "ingest/checksums.h"

#include <algorithm>
#include <string>
#include <utility>

#include "log.h"
#include "adjsnap/checksum.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/zfp_codec.h"

namespace adjsnap {

Checksums::Checksums(StoreIndex& ix, Record record,
                     std::function<void(const void*, uint64_t)> on_hash,
                     std::function<void()> wake)
    : ix_(ix), record_(std::move(record)), on_hash_(std::move(on_hash)), wake_(std::move(wake)) {}

Checksums::~Checksums() {
  if (!thread_.joinable()) return;
  {
    IndexLock lock(ix_);
    ix_.stopping = true;
  }
  Stop();
}

uint64_t Checksums::Hash(const void* data, uint64_t bytes) const {
  if (on_hash_) on_hash_(data, bytes);
  hashes_.fetch_add(1, std::memory_order_relaxed);
  return Checksum(data, bytes);
}

Status Checksums::Verify(const void* data, uint64_t bytes, uint64_t expected,
                         const char* what) const {
  if (Hash(data, bytes) == expected) return Status::Ok();
  return Status::DataLoss(std::string("its stored copy does not match the checksum of the ") +
                          what + " recorded when it was stored");
}

void Checksums::Start() {
  thread_ = NamedThread("adjsnap-cksum", [this] { Loop(); });
}

void Checksums::Stop() {
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Checksums::Queue(StoreIndex& ix, uint64_t run_id, const StoreIndex::Snapshot& snap,
                      uint64_t bytes) {
  ix.checksums.jobs.push_back({run_id, snap.record.step(), snap.generation, bytes, snap.block,
                               std::chrono::steady_clock::now()});
  cv_.NotifyOne();
}

uint64_t Checksums::HeldBytes(StoreIndex& ix) {
  if (!ix.checksums.busy) return 0;
  const Job& job = ix.checksums.current;
  const StoreIndex::Snapshot* snap = ix.FindSnapshot(job.run_id, job.step, job.generation);
  return !snap || !snap->block ? job.bytes : 0;  // the checksum holds its only copy
}

void Checksums::SetRecorded(v1::SnapshotRecord& rec, uint64_t sum) {
  rec.set_checksum(sum);
  rec.set_checksum_state(v1::CHECKSUM_RECORDED);
  if (compress::IsGpuCodec(rec.codec())) rec.set_stored_checksum(sum);  // the two are one
}

bool Checksums::Moot(StoreIndex& ix, const Job& job) {
  StoreIndex::Snapshot* snap = ix.FindSnapshot(job.run_id, job.step, job.generation);
  return !snap || snap->record.checksum_state() == v1::CHECKSUM_RECORDED ||
         ix.checksums.hashing.count({job.run_id, job.step, job.generation});
}

void Checksums::Prune(StoreIndex& ix) {
  size_t dropped = std::erase_if(
      ix.checksums.jobs, [&](const Job& job) ADJSNAP_REQUIRES_INDEX(ix) { return Moot(ix, job); });
  if (dropped) cv_.NotifyAll();  // WaitIdle may be waiting on an empty queue
}

std::shared_ptr<Checksums::Hashing> Checksums::BeginHash(StoreIndex& ix, const CopyKey& key) {
  auto hashing = std::make_shared<Hashing>();
  ix.checksums.hashing[key] = hashing;
  return hashing;
}

void Checksums::FinishHash(StoreIndex& ix, const CopyKey& key, Hashing& hashing, uint64_t sum) {
  hashing.done = true;
  hashing.sum = sum;
  cv_.NotifyAll();  // whoever waits for the sum has it now, before it is recorded
  // Record first, then the index. The copy stays in `hashing` (done) until then: a job that
  // asks for its checksum meanwhile gets this sum, and none hashes it again.
  ix.AwaitRecords(key);  // a demotion's record, say: this one builds on it
  auto [run_id, step, generation] = key;
  StoreIndex::Snapshot* snap = ix.FindSnapshot(run_id, step, generation);
  if (snap && snap->record.checksum_state() == v1::CHECKSUM_PENDING &&
      snap->record.tier() != v1::TIER_LOST) {
    v1::SnapshotRecord updated = snap->record;
    SetRecorded(updated, sum);
    Status s = ix.RecordAndWait(record_, key, updated);
    snap = ix.FindSnapshot(run_id, step, generation);  // deleted or lost meanwhile: so it stays
    if (!s.ok()) {
      ADJSNAP_LOG_ERROR("recording checksum: %s", s.ToString().c_str());
    } else if (snap && snap->record.tier() != v1::TIER_LOST) {
      ix.runs.at(run_id).SetRecord(*snap, std::move(updated));
    }
    ix.EndRecord(key);
  }
  ix.checksums.hashing.erase(key);
  cv_.NotifyAll();
}

uint64_t Checksums::ChecksumOf(StoreIndex& ix, uint64_t run_id, uint64_t step,
                               uint64_t generation, const HostBlock& block, uint64_t bytes) {
  const CopyKey key{run_id, step, generation};
  IndexLock lock(ix);
  StoreIndex::Snapshot* snap = ix.FindSnapshot(run_id, step, generation);
  if (!snap) return 0;  // deleted: whoever asked finds it gone too and drops its work
  if (snap->record.checksum_state() == v1::CHECKSUM_RECORDED) return snap->record.checksum();
  if (auto it = ix.checksums.hashing.find(key); it != ix.checksums.hashing.end()) {
    std::shared_ptr<Hashing> hashing = it->second;  // outlives its entry in `hashing`
    cv_.Wait(ix.mu, [&] { return hashing->done; });
    return hashing->sum;
  }
  // Nobody has it: hash here, and take the queued job (if any) out of the checksum thread's way.
  if (std::erase_if(ix.checksums.jobs, [&](const Job& job) {
        return job.run_id == run_id && job.step == step && job.generation == generation;
      })) {
    cv_.NotifyAll();  // WaitIdle may be waiting on an empty queue
  }
  std::shared_ptr<Hashing> hashing = BeginHash(ix, key);
  lock.Unlock();
  uint64_t sum = Hash(block.data(), bytes);
  lock.Lock();
  FinishHash(ix, key, *hashing, sum);
  return sum;
}

void Checksums::WaitIdle(StoreIndex& ix) {
  IndexLock lock(ix);
  ++ix.checksums.idle_waiters;
  cv_.NotifyAll();  // the checksum thread stops holding off
  cv_.Wait(ix.mu, [&]() ADJSNAP_REQUIRES_INDEX(ix) {
    return ix.checksums.jobs.empty() && !ix.checksums.busy;
  });
  --ix.checksums.idle_waiters;
}

void Checksums::Loop() {
  IndexLock lock(ix_);
  for (;;) {
    cv_.Wait(ix_.mu, [&]() ADJSNAP_REQUIRES_INDEX(ix_) {
      return ix_.stopping || !ix_.checksums.jobs.empty();
    });
    if (ix_.stopping) return;
    if (ix_.checksums.idle_waiters == 0) {  // hold off while the data plane is busy (checksums.h)
      auto now = std::chrono::steady_clock::now();
      bool pushing = std::any_of(ix_.runs.begin(), ix_.runs.end(),
                                 [](const auto& r) { return !r.second.in_flight.empty(); });
      auto start = std::min(pushing ? now + kQuiet : ix_.checksums.last_data_activity + kQuiet,
                            ix_.checksums.jobs.front().queued + kMaxDelay);
      if (now < start) {
        cv_.WaitUntil(ix_.mu, start, [&]() ADJSNAP_REQUIRES_INDEX(ix_) {
          return ix_.stopping || ix_.checksums.idle_waiters > 0 || ix_.checksums.jobs.empty();
        });
        continue;  // look again: more activity may have come meanwhile
      }
    }
    Job job = std::move(ix_.checksums.jobs.front());
    ix_.checksums.jobs.pop_front();
    if (Moot(ix_, job)) {
      job.block.reset();
      cv_.NotifyAll();
      continue;
    }
    const CopyKey key{job.run_id, job.step, job.generation};
    ix_.checksums.busy = true;
    ix_.checksums.current = {job.run_id, job.step, job.generation, job.bytes, nullptr, {}};
    std::shared_ptr<Hashing> hashing = BeginHash(ix_, key);
    lock.Unlock();
    uint64_t sum = Hash(job.block->data(), job.bytes);
    job.block.reset();
    lock.Lock();
    FinishHash(ix_, key, *hashing, sum);
    ix_.checksums.busy = false;  // after the record: WaitIdle waits for it too
    wake_();  // tiering holds back while checksums are pending (see Tiering::FreeHostRoom)
  }
}

}  // namespace adjsnap
