#include "daemon.h"

#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "control/request_errors.h"
#include "log.h"
#include "adjsnap/paths.h"
#include "adjsnap/units.h"
#include "adjsnap/unix_socket.h"

namespace adjsnap {
namespace {

// Fails when a live daemon already answers on `path`; removes a stale socket file.
Status ClaimSocket(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec)
    return Status::PermissionDenied("creating the socket directory for " + path + ": " +
                                    ec.message());
  auto live = ConnectUnix(path);
  if (live.status().code() == Code::kInvalidArgument) return live.status();
  if (live.ok()) {
    return Status::AlreadyExists("another adjsnapd is already serving " + path +
                                 "; stop it or pick another socket");
  }
  unlink(path.c_str());
  return Status::Ok();
}

// The names the host tier's arenas have in systemd's fd store (FDNAME=, LISTEN_FDNAMES):
// "hosttier-UID" per arena; "hosttier" is the one arena of an earlier adjsnapd, adjsnapd's own.
constexpr char kHostTierFdName[] = "hosttier";

std::string ArenaFdName(HostTier::ArenaId arena) {
  return std::string(kHostTierFdName) + "-" + std::to_string(arena);
}

// The arena a name passed by systemd stands for; nullopt if it is none.
std::optional<HostTier::ArenaId> ArenaOfFdName(const std::string& name) {
  if (name == kHostTierFdName) return geteuid();
  const std::string prefix = std::string(kHostTierFdName) + "-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 10) {
    return std::nullopt;
  }
  uint64_t uid = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    uid = uid * 10 + static_cast<uint64_t>(c - '0');
  }
  if (uid > UINT32_MAX) return std::nullopt;
  return static_cast<HostTier::ArenaId>(uid);
}

// systemd keeps an fd store for adjsnapd: $FDSTORE (systemd 254 and later, when the unit sets
// FileDescriptorStoreMax=) and a notification socket to send the fd on.
bool FdStoreKept(const std::map<std::string, std::string>& env) {
  auto fdstore = env.find("FDSTORE");
  auto notify = env.find("NOTIFY_SOCKET");
  return fdstore != env.end() && std::strtol(fdstore->second.c_str(), nullptr, 10) > 0 &&
         notify != env.end() && !notify->second.empty();
}

// The host tier: the arenas the last stop handed to systemd's fd store, passed back to this
// start as LISTEN_FDNAMES=hosttier-UID, when the catalog says what they hold (`kept`); else a new
// one. second: whether it was taken back. Any other fd passed is closed, and a memfd this
// start does not use is taken out of the fd store, so systemd does not keep its memory.
Result<std::pair<std::unique_ptr<HostTier>, bool>> TakeBackHostTier(
    const std::map<std::string, std::string>& env, const std::optional<v1::HostTierKept>& kept,
    uint64_t budget, const HostTierOptions& options) {
  std::map<HostTier::ArenaId, int> fds;
  for (auto [name, passed] : ListenFds(env)) {
    std::optional<HostTier::ArenaId> arena = ArenaOfFdName(name);
    if (arena && fds.emplace(*arena, passed).second) {
      // systemd's copy goes: this start holds the memfd now, and a stop stores it again.
      Notify(env, "FDSTOREREMOVE=1\nFDNAME=" + name);
    } else {
      ADJSNAP_LOG_WARN("closing fd %d (%s) passed by systemd: adjsnapd uses only '%s-UID', once each",
                     passed, name.c_str(), kHostTierFdName);
      close(passed);
    }
  }
  if (!fds.empty()) {
    if (kept) {
      const size_t arenas = fds.size();
      auto adopted = HostTier::AdoptArenas(std::move(fds), budget, options);
      if (adopted.ok()) {
        ADJSNAP_LOG_INFO(
            "took back the host tier from systemd's fd store (%zu arenas, %llu steps "
            "kept by start %llu); checking them",
            arenas, static_cast<unsigned long long>(kept->steps()),
            static_cast<unsigned long long>(kept->epoch()));
        return std::make_pair(std::move(adopted).value(), true);
      }
      ADJSNAP_LOG_ERROR("taking back the host tier: %s", adopted.status().message().c_str());
    } else {
      ADJSNAP_LOG_WARN(
          "systemd passed a host tier but the catalog records none kept; "
          "starting with an empty one");
      for (auto& [arena, fd] : fds) close(fd);
    }
  }
  auto created = HostTier::Create(budget, options);
  if (!created.ok()) return created.status();
  return std::make_pair(std::move(created).value(), false);
}

}  // namespace

