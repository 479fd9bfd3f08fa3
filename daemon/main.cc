// snapd: the per-node snapshot storage daemon. Start-up order is the dependency order
// (catalog, host tier, store, sessions, data plane, control plane); shutdown on SIGTERM or
// SIGINT runs it backwards so nothing is freed while still in use.
#include <grp.h>
#include <malloc.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>

#include "catalog/catalog.h"
#include "config/config.h"
#include "control/control_service.h"
#include "control/peer_listener.h"
#include "control/request_errors.h"
#include "metrics/metrics.h"
#include "data_plane/address_check.h"
#include "data_plane/arena_socket.h"
#include "data_plane/data_plane.h"
#include "disk_tier/disk_tier.h"
#include "host_tier/host_tier.h"
#include "log.h"
#include "snapd/paths.h"
#include "service/sd_notify.h"
#include "sessions/sessions.h"
#include "store/store.h"
#include "snapd/units.h"
#include "snapd/unix_socket.h"

extern char** environ;

namespace snapd {
namespace {

// Fails when a live daemon already answers on `path`; removes a stale socket file.
Status ClaimSocket(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return Status::PermissionDenied("creating the socket directory for " + path + ": " +
                                          ec.message());
  auto live = ConnectUnix(path);
  if (live.status().code() == Code::kInvalidArgument) return live.status();
  if (live.ok()) {
    return Status::AlreadyExists("another snapd is already serving " + path +
                                 "; stop it or pick another socket");
  }
  unlink(path.c_str());
  return Status::Ok();
}

// The names the host tier's arenas have in systemd's fd store (FDNAME=, LISTEN_FDNAMES):
// "hosttier-UID" per arena; "hosttier" is the one arena of an earlier snapd, snapd's own.
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

// systemd keeps an fd store for snapd: $FDSTORE (systemd 254 and later, when the unit sets
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
      SNAPD_LOG_WARN("closing fd %d (%s) passed by systemd: snapd uses only '%s-UID', once each",
                     passed, name.c_str(), kHostTierFdName);
      close(passed);
    }
  }
  if (!fds.empty()) {
    if (kept) {
      const size_t arenas = fds.size();
      auto adopted = HostTier::AdoptArenas(std::move(fds), budget, options);
      if (adopted.ok()) {
        SNAPD_LOG_INFO("took back the host tier from systemd's fd store (%zu arenas, %llu steps "
                       "kept by start %llu); checking them",
                       arenas, static_cast<unsigned long long>(kept->steps()),
                       static_cast<unsigned long long>(kept->epoch()));
        return std::make_pair(std::move(adopted).value(), true);
      }
      SNAPD_LOG_ERROR("taking back the host tier: %s", adopted.status().message().c_str());
    } else {
      SNAPD_LOG_WARN("systemd passed a host tier but the catalog records none kept; "
                     "starting with an empty one");
      for (auto& [arena, fd] : fds) close(fd);
    }
  }
  auto created = HostTier::Create(budget, options);
  if (!created.ok()) return created.status();
  return std::make_pair(std::move(created).value(), false);
}

