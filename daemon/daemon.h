// The daemon as one object: every part adjsnapd runs, started in dependency order (catalog, host
// tier, disk tier, store, sessions, data plane, arena socket, control plane, listener,
// metrics, watchdog) and torn down in the reverse order of its members. main() loads the
// configuration, blocks the stop signals and hands the rest to it.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "catalog/catalog.h"
#include "config/config.h"
#include "control/control_service.h"
#include "control/peer_listener.h"
#include "data_plane/arena_socket.h"
#include "data_plane/data_plane.h"
#include "disk_tier/disk_tier.h"
#include "host_tier/host_tier.h"
#include "metrics/metrics.h"
#include "service/sd_notify.h"
#include "sessions/sessions.h"
#include "adjsnap/status.h"
#include "store/store.h"

namespace adjsnap {

class Daemon {
 public:
  // Starts every part and tells systemd it is ready; an error names what could not start.
  // `env` is the process environment (systemd's variables, the fd store).
  static Result<std::unique_ptr<Daemon>> Start(const Config& config,
                                               std::map<std::string, std::string> env);
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // The stop that `sig` asked for (docs/operations.md, "Restart, upgrade and drain"): pushes
  // are refused, the sockets close, and the host-only steps are written to disk within
  // stop_timeout and/or handed to systemd's fd store. What is left goes with the object.
  void Stop(int sig);

 private:
  Daemon(const Config& config, std::map<std::string, std::string> env);
  Status OpenTiers();
  Status StartServing();

  const Config config_;
  const std::map<std::string, std::string> env_;
  bool host_tier_adopted_ = false;  // the host tier came back from systemd's fd store

  // Members are destroyed last to first, so the order below is the teardown order read
  // upwards: the watchdog, metrics and arena socket first (Stop has made them idle), then the
  // data plane before the store it feeds, the store before the tiers and catalog it uses, the
  // disk tier (whose state listener updates the server's health) before the server, the
  // server before the listener its calls ask who is calling (Stop only stops its accepting),
  // the listener before the service, and the service before the sessions.
  std::atomic<int64_t> calls_in_flight_{0};  // control-plane calls; outlives the server
  SessionTable sessions_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<PeerListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<ArenaSocket> arena_;
  std::unique_ptr<MetricsFile> metrics_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace adjsnap
