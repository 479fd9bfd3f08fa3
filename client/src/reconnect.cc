// Client::Impl's reconnect (see client_impl.h): which failures are sent again on a new session
// (Retriable), the operations that wait for one (AfterReconnect), and the episodes that open
// it, with backoff, until reconnect_timeout (ReconnectEpisode, ReconnectOnce). The link it
// starts is data_channel.cc's.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client_impl.h"
#include "device_copy.h"

namespace adjsnap {

uint64_t Client::Impl::Generation() {
  MutexLock lock(conn_mu);
  return conn_generation;
}

bool Client::Impl::Retriable(const Status& s, uint64_t generation) {
  if (s.code() != Code::kUnavailable || reconnect_timeout_s.load() <= 0) return false;
  MutexLock lock(conn_mu);
  if (closing) return false;
  return link_lost.load() || conn_generation != generation ||
         s.message().rfind("adjsnapd is stopping", 0) == 0;
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
      const auto until =
          std::chrono::steady_clock::now() +
          std::chrono::milliseconds(static_cast<int64_t>(reconnect_timeout_s.load() * 1000));
      if (!reconnecting || until > reconnect_deadline) reconnect_deadline = until;
      StartEpisode();
      return;
    }
  }
  then(Status::Ok());  // a newer session is open already
}

void Client::Impl::ReconnectInBackground() {
  MutexLock lock(conn_mu);
  if (closing) return;
  reconnect_until_open = true;
  if (!reconnecting) reconnect_deadline = std::chrono::steady_clock::now();
  StartEpisode();
}

void Client::Impl::StartEpisode() {
  if (reconnecting) return;
  reconnecting = true;
  reconnector->Submit([this] { ReconnectEpisode(); });
}

void Client::Impl::ReconnectEpisode() {
  auto backoff = std::chrono::milliseconds(50);
  Status result;
  std::vector<std::function<void(Status)>> waiting;
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
    MutexLock lock(conn_mu);
    auto now = std::chrono::steady_clock::now();
    if (now >= reconnect_deadline) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", reconnect_timeout_s.load());
      Status gave_up = Status::Unavailable(
          "adjsnapd at " + socket_path + " did not come back within " + secs + " s (" +
          result.message() + "); start it, or raise ADJSNAP_RECONNECT_TIMEOUT");
      if (!reconnect_until_open) {
        result = gave_up;
        break;
      }
      // The waiting operations fail; the reconnect goes on, once a second at most.
      waiting.swap(after_reconnect);
      lock.Unlock();
      for (auto& f : waiting) f(gave_up);
      waiting.clear();
      lock.Lock();
      now = std::chrono::steady_clock::now();
    }
    // The last try falls on the deadline of those waiting, if it comes sooner.
    auto pause = backoff;
    if (reconnect_deadline > now) {
      pause = std::min(
          pause, std::chrono::duration_cast<std::chrono::milliseconds>(reconnect_deadline - now) +
                     std::chrono::milliseconds(1));
    }
    conn_cv.WaitFor(conn_mu, pause, [&]() ADJSNAP_REQUIRES(conn_mu) { return closing; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  {
    MutexLock lock(conn_mu);
    if (result.ok()) {
      ++conn_generation;
      reconnect_until_open = false;
    }
    reconnecting = false;
    waiting.swap(after_reconnect);
    // The new link went already (LinkLost found this episode running): another one.
    if (result.ok() && link_lost.load() && !closing) {
      reconnect_until_open = true;
      reconnect_deadline = std::chrono::steady_clock::now();
      StartEpisode();
    }
  }
  for (auto& f : waiting) f(result);
}

Status Client::Impl::ReconnectOnce() {
  ADJSNAP_RETURN_IF_ERROR(detail::ProbeSocket(socket_path));
  v1::OpenSessionResponse resp;
  ADJSNAP_RETURN_IF_ERROR(OpenSession(client_name, /*with_ucx=*/!mapped, &resp, /*deadline_s=*/5));
  char* base = nullptr;
  uint64_t base_bytes = 0;
  auto socket = std::make_shared<ucx::ScopedFd>();
  if (mapped) {
    Status s = detail::MapArena(resp.arena_socket(), resp.session_id(), resp.token(), &base,
                                &base_bytes, socket.get());
    // Not closed here: adjsnapd ends a session whose socket never comes within connect_timeout
    // as a death, which orphans again the runs this session attached to (OpenSession).
    if (!s.ok()) return s;
  }
  // On the loop: the old link and mapping go, the new session's come.
  auto hello = std::make_shared<detail::OpState>();
  loop->Post([this, hello, resp, base, base_bytes, socket] {
    if (ep) ucx::CloseEndpoint(*loop, ep, /*force=*/true);
    ep = nullptr;
    link.reset();
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
    StartLink(mapped ? socket : nullptr, hello);
  });
  return hello->WaitCompleted();
}

}  // namespace adjsnap
