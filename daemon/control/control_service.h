// The gRPC control plane (adjsnap.v1.Control), served with the callback API. Each RPC is a thin
// translation between protobuf and the Store/SessionTable; grpc::Status appears only here.
// Reactions never wait on the data plane or the disk: they take the store's mutex briefly and,
// for changes, write one catalog record; Drain and Dump finish from store callbacks.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "control/peer_listener.h"
#include "data_plane/data_plane.h"
#include "adjsnap/io_pool.h"
#include "log.h"
#include "sessions/sessions.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "store/store.h"

namespace adjsnap {

class ControlService final : public v1::Control::CallbackService {
 public:
  ControlService(Store* store, SessionTable* sessions, DataPlane* data_plane,
                 std::string control_socket, std::string arena_socket);
  // Who is calling: set once, before the first connection is accepted. Members of
  // `admin_gid` (and root, and adjsnapd's own uid) are admins; kNoGroup: no admin group.
  static constexpr gid_t kNoGroup = static_cast<gid_t>(-1);
  // Before the server shuts down: sessions still waiting to open are refused (UNAVAILABLE).
  void Stop() { stopping_ = true; }
  void SetPeers(const PeerListener* peers, gid_t admin_gid) {
    peers_ = peers;
    admin_gid_ = admin_gid;
  }

  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* ctx,
                                        const v1::OpenSessionRequest* req,
                                        v1::OpenSessionResponse* resp) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* ctx,
                                         const v1::CloseSessionRequest* req,
                                         v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* OpenRun(grpc::CallbackServerContext* ctx,
                                    const v1::OpenRunRequest* req,
                                    v1::OpenRunResponse* resp) override;
  grpc::ServerUnaryReactor* CloseRun(grpc::CallbackServerContext* ctx,
                                     const v1::CloseRunRequest* req,
                                     v1::CloseRunResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteRun(grpc::CallbackServerContext* ctx,
                                      const v1::DeleteRunRequest* req,
                                      v1::DeleteRunResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteSnapshot(grpc::CallbackServerContext* ctx,
                                           const v1::DeleteSnapshotRequest* req,
                                           v1::DeleteSnapshotResponse* resp) override;
  grpc::ServerUnaryReactor* HoldDeviceStep(grpc::CallbackServerContext* ctx,
                                           const v1::HoldDeviceStepRequest* req,
                                           v1::HoldDeviceStepResponse* resp) override;
  grpc::ServerUnaryReactor* Locate(grpc::CallbackServerContext* ctx,
                                   const v1::LocateRequest* req,
                                   v1::LocateResponse* resp) override;
  grpc::ServerUnaryReactor* ListRuns(grpc::CallbackServerContext* ctx,
                                     const v1::ListRunsRequest* req,
                                     v1::ListRunsResponse* resp) override;
  grpc::ServerUnaryReactor* ListSnapshots(grpc::CallbackServerContext* ctx,
                                          const v1::ListSnapshotsRequest* req,
                                          v1::ListSnapshotsResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx, const v1::StatsRequest* req,
                                  v1::StatsResponse* resp) override;
  // What Stats answers: with the spool paths for an admin, and the waits `who` may see (none
  // when null: the metrics file's source, which has the counts only).
  void CollectStats(const Tenant* who, v1::StatsResponse* resp) const;
  grpc::ServerUnaryReactor* Quota(grpc::CallbackServerContext* ctx, const v1::QuotaRequest* req,
                                  v1::QuotaResponse* resp) override;
  grpc::ServerUnaryReactor* PurgeRuns(grpc::CallbackServerContext* ctx,
                                      const v1::PurgeRunsRequest* req,
                                      v1::PurgeRunsResponse* resp) override;
  // Raises SIGTERM in adjsnapd itself: the stop runs on the main thread, as for a signal.
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx,
                                     const v1::ShutdownRequest* req,
                                     v1::ShutdownResponse* resp) override;
  grpc::ServerUnaryReactor* Prefetch(grpc::CallbackServerContext* ctx,
                                     const v1::PrefetchRequest* req,
                                     v1::PrefetchResponse* resp) override;
  // Probes every failed spool now (`adjsnap spool probe`) and answers with each spool's state.
  grpc::ServerUnaryReactor* ProbeSpools(grpc::CallbackServerContext* ctx,
                                        const v1::ProbeSpoolsRequest* req,
                                        v1::ProbeSpoolsResponse* resp) override;
  grpc::ServerUnaryReactor* ScrubRun(grpc::CallbackServerContext* ctx,
                                     const v1::ScrubRunRequest* req,
                                     v1::ScrubRunResponse* resp) override;
  // Answers from the store's tiering thread once every host-only snapshot is on disk.
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx, const v1::DrainRequest* req,
                                  v1::DrainResponse* resp) override;
  // One step at a time: the store hands over the step's host bytes (reading them from disk on
  // an I/O thread if needed), then 1 MiB chunks are written, each after the previous finished.
  grpc::ServerWriteReactor<v1::DumpChunk>* Dump(grpc::CallbackServerContext* ctx,
                                                const v1::DumpRequest* req) override;

 private:
  // The caller as the control socket's SO_PEERCRED told; UNAUTHENTICATED when unknown.
  Result<Tenant> Caller(grpc::CallbackServerContext* ctx) const;
  // The open session `id` with `token`, if it belongs to the caller's uid: NOT_FOUND or
  // PERMISSION_DENIED otherwise.
  Result<Session> OwnSession(const Tenant& who, uint64_t id, uint64_t token) const;
  // A caller on admin_listen: mutual TLS verified its client certificate.
  static bool RemoteAdmin(grpc::CallbackServerContext* ctx);
  // Answers a unary call with `s`; a refusal of the request is counted and logged (Refused).
  grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const Status& s);
  // Counts and logs `s` under its reason (rejections_) when it refuses the request as
  // malformed, unauthenticated, not permitted or over a limit; other failures are answers about
  // adjsnapd's state, not rejections. `caller`: who asked ("uid 1000"), for the log line.
  void Refused(grpc::CallbackServerContext* ctx, const Status& s);
  void Refused(const std::string& caller, const Status& s);

  Store* const store_;
  SessionTable* const sessions_;
  DataPlane* const data_plane_;
  const std::string control_socket_;
  const std::string arena_socket_;
  const std::chrono::steady_clock::time_point started_;
  const PeerListener* peers_ = nullptr;
  gid_t admin_gid_ = kNoGroup;
  // OpenSession vets each client's worker address in a child process (data_plane/
  // address_check.h): a few threads do it, at most kMaxOpening sessions wait for them, and
  // more are refused at once, so a flood of OpenSession calls costs adjsnapd neither a thread nor a
  // process each.
  static constexpr int kVettingThreads = 4;
  static constexpr int kMaxOpening = 256;
  std::atomic<int> opening_{0};
  std::atomic<bool> stopping_{false};
  log::RejectionLog rejections_{log::Surface::kControlPlane};
  IoPool vetting_{kVettingThreads,
                  "adjsnap-vetting"};  // last: joined before the members its jobs use go
};

// The spools' states as Stats and ProbeSpools answer them (control_stats.cc): directories and
// the full failure reasons only for an admin.
void FillSpools(const DiskTier& disk, bool admin,
                google::protobuf::RepeatedPtrField<v1::SpoolState>* out);

}  // namespace adjsnap
