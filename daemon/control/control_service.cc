#include "control/control_service.h"

#include <grp.h>
#include <grpc/grpc_security_constants.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "control/dump_reactor.h"
#include "data_plane/address_check.h"
#include "log.h"
#include "adjsnap/wire.h"

namespace adjsnap {
namespace {

grpc::Status ToGrpc(const Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// The answers counted as rejections of the request: it was malformed, or its caller may not
// make it, or it asks for more than a limit allows. Other failures (NOT_FOUND, ALREADY_EXISTS,
// FAILED_PRECONDITION, UNAVAILABLE, ...) answer about the state of adjsnapd and its runs.
std::optional<log::Reason> RefusalReason(Code code) {
  switch (code) {
    case Code::kInvalidArgument:
      return log::Reason::kInvalidArgument;
    case Code::kUnauthenticated:
      return log::Reason::kUnauthenticated;
    case Code::kPermissionDenied:
      return log::Reason::kPermissionDenied;
    case Code::kResourceExhausted:
      return log::Reason::kResourceExhausted;
    default:
      return std::nullopt;
  }
}

// Is `uid` (primary group `gid`) a member of `group`, by its primary or supplementary groups?
bool InGroup(uid_t uid, gid_t gid, gid_t group) {
  if (gid == group) return true;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) return false;
  int n = 64;
  std::vector<gid_t> groups(n);
  if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) {
    groups.resize(n);
    if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) return false;
  }
  for (int i = 0; i < n; ++i) {
    if (groups[i] == group) return true;
  }
  return false;
}

#define ADJSNAP_CALLER_OR_FINISH(who, ctx)            \
  Result<Tenant> who##_or = Caller(ctx);            \
  if (!who##_or.ok()) return Finish(ctx, who##_or.status()); \
  const Tenant who = *who##_or

}  // namespace

grpc::ServerUnaryReactor* ControlService::Finish(grpc::CallbackServerContext* ctx,
                                                 const Status& s) {
  if (!s.ok()) Refused(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(s));
  return reactor;
}

void ControlService::Refused(grpc::CallbackServerContext* ctx, const Status& s) {
  if (!RefusalReason(s.code())) return;
  std::optional<Peer> p = peers_ ? peers_->Find(ctx->peer()) : std::nullopt;
  Refused(p ? "uid " + std::to_string(p->uid) : "peer " + ctx->peer(), s);
}

void ControlService::Refused(const std::string& caller, const Status& s) {
  if (std::optional<log::Reason> reason = RefusalReason(s.code())) {
    rejections_.Reject(*reason, caller + ": " + s.ToString());
  }
}

Result<Tenant> ControlService::Caller(grpc::CallbackServerContext* ctx) const {
  std::optional<Peer> p = peers_ ? peers_->Find(ctx->peer()) : std::nullopt;
  if (!p && RemoteAdmin(ctx)) return Tenant::Admin();
  if (!p) {
    return Status::Unauthenticated("adjsnapd cannot tell who is calling (peer " + ctx->peer() +
                                   "): connect through adjsnapd's control socket");
  }
  bool admin =
      TrustedUid(p->uid) || (admin_gid_ != kNoGroup && InGroup(p->uid, p->gid, admin_gid_));
  return Tenant{p->uid, admin};
}

bool ControlService::RemoteAdmin(grpc::CallbackServerContext* ctx) {
  // Only the admin_listen port serves TLS, and it requires and verifies client certificates.
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return false;
  auto type = auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  return !type.empty() && std::string(type[0].data(), type[0].size()) == "ssl";
}

ControlService::ControlService(Store* store, SessionTable* sessions, DataPlane* data_plane,
                               std::string control_socket, std::string arena_socket)
    : store_(store),
      sessions_(sessions),
      data_plane_(data_plane),
      control_socket_(std::move(control_socket)),
      arena_socket_(std::move(arena_socket)),
      started_(std::chrono::steady_clock::now()) {}

