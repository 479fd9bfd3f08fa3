// The data plane's mapped path (wire.h): reservations a client copies into itself, their
// commit or abort, and the release of a fetched block's lease.
#include <cstring>
#include <optional>

#include "data_plane/data_plane.h"
#include "log.h"

namespace adjsnap {

Status DataPlane::MappedByEndpoint(const Conn& conn, const HostBlock& block, uint64_t run_id,
                                   uint64_t step) const {
  uint32_t mapped = store_->HostArenaFor(conn.tenant.uid);
  if (block.arena() == mapped) return Status::Ok();
  // An admin reaching into another tenant's run: its arena is not the one this client maps.
  return Status::PermissionDenied(
      "step " + std::to_string(step) + " of run id " + std::to_string(run_id) +
      " lies in the host-tier arena of uid " + std::to_string(block.arena()) + ", and uid " +
      std::to_string(conn.tenant.uid) + " maps only its own (uid " + std::to_string(mapped) +
      "); push and fetch it with the copied messages (Push, Fetch)");
}

ucs_status_t DataPlane::HandleReserve(Conn& conn, Link link, const wire::PushRequest& req, void*,
                                      size_t, const ucp_am_recv_param_t*) {
  uint64_t id = req.header.request_id;
  if (conn.reserved.size() + conn.parked >= kMaxReservationsPerEndpoint) {
    Reply(link, id,
          Status::ResourceExhausted(
              std::to_string(kMaxReservationsPerEndpoint) +
              " pushes are already reserved and not committed on this endpoint; wait for "
              "earlier pushes to be stored"));
    return UCS_OK;
  }
  auto arrived = Clock::now();
  auto parked = std::make_shared<bool>(false);  // set below if the answer comes later
  bool waits = store_->BeginPush(
      req.run_id, req.step, req.bytes,
      OnLoop<Result<Store::PushTicket>>(
          [this, peer = Peer{link, conn.serial}, id, arrived, parked](Result<Store::PushTicket> t) {
            OnReserved(peer, id, *parked, std::move(t), arrived);
          }),
      conn.tenant);
  if (waits) {
    *parked = true;  // before the posted answer runs on this thread
    ++conn.parked;
  }
  return UCS_OK;
}

void DataPlane::OnReserved(const Peer& peer, uint64_t id, bool parked, Result<Store::PushTicket> t,
                           Clock::time_point arrived) {
  Conn* found = Find(peer);
  if (!found) {  // its client left (a later one may have the same handle: not its push)
    if (t.ok()) store_->AbortPush(*t);
    return;
  }
  Conn& conn = *found;
  Link link = peer.link;
  if (parked) --conn.parked;
  if (!t.ok()) {
    Reply(link, id, t.status());
    return;
  }
  if (Status s = MappedByEndpoint(conn, *t->block, t->run_id, t->step); !s.ok()) {
    store_->AbortPush(*t);
    Reply(link, id, s);
    return;
  }
  ReplyBody body;
  body.offset = t->block->offset();
  Store::PushTicket ticket = std::move(t).value();
  conn.reserved[{ticket.run_id, ticket.step}] =
      Conn::Reservation{std::move(ticket), Clock::now(), arrived};
  Reply(link, id, Status::Ok(), std::move(body));
}

std::optional<DataPlane::Conn::Reservation> DataPlane::TakeReservation(Conn& conn, Link link,
                                                                       const wire::PushRequest& req,
                                                                       const char* what) {
  auto it = conn.reserved.find({req.run_id, req.step});
  if (it == conn.reserved.end()) {
    Reply(link, req.header.request_id,
          Status::FailedPrecondition(std::string(what) + " of step " + std::to_string(req.step) +
                                     " of run id " + std::to_string(req.run_id) +
                                     " without a reservation on this endpoint"));
    return std::nullopt;
  }
  Conn::Reservation r = std::move(it->second);
  conn.reserved.erase(it);
  return r;
}

ucs_status_t DataPlane::HandleCommit(Conn& conn, Link link, const wire::PushRequest& req, void*,
                                     size_t, const ucp_am_recv_param_t*) {
  std::optional<Conn::Reservation> r = TakeReservation(conn, link, req, "commit");
  if (!r) return UCS_OK;
  if (req.flags & ~wire::kPushChecksum) {
    store_->AbortPush(r->ticket);
    Reply(link, req.header.request_id,
          Status::InvalidArgument("commit of step " + std::to_string(req.step) +
                                  " carries unknown flags " + std::to_string(req.flags) +
                                  " (this adjsnapd knows only kPushChecksum = 1); the push is "
                                  "abandoned"));
    return UCS_OK;
  }
  if (req.flags & wire::kPushChecksum) r->ticket.checksum = req.checksum;
  // The client's own copy time when reported: reservation-to-commit would also count time
  // the push spent queued behind earlier copies in a pipelining client.
  if (req.copy_ns) {
    counters_.AddWrite(req.bytes, req.copy_ns);
  } else {
    counters_.AddWrite(req.bytes, r->since);
  }
  FinishPush(Peer{link, conn.serial}, req.header.request_id, r->ticket, r->arrived);
  return UCS_OK;
}

ucs_status_t DataPlane::HandleAbort(Conn& conn, Link link, const wire::PushRequest& req, void*,
                                    size_t, const ucp_am_recv_param_t*) {
  std::optional<Conn::Reservation> r = TakeReservation(conn, link, req, "abort");
  if (!r) return UCS_OK;
  store_->AbortPush(r->ticket);  // the step and its tier memory are free again
  Reply(link, req.header.request_id, Status::Ok());
  return UCS_OK;
}

ucs_status_t DataPlane::HandleReleaseLease(Conn& conn, Link, const wire::LeaseRelease& req, void*,
                                           size_t, const ucp_am_recv_param_t*) {
  auto lease = conn.leases.find(req.lease);
  if (lease == conn.leases.end()) return UCS_OK;  // release is idempotent
  const Conn::Lease& l = lease->second;
  if (req.copy_ns) {
    counters_.AddRead(l.bytes, req.copy_ns);
  } else {
    counters_.AddRead(l.bytes, l.since);
  }
  uint64_t run = l.run_id, step = l.step, gen = l.generation;
  conn.leases.erase(lease);
  store_->Consumed(run, step, gen);  // the client has the bytes: read-once release
  return UCS_OK;
}

}  // namespace adjsnap
