#include "tiering/placement.h"

#include <algorithm>
#include <cmath>

namespace adjsnap {
bool UsesHost(v1::Layers layers) {
  const LayersEntry* e = FindLayers(layers);
  return e && e->host;
}

bool UsesDisk(v1::Layers layers) {
  const LayersEntry* e = FindLayers(layers);
  return e && e->disk;
}

bool UsesDevice(v1::Layers layers) {
  const LayersEntry* e = FindLayers(layers);
  return e && e->device;
}

uint64_t HostBoundary(v1::Layers layers, uint64_t steps, uint64_t block_bytes,
                      uint64_t host_room) {
  if (steps == 0 || !UsesDisk(layers)) return 0;
  if (!UsesHost(layers)) return steps;  // Disk: every step goes to disk
  uint64_t room = host_room > kStagingBlocks * block_bytes
                      ? host_room - kStagingBlocks * block_bytes
                      : 0;
  uint64_t resident = std::min(steps, room / block_bytes);
  return steps - resident;
}

uint64_t PrefetchDepth(double pace_ns, double read_ns, uint64_t max_depth, uint64_t margin) {
  // No read measured yet (the first backward pass): as far ahead as allowed; what room there is
  // bounds it (read-ahead only takes host room nobody waits for).
  uint64_t depth = max_depth;
  if (pace_ns > 0 && read_ns > 0) {
    depth = static_cast<uint64_t>(std::ceil(read_ns / pace_ns)) + margin;
  } else if (read_ns > 0) {
    depth = 2;  // a read measured, the pace not yet (the pass's first fetch)
  }
  return std::clamp<uint64_t>(depth, 2, std::max<uint64_t>(max_depth, 2));
}

}  // namespace adjsnap
