// Client::Impl's data channel: UCX to snapd, and the mapped host tier (see client_impl.h).
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
  loop->Post([this, p, offset, session = session_id.load()] {
    if (session != session_id) {  // a reconnect replaced the tier this offset was in
      p.state->Complete(Status::Unavailable("the reservation's session was replaced"));
      return;
    }
    auto t0 = std::chrono::steady_clock::now();
    PopulateOnce(offset, p.bytes);
    copier->Copy(arena + offset, p.buffer, p.bytes);
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

// ucp_ep_print_info names each lane's transport and device as "tl/dev" after "lane[N]:"
// (e.g. "lane[0]:  1:posix/memory.0 md[1] ..."): the distinct ones, in lane order.
std::string Client::Impl::EndpointTransports() {
  std::promise<std::string> text;
  std::future<std::string> got = text.get_future();
  loop->Post([this, &text] {
    std::string out;
    if (ep != nullptr) {
      char* buf = nullptr;
      size_t len = 0;
      if (FILE* mem = open_memstream(&buf, &len)) {
        ucp_ep_print_info(ep, mem);
        std::fclose(mem);
        out.assign(buf, len);
        std::free(buf);
      }
    }
    text.set_value(std::move(out));
  });
  std::istringstream lines(got.get());
  std::vector<std::string> seen;
  for (std::string line; std::getline(lines, line);) {
    size_t lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    std::istringstream words(line.substr(line.find(':', lane) + 1));
    std::string word;
    words >> word;  // "1:posix/memory.0": resource index, transport/device, path index
    size_t colon = word.find(':');
    if (colon != std::string::npos) word = word.substr(colon + 1);
    size_t dot = word.rfind('.');
    if (dot != std::string::npos && word.find('/') != std::string::npos && dot > word.find('/')) {
      word = word.substr(0, dot);
    }
    if (word.find('/') == std::string::npos) continue;
    if (std::find(seen.begin(), seen.end(), word) == seen.end()) seen.push_back(word);
  }
  std::string joined;
  for (const auto& w : seen) joined += (joined.empty() ? "" : ", ") + w;
  return joined;
}

void Client::Impl::FailAll(const Status& s) {
  auto failed = std::move(pending);
  pending.clear();
  for (auto& [id, p] : failed) p.state->Complete(s);
}

void Client::Impl::OnEndpointError(void* arg, ucp_ep_h failed, ucs_status_t status) {
  auto* self = static_cast<Impl*>(arg);
  if (failed != self->ep) return;  // an endpoint a reconnect replaced already
  // UNAVAILABLE: snapd went away (a restart); pushes and fetches wait for a reconnect.
  self->link_lost = true;
  self->ep_error = Status::Unavailable(
      "data-plane connection to snapd at " + self->socket_path + " lost: " +
      ucx::FromUcs(status, "endpoint").message());
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
  auto outer = std::make_shared<detail::OpState>();
  Describe(*outer, "push", run_id, step);
  TrackPush(run_id, step, outer);
  PushAttempt(outer, run_id, step, data, bytes, device, stream);
  return PushHandle(outer);
}

void Client::Impl::PushAttempt(std::shared_ptr<detail::OpState> outer, uint64_t run_id,
                               uint64_t step, const void* data, size_t bytes, bool device,
                               void* stream) {
  const uint64_t generation = Generation();
  auto state = std::make_shared<detail::OpState>();
  // Released: the caller's buffer is free, whatever happens next. A failure before that is
  // not passed on: the push may be sent again.
  state->WhenReleased([outer, state] {
    if (Status s = state->WaitReleased(); s.ok()) outer->Release(s);
  });
  state->WhenCompleted([this, outer, state, generation, run_id, step, data, bytes, device,
                        stream] {
    Status s = state->WaitCompleted();
    if (s.ok() || !Retriable(s, generation)) {
      outer->Complete(s);
      return;
    }
    bool released = outer->IsReleased();
    AfterReconnect(generation, [this, outer, released, s, run_id, step, data, bytes, device,
                                stream](Status reconnected) {
      if (!reconnected.ok()) {
        outer->Complete(reconnected);
      } else if (!released) {
        PushAttempt(outer, run_id, step, data, bytes, device, stream);
      } else {
        // The bytes left the caller's buffer but snapd stopped before storing them (it lets
        // reserved pushes commit first, so this is a narrow window): say so.
        outer->Complete(Status::Unavailable(
            "push of step " + std::to_string(step) + " of run id " + std::to_string(run_id) +
            " was released but snapd at " + socket_path + " stopped before storing it (" +
            s.message() + "); push it again"));
      }
    });
  });
  if (mapped) {
    Pending entry{Kind::kReserve, state, const_cast<void*>(data), bytes, run_id, step, stream,
                  device};
    loop->Post([this, entry, run_id, step, bytes] {
      wire::PushRequest reserve{};
      reserve.run_id = run_id;
      reserve.step = step;
      reserve.bytes = bytes;
      SendHeader(wire::kReserve, reserve, entry);
    });
    return;
  }
  loop->Post([this, state, run_id, step, data, bytes] {
    uint64_t id = next_request++;
    auto header = std::make_shared<wire::PushRequest>(wire::PushRequest{
        wire::MakeHeader(wire::kPush, token, id), run_id, step, bytes, /*copy_ns=*/0});
    Send(header, sizeof *header, id, wire::kPush, Pending{Kind::kPush, state}, data, bytes);
  });
}

FetchHandle Client::Impl::StartFetch(uint64_t run_id, uint64_t step, void* data, size_t bytes,
                                     bool device, void* stream) {
  auto outer = std::make_shared<detail::OpState>();
  Describe(*outer, "fetch", run_id, step);
  auto send = [this, outer, run_id, step, data, bytes, device, stream] {
    FetchAttempt(outer, run_id, step, data, bytes, device, stream);
  };
  if (auto push = UnstoredPush(run_id, step)) {
    push->WhenCompleted(std::move(send));  // read what this client wrote, once it is stored
  } else {
    send();
  }
  return FetchHandle(outer);
}

void Client::Impl::FetchAttempt(std::shared_ptr<detail::OpState> outer, uint64_t run_id,
                                uint64_t step, void* data, size_t bytes, bool device,
                                void* stream) {
  const uint64_t generation = Generation();
  auto state = std::make_shared<detail::OpState>();
  state->WhenCompleted([this, outer, state, generation, run_id, step, data, bytes, device,
                        stream] {
    Status s = state->WaitCompleted();
    if (s.ok() || !Retriable(s, generation)) {
      outer->Complete(s);
      return;
    }
    // A fetch is sent again whole: whatever reached `data` is overwritten.
    AfterReconnect(generation, [this, outer, run_id, step, data, bytes, device,
                                stream](Status reconnected) {
      if (!reconnected.ok()) {
        outer->Complete(reconnected);
      } else {
        FetchAttempt(outer, run_id, step, data, bytes, device, stream);
      }
    });
  });
  loop->Post([this, state, run_id, step, data, bytes, device, stream] {
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
}

uint64_t Client::Impl::Generation() {
  MutexLock lock(conn_mu);
  return conn_generation;
}

bool Client::Impl::Retriable(const Status& s, uint64_t generation) {
  if (s.code() != Code::kUnavailable || reconnect_timeout_s.load() <= 0) return false;
  MutexLock lock(conn_mu);
  if (closing) return false;
  return link_lost.load() || conn_generation != generation ||
         s.message().rfind("snapd is stopping", 0) == 0;
}

void Client::Impl::AfterReconnect(uint64_t seen, std::function<void(Status)> then) {
  {
    MutexLock lock(conn_mu);
    if (closing) {
      lock.Unlock();
      then(Status::Aborted("client disconnected"));
      return;
    }
    if (conn_generation <= seen) {
      after_reconnect.push_back(std::move(then));
      if (!reconnecting) {
        reconnecting = true;
        reconnector->Submit([this] { ReconnectEpisode(); });
      }
      return;
    }
  }
  then(Status::Ok());  // a newer session is open already
}

void Client::Impl::ReconnectEpisode() {
  const double timeout = reconnect_timeout_s.load();
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  auto backoff = std::chrono::milliseconds(50);
  Status result;
  for (;;) {
    {
      MutexLock lock(conn_mu);
      if (closing) {
        result = Status::Aborted("client disconnected");
        break;
      }
    }
    result = ReconnectOnce();
    if (result.ok()) break;
    if (std::chrono::steady_clock::now() + backoff > deadline) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout);
      result = Status::Unavailable("snapd at " + socket_path + " did not come back within " +
                                   secs + " s (" + result.message() +
                                   "); start it, or raise SNAPD_RECONNECT_TIMEOUT");
      break;
    }
    MutexLock lock(conn_mu);
    conn_cv.WaitFor(conn_mu, backoff, [&]() SNAPD_REQUIRES(conn_mu) { return closing; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  std::vector<std::function<void(Status)>> waiting;
  {
    MutexLock lock(conn_mu);
    if (result.ok()) ++conn_generation;
    reconnecting = false;
    waiting.swap(after_reconnect);
  }
  for (auto& f : waiting) f(result);
}

Status Client::Impl::ReconnectOnce() {
  SNAPD_RETURN_IF_ERROR(detail::ProbeSocket(socket_path));
  v1::OpenSessionRequest req;
  req.set_client_name(client_name);
  req.set_ucx_address(loop->address());
  v1::OpenSessionResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.set_wait_for_ready(true);
  grpc::Status opened = stub->OpenSession(&ctx, req, &resp);
  if (!opened.ok()) {
    return Status(static_cast<Code>(opened.error_code()), opened.error_message());
  }
  if (resp.wire_version() != wire::kVersion) {
    return Status::FailedPrecondition("snapd came back speaking data-plane wire version " +
                                      std::to_string(resp.wire_version()));
  }
  char* base = nullptr;
  uint64_t base_bytes = 0;
  if (mapped) {
    SNAPD_RETURN_IF_ERROR(detail::MapArena(resp.arena_socket(), resp.session_id(), resp.token(),
                                           &base, &base_bytes));
  }
  // On the loop: the old endpoint and mapping go, the new session's come.
  auto hello = std::make_shared<detail::OpState>();
  loop->Post([this, hello, resp, base, base_bytes] {
    if (ep) ucx::CloseEndpoint(*loop, ep, /*force=*/true);
    ep = nullptr;
    FailAll(Status::Unavailable("the data-plane session was replaced by a reconnect"));
    session_id = resp.session_id();
    token = resp.token();
    data_plane_address = resp.data_plane_worker_address();
    if (mapped) {
      pinning.reset();
      munmap(arena.load(), arena_bytes);
      arena = base;
      arena_bytes = base_bytes;
      pinning = std::make_unique<detail::HostPinning>(
          base, base_bytes, detail::HostPinning::kDefaultChunk, detail::PinHost,
          detail::UnpinHost);
    }
    ep_error = Status::Ok();
    link_lost = false;
    if (Status s = CreateEndpoint(); !s.ok()) {
      ep_error = s;
      hello->Complete(s);
      return;
    }
    wire::HelloRequest h{};
    h.session_id = session_id;
    SendHeader(wire::kHello, h, Pending{Kind::kHello, hello});
  });
  return hello->WaitCompleted();
}

}  // namespace snapd
