// The data plane's pushes and fetches: a copied push (its bytes received straight into tier
// memory), and a fetch on either path (its bytes sent as the Reply's data, or its block leased
// to a mapped client).
#include <cstring>
#include <optional>

#include "data_plane/data_plane.h"
#include "log.h"
#include "adjsnap/checksum.h"

namespace adjsnap {

ucs_status_t DataPlane::HandlePush(Conn& conn, Link link, const wire::PushRequest& req, void* data,
                                   size_t length, const ucp_am_recv_param_t* param) {
  uint64_t id = req.header.request_id;
  if (length != req.bytes) {
    Reply(link, id,
          Status::InvalidArgument("push header says " + std::to_string(req.bytes) + " bytes but " +
                                  std::to_string(length) + " bytes of data arrived"));
    return UCS_OK;
  }
  bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
  auto arrived = std::chrono::steady_clock::now();
  // Eager data live only during this callback: a push that must wait keeps a copy (`kept`),
  // made before the answer can arrive (it is posted to this thread).
  auto kept = std::make_shared<std::optional<std::vector<char>>>();
  bool waits = store_->BeginPush(
      req.run_id, req.step, req.bytes,
      OnLoop<Result<Store::PushTicket>>([this, peer = Peer{link, conn.serial}, id, data, length,
                                         rndv, kept, arrived](Result<Store::PushTicket> t) {
        bool kept_rndv = rndv && kept->has_value();  // a parked rendezvous: ours to release
        bool gone = !Find(peer);
        if (gone || !t.ok()) {
          if (t.ok()) store_->AbortPush(*t);
          if (kept_rndv) ucp_am_data_release(loop_->worker(), data);
          if (!gone) Reply(peer.link, id, t.status());
          return;
        }
        const std::vector<char>* eager = !rndv && kept->has_value() ? &**kept : nullptr;
        ReceivePush(peer, id, std::move(t).value(), data, length, rndv, eager, arrived);
      }),
      conn.tenant);
  if (!waits) return UCS_OK;  // answered already: received, or refused with a reply
  if (rndv) {
    kept->emplace();        // marks the descriptor as ours to receive or release later
    return UCS_INPROGRESS;  // the descriptor stays valid until received or released
  }
  kept->emplace(static_cast<char*>(data), static_cast<char*>(data) + length);
  return UCS_OK;
}

void DataPlane::ReceivePush(const Peer& peer, uint64_t id, Store::PushTicket t, void* data,
                            size_t length, bool rndv, const std::vector<char>* eager,
                            Clock::time_point arrived) {
  if (!rndv) {  // the one copy adjsnapd makes of a push: it computes the checksum too
    t.checksum = CopyWithChecksum(t.block->data(), eager ? eager->data() : data, length);
    FinishPush(peer, id, t, arrived);
    return;
  }
  void* dest = t.block->data();
  auto since = std::chrono::steady_clock::now();
  ucp_request_param_t p =
      ucx::RecvDataParam([this, peer, id, t, since, length, arrived](ucs_status_t s, size_t) {
        if (s == UCS_OK) {
          counters_.AddWrite(length, since);
          FinishPush(peer, id, t, arrived);
        } else {
          store_->AbortPush(t);
          ADJSNAP_LOG_WARN("push of run %llu step %llu abandoned: %s",
                         static_cast<unsigned long long>(t.run_id),
                         static_cast<unsigned long long>(t.step), ucs_status_string(s));
          if (Find(peer)) Reply(peer.link, id, ucx::FromUcs(s, "receiving the snapshot"));
        }
      });
  ucx::Track(ucp_am_recv_data_nbx(loop_->worker(), data, dest, length, &p), p);
}

void DataPlane::FinishPush(const Peer& peer, uint64_t request_id, const Store::PushTicket& ticket,
                           Clock::time_point arrived) {
  // Answered once the step's record is written, which this thread does not wait for; then
  // the step is made stored here.
  store_->CommitPush(ticket, OnLoop<Store::Install>([this, peer, request_id,
                                                     arrived](Store::Install install) {
                       Status s = install();
                       if (s.ok()) {
                         counters_.pushes.fetch_add(1, std::memory_order_relaxed);
                         counters_.push_seconds.Observe(
                             std::chrono::duration<double>(Clock::now() - arrived).count());
                       }
                       if (Find(peer)) Reply(peer.link, request_id, s);
                     }));
}

ucs_status_t DataPlane::HandleFetch(Conn& conn, Link link, const wire::FetchRequest& req, void*,
                                    size_t, const ucp_am_recv_param_t*) {
  StartFetch(conn, link, req, /*mapped=*/false);
  return UCS_OK;
}

ucs_status_t DataPlane::HandleFetchMapped(Conn& conn, Link link, const wire::FetchRequest& req,
                                          void*, size_t, const ucp_am_recv_param_t*) {
  StartFetch(conn, link, req, /*mapped=*/true);
  return UCS_OK;
}

void DataPlane::StartFetch(const Conn& conn, Link link, const wire::FetchRequest& req,
                           bool mapped) {
  // OnFetched runs now, or when the step lands from disk.
  store_->BeginFetch(req.run_id, req.step, req.bytes, /*backward=*/true,
                     OnLoop<Result<Store::FetchGrant>>([this, peer = Peer{link, conn.serial}, req,
                                                        mapped](Result<Store::FetchGrant> g) {
                       OnFetched(peer, req.header.request_id, mapped, req, std::move(g));
                     }),
                     conn.tenant);
}

void DataPlane::OnFetched(const Peer& peer, uint64_t id, bool mapped, const wire::FetchRequest& req,
                          Result<Store::FetchGrant> grant) {
  Conn* conn = Find(peer);
  if (!conn) return;  // the client left; the step stays stored
  Link link = peer.link;
  if (!grant.ok()) {
    Reply(link, id, grant.status());
    return;
  }
  Store::FetchGrant g = std::move(grant).value();
  if (mapped) {
    if (Status s = MappedByEndpoint(*conn, *g.block, req.run_id, req.step); !s.ok()) {
      Reply(link, id, s);
      return;
    }
  }
  ReplyBody body;
  body.bytes = g.bytes;  // a raw step's, or a frame's (fewer)
  if (mapped) {
    body.offset = g.block->offset();
    conn->leases[id] = Conn::Lease{std::move(g.block), g.bytes,  std::chrono::steady_clock::now(),
                                   req.run_id,         req.step, g.generation};
    counters_.fetches.fetch_add(1, std::memory_order_relaxed);
  } else {
    body.data = g.block->data();
    body.keep = std::move(g.block);
    body.since = std::chrono::steady_clock::now();
    body.on_sent = [this, run = req.run_id, step = req.step, gen = g.generation] {
      store_->Consumed(run, step, gen);
    };
  }
  Reply(link, id, Status::Ok(), std::move(body));
}

}  // namespace adjsnap