Daemon::Daemon(const Config& config, std::map<std::string, std::string> env)
    : config_(config), env_(std::move(env)) {}

Result<std::unique_ptr<Daemon>> Daemon::Start(const Config& config,
                                              std::map<std::string, std::string> env) {
  std::unique_ptr<Daemon> d(new Daemon(config, std::move(env)));
  ADJSNAP_RETURN_IF_ERROR(d->OpenTiers());
  ADJSNAP_RETURN_IF_ERROR(d->StartServing());
  return d;
}

// The catalog, the host and disk tiers, and the store over them.
Status Daemon::OpenTiers() {
  const Config& config = config_;
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir, ec);
  // The catalog names every run and its owner: adjsnapd's alone, whatever the umask.
  if (!ec && chmod(config.state_dir.c_str(), 0700) != 0) {
    ec = std::error_code(errno, std::generic_category());
  }
  if (ec) {
    return Status::PermissionDenied("creating state_dir " + config.state_dir + ": " + ec.message());
  }
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t mem, MemInfo("MemAvailable"));
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t total, MemInfo("MemTotal"));
  uint64_t budget = HostBudget(config, mem);
  if (budget > total) {
    return Status::InvalidArgument(
        "host_mem " + FormatBytes(budget) + " is more than this node's memory (" +
        FormatBytes(total) + " MemTotal); lower host_mem, or leave it 0 to use host_mem_perc");
  }
  if (budget > mem) {
    ADJSNAP_LOG_WARN(
        "host_mem %s is more than the memory available now (%s MemAvailable): the "
        "host tier may push other processes into swap or the OOM killer",
        FormatBytes(budget).c_str(), FormatBytes(mem).c_str());
  }

  ADJSNAP_ASSIGN_OR_RETURN(catalog_, Catalog::Open(config.state_dir + "/catalog"));
  if (catalog_->opened_format() < Catalog::kFormatVersion) {
    ADJSNAP_LOG_INFO("catalog upgraded from format %llu to %llu",
                   static_cast<unsigned long long>(catalog_->opened_format()),
                   static_cast<unsigned long long>(Catalog::kFormatVersion));
  }
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t epoch, catalog_->BeginEpoch());
  HostTierOptions host_options;
  host_options.huge_pages = config.host_huge_pages == "hugetlb" ? HugePages::kHugeTlb
                            : config.host_huge_pages == "thp"   ? HugePages::kThp
                            : config.host_huge_pages == "off"   ? HugePages::kOff
                                                                : HugePages::kAuto;
  host_options.tmpfs_dir = config.host_tmpfs;
  host_options.prefault = config.host_prefault == "true";
  // Ahead of a solver's pushes: a quarter of the tier, at most 1 GiB.
  host_options.populate_ahead_bytes =
      config.host_prefault == "background" ? std::min<uint64_t>(budget / 4, 1ull << 30) : 0;
  host_options.per_uid_arenas = config.host_arenas != "shared";
  host_options.release_after = std::chrono::seconds(config.host_release_after);
  ADJSNAP_ASSIGN_OR_RETURN(std::optional<v1::HostTierKept> kept, catalog_->TakeHostTierKept());
  ADJSNAP_ASSIGN_OR_RETURN(auto host, TakeBackHostTier(env_, kept, budget, host_options));
  host_ = std::move(host.first);
  host_tier_adopted_ = host.second;
  if (std::vector<std::string> spools = SpoolDirs(config);
      !spools.empty() || !config.shared_spool_dirs.empty()) {
    DiskTierOptions disk_options{spools, config.disk_mem, config.disk_mem_perc};
    disk_options.shared_spools = config.shared_spool_dirs;
    disk_options.shared_budget_bytes = config.shared_disk_mem;
    ADJSNAP_ASSIGN_OR_RETURN(disk_, DiskTier::Open(disk_options));
  }
  StoreOptions store_options = StoreOptions::From(config);
  store_options.epoch = epoch;
  store_options.kept_host_tier = kept;
  store_options.host_tier_adopted = host_tier_adopted_;
  ADJSNAP_ASSIGN_OR_RETURN(store_,
                         Store::Open(catalog_.get(), host_.get(), disk_.get(), store_options));
  // Every kept step is claimed or given up by now: the free ranges of a tier taken back from
  // the fd store hold nothing any more.
  host_->StartRelease();
  return Status::Ok();
}

