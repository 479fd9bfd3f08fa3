#include "ingest/checksums.h"

#include <algorithm>
#include <string>

#include "log.h"
#include "snapd/checksum.h"

namespace snapd {

uint64_t Checksums::Hash(const void* data, uint64_t bytes) const {
  if (options_.on_hash) options_.on_hash(data, bytes);
  hashes_.fetch_add(1, std::memory_order_relaxed);
  return Checksum(data, bytes);
}

Status Checksums::Verify(const void* data, uint64_t bytes, uint64_t expected,
                         const char* what) const {
  if (Hash(data, bytes) == expected) return Status::Ok();
  return Status::DataLoss(std::string("its stored copy does not match the checksum of the ") +
                          what + " recorded when it was stored");
}

void Checksums::StartChecksums() {
  checksum_thread_ = std::thread([this] { ChecksumLoop(); });
}

void Checksums::StopChecksums() {
  checksum_cv_.NotifyAll();
  if (checksum_thread_.joinable()) checksum_thread_.join();
}

void Checksums::QueueChecksum(uint64_t run_id, const Snapshot& snap, uint64_t bytes) {
  checksum_queue_.push_back({run_id, snap.record.step(), snap.generation, bytes, snap.block,
                             std::chrono::steady_clock::now()});
  checksum_cv_.NotifyOne();
}

uint64_t Checksums::ChecksumHeldBytes() {
  if (!checksum_busy_) return 0;
  const ChecksumJob& job = checksum_current_;
  const Snapshot* snap = FindSnapshot(job.run_id, job.step, job.generation);
  return !snap || !snap->block ? job.bytes : 0;  // the checksum holds its only copy
}

bool Checksums::Moot(const ChecksumJob& job) {
  Snapshot* snap = FindSnapshot(job.run_id, job.step, job.generation);
  return !snap || snap->record.checksum_state() == v1::CHECKSUM_RECORDED ||
         hashing_.count({job.run_id, job.step, job.generation});
}

void Checksums::PruneChecksumQueue() {
  size_t dropped = std::erase_if(
      checksum_queue_, [&](const ChecksumJob& job) SNAPD_REQUIRES(mu_) { return Moot(job); });
  if (dropped) checksum_cv_.NotifyAll();  // WaitChecksumsIdle may be waiting on an empty queue
}

std::shared_ptr<Checksums::Hashing> Checksums::BeginHash(const CopyKey& key) {
  auto hashing = std::make_shared<Hashing>();
  hashing_[key] = hashing;
  return hashing;
}

void Checksums::FinishHash(const CopyKey& key, Hashing& hashing, uint64_t sum) {
  hashing.done = true;
  hashing.sum = sum;
  hashing_.erase(key);
  auto [run_id, step, generation] = key;
  Snapshot* snap = FindSnapshot(run_id, step, generation);
  if (snap && snap->record.checksum_state() == v1::CHECKSUM_PENDING &&
      snap->record.tier() != v1::TIER_LOST) {
    v1::SnapshotRecord updated = snap->record;
    updated.set_checksum(sum);
    updated.set_checksum_state(v1::CHECKSUM_RECORDED);
    Status s = catalog_->PutSnapshot(updated);
    if (s.ok()) {
      snap->record = std::move(updated);
    } else {
      SNAPD_LOG_ERROR("recording checksum: %s", s.ToString().c_str());
    }
  }
  checksum_cv_.NotifyAll();
}

uint64_t Checksums::ChecksumOf(uint64_t run_id, uint64_t step, uint64_t generation,
                               const HostBlock& block, uint64_t bytes) {
  const CopyKey key{run_id, step, generation};
  MutexLock lock(mu_);
  Snapshot* snap = FindSnapshot(run_id, step, generation);
  if (!snap) return 0;  // deleted: whoever asked finds it gone too and drops its work
  if (snap->record.checksum_state() == v1::CHECKSUM_RECORDED) return snap->record.checksum();
  if (auto it = hashing_.find(key); it != hashing_.end()) {
    std::shared_ptr<Hashing> hashing = it->second;  // outlives its entry in hashing_
    checksum_cv_.Wait(mu_, [&] { return hashing->done; });
    return hashing->sum;
  }
  // Nobody has it: hash here, and take the queued job (if any) out of the checksum thread's way.
  if (std::erase_if(checksum_queue_, [&](const ChecksumJob& job) {
        return job.run_id == run_id && job.step == step && job.generation == generation;
      })) {
    checksum_cv_.NotifyAll();  // WaitChecksumsIdle may be waiting on an empty queue
  }
  std::shared_ptr<Hashing> hashing = BeginHash(key);
  lock.Unlock();
  uint64_t sum = Hash(block.data(), bytes);
  lock.Lock();
  FinishHash(key, *hashing, sum);
  return sum;
}

void Checksums::WaitChecksumsIdle() {
  MutexLock lock(mu_);
  ++idle_waiters_;
  checksum_cv_.NotifyAll();  // the checksum thread stops holding off
  checksum_cv_.Wait(
      mu_, [&]() SNAPD_REQUIRES(mu_) { return checksum_queue_.empty() && !checksum_busy_; });
  --idle_waiters_;
}

void Checksums::ChecksumLoop() {
  MutexLock lock(mu_);
  for (;;) {
    checksum_cv_.Wait(mu_,
                      [&]() SNAPD_REQUIRES(mu_) { return stopping_ || !checksum_queue_.empty(); });
    if (stopping_) return;
    if (idle_waiters_ == 0) {  // hold off while the data plane is busy (checksums.h)
      auto now = std::chrono::steady_clock::now();
      bool pushing = std::any_of(runs_.begin(), runs_.end(),
                                 [](const auto& r) { return !r.second.in_flight.empty(); });
      auto start = std::min(pushing ? now + kQuiet : last_data_activity_ + kQuiet,
                            checksum_queue_.front().queued + kMaxDelay);
      if (now < start) {
        checksum_cv_.WaitUntil(mu_, start, [&]() SNAPD_REQUIRES(mu_) {
          return stopping_ || idle_waiters_ > 0 || checksum_queue_.empty();
        });
        continue;  // look again: more activity may have come meanwhile
      }
    }
    ChecksumJob job = std::move(checksum_queue_.front());
    checksum_queue_.pop_front();
    if (Moot(job)) {
      job.block.reset();
      checksum_cv_.NotifyAll();
      continue;
    }
    const CopyKey key{job.run_id, job.step, job.generation};
    checksum_busy_ = true;
    checksum_current_ = {job.run_id, job.step, job.generation, job.bytes, nullptr, {}};
    std::shared_ptr<Hashing> hashing = BeginHash(key);
    lock.Unlock();
    uint64_t sum = Hash(job.block->data(), job.bytes);
    job.block.reset();
    lock.Lock();
    checksum_busy_ = false;
    FinishHash(key, *hashing, sum);
    Wake();  // tiering holds back while checksums are pending (see Tiering::FreeHostRoom)
  }
}

}  // namespace snapd
