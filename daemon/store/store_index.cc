#include "store/store_index.h"

#include <future>
#include <iterator>

namespace adjsnap {

StoreIndex::Snapshot* StoreIndex::FindSnapshot(uint64_t run_id, uint64_t step,
                                               uint64_t generation) {
  auto run = runs.find(run_id);
  if (run == runs.end()) return nullptr;
  auto snap = run->second.snapshots.find(step);
  if (snap == run->second.snapshots.end() || snap->second.generation != generation) {
    return nullptr;
  }
  return &snap->second;
}

std::pair<StoreIndex::Run*, StoreIndex::Snapshot*> StoreIndex::FindSnapshot(const Key& key) {
  auto run = runs.find(key.first);
  if (run == runs.end()) return {nullptr, nullptr};
  auto snap = run->second.snapshots.find(key.second);
  if (snap == run->second.snapshots.end()) return {nullptr, nullptr};
  return {&run->second, &snap->second};
}

uint64_t StoreIndex::DiskCursor::Count(const Steps& steps, uint64_t step, uint64_t bound) {
  if (steps_ != &steps || bound != bound_) {
    steps_ = &steps;
    bound_ = bound;
    count_ = 0;
    cursor_ = steps.lower_bound(step);
    for (auto it = cursor_; it != steps.end() && it->first < bound; ++it) count_ += Counted(*it);
    return count_;
  }
  // To the first snapshot at or after `step`, forward or back.
  while (cursor_ != steps.end() && cursor_->first < step) {
    count_ -= Counted(*cursor_);
    ++cursor_;
  }
  while (cursor_ != steps.begin()) {
    auto before = std::prev(cursor_);
    if (before->first < step) break;
    cursor_ = before;
    count_ += Counted(*cursor_);
  }
  return count_;
}

void StoreIndex::DiskCursor::TierChanged(uint64_t step, bool on_disk) {
  if (!AtOrAfterCursor(step) || step >= bound_) return;
  if (on_disk) {
    ++count_;
  } else {
    --count_;
  }
}

void StoreIndex::DiskCursor::Erasing(Steps::const_iterator it) {
  if (!AtOrAfterCursor(it->first)) return;
  count_ -= Counted(*it);
  if (it == cursor_) ++cursor_;
}

void StoreIndex::Run::SetRecord(Snapshot& snap, v1::SnapshotRecord rec) {
  const bool was_on_disk = snap.record.tier() == v1::TIER_DISK;
  snap.record = std::move(rec);
  const bool on_disk = snap.record.tier() == v1::TIER_DISK;
  if (on_disk != was_on_disk) disk_cursor.TierChanged(snap.record.step(), on_disk);
}

void StoreIndex::Run::EraseSnapshot(std::map<uint64_t, Snapshot>::iterator it) {
  disk_cursor.Erasing(it);
  snapshots.erase(it);
}

void StoreIndex::EndRecord(const CopyKey& copy) {
  auto it = records.find(copy);
  if (it == records.end() || --it->second.writes > 0) return;
  std::deque<std::function<void()>> after = std::move(it->second.after);
  records.erase(it);
  while (!after.empty()) {
    if (auto again = records.find(copy); again != records.end()) {
      // The last update began a record: the rest wait for it, ahead of anything queued since.
      again->second.after.insert(again->second.after.begin(),
                                 std::make_move_iterator(after.begin()),
                                 std::make_move_iterator(after.end()));
      return;
    }
    std::function<void()> update = std::move(after.front());
    after.pop_front();
    update();
  }
}

void StoreIndex::AfterRecords(const CopyKey& copy, std::function<void()> update) {
  if (auto it = records.find(copy); it != records.end()) {
    it->second.after.push_back(std::move(update));
    return;
  }
  update();
}

void StoreIndex::RecordThen(const RecordWriter& write, const CopyKey& copy,
                            const v1::SnapshotRecord& rec, std::function<void(Status)> applied) {
  BeginRecord(copy);
  write(rec, [this, copy, applied = std::move(applied)](Status written) {
    IndexLock lock(*this);
    applied(std::move(written));
    EndRecord(copy);
  });
}

void StoreIndex::AwaitRecords(const CopyKey& copy) {
  while (Recording(copy)) {
    auto idle = std::make_shared<std::promise<void>>();
    AfterRecords(copy, [idle] { idle->set_value(); });
    mu.unlock();
    idle->get_future().wait();
    mu.lock();
  }
}

Status StoreIndex::RecordAndWait(const RecordWriter& write, const CopyKey& copy,
                                 const v1::SnapshotRecord& rec) {
  BeginRecord(copy);
  auto written = std::make_shared<std::promise<Status>>();
  std::future<Status> answer = written->get_future();
  write(rec, [written](Status s) { written->set_value(std::move(s)); });
  mu.unlock();
  Status s = answer.get();
  mu.lock();
  return s;
}

}  // namespace adjsnap