grpc::ServerUnaryReactor* ControlService::OpenSession(grpc::CallbackServerContext* ctx,
                                                      const v1::OpenSessionRequest* req,
                                                      v1::OpenSessionResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  if (RemoteAdmin(ctx)) {
    return Finish(ctx, Status::PermissionDenied(
                           "the admin address serves adjsnap; solvers open sessions on adjsnapd's "
                           "unix socket, on the node"));
  }
  if (req->ucx_address().size() > kMaxUcxAddressBytes) {
    return Finish(ctx, Status::InvalidArgument(
                           "ucx_address of " + std::to_string(req->ucx_address().size()) +
                           " bytes is over the limit of " + std::to_string(kMaxUcxAddressBytes)));
  }
  if (static_cast<size_t>(req->run_ids_size()) > kMaxReattachRuns) {
    return Finish(ctx,
                  Status::InvalidArgument("run_ids names " + std::to_string(req->run_ids_size()) +
                                          " runs; at most " + std::to_string(kMaxReattachRuns) +
                                          " may be attached again"));
  }
  std::vector<uint64_t> run_ids(req->run_ids().begin(), req->run_ids().end());
  auto answer = [this, resp, who, run_ids = std::move(run_ids)](const Session& session) {
    // A reconnect: the new session counts among the clients of the runs the client opened.
    // As the data plane sees the session: the caller's own runs (admin_group does not reach
    // other users' runs there).
    Tenant attaching = Tenant::User(who.uid);
    attaching.session_id = session.id;
    if (!run_ids.empty()) store_->AttachSession(run_ids, attaching);
    resp->set_session_id(session.id);
    resp->set_token(session.token);
    resp->set_data_plane_worker_address(data_plane_->worker_address());
    resp->set_wire_version(wire::kVersion);
    resp->set_max_message_bytes(store_->host_budget());
    resp->set_arena_socket(arena_socket_);
  };
  if (req->ucx_address().empty()) {
    // A mapped client: its link is the arena socket's connection (wire.h, "Session socket").
    if (stopping_) return Finish(ctx, Status::Unavailable("adjsnapd is stopping"));
    Result<Session> session = sessions_->Open(req->client_name(), who.uid, /*socket_link=*/true);
    if (!session.ok()) return Finish(ctx, session.status());
    data_plane_->ExpectSocket(*session);
    answer(*session);
    return Finish(ctx, Status::Ok());
  }
  if (opening_.fetch_add(1) >= kMaxOpening) {
    opening_.fetch_sub(1);
    return Finish(
        ctx, Status::ResourceExhausted("adjsnapd is already opening " + std::to_string(kMaxOpening) +
                                       " sessions; retry in a moment"));
  }
  // Vetting the address takes a child process: off the reactor, on the vetting threads.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  vetting_.Submit(
      [this, reactor, answer, uid = who.uid, name = req->client_name(),
       address = req->ucx_address()] {
        Status s = stopping_ ? Status::Unavailable("adjsnapd is stopping")
                             : CheckUcxAddress(address, std::chrono::seconds(10));
        Result<Session> session = s.ok() ? sessions_->Open(name, uid) : Result<Session>(s);
        if (s.ok() && !session.ok()) s = session.status();
        if (s.ok()) {
          s = data_plane_->Connect(*session, address);
          if (!s.ok()) {
            (void)sessions_->Close(session->id, session->token);
          } else {
            answer(*session);
          }
        }
        if (RefusalReason(s.code())) {
          Refused("uid " + std::to_string(uid), s);
        } else if (!s.ok()) {  // not the caller's fault (adjsnapd is stopping, or slow): logged only
          rejections_.Reject("OpenSession failed",
                             "uid " + std::to_string(uid) + ": " + s.ToString());
        }
        opening_.fetch_sub(1);
        reactor->Finish(ToGrpc(s));
      },
      /*urgent=*/false);
  return reactor;
}

