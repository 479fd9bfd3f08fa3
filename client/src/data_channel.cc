// Client::Impl's data channel (see client_impl.h): the UCX endpoint to adjsnapd, requests and
// replies, pushes and fetches with their retries, and the link a session starts. Reconnecting
// after adjsnapd restarts is in reconnect.cc, the mapped host tier's copies in mapped_arena.cc.
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

// ucp_ep_print_info names each lane's transport and device as "tl/dev" after "lane[N]:"
// (e.g. "lane[0]:  1:posix/memory.0 md[1] ..."): the distinct ones, in lane order.
std::string Client::Impl::EndpointTransports() {
  std::promise<std::string> text;
  std::future<std::string> got = text.get_future();
  loop->Post([this, &text] {
    std::string out;
    if (link) {
      out = "lane[0]: 0:unix/session-socket.0";  // parsed below like UCX's own lines
    } else if (ep != nullptr) {
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

void Client::Impl::LinkLost(const std::string& what) {
  bool ending;
  {
    MutexLock lock(conn_mu);
    ending = closing;  // this client closed its session: adjsnapd closed the link after it
  }
  // UNAVAILABLE: adjsnapd went away (a restart); pushes and fetches wait for a reconnect.
  link_lost = true;
  ep_error = ending ? Status::Aborted("client disconnected")
                    : Status::Unavailable("data-plane connection to adjsnapd at " + socket_path +
                                          " lost: " + what);
  FailAll(ep_error);
  // Reconnect now, not at the next push or fetch, and until it succeeds: the new session
  // attaches to this client's runs (OpenSession), which a restarted adjsnapd removes as orphans
  // after orphan_grace unless a client comes back to them. A push or fetch meanwhile waits for
  // this reconnect, for reconnect_timeout at most.
  if (!ending && reconnect_timeout_s.load() > 0) ReconnectInBackground();
}

void Client::Impl::OnEndpointError(void* arg, ucp_ep_h failed, ucs_status_t status) {
  auto* self = static_cast<Impl*>(arg);
  if (failed != self->ep) return;  // an endpoint a reconnect replaced already
  self->LinkLost(ucx::FromUcs(status, "endpoint").message());
}

ucs_status_t Client::Impl::OnReply(void* arg, const void* header, size_t header_length,
                                   void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Impl*>(arg);
  if (header_length != sizeof(wire::Reply)) return UCS_OK;  // not a reply we understand
  wire::Reply reply;
  std::memcpy(&reply, header, sizeof reply);
  self->HandleReply(reply, data, length, param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
  return UCS_OK;
}

void Client::Impl::HandleReply(const wire::Reply& reply, void* data, size_t length, bool rndv) {
  auto it = pending.find(reply.header.request_id);
  if (it == pending.end()) return;
  Pending p = std::move(it->second);
  pending.erase(it);
  size_t n = std::min<size_t>(reply.message_length, wire::kMaxReplyMessage);
  Status status(static_cast<Code>(reply.code), std::string(reply.message, n));
  if (status.ok() && p.kind == Kind::kReserve) {
    CopyIn(std::move(p), reply.offset);
    return;
  }
  if (status.ok() && p.kind == Kind::kFetchMapped) {
    // A step stored as a chunk frame (an nvCOMP run) is its frame's bytes, fewer than a raw
    // step: only they are copied out.
    if (reply.bytes > p.bytes) {
      PostLeaseRelease(reply.header.request_id, 0);
      p.state->Complete(Status::Internal("adjsnapd leased " + std::to_string(reply.bytes) +
                                         " bytes for a fetch of " + std::to_string(p.bytes)));
      return;
    }
    if (reply.bytes != 0 && reply.bytes < p.bytes) {
      p.bytes = reply.bytes;
      p.state->frame_bytes = reply.bytes;
    }
    CopyOut(std::move(p), reply.offset, reply.header.request_id);
    return;
  }
  if (p.kind != Kind::kFetch || !status.ok()) {
    p.state->Complete(status);
    return;
  }
  if (length > p.bytes || (length == 0 && p.bytes != 0)) {
    p.state->Complete(Status::Internal("adjsnapd sent " + std::to_string(length) +
                                       " bytes for a fetch of " + std::to_string(p.bytes)));
    return;
  }
  if (length < p.bytes) p.state->frame_bytes = length;  // a chunk frame (an nvCOMP run)
  if (!rndv) {  // eager: data are here already, in host memory
    if (p.device) {  // a device buffer UCX takes (ucx_memory.h): a small step, copied up now
      p.state->Complete(detail::CopyHostToDevice(p.buffer, data, length, p.stream));
      return;
    }
    std::memcpy(p.buffer, data, length);
    p.state->Complete(Status::Ok());
    return;
  }
  auto state = p.state;
  ucp_request_param_t rp = ucx::RecvDataParam([state](ucs_status_t s, size_t) {
    state->Complete(ucx::FromUcs(s, "receiving the snapshot"));
  });
  detail::SetUcxMemoryType(p.device ? detail::UcxBuffer::kCuda : detail::UcxBuffer::kHost, &rp);
  ucx::Track(ucp_am_recv_data_nbx(loop->worker(), data, p.buffer, length, &rp), rp);
}

Status Client::Impl::CreateEndpoint() {
  ADJSNAP_ASSIGN_OR_RETURN(ep, ucx::ConnectToWorker(loop->worker(), data_plane_address,
                                            &Impl::OnEndpointError, this));
  return Status::Ok();
}

void Client::Impl::Send(std::shared_ptr<const void> header, size_t header_bytes,
                        uint64_t request_id, wire::AmId op, Pending entry, const void* data,
                        size_t data_bytes, detail::UcxBuffer memory) {
  auto state = entry.state;
  if (!ep_error.ok() || (ep == nullptr && !link)) {
    if (state) state->Complete(ep_error.ok() ? Status::Unavailable("not connected to adjsnapd")
                                             : ep_error);
    return;
  }
  if (link) {
    // The session socket carries header-only messages (the mapped path): queued now, and
    // sent as the socket takes them. If it ended, LinkLost fails what was pending.
    if (data_bytes != 0) {
      if (state) state->Complete(Status::Internal("a copied push over a session socket"));
      return;
    }
    if (state) pending.emplace(request_id, std::move(entry));
    if (!link->Send(op, header.get(), header_bytes) && state) {
      auto it = pending.find(request_id);
      if (it != pending.end()) {
        pending.erase(it);
        state->Complete(ep_error.ok() ? Status::Unavailable("session socket to adjsnapd ended")
                                      : ep_error);
      }
    }
    return;
  }
  if (state) pending.emplace(request_id, std::move(entry));
  bool is_push = op == wire::kPush;
  ucp_request_param_t p = ucx::SendParam([state, header, is_push](ucs_status_t s, size_t) {
    if (!state) return;
    // A rejected push completes its send with OK; its Reply carries the reason.
    if (is_push) state->Release(ucx::FromUcs(s, "sending the snapshot"));
    if (s != UCS_OK) state->Complete(ucx::FromUcs(s, "sending to adjsnapd"));
  });
  p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  detail::SetUcxMemoryType(memory, &p);
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
        // The bytes left the caller's buffer but adjsnapd stopped before storing them (it lets
        // reserved pushes commit first, so this is a narrow window): say so.
        outer->Complete(Status::Unavailable(
            "push of step " + std::to_string(step) + " of run id " + std::to_string(run_id) +
            " was released but adjsnapd at " + socket_path + " stopped before storing it (" +
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
  // Copied path: a device push here is a buffer UCX takes as CUDA memory (PushDeviceToDaemon).
  auto memory = device ? detail::UcxBuffer::kCuda : detail::UcxBuffer::kHost;
  loop->Post([this, state, run_id, step, data, bytes, memory] {
    uint64_t id = next_request++;
    auto header = std::make_shared<wire::PushRequest>(wire::PushRequest{
        wire::MakeHeader(wire::kPush, token, id), run_id, step, bytes, /*copy_ns=*/0});
    Send(header, sizeof *header, id, wire::kPush, Pending{Kind::kPush, state}, data, bytes,
         memory);
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
      outer->frame_bytes = state->frame_bytes.load();
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
      // A device fetch here is a buffer UCX takes as CUDA memory (FetchDeviceFromDaemon).
      SendHeader(wire::kFetch, fetch,
                 Pending{Kind::kFetch, state, data, bytes, 0, 0, stream, device});
    }
  });
}

void Client::Impl::StartLink(std::shared_ptr<ucx::ScopedFd> fd,
                             std::shared_ptr<detail::OpState> hello) {
  if (fd) {
    auto started = MessageSocket::Start(
        loop.get(), std::move(*fd), MessageSocket::Limits{wire::kMaxSocketMessage, 64 << 20},
        [this](uint16_t op, const void* message, size_t bytes) {
          if (op != wire::kReply || bytes != sizeof(wire::Reply)) return;  // nothing else comes
          wire::Reply reply;
          std::memcpy(&reply, message, sizeof reply);
          HandleReply(reply, nullptr, 0, false);
        },
        [this](const Status& why) { LinkLost(why.message()); });
    if (!started.ok()) {
      ep_error = started.status();
      hello->Complete(started.status());
      return;
    }
    link = std::move(started).value();
    hello->Complete(Status::Ok());  // the arena socket authenticated it: no Hello
    return;
  }
  if (Status s = CreateEndpoint(); !s.ok()) {
    ep_error = s;
    hello->Complete(s);
    return;
  }
  wire::HelloRequest h{};
  h.session_id = session_id;
  SendHeader(wire::kHello, h, Pending{Kind::kHello, hello});
}

}  // namespace adjsnap
