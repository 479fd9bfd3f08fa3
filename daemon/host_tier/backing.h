// Where the host tier's memory comes from, for HostTier alone (host_tier.cc): a memfd of one
// kind or another, sized to the budget, and what the kernel offers.
#pragma once

#include <cstdint>
#include <string>

#include "adjsnap/status.h"

namespace adjsnap {

// A memfd for an arena: its fd, the bytes it holds, and its pages in words (for the log).
struct Backing {
  int fd = -1;
  uint64_t budget = 0;
  std::string pages;
};

// The kernel's shmem THP policy, the bracketed word of shmem_enabled ("never" if unknown).
std::string ShmemThpPolicy();

// A hugetlb memfd of the budget rounded down to whole huge pages, when the pool has them free;
// else the reason why not.
Result<Backing> HugeTlbBacking(uint64_t budget);

// A file on a tmpfs of the tier's own, mounted `huge=always` in a private mount namespace by
// a short-lived child. tmpfs's `huge=` mount option holds whatever the node's shmem_enabled
// says (that setting governs memfds and is "never" on many distributions), so the tier gets
// 2 MiB pages with neither a hugetlb pool nor root: without CAP_SYS_ADMIN the child mounts it
// in a user namespace of its own. The file has no name and its namespace ends with the child,
// so only the fd reaches it (the daemon's, and the clients' it is passed to).
Result<Backing> HugeTmpfsBacking(uint64_t budget);

// A nameless file on the tmpfs an operator mounted at `dir` (config `host_tmpfs`; the systemd
// unit's TemporaryFileSystem= with huge=always, docs/install.md); INVALID_ARGUMENT naming the
// directory when it is missing, not a tmpfs, or not mounted huge=always.
Result<Backing> TmpfsDirBacking(const std::string& dir, uint64_t budget);

// Sizes `fd` to `bytes` (closing it on error).
Status SizeArena(int fd, uint64_t bytes);

}  // namespace adjsnap