Result<Session> ControlService::OwnSession(const Tenant& who, uint64_t id, uint64_t token) const {
  std::optional<Session> session = sessions_->Find(id, token);
  if (!session) {
    // UNAUTHENTICATED, not NOT_FOUND: libadjsnap takes it as "this adjsnapd does not know my
    // session" (it restarted before the data plane noticed) and opens a new one.
    return Status::Unauthenticated("session " + std::to_string(id) +
                                   " is not open on this adjsnapd (closed, or opened before it "
                                   "restarted), or the token is wrong");
  }
  // A token is a secret, but not a bearer one: it works only for the uid that opened it.
  if (session->uid != who.uid) {
    return Status::PermissionDenied("session " + std::to_string(id) + " belongs to another user");
  }
  return *session;
}

grpc::ServerUnaryReactor* ControlService::CloseSession(grpc::CallbackServerContext* ctx,
                                                       const v1::CloseSessionRequest* req,
                                                       v1::CloseSessionResponse*) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  Result<Session> own = OwnSession(who, req->session_id(), req->token());
  if (!own.ok()) return Finish(ctx, own.status());
  Status s = sessions_->Close(req->session_id(), req->token());
  if (s.ok()) {
    ADJSNAP_LOG_INFO("session %llu: closed by its client",
                   static_cast<unsigned long long>(req->session_id()));
    data_plane_->DropSession(req->session_id());
    store_->EndSession(req->session_id());
  }
  return Finish(ctx, s);
}

grpc::ServerUnaryReactor* ControlService::HoldDeviceStep(grpc::CallbackServerContext* ctx,
                                                         const v1::HoldDeviceStepRequest* req,
                                                         v1::HoldDeviceStepResponse*) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  Result<Session> session = OwnSession(who, req->session_id(), req->token());
  if (!session.ok()) return Finish(ctx, session.status());
  return Finish(ctx, store_->HoldDeviceStep(req->run_id(), req->step(), req->bytes(),
                                            session->id, req->held(), who));
}

grpc::ServerUnaryReactor* ControlService::OpenRun(grpc::CallbackServerContext* ctx,
                                                  const v1::OpenRunRequest* req,
                                                  v1::OpenRunResponse* resp) {
  bool created = false;
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  uint64_t session_id = 0;
  if (req->session_id() != 0) {  // only the caller's own session, proven by its token
    Result<Session> own = OwnSession(who, req->session_id(), req->token());
    if (!own.ok()) return Finish(ctx, own.status());
    session_id = own->id;
  }
  auto run = store_->OpenRun(req->spec(), who.uid, &created, req->device_steps(), session_id);
  if (run.ok()) {
    *resp->mutable_run() = std::move(run).value();
    resp->set_created(created);
  }
  return Finish(ctx, run.status());
}

grpc::ServerUnaryReactor* ControlService::CloseRun(grpc::CallbackServerContext* ctx,
                                                   const v1::CloseRunRequest* req,
                                                   v1::CloseRunResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  auto run = store_->CloseRun(req->name(), who);
  if (run.ok()) *resp->mutable_run() = std::move(run).value();
  return Finish(ctx, run.status());
}

grpc::ServerUnaryReactor* ControlService::DeleteRun(grpc::CallbackServerContext* ctx,
                                                    const v1::DeleteRunRequest* req,
                                                    v1::DeleteRunResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  auto freed = store_->DeleteRun(req->name(), who);
  if (freed.ok()) resp->set_freed_bytes(*freed);
  return Finish(ctx, freed.status());
}

grpc::ServerUnaryReactor* ControlService::DeleteSnapshot(grpc::CallbackServerContext* ctx,
                                                         const v1::DeleteSnapshotRequest* req,
                                                         v1::DeleteSnapshotResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  auto freed = store_->DeleteSnapshot(req->name(), req->step(), who);
  if (freed.ok()) resp->set_freed_bytes(*freed);
  return Finish(ctx, freed.status());
}