// The data plane, the arena and control sockets, the gRPC server, metrics and the watchdog.
Status Daemon::StartServing() {
  const Config& config = config_;
  DataPlane::Options dp_options;
  dp_options.connect_timeout = std::chrono::seconds(config.session_connect_timeout);
  dp_options.orphan_grace = std::chrono::seconds(config.orphan_grace);
  sessions_.set_max_per_uid(config.max_sessions_per_uid);
  ADJSNAP_ASSIGN_OR_RETURN(data_plane_, DataPlane::Start(dp_options, store_.get(), &sessions_));

  ADJSNAP_RETURN_IF_ERROR(ClaimSocket(config.socket));
  DataPlane* data_plane = data_plane_.get();
  ADJSNAP_ASSIGN_OR_RETURN(arena_,
                         ArenaSocket::Start(config.socket + ".arena", host_.get(), &sessions_,
                                            [data_plane](const Session& session, ucx::ScopedFd fd) {
                                              data_plane->AttachSocket(session, std::move(fd));
                                            }));
  service_ = std::make_unique<ControlService>(store_.get(), &sessions_, data_plane_.get(),
                                              config.socket, arena_->path());
  if (!config.metrics_textfile.empty()) {
    ControlService* service = service_.get();
    ADJSNAP_ASSIGN_OR_RETURN(
        metrics_, MetricsFile::Start(config.metrics_textfile,
                                     std::chrono::seconds(config.metrics_interval), [service] {
                                       v1::StatsResponse stats;
                                       service->CollectStats(/*who=*/nullptr, &stats);
                                       return stats;
                                     }));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.RegisterService(service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(NameRequestErrors(&calls_in_flight_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  int admin_port = 0;  // the port admin_listen got: its own, or the kernel's pick for port 0
  if (!config.admin_listen.empty()) {
    grpc::SslServerCredentialsOptions tls(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    std::string cert, key;
    for (auto [path, out] :
         {std::pair{&config.admin_tls_cert, &cert}, std::pair{&config.admin_tls_key, &key},
          std::pair{&config.admin_tls_ca, &tls.pem_root_certs}}) {
      ADJSNAP_ASSIGN_OR_RETURN(*out, ReadTextFile(*path));
    }
    tls.pem_key_cert_pairs.push_back({key, cert});
    builder.AddListeningPort(config.admin_listen, grpc::SslServerCredentials(tls), &admin_port);
  }
  server_ = builder.BuildAndStart();
  if (!server_ || (!config.admin_listen.empty() && admin_port == 0)) {
    return Status::Unavailable(
        config.admin_listen.empty()
            ? "cannot start the gRPC server"
            : "cannot serve admin_listen " + config.admin_listen +
                  " (address in use, or the TLS certificate and key do not load)");
  }
  if (!config.admin_listen.empty()) {
    std::string host = config.admin_listen.substr(0, config.admin_listen.rfind(':'));
    ADJSNAP_LOG_INFO("remote administration over mutual TLS on %s:%d", host.c_str(), admin_port);
  }
  // adjsnapd accepts control connections itself to learn each caller's uid (SO_PEERCRED).
  gid_t admin_gid = ControlService::kNoGroup;
  if (!config.admin_group.empty()) {
    group* g = getgrnam(config.admin_group.c_str());
    if (!g) {
      return Status::InvalidArgument("admin_group '" + config.admin_group +
                                     "' is not a group on this node");
    }
    admin_gid = g->gr_gid;
  }
  ADJSNAP_ASSIGN_OR_RETURN(listener_, PeerListener::Listen(config.socket, config.socket_mode));
  service_->SetPeers(listener_.get(), admin_gid);
  listener_->Serve(server_.get());
  server_->GetHealthCheckService()->SetServingStatus("adjsnap.v1.Control", true);
  if (disk_) {
    // "adjsnap.v1.DiskTier": SERVING while at least one spool works (adjsnap status and Stats
    // say which failed and why). The disk tier goes before the server (member order).
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    DiskTier* d = disk_.get();
    auto update = [health, d] { health->SetServingStatus("adjsnap.v1.DiskTier", d->usable()); };
    update();
    disk_->AddStateListener(update);
  }

  std::string spools = SpoolDirsText(config);
  if (!config.shared_spool_dirs.empty())
    spools += "; shared: " + DirsText(config.shared_spool_dirs);
  ADJSNAP_LOG_INFO(
      "adjsnapd %s serving on unix:%s, data plane: %s, host tier %s (%s%s), disk "
      "tier %s (%s), catalog %s",
      ADJSNAP_VERSION, config.socket.c_str(), data_plane_->Describe().c_str(),
      FormatBytes(host_->budget()).c_str(), host_->pages().c_str(),
      config.host_prefault == "true" ? ", prefaulting" : "",
      disk_ ? FormatBytes(disk_->budget()).c_str() : "none", spools.c_str(),
      config.state_dir.c_str());
  // systemd (Type=notify): ready now; then watchdog pings while the store answers and the UCX
  // progress thread runs.
  Notify(env_,
         "READY=1\nSTATUS=serving on " + config.socket + "\nMAINPID=" + std::to_string(getpid()));
  Store* st = store_.get();
  DataPlane* dp = data_plane_.get();
  watchdog_ = Watchdog::Start(env_, [st, dp] {
    (void)st->Counters();  // takes the store's mutex: hangs if it is stuck
    return dp->Responsive(std::chrono::seconds(1));
  });
  if (watchdog_) {
    ADJSNAP_LOG_INFO("systemd watchdog: pinging every %lld ms while healthy",
                   static_cast<long long>(watchdog_->interval().count() / 2000));
  }
  return Status::Ok();
}

void Daemon::Stop(int sig) {
  // From here blocks are freed as the store winds down while their bytes may be kept for the
  // next start (fd store): nothing may give their pages back.
  host_->StopBackgroundWork();
  // A stop loses nothing (docs/operations.md, "Restart, upgrade and drain"): pushes are
  // refused from now on, and the host-only steps are written to disk within stop_timeout
  // and/or go to systemd's fd store with the memfd that holds them (config fdstore).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(config_.stop_timeout);
  // fdstore "auto" does both: the drain makes a stop or a reboot lose nothing, the fd store
  // makes a restart serve every step from memory again (also one the drain had no time for).
  const bool keep = config_.fdstore != "off" && FdStoreKept(env_);
  const bool drain = config_.fdstore != "only" || !keep;
  const std::string writing = "writing host-only steps to disk (stop_timeout " +
                              std::to_string(config_.stop_timeout) + " s)";
  const std::string plan = !keep   ? writing
                           : drain ? writing + ", then the host tier goes to systemd's fd store"
                                   : "the host tier goes to systemd's fd store";
  ADJSNAP_LOG_INFO("received %s, stopping: %s", strsignal(sig), plan.c_str());
  Notify(env_, "STOPPING=1\nSTATUS=stopping: " + plan);
  store_->BeginStop();
  // Pushes reserved before the stop may still commit (briefly: their bytes are being copied).
  const auto settle =
      std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  while (store_->PushesInFlight() != 0 && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  watchdog_.reset();
  server_->GetHealthCheckService()->SetServingStatus(false);
  metrics_.reset();  // the file keeps the last figures
  // No new connections. The listener itself stays until the server is gone: a call on a
  // connection already accepted asks it who is calling (ControlService::Caller).
  listener_->StopAccepting();
  service_->Stop();  // sessions still waiting to open are refused
  // gRPC's graceful shutdown also waits for every client to close its connection, which a
  // connected solver does not do: wait (up to 2 s) for the calls in flight only.
  const auto calls_done_by = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (calls_in_flight_.load() > 0 && std::chrono::steady_clock::now() < calls_done_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  arena_.reset();
  // The data plane stays up (pushes are refused since BeginStop) until the host-only steps
  // are safe: UCX 1.13 can abort in ucp_worker_destroy while a client's connection is being
  // set up over tcp, and an abort before the drain lost every host-only step (the soak found
  // it: 287 steps). It goes below, before the store it feeds.
  auto started = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  if (drain) {
    Store::StopResult drained = store_->DrainForStop(deadline, /*keep_host_copies=*/keep);
    if (!drained.status.ok()) {
      ADJSNAP_LOG_ERROR("stopping short of writing every host-only step to disk: %s; %s",
                      drained.status.message().c_str(),
                      keep ? "the rest stays only in the host tier kept by systemd's fd store "
                             "(lost if the store is flushed or the node reboots)"
                           : "the steps left are named below and marked lost");
    } else {
      ADJSNAP_LOG_INFO("wrote to disk %llu host-only steps (%s) in %.2f s",
                     static_cast<unsigned long long>(drained.steps),
                     FormatBytes(drained.bytes).c_str(), seconds_since(started));
    }
  }
  if (keep) {
    // Writes in flight when a drain ran out of time end first (one step each): a short grace
    // inside TimeoutStopSec's margin over stop_timeout.
    auto kept_by = std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    auto kept_from = std::chrono::steady_clock::now();
    Store::StopResult stopped = store_->KeepHostTier(kept_by);
    bool handed = true;
    if (stopped.status.ok()) {
      for (auto [arena, fd] : host_->arena_fds()) {
        handed = NotifyWithFd(env_, "FDSTORE=1\nFDNAME=" + ArenaFdName(arena), fd) && handed;
      }
    }
    if (stopped.status.ok() && !handed) {
      ADJSNAP_LOG_ERROR(
          "handing the host tier to systemd's fd store failed (%s): %llu of its "
          "%llu steps are on no disk and will be reported lost at the next start",
          std::strerror(errno), static_cast<unsigned long long>(stopped.host_only),
          static_cast<unsigned long long>(stopped.steps));
    } else if (!stopped.status.ok()) {
      ADJSNAP_LOG_ERROR(
          "stopping short: %s; the host-only steps left are named below and "
          "marked lost",
          stopped.status.message().c_str());
    } else {
      ADJSNAP_LOG_INFO(
          "kept in systemd's fd store %llu host-tier steps (%s), %llu of them on no "
          "disk, in %.2f s",
          static_cast<unsigned long long>(stopped.steps), FormatBytes(stopped.bytes).c_str(),
          static_cast<unsigned long long>(stopped.host_only), seconds_since(kept_from));
    }
  }
  if (!keep && host_tier_adopted_) {
    for (auto [arena, fd] : host_->arena_fds()) {
      Notify(env_, "FDSTOREREMOVE=1\nFDNAME=" + ArenaFdName(arena));
    }
  }
  Catalog::WriterCounts records = catalog_->writer_counts();
  ADJSNAP_LOG_INFO("catalog: %llu record writes in %llu RocksDB batches since the start",
                 static_cast<unsigned long long>(records.written),
                 static_cast<unsigned long long>(records.batches));
  // The rest (the data plane, then the store, the tiers and the catalog) goes with the
  // object, in member order.
}

}  // namespace adjsnap
