#include "store/store_index.h"

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

}  // namespace adjsnap