grpc::ServerUnaryReactor* ControlService::Locate(grpc::CallbackServerContext* ctx,
                                                 const v1::LocateRequest* req,
                                                 v1::LocateResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  auto snap = store_->Locate(req->name(), req->step(), who);
  if (snap.ok()) *resp->mutable_snapshot() = std::move(snap).value();
  return Finish(ctx, snap.status());
}

grpc::ServerUnaryReactor* ControlService::ListRuns(grpc::CallbackServerContext* ctx,
                                                   const v1::ListRunsRequest*,
                                                   v1::ListRunsResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  for (auto& run : store_->ListRuns(who)) *resp->add_runs() = std::move(run);
  return Finish(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* ControlService::ListSnapshots(grpc::CallbackServerContext* ctx,
                                                        const v1::ListSnapshotsRequest* req,
                                                        v1::ListSnapshotsResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  auto snaps = store_->ListSnapshots(req->name(), resp->mutable_run(), who);
  if (snaps.ok()) {
    for (auto& s : *snaps) *resp->add_snapshots() = std::move(s);
  }
  return Finish(ctx, snaps.status());
}

grpc::ServerUnaryReactor* ControlService::Stats(grpc::CallbackServerContext* ctx,
                                                const v1::StatsRequest*,
                                                v1::StatsResponse* resp) {
  // Where adjsnapd keeps every tenant's files is an admin's business.
  Result<Tenant> who = Caller(ctx);
  CollectStats(who.ok() ? &*who : nullptr, resp);
  return Finish(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* ControlService::Prefetch(grpc::CallbackServerContext* ctx,
                                                   const v1::PrefetchRequest* req,
                                                   v1::PrefetchResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  auto started = store_->Prefetch(
      req->name(), std::vector<uint64_t>(req->steps().begin(), req->steps().end()), who);
  if (started.ok()) resp->set_scheduled(*started);
  return Finish(ctx, started.status());
}


grpc::ServerUnaryReactor* ControlService::ProbeSpools(grpc::CallbackServerContext* ctx,
                                                      const v1::ProbeSpoolsRequest*,
                                                      v1::ProbeSpoolsResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  if (!who.admin) {
    return Finish(ctx, Status::PermissionDenied("probing spools is for root, adjsnapd's own uid or "
                                                "the admin_group (uid " +
                                                std::to_string(who.uid) + " may not)"));
  }
  if (!store_->disk()) {
    return Finish(ctx, Status::FailedPrecondition(
                           "adjsnapd runs without a disk tier (spool_dirs = none): no spool to probe"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  store_->ProbeSpools([this, reactor, resp](int recovered) {
    resp->set_recovered(static_cast<uint32_t>(recovered));
    FillSpools(*store_->disk(), /*admin=*/true, resp->mutable_spools());
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ControlService::ScrubRun(grpc::CallbackServerContext* ctx,
                                                   const v1::ScrubRunRequest* req,
                                                   v1::ScrubRunResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  if (!who.admin) {
    return Finish(ctx, Status::PermissionDenied("a scrub reads the disk at full speed: only "
                                                "root, adjsnapd's own uid or the admin_group may "
                                                "start one (uid " +
                                                std::to_string(who.uid) + " may not)"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  store_->ScrubRun(
      req->name(),
      [reactor, resp](Result<Store::ScrubResult> r) {
        if (r.ok()) {
          resp->set_verified(r->verified);
          resp->set_unreadable(r->unreadable);
          for (const auto& [step, why] : r->lost) {
            v1::LostStep* l = resp->add_lost();
            l->set_step(step);
            l->set_reason(why);
          }
        }
        const Status& s = r.status();
        reactor->Finish(grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message()));
      },
      who);
  return reactor;
}

grpc::ServerUnaryReactor* ControlService::Shutdown(grpc::CallbackServerContext* ctx,
                                                   const v1::ShutdownRequest*,
                                                   v1::ShutdownResponse*) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  if (!who.admin) {
    return Finish(ctx, Status::PermissionDenied(
                           "shutdown stops adjsnapd for everyone: only root, adjsnapd's own uid or "
                           "the admin_group may (uid " + std::to_string(who.uid) + " may not)"));
  }
  ADJSNAP_LOG_INFO("shutdown asked by uid %u", who.uid);
  kill(getpid(), SIGTERM);  // main's sigwait takes it; this answer goes out first
  return Finish(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* ControlService::Drain(grpc::CallbackServerContext* ctx,
                                                const v1::DrainRequest*,
                                                v1::DrainResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  if (!who.admin) {
    return Finish(ctx, Status::PermissionDenied(
                           "drain moves every user's snapshots: only root, adjsnapd's own uid or "
                           "the admin_group may (uid " + std::to_string(who.uid) + " may not)"));
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  store_->Drain([reactor, resp](Result<Store::DrainResult> r) {
    if (r.ok()) {
      resp->set_moved(r->moved);
      resp->set_moved_bytes(r->moved_bytes);
    }
    const Status& s = r.status();
    reactor->Finish(grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message()));
  });
  return reactor;
}

grpc::ServerWriteReactor<v1::DumpChunk>* ControlService::Dump(grpc::CallbackServerContext* ctx,
                                                              const v1::DumpRequest* req) {
  return StartDump(store_, *req, Caller(ctx), [this, ctx](const Status& s) { Refused(ctx, s); });
}

grpc::ServerUnaryReactor* ControlService::Quota(grpc::CallbackServerContext* ctx,
                                                const v1::QuotaRequest* req,
                                                v1::QuotaResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  uint32_t uid = req->has_uid() ? req->uid() : who.uid;
  if (!who.admin && (uid != who.uid || req->set())) {
    return Finish(ctx, Status::PermissionDenied(
                           req->set() ? "only root, adjsnapd's own uid or the admin_group set quotas"
                                      : "uid " + std::to_string(who.uid) +
                                            " may read only its own quota"));
  }
  if (req->set()) {
    store_->SetQuota(uid, req->quota_bytes());
    ADJSNAP_LOG_INFO("uid %u set the quota of uid %u to %llu bytes", who.uid, uid,
                   static_cast<unsigned long long>(req->quota_bytes()));
  }
  Store::Usage u = store_->TenantUsage(uid);
  resp->set_uid(uid);
  resp->set_quota_bytes(u.quota);
  resp->set_stored_bytes(u.stored_bytes);
  resp->set_runs(u.runs);
  return Finish(ctx, Status::Ok());
}

grpc::ServerUnaryReactor* ControlService::PurgeRuns(grpc::CallbackServerContext* ctx,
                                                    const v1::PurgeRunsRequest* req,
                                                    v1::PurgeRunsResponse* resp) {
  ADJSNAP_CALLER_OR_FINISH(who, ctx);
  uint32_t uid = req->has_uid() ? req->uid() : who.uid;
  if (!who.admin && uid != who.uid) {
    return Finish(ctx, Status::PermissionDenied("uid " + std::to_string(who.uid) +
                                                " may purge only its own runs"));
  }
  uint64_t runs = 0, freed = 0;
  for (const v1::RunInfo& run : store_->ListRuns(Tenant::User(uid))) {
    if (!req->job().empty() && run.spec().job() != req->job()) continue;
    auto f = store_->DeleteRun(run.spec().name(), Tenant::User(uid));
    if (!f.ok()) continue;  // deleted meanwhile
    ++runs;
    freed += *f;
  }
  ADJSNAP_LOG_INFO("uid %u purged %llu run%s of uid %u%s%s", who.uid,
                 static_cast<unsigned long long>(runs), runs == 1 ? "" : "s", uid,
                 req->job().empty() ? "" : ", job ", req->job().c_str());
  resp->set_runs(runs);
  resp->set_freed_bytes(freed);
  return Finish(ctx, Status::Ok());
}

}  // namespace adjsnap
