// The placement policy: which tier each snapshot belongs in, and how far ahead the backward
// pass is prefetched. Pure functions; the tiering owner applies them (tiering/tiering.h).
//
// Reverse-order rule: the backward pass reads step N-1 first, so the newest steps stay in host
// memory and the oldest go to disk. With N declared, steps [0, j) go to disk and [j, N) stay in
// host memory, j as small as the host room allows (HostBoundary). With N unknown, a push lands
// in host memory and, when the host tier runs low, the oldest host-only step is demoted; both
// end with the same layout.
#pragma once

#include <cstdint>
#include <string>

#include "adjsnap/layers.h"
#include "adjsnap/v1/control.pb.h"

namespace adjsnap {

// Host blocks kept free for traffic in flight (a push being copied while the previous one is
// written out, a read ahead of the backward pass) when sizing the host-resident range.
constexpr uint64_t kStagingBlocks = 2;

// Read-ahead reads of one run in flight at once on the shared spools (Tiering::SchedulePrefetch).
constexpr int kSharedReads = 2;

bool UsesHost(v1::Layers layers);
bool UsesDisk(v1::Layers layers);
bool UsesDevice(v1::Layers layers);

// j for a run of `steps` steps of `block_bytes` (host-tier bytes per step) when `host_room`
// bytes of host memory are free: the first step kept in host memory. Steps below j go to disk.
uint64_t HostBoundary(v1::Layers layers, uint64_t steps, uint64_t block_bytes,
                      uint64_t host_room);

// How many steps below the one just fetched to read ahead: enough that a read started now
// completes before the backward pass reaches it, given the pace between fetches and the time
// one disk read takes (both measured), plus `margin` steps; at least 2, at most `max_depth`.
// With no read measured yet, `max_depth`.
uint64_t PrefetchDepth(double pace_ns, double read_ns, uint64_t max_depth, uint64_t margin = 1);

}  // namespace adjsnap
