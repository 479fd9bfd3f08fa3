// The disk tier's transfer accounting: busy time and bytes per direction and spool class (the
// rates of Stats), and each step file's time (the fits plan prices steps with).
#include <chrono>

#include "disk_tier/disk_tier.h"

namespace adjsnap {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DiskIoCounters DiskTier::writes() const {
  MutexLock lock(mu_);
  return writes_.counters;
}

DiskIoCounters DiskTier::reads() const {
  MutexLock lock(mu_);
  return reads_.counters;
}

uint64_t DiskTier::budget(SpoolClass c) const {
  uint64_t budget = 0;
  for (const auto& s : spools_) budget += s->spool_class == c ? s->budget : 0;
  return budget;
}

uint64_t DiskTier::used(SpoolClass c) const {
  MutexLock lock(mu_);
  uint64_t used = 0;
  for (const auto& s : spools_) used += s->spool_class == c ? s->used : 0;
  return used;
}

DiskIoCounters DiskTier::writes(SpoolClass c) const {
  MutexLock lock(mu_);
  return class_writes_[static_cast<int>(c)].counters;
}

DiskIoCounters DiskTier::reads(SpoolClass c) const {
  MutexLock lock(mu_);
  return class_reads_[static_cast<int>(c)].counters;
}

int64_t DiskTier::BeginIo(bool write, SpoolClass c) {
  MutexLock lock(mu_);
  for (Busy* b : {write ? &writes_ : &reads_, write ? &class_writes_[static_cast<int>(c)]
                                                    : &class_reads_[static_cast<int>(c)]}) {
    if (b->in_flight++ == 0) b->since_ns = NowNs();
  }
  return NowNs();
}

void DiskTier::EndIo(bool write, SpoolClass c, uint64_t bytes, int64_t began_ns) {
  if (bytes > 0 && began_ns >= 0) {
    (write ? class_write_samples_ : class_read_samples_)[static_cast<int>(c)].Add(
        bytes, static_cast<double>(NowNs() - began_ns) * 1e-9);
  }
  MutexLock lock(mu_);
  for (Busy* b : {write ? &writes_ : &reads_, write ? &class_writes_[static_cast<int>(c)]
                                                    : &class_reads_[static_cast<int>(c)]}) {
    b->counters.bytes += bytes;
    ++b->counters.ops;
    if (--b->in_flight == 0) {
      b->counters.busy_ns += static_cast<uint64_t>(NowNs() - b->since_ns);
    }
  }
}

}  // namespace adjsnap
