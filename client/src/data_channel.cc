// Client::Impl's data channel: UCX to snapd, and the mapped host tier (see client_impl.h).
#include <sys/mman.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "client_impl.h"
#include "device_copy.h"

namespace snapd {

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
// walk. docs/architecture.md, "First touch", has the figures.
void PopulateTierPages(char* p, uint64_t bytes) {
  static std::atomic<bool> unsupported{false};
  if (bytes == 0 || unsupported.load(std::memory_order_relaxed)) return;
  constexpr uintptr_t kPage = 4096;
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) != 0 &&
      errno == EINVAL) {
    unsupported.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

namespace detail {

Status MapArena(const std::string& path, uint64_t session_id, uint64_t token, char** base,
                uint64_t* bytes) {
  if (path.empty()) return Status::Unavailable("snapd offers no arena socket");
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
  iovec iov{&reply, sizeof reply};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock.get(), &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC) != sizeof reply) {
    return Status::Unavailable("arena socket " + path + ": short reply");
  }
  if (reply.code != 0) {
    size_t n = std::min<size_t>(reply.message_length, wire::kMaxReplyMessage);
    return Status(static_cast<Code>(reply.code), std::string(reply.message, n));
  }
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) {
    return Status::Internal("arena socket replied without a file descriptor");
  }
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  ucx::ScopedFd arena_fd(fd);
  void* p = mmap(nullptr, reply.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::Internal(std::string("mapping the host tier: ") +
                                               std::strerror(errno));
  // Shmem THP in "advise" mode needs the advice on the mapping that touches a page first,
  // which may be this one (host_tier.h, HugePages); elsewhere it changes nothing.
  (void)madvise(p, reply.arena_bytes, MADV_HUGEPAGE);
  *base = static_cast<char*>(p);
  *bytes = reply.arena_bytes;
  return Status::Ok();
}

}  // namespace detail

Status Client::Impl::CheckRange(uint64_t offset, size_t bytes) const {
  if (offset > arena_bytes || bytes > arena_bytes - offset) {
    return Status::Internal("snapd named arena offset " + std::to_string(offset) +
                            " outside its " + std::to_string(arena_bytes) + "-byte host tier");
  }
  return Status::Ok();
}

