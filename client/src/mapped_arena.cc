// Client::Impl's mapped host tier (see client_impl.h): the arena mapped from adjsnapd's memfd, its
// pages populated once, and the copies into and out of it (host memory by the copy pool, device
// memory by the GPU's copy engine) between a reservation or lease and its end.
#include <sys/mman.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <set>
#include <sstream>
#include <string>

#include "client_impl.h"
#include "device_copy.h"

namespace adjsnap {

namespace {

uint64_t NanosSince(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and the copy faults
#endif

// Maps the tier pages of [p, p + bytes) into this process before a copy touches them. A fresh
// process has none of the host tier in its page tables, so a plain memcpy takes one page
// fault per 4 KiB page (about 262,000 per GiB); one madvise populates them in bulk, faulting
// around 16 pages at a time. A read populate is enough for a write: the tier is a shared
// memfd, whose pages are mapped writable on any fault. Pages already mapped cost a page-table
// walk per page, as dear as a quarter of the copy (PopulateOnce skips them). false if the
// pages were not populated (the copy then faults them in). docs/architecture.md, "First
// touch", has the figures.
bool PopulateTierPages(char* p, uint64_t bytes) {
  static std::atomic<bool> unsupported{false};
  if (bytes == 0 || unsupported.load(std::memory_order_relaxed)) return false;
  constexpr uintptr_t kPage = 4096;
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return true;
  if (errno == EINVAL) unsupported.store(true, std::memory_order_relaxed);
  return false;
}

}  // namespace

namespace detail {

Status MapArena(const std::string& path, uint64_t session_id, uint64_t token, char** base,
                uint64_t* bytes, ucx::ScopedFd* link) {
  if (path.empty()) return Status::Unavailable("adjsnapd offers no arena socket");
  auto connected = ConnectUnix(path);
  if (!connected.ok()) {
    return Status::Unavailable("arena socket " + path + ": " + connected.status().message());
  }
  ucx::ScopedFd sock = std::move(connected).value();
  wire::ArenaRequest req{session_id, token};
  if (send(sock.get(), &req, sizeof req, MSG_NOSIGNAL) != sizeof req) {
    return Status::Unavailable("arena socket " + path + ": send failed");
  }
  wire::ArenaReply reply{};
  int fd = -1;
  ssize_t got = RecvWithFd(sock.get(), &reply, sizeof reply, MSG_WAITALL, &fd);
  ucx::ScopedFd arena_fd(fd);  // closed on return; a mapping of it outlives it
  if (got != sizeof reply) {
    return Status::Unavailable("arena socket " + path + ": short reply");
  }
  if (reply.code != 0) {
    size_t n = std::min<size_t>(reply.message_length, wire::kMaxReplyMessage);
    return Status(static_cast<Code>(reply.code), std::string(reply.message, n));
  }
  if (fd < 0) return Status::Internal("arena socket replied without a file descriptor");
  void* p = mmap(nullptr, reply.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Internal(std::string("mapping the host tier: ") +
                                               std::strerror(errno));
  // Shmem THP in "advise" mode needs the advice on the mapping that touches a page first,
  // which may be this one (host_tier.h, HugePages); elsewhere it changes nothing.
  (void)madvise(p, reply.arena_bytes, MADV_HUGEPAGE);
  *base = static_cast<char*>(p);
  *bytes = reply.arena_bytes;
  if (link) *link = std::move(sock);
  return Status::Ok();
}

}  // namespace detail

void Client::Impl::PopulateOnce(uint64_t offset, uint64_t bytes) {
  constexpr uint64_t kPage = 4096;
  char* base = arena;
  const uint64_t pages = (arena_bytes + kPage - 1) / kPage;
  if (session_id != populated_session) {  // a new mapping: none of its pages is known mapped
    populated_pages.assign((pages + 63) / 64, 0);
    populated_session = session_id;
  }
  auto populated = [&](uint64_t pg) { return (populated_pages[pg / 64] >> (pg % 64)) & 1; };
  const uint64_t last = std::min(pages, (offset + bytes + kPage - 1) / kPage);
  for (uint64_t pg = offset / kPage; pg < last;) {
    if (populated(pg)) {
      ++pg;
      continue;
    }
    uint64_t end = pg + 1;
    while (end < last && !populated(end)) ++end;
    // The kernel's first touch of a page (allocating and zeroing it on a new daemon) scales
    // with threads as a copy does: the copy threads share the range.
    char* run = base + pg * kPage;
    std::atomic<bool> all{true};
    copier->ForStripes((end - pg) * kPage, [&](size_t begin, size_t n) {
      if (!PopulateTierPages(run + begin, n)) all.store(false, std::memory_order_relaxed);
    });
    if (all.load()) {
      for (uint64_t i = pg; i < end; ++i) populated_pages[i / 64] |= uint64_t{1} << (i % 64);
    }
    pg = end;
  }
}

Status Client::Impl::CheckRange(uint64_t offset, size_t bytes) const {
  if (offset > arena_bytes || bytes > arena_bytes - offset) {
    return Status::Internal("adjsnapd named arena offset " + std::to_string(offset) +
                            " outside its " + std::to_string(arena_bytes) + "-byte host tier");
  }
  return Status::Ok();
}

void Client::Impl::EndReservation(wire::AmId op, const Pending& p, uint64_t ns,
                                  std::optional<uint64_t> checksum) {
  wire::PushRequest end{};
  end.run_id = p.run_id;
  end.step = p.step;
  end.bytes = p.bytes;
  end.copy_ns = ns;
  if (checksum && op == wire::kCommit) {
    end.checksum = *checksum;
    end.flags = wire::kPushChecksum;
  }
  SendHeader(op, end, Pending{Kind::kCommit, op == wire::kCommit ? p.state : nullptr});
}

void Client::Impl::ReleaseLease(uint64_t lease, uint64_t ns) {
  wire::LeaseRelease release{};
  release.lease = lease;
  release.copy_ns = ns;
  SendHeader(wire::kReleaseLease, release, Pending{Kind::kFetchMapped, nullptr});
}

void Client::Impl::PostReservationEnd(wire::AmId op, const Pending& p, uint64_t ns) {
  loop->Post([this, op, p, ns] { EndReservation(op, p, ns); });
}

void Client::Impl::PostLeaseRelease(uint64_t lease, uint64_t ns) {
  loop->Post([this, lease, ns] { ReleaseLease(lease, ns); });
}

void Client::Impl::CopyIn(Pending p, uint64_t offset) {
  if (Status s = CheckRange(offset, p.bytes); !s.ok()) {
    p.state->Complete(s);
    return;
  }
  if (p.device) {  // the GPU copies into tier memory once the block's chunks are pinned
    pinning->WhenPinned(offset, p.bytes, [this, p, offset](Status pinned) {
      if (pinned.ok()) {
        EnqueueDeviceCopyIn(p, offset);
        return;
      }
      p.state->Complete(pinned);
      PostReservationEnd(wire::kAbort, p, 0);
    });
    return;
  }
  // Host memory: copied on the loop thread that received the reservation and committed at
  // once, so the push crosses no other thread of this client. Posted to the loop itself: the
  // commit is sent after this UCX callback returns, never from inside it.
  loop->Post([this, p, offset, session = session_id.load()] {
    if (session != session_id) {  // a reconnect replaced the tier this offset was in
      p.state->Complete(Status::Unavailable("the reservation's session was replaced"));
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    PopulateOnce(offset, p.bytes);
    uint64_t sum = copier->CopyWithChecksum(arena + offset, p.buffer, p.bytes);
    uint64_t ns = NanosSince(t0);
    p.state->Release(Status::Ok());
    EndReservation(wire::kCommit, p, ns, sum);
  });
}

void Client::Impl::EnqueueDeviceCopyIn(const Pending& p, uint64_t offset) {
  auto t0 = std::chrono::steady_clock::now();
  auto landed = [this, p, t0](Status) {  // the reservation is committed once the bytes landed
    p.state->Release(Status::Ok());
    PostReservationEnd(wire::kCommit, p, NanosSince(t0));
  };
  Status s = detail::CopyDeviceToHostAsync(arena, static_cast<const char*>(p.buffer),
                                           pinning->Pieces(offset, p.bytes), p.stream, landed);
  if (!s.ok()) {  // not enqueued: the push failed; give the reservation back
    p.state->Complete(s);
    PostReservationEnd(wire::kAbort, p, 0);
  }
}

void Client::Impl::EnqueueDeviceCopyOut(const Pending& p, uint64_t offset, uint64_t lease) {
  auto t0 = std::chrono::steady_clock::now();
  Status s = detail::CopyHostToDeviceAsync(static_cast<char*>(p.buffer), arena,
                                           pinning->Pieces(offset, p.bytes), p.stream,
                                           [this, p, lease, t0](Status) {
                                             PostLeaseRelease(lease, NanosSince(t0));
                                             p.state->Complete(Status::Ok());
                                           });
  if (!s.ok()) {
    PostLeaseRelease(lease, 0);
    p.state->Complete(s);
  }
}

void Client::Impl::CopyOut(Pending p, uint64_t offset, uint64_t lease) {
  if (Status s = CheckRange(offset, p.bytes); !s.ok()) {
    p.state->Complete(s);
    return;
  }
  if (p.device) {
    pinning->WhenPinned(offset, p.bytes, [this, p, offset, lease](Status pinned) {
      if (pinned.ok()) {
        EnqueueDeviceCopyOut(p, offset, lease);
        return;
      }
      PostLeaseRelease(lease, 0);
      p.state->Complete(pinned);
    });
    return;
  }
  loop->Post([this, p, offset, lease, session = session_id.load()] {  // on the loop, as CopyIn
    if (session != session_id) {  // a reconnect replaced the tier this offset was in
      p.state->Complete(Status::Unavailable("the lease's session was replaced"));
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    PopulateOnce(offset, p.bytes);
    copier->Copy(p.buffer, arena + offset, p.bytes);
    ReleaseLease(lease, NanosSince(t0));
    p.state->Complete(Status::Ok());
  });
}

}  // namespace adjsnap