int Run(int argc, char** argv) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    if (size_t eq = kv.find('='); eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto loaded = LoadConfig(std::vector<std::string>(argv + 1, argv + argc), env);
  if (!loaded.ok()) {
    std::fprintf(stderr, "snapd: %s\n", loaded.status().message().c_str());
    return 2;
  }
  if (loaded->help) {
    std::fputs(CommandLineHelp().c_str(), stdout);
    return 0;
  }
  if (loaded->version) {
    std::printf("snapd %s\n", SNAPD_VERSION);
    return 0;
  }
  const Config& config = loaded->config;
  if (loaded->print_config) {
    std::fputs(FormatConfig(config).c_str(), stdout);
    return 0;
  }
  log::Level level;
  if (log::ParseLevel(config.log_level.c_str(), &level)) log::SetLevel(level);

  // Block the shutdown signals before any thread starts so only sigwait() below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto fail = [](const Status& s) {
    SNAPD_LOG_ERROR("%s", s.ToString().c_str());
    return 1;
  };
  std::error_code ec;
  std::filesystem::create_directories(config.state_dir, ec);
  // The catalog names every run and its owner: snapd's alone, whatever the umask.
  if (!ec && chmod(config.state_dir.c_str(), 0700) != 0) {
    ec = std::error_code(errno, std::generic_category());
  }
  if (ec) return fail(Status::PermissionDenied("creating state_dir " + config.state_dir + ": " +
                                               ec.message()));
  auto mem = MemInfo("MemAvailable");
  if (!mem.ok()) return fail(mem.status());
  auto total = MemInfo("MemTotal");
  if (!total.ok()) return fail(total.status());
  uint64_t budget = HostBudget(config, *mem);
  if (budget > *total) {
    return fail(Status::InvalidArgument(
        "host_mem " + FormatBytes(budget) + " is more than this node's memory (" +
        FormatBytes(*total) + " MemTotal); lower host_mem, or leave it 0 to use host_mem_perc"));
  }
  if (budget > *mem) {
    SNAPD_LOG_WARN(
        "host_mem %s is more than the memory available now (%s MemAvailable): the "
        "host tier may push other processes into swap or the OOM killer",
        FormatBytes(budget).c_str(), FormatBytes(*mem).c_str());
  }

  auto catalog = Catalog::Open(config.state_dir + "/catalog");
  if (!catalog.ok()) return fail(catalog.status());
  if ((*catalog)->opened_format() < Catalog::kFormatVersion) {
    SNAPD_LOG_INFO("catalog upgraded from format %llu to %llu",
                   static_cast<unsigned long long>((*catalog)->opened_format()),
                   static_cast<unsigned long long>(Catalog::kFormatVersion));
  }
  auto epoch = (*catalog)->BeginEpoch();
  if (!epoch.ok()) return fail(epoch.status());
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
  auto kept = (*catalog)->TakeHostTierKept();
  if (!kept.ok()) return fail(kept.status());
  auto host = TakeBackHostTier(env, *kept, budget, host_options);
  if (!host.ok()) return fail(host.status());
  const bool host_tier_adopted = host->second;
  std::unique_ptr<DiskTier> disk;
  if (std::vector<std::string> spools = SpoolDirs(config); !spools.empty()) {
    auto opened = DiskTier::Open({spools, config.disk_mem, config.disk_mem_perc});
    if (!opened.ok()) return fail(opened.status());
    disk = std::move(opened).value();
  }
  StoreOptions store_options = StoreOptions::From(config);
  store_options.epoch = *epoch;
  store_options.kept_host_tier = *kept;
  store_options.host_tier_adopted = host_tier_adopted;
  auto store = Store::Open(catalog->get(), host->first.get(), disk.get(), store_options);
  if (!store.ok()) return fail(store.status());
  // Every kept step is claimed or given up by now: the free ranges of a tier taken back from
  // the fd store hold nothing any more.
  host->first->StartRelease();
  SessionTable sessions;
  DataPlane::Options dp_options;
  dp_options.connect_timeout = std::chrono::seconds(config.session_connect_timeout);
  dp_options.orphan_grace = std::chrono::seconds(config.orphan_grace);
  auto data_plane = DataPlane::Start(dp_options, store->get(), &sessions);
  if (!data_plane.ok()) return fail(data_plane.status());

  Status claimed = ClaimSocket(config.socket);
  if (!claimed.ok()) return fail(claimed);
  auto arena = ArenaSocket::Start(config.socket + ".arena", host->first.get(), &sessions);
  if (!arena.ok()) return fail(arena.status());
  ControlService service(store->get(), &sessions, data_plane->get(), config.socket,
                         (*arena)->path());
  std::atomic<int64_t> calls_in_flight{0};  // control-plane calls; outlives the server
  std::unique_ptr<MetricsFile> metrics;
  if (!config.metrics_textfile.empty()) {
    auto started = MetricsFile::Start(config.metrics_textfile,
                                      std::chrono::seconds(config.metrics_interval), [&service] {
                                        v1::StatsResponse stats;
                                        service.CollectStats(/*who=*/nullptr, &stats);
                                        return stats;
                                      });
    if (!started.ok()) return fail(started.status());
    metrics = std::move(started).value();
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(NameRequestErrors(&calls_in_flight));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  int admin_port = 0;  // the port admin_listen got: its own, or the kernel's pick for port 0
  if (!config.admin_listen.empty()) {
    grpc::SslServerCredentialsOptions tls(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    std::string cert, key;
    for (auto [path, out] : {std::pair{&config.admin_tls_cert, &cert},
                             std::pair{&config.admin_tls_key, &key},
                             std::pair{&config.admin_tls_ca, &tls.pem_root_certs}}) {
      auto text = ReadTextFile(*path);
      if (!text.ok()) return fail(text.status());
      *out = *text;
    }
    tls.pem_key_cert_pairs.push_back({key, cert});
    builder.AddListeningPort(config.admin_listen, grpc::SslServerCredentials(tls), &admin_port);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || (!config.admin_listen.empty() && admin_port == 0)) {
    return fail(Status::Unavailable(
        config.admin_listen.empty()
            ? "cannot start the gRPC server"
            : "cannot serve admin_listen " + config.admin_listen +
                  " (address in use, or the TLS certificate and key do not load)"));
  }
  if (!config.admin_listen.empty()) {
    std::string host = config.admin_listen.substr(0, config.admin_listen.rfind(':'));
    SNAPD_LOG_INFO("remote administration over mutual TLS on %s:%d", host.c_str(), admin_port);
  }
  // snapd accepts control connections itself to learn each caller's uid (SO_PEERCRED).
  gid_t admin_gid = ControlService::kNoGroup;
  if (!config.admin_group.empty()) {
    group* g = getgrnam(config.admin_group.c_str());
    if (!g) {
      return fail(Status::InvalidArgument("admin_group '" + config.admin_group +
                                          "' is not a group on this node"));
    }
    admin_gid = g->gr_gid;
  }
  auto listener = PeerListener::Listen(config.socket, config.socket_mode);
  if (!listener.ok()) return fail(listener.status());
  service.SetPeers(listener->get(), admin_gid);
  (*listener)->Serve(server.get());
  server->GetHealthCheckService()->SetServingStatus("snapd.v1.Control", true);
  if (disk) {
    // "snapd.v1.DiskTier": SERVING while at least one spool works (snapctl status and Stats
    // say which failed and why).
    grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
    DiskTier* d = disk.get();
    auto update = [health, d] { health->SetServingStatus("snapd.v1.DiskTier", d->usable()); };
    update();
    disk->AddStateListener(update);
  }

  SNAPD_LOG_INFO("snapd %s serving on unix:%s, data plane: %s, host tier %s (%s%s), disk "
                 "tier %s (%s), catalog %s",
                 SNAPD_VERSION, config.socket.c_str(), (*data_plane)->Describe().c_str(),
                 FormatBytes(host->first->budget()).c_str(), host->first->pages().c_str(),
                 config.host_prefault == "true" ? ", prefaulting" : "",
                 disk ? FormatBytes(disk->budget()).c_str() : "none",
                 SpoolDirsText(config).c_str(), config.state_dir.c_str());
  // systemd (Type=notify): ready now; then watchdog pings while the store answers and the UCX
  // progress thread runs.
  Notify(env, "READY=1\nSTATUS=serving on " + config.socket + "\nMAINPID=" +
                  std::to_string(getpid()));
  std::unique_ptr<Watchdog> watchdog;
  {
    Store* st = store->get();
    DataPlane* dp = data_plane->get();
    watchdog = Watchdog::Start(env, [st, dp] {
      (void)st->Counters();  // takes the store's mutex: hangs if it is stuck
      return dp->Responsive(std::chrono::seconds(1));
    });
  }
  if (watchdog) {
    SNAPD_LOG_INFO("systemd watchdog: pinging every %lld ms while healthy",
                   static_cast<long long>(watchdog->interval().count() / 2000));
  }

  int sig = 0;
  sigwait(&signals, &sig);
  // From here blocks are freed as the store winds down while their bytes may be kept for the
  // next start (fd store): nothing may give their pages back.
  host->first->StopBackgroundWork();
  // A stop loses nothing (docs/operations.md, "Restart, upgrade and drain"): pushes are
  // refused from now on, and the host-only steps are written to disk within stop_timeout
  // and/or go to systemd's fd store with the memfd that holds them (config fdstore).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config.stop_timeout);
  // fdstore "auto" does both: the drain makes a stop or a reboot lose nothing, the fd store
  // makes a restart serve every step from memory again (also one the drain had no time for).
  const bool keep = config.fdstore != "off" && FdStoreKept(env);
  const bool drain = config.fdstore != "only" || !keep;
  const std::string writing = "writing host-only steps to disk (stop_timeout " +
                              std::to_string(config.stop_timeout) + " s)";
  const std::string plan = !keep ? writing
                           : drain ? writing + ", then the host tier goes to systemd's fd store"
                                   : "the host tier goes to systemd's fd store";
  SNAPD_LOG_INFO("received %s, stopping: %s", strsignal(sig), plan.c_str());
  Notify(env, "STOPPING=1\nSTATUS=stopping: " + plan);
  (*store)->BeginStop();
  // Pushes reserved before the stop may still commit (briefly: their bytes are being copied).
  const auto settle = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  while ((*store)->PushesInFlight() != 0 && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  watchdog.reset();
  server->GetHealthCheckService()->SetServingStatus(false);
  metrics.reset();    // the file keeps the last figures
  listener->reset();  // no new connections
  service.Stop();     // sessions still waiting to open are refused
  // gRPC's graceful shutdown also waits for every client to close its connection, which a
  // connected solver does not do: wait (up to 2 s) for the calls in flight only.
  const auto calls_done_by = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (calls_in_flight.load() > 0 && std::chrono::steady_clock::now() < calls_done_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  arena->reset();
  // The data plane stays up (pushes are refused since BeginStop) until the host-only steps
  // are safe: UCX 1.13 can abort in ucp_worker_destroy while a client's connection is being
  // set up over tcp, and an abort before the drain lost every host-only step (the soak found
  // it: 287 steps). It goes below, before the store it feeds.
  auto started = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  if (drain) {
    Store::StopResult drained = (*store)->DrainForStop(deadline, /*keep_host_copies=*/keep);
    if (!drained.status.ok()) {
      SNAPD_LOG_ERROR("stopping short of writing every host-only step to disk: %s; %s",
                      drained.status.message().c_str(),
                      keep ? "the rest stays only in the host tier kept by systemd's fd store "
                             "(lost if the store is flushed or the node reboots)"
                           : "the steps left are named below and marked lost");
    } else {
      SNAPD_LOG_INFO("wrote to disk %llu host-only steps (%s) in %.2f s",
                     static_cast<unsigned long long>(drained.steps),
                     FormatBytes(drained.bytes).c_str(), seconds_since(started));
    }
  }
  if (keep) {
    // Writes in flight when a drain ran out of time end first (one step each): a short grace
    // inside TimeoutStopSec's margin over stop_timeout.
    auto kept_by = std::max(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    auto kept_from = std::chrono::steady_clock::now();
    Store::StopResult stopped = (*store)->KeepHostTier(kept_by);
    bool handed = true;
    if (stopped.status.ok()) {
      for (auto [arena, fd] : host->first->arena_fds()) {
        handed = NotifyWithFd(env, "FDSTORE=1\nFDNAME=" + ArenaFdName(arena), fd) && handed;
      }
    }
    if (stopped.status.ok() && !handed) {
      SNAPD_LOG_ERROR("handing the host tier to systemd's fd store failed (%s): %llu of its "
                      "%llu steps are on no disk and will be reported lost at the next start",
                      std::strerror(errno), static_cast<unsigned long long>(stopped.host_only),
                      static_cast<unsigned long long>(stopped.steps));
    } else if (!stopped.status.ok()) {
      SNAPD_LOG_ERROR("stopping short: %s; the host-only steps left are named below and "
                      "marked lost", stopped.status.message().c_str());
    } else {
      SNAPD_LOG_INFO("kept in systemd's fd store %llu host-tier steps (%s), %llu of them on no "
                     "disk, in %.2f s",
                     static_cast<unsigned long long>(stopped.steps),
                     FormatBytes(stopped.bytes).c_str(),
                     static_cast<unsigned long long>(stopped.host_only), seconds_since(kept_from));
    }
  }
  if (!keep && host_tier_adopted) {
    for (auto [arena, fd] : host->first->arena_fds()) {
      Notify(env, "FDSTOREREMOVE=1\nFDNAME=" + ArenaFdName(arena));
    }
  }
  data_plane->reset();  // no more traffic into the store
  store->reset();
  disk.reset();
  host->first.reset();
  catalog->reset();
  SNAPD_LOG_INFO("stopped cleanly");
  return 0;
}

}  // namespace
}  // namespace snapd

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], snapd::kCheckUcxAddressFlag) == 0) {
    snapd::RunUcxAddressCheck();
  }
  // The scratch buffers of compression, decoding and scrubbing (up to a step's size, on the
  // I/O and compression threads) are mapped for each use and unmapped when freed. glibc's
  // adaptive threshold would serve them from per-thread heaps once the first one is freed,
  // and keep that memory: in the soak (tests/soak), snapd's anonymous memory grew from 70 to
  // 216 MiB within one six-minute life; mapped per use, it stayed under 35 MiB.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  return snapd::Run(argc, argv);
}