void Client::Impl::EndReservation(wire::AmId op, const Pending& p, uint64_t ns) {
  wire::PushRequest end{};
  end.run_id = p.run_id;
  end.step = p.step;
  end.bytes = p.bytes;
  end.copy_ns = ns;
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
  loop->Post([this, p, offset] {
    auto t0 = std::chrono::steady_clock::now();
    PopulateTierPages(arena + offset, p.bytes);
    std::memcpy(arena + offset, p.buffer, p.bytes);
    uint64_t ns = NanosSince(t0);
    p.state->Release(Status::Ok());
    EndReservation(wire::kCommit, p, ns);
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
  loop->Post([this, p, offset, lease] {  // on the loop thread, as CopyIn
    auto t0 = std::chrono::steady_clock::now();
    PopulateTierPages(arena + offset, p.bytes);
    std::memcpy(p.buffer, arena + offset, p.bytes);
    ReleaseLease(lease, NanosSince(t0));
    p.state->Complete(Status::Ok());
  });
}

void Client::Impl::FailAll(const Status& s) {
  auto failed = std::move(pending);
  pending.clear();
  for (auto& [id, p] : failed) p.state->Complete(s);
}

void Client::Impl::OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<Impl*>(arg);
  self->ep_error = ucx::FromUcs(status, "data-plane connection to snapd lost");
  self->FailAll(self->ep_error);
}

ucs_status_t Client::Impl::OnReply(void* arg, const void* header, size_t header_length,
                                   void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  if (header_length != sizeof(wire::Reply)) return UCS_OK;  // not a reply we understand
  wire::Reply reply;
  std::memcpy(&reply, header, sizeof reply);
  auto it = self->pending.find(reply.header.request_id);
  if (it == self->pending.end()) return UCS_OK;
  Pending p = std::move(it->second);
  self->pending.erase(it);
  size_t n = std::min<size_t>(reply.message_length, wire::kMaxReplyMessage);
  Status status(static_cast<Code>(reply.code), std::string(reply.message, n));
  if (status.ok() && p.kind == Kind::kReserve) {
    self->CopyIn(std::move(p), reply.offset);
    return UCS_OK;
  }
  if (status.ok() && p.kind == Kind::kFetchMapped) {
    self->CopyOut(std::move(p), reply.offset, reply.header.request_id);
    return UCS_OK;
  }
  if (p.kind != Kind::kFetch || !status.ok()) {
    p.state->Complete(status);
    return UCS_OK;
  }
  if (length != p.bytes) {
    p.state->Complete(Status::Internal("snapd sent " + std::to_string(length) +
                                       " bytes for a fetch of " + std::to_string(p.bytes)));
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {  // eager: data are here already
    std::memcpy(p.buffer, data, length);
    p.state->Complete(Status::Ok());
    return UCS_OK;
  }
  auto state = p.state;
  ucp_request_param_t rp = ucx::RecvDataParam([state](ucs_status_t s, size_t) {
    state->Complete(ucx::FromUcs(s, "receiving the snapshot"));
  });
  ucx::Track(ucp_am_recv_data_nbx(self->loop->worker(), data, p.buffer, length, &rp), rp);
  return UCS_OK;
}

Status Client::Impl::CreateEndpoint() {
  SNAPD_ASSIGN_OR_RETURN(ep, ucx::ConnectToWorker(loop->worker(), data_plane_address,
                                            &Impl::OnEndpointError, this));
  return Status::Ok();
}

void Client::Impl::Send(std::shared_ptr<const void> header, size_t header_bytes,
                        uint64_t request_id, wire::AmId op, Pending entry, const void* data,
                        size_t data_bytes) {
  auto state = entry.state;
  if (!ep_error.ok() || ep == nullptr) {
    if (state) state->Complete(ep_error.ok() ? Status::Unavailable("not connected to snapd")
                                             : ep_error);
    return;
  }
  if (state) pending.emplace(request_id, std::move(entry));
  bool is_push = op == wire::kPush;
  ucp_request_param_t p = ucx::SendParam([state, header, is_push](ucs_status_t s, size_t) {
    if (!state) return;
    // A rejected push completes its send with OK; its Reply carries the reason.
    if (is_push) state->Release(ucx::FromUcs(s, "sending the snapshot"));
    if (s != UCS_OK) state->Complete(ucx::FromUcs(s, "sending to snapd"));
  });
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  // The header must stay valid until the send completes; the callback holds it.
  ucx::Track(ucp_am_send_nbx(ep, op, header.get(), header_bytes, data, data_bytes, &p), p);
}

void Client::Impl::TrackPush(uint64_t run_id, uint64_t step,
                             const std::shared_ptr<detail::OpState>& state) {
  {
    MutexLock lock(unstored_mu);
    unstored[{run_id, step}] = state;
  }
  std::weak_ptr<detail::OpState> weak = state;
  state->WhenCompleted([this, run_id, step, weak] {
    MutexLock lock(unstored_mu);
    auto it = unstored.find({run_id, step});
    if (it != unstored.end() && it->second == weak.lock()) unstored.erase(it);
  });
}

std::shared_ptr<detail::OpState> Client::Impl::UnstoredPush(uint64_t run_id, uint64_t step) {
  MutexLock lock(unstored_mu);
  auto it = unstored.find({run_id, step});
  return it == unstored.end() ? nullptr : it->second;
}

PushHandle Client::Impl::StartPush(uint64_t run_id, uint64_t step, const void* data,
                                   size_t bytes, bool device, void* stream) {
  auto state = std::make_shared<detail::OpState>();
  TrackPush(run_id, step, state);
  if (arena) {
    Pending entry{Kind::kReserve, state, const_cast<void*>(data), bytes, run_id, step, stream,
                  device};
    loop->Post([this, entry, run_id, step, bytes] {
      wire::PushRequest reserve{};
      reserve.run_id = run_id;
      reserve.step = step;
      reserve.bytes = bytes;
      SendHeader(wire::kReserve, reserve, entry);
    });
    return PushHandle(state);
  }
  uint64_t id = next_request++;
  auto header = std::make_shared<wire::PushRequest>(wire::PushRequest{
      wire::MakeHeader(wire::kPush, token, id), run_id, step, bytes, /*copy_ns=*/0});
  loop->Post([this, header, id, state, data, bytes] {
    Send(header, sizeof *header, id, wire::kPush, Pending{Kind::kPush, state}, data, bytes);
  });
  return PushHandle(state);
}

FetchHandle Client::Impl::StartFetch(uint64_t run_id, uint64_t step, void* data, size_t bytes,
                                     bool device, void* stream) {
  auto state = std::make_shared<detail::OpState>();
  bool mapped = arena != nullptr;
  auto send = [this, mapped, state, run_id, step, data, bytes, device, stream] {
    loop->Post([this, mapped, state, run_id, step, data, bytes, device, stream] {
      wire::FetchRequest fetch{};
      fetch.run_id = run_id;
      fetch.step = step;
      fetch.bytes = bytes;
      if (mapped) {
        SendHeader(wire::kFetchMapped, fetch,
                   Pending{Kind::kFetchMapped, state, data, bytes, 0, 0, stream, device});
      } else {
        SendHeader(wire::kFetch, fetch, Pending{Kind::kFetch, state, data, bytes});
      }
    });
  };
  if (auto push = UnstoredPush(run_id, step)) {
    push->WhenCompleted(std::move(send));  // read what this client wrote, once it is stored
  } else {
    send();
  }
  return FetchHandle(state);
}

}  // namespace snapd
