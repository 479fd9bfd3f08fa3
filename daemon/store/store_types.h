// What the store's callers (the data plane, the control service, dumps) and its components
// (ingest/, tiering/) exchange with it: a push's reservation and a fetch's grant, with their
// callbacks. A header of their own, so a part that only passes them on includes no index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "host_tier/host_tier.h"
#include "adjsnap/status.h"

namespace adjsnap {

// The step's bytes in host memory. `generation` identifies this copy of the step for
// Consumed (a step deleted and pushed again is another generation).
struct FetchGrant {
  // A lease (see StoreState::Lease): a concurrent delete cannot free it under a send.
  std::shared_ptr<HostBlock> block;
  uint64_t generation = 0;
  uint64_t bytes = 0;  // what a fetch carries: ServedBytes (a framed step's frame, else raw)
};
using FetchDone = std::function<void(Result<FetchGrant>)>;
// A push between BeginPush and CommitPush/AbortPush: the step is reserved and `block` holds
// the host memory its bytes go to (also the staging buffer of a step bound for disk). `block`
// is a lease (see StoreState::Lease): the store keeps its own reference in Run::in_flight.
struct PushTicket {
  uint64_t run_id = 0;
  uint64_t step = 0;
  std::shared_ptr<HostBlock> block;
  // What the push carries: the run's bytes_per_step, or fewer for a chunk frame (IsFramed).
  // `block` holds bytes_per_step either way: a frame that fails its check at commit leaves
  // nothing to undo, and a push never needs more room than its raw step.
  uint64_t bytes = 0;
  // The checksum of those bytes when the copy that wrote them computed it (the client's
  // copy on the mapped path, adjsnapd's own of an eager push): recorded with the commit, and
  // the checksum thread does not read the step again. Unset: the checksum thread hashes it.
  std::optional<uint64_t> checksum;
};
using PushDone = std::function<void(Result<PushTicket>)>;
struct DrainResult {
  uint64_t moved = 0;
  uint64_t moved_bytes = 0;
};

}  // namespace adjsnap
