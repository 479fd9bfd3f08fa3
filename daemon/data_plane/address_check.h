// Vetting of UCX worker addresses that clients send in OpenSession.
//
// UCX unpacks a worker address without bounds checks: a crafted or corrupted address can
// crash the process that unpacks it (UCX 1.13 asserts or segfaults on many one-byte
// mutations). adjsnapd therefore unpacks every client address first in a throwaway process (this
// binary, re-executed with kCheckUcxAddressFlag), which creates an endpoint to it with the
// daemon's UCX configuration (less UCX's memory hooks, which it does not need: address_check.cc);
// only an address that survives is unpacked by the daemon.
#pragma once

#include <chrono>
#include <string>

#include "adjsnap/status.h"

namespace adjsnap {

inline constexpr const char* kCheckUcxAddressFlag = "--check-ucx-address";
inline constexpr size_t kMaxUcxAddressBytes = 64 * 1024;

// OK when a child process could create (and close) a UCX endpoint to `address`;
// INVALID_ARGUMENT naming why not (UCX refused it, the child crashed, or timed out).
// Blocks for the child's life (typically tens of milliseconds): never call it on a reactor or
// the data plane's loop thread. Thread-safe.
Status CheckUcxAddress(const std::string& address, std::chrono::milliseconds timeout);

// The child's side: reads the address from stdin, exits 0 when an endpoint to it could be
// created, 1 when UCX refused it. Called from main() when argv[1] is kCheckUcxAddressFlag.
[[noreturn]] void RunUcxAddressCheck();

}  // namespace adjsnap
