#include "fuzz_node.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <future>
#include <mutex>
#include <vector>
#include <thread>

#include "control/request_errors.h"
#include "log.h"

namespace adjsnap::fuzz {

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "fuzz harness: %s failed: %s\n", what, s.ToString().c_str());
  std::abort();
}

std::string MakeTempDir(const char* tag) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/adjsnap-fuzz-" + tag + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::perror("fuzz harness: mkdtemp");
    std::abort();
  }
  return pattern;
}

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

void QuietLogs() {
  const char* verbose = std::getenv("ADJSNAP_FUZZ_VERBOSE");
  if (verbose && *verbose == '1') return;
  log::SetLevel(log::Level::kWarn);
  setenv("UCX_LOG_LEVEL", "error", 0);
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
}

namespace {

// The directories of nodes that live until the process ends (the targets keep one node for all
// inputs and never destroy it): removed at exit, which is how libFuzzer ends a timed run, so a
// run leaves no catalog and spool behind in $TMPDIR (often tmpfs, that is memory).
std::mutex exit_dirs_mu;
std::vector<std::string>* exit_dirs = nullptr;

void RemoveExitDirs() {
  std::lock_guard<std::mutex> lock(exit_dirs_mu);
  for (const std::string& dir : *exit_dirs) RemoveTree(dir);
}

void RemoveAtExit(const std::string& dir) {
  std::lock_guard<std::mutex> lock(exit_dirs_mu);
  if (!exit_dirs) {
    exit_dirs = new std::vector<std::string>;
    std::atexit(RemoveExitDirs);
  }
  exit_dirs->push_back(dir);
}

}  // namespace

std::unique_ptr<Node> Node::Start(const NodeOptions& options) {
  std::unique_ptr<Node> n(new Node());
  n->dir_ = options.dir;
  if (n->dir_.empty()) {
    n->dir_ = MakeTempDir("node");
    n->own_dir_ = true;
    RemoveAtExit(n->dir_);
  }
  n->catalog_ = Take(Catalog::Open(n->dir_ + "/catalog"), "Catalog::Open");
  uint64_t epoch = Take(n->catalog_->BeginEpoch(), "BeginEpoch");
  n->host_ = Take(HostTier::Create(options.host_bytes), "HostTier::Create");
  if (options.disk) {
    DiskTierOptions d;
    d.spools = {n->dir_ + "/spool"};
    d.budget_bytes = options.disk_bytes;
    n->disk_ = Take(DiskTier::Open(d), "DiskTier::Open");
  }
  StoreOptions so;
  so.epoch = epoch;
  so.io_threads = 1;
  n->store_ = Take(Store::Open(n->catalog_.get(), n->host_.get(), n->disk_.get(), so),
                   "Store::Open");
  if (options.data_plane || options.control) {
    DataPlane::Options dp;
    n->data_plane_ = Take(DataPlane::Start(dp, n->store_.get(), &n->sessions_), "DataPlane::Start");
  }
  if (options.arena_socket || options.control) {
    n->arena_ = Take(ArenaSocket::Start(n->dir_ + "/adjsnap.sock.arena", n->host_.get(),
                                        &n->sessions_),
                     "ArenaSocket::Start");
  }
  if (options.control) {
    n->control_socket_ = n->dir_ + "/adjsnap.sock";
    n->service_ = std::make_unique<ControlService>(n->store_.get(), &n->sessions_,
                                                   n->data_plane_.get(), n->control_socket_,
                                                   n->arena_->path());
    grpc::ServerBuilder builder;
    builder.RegisterService(n->service_.get());
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> ic;
    ic.push_back(NameRequestErrors(&n->calls_in_flight_));
    builder.experimental().SetInterceptorCreators(std::move(ic));
    n->server_ = builder.BuildAndStart();
    if (!n->server_) Check(Status::Internal("no server"), "grpc BuildAndStart");
    n->listener_ = Take(PeerListener::Listen(n->control_socket_, 0600), "PeerListener::Listen");
    n->service_->SetPeers(n->listener_.get(), ControlService::kNoGroup);
    n->listener_->Serve(n->server_.get());
  }
  return n;
}

Node::~Node() {
  if (service_) service_->Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  listener_.reset();
  server_.reset();
  service_.reset();
  arena_.reset();
  data_plane_.reset();
  store_.reset();
  disk_.reset();
  host_.reset();
  catalog_.reset();
  if (own_dir_) RemoveTree(dir_);
}

}  // namespace adjsnap::fuzz

namespace adjsnap::fuzz {

Status StartFrom(const std::string& dir, bool host_adopted) {
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog, Catalog::Open(dir + "/catalog"));
  ADJSNAP_ASSIGN_OR_RETURN(uint64_t epoch, catalog->BeginEpoch());
  ADJSNAP_ASSIGN_OR_RETURN(std::optional<v1::HostTierKept> kept, catalog->TakeHostTierKept());
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<HostTier> host, HostTier::Create(8ull << 20));
  DiskTierOptions d;
  d.spools = {dir + "/spool"};
  d.budget_bytes = 8ull << 20;
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> disk, DiskTier::Open(d));
  StoreOptions so;
  so.epoch = epoch;
  so.io_threads = 1;
  so.kept_host_tier = kept;
  so.host_tier_adopted = host_adopted && kept.has_value();
  ADJSNAP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                         Store::Open(catalog.get(), host.get(), disk.get(), so));
  auto wait = [](std::future<void>& f, const char* what) {
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      std::fprintf(stderr, "restart: %s unanswered within 10 s\n", what);
      std::abort();
    }
  };
  for (const v1::RunInfo& run : store->ListRuns()) {
    const std::string name = std::to_string(run.owner_uid()) + ":" + run.spec().name();
    auto scrubbed = std::make_shared<std::promise<void>>();
    std::future<void> f = scrubbed->get_future();
    store->ScrubRun(name, [scrubbed](Result<Store::ScrubResult>) { scrubbed->set_value(); });
    wait(f, "ScrubRun");
    v1::RunInfo info;
    auto snaps = store->ListSnapshots(name, &info);
    if (!snaps.ok()) continue;
    for (const v1::SnapshotInfo& s : *snaps) {
      auto fetched = std::make_shared<std::promise<void>>();
      std::future<void> g = fetched->get_future();
      store->BeginFetch(run.run_id(), s.step(), run.spec().bytes_per_step(), /*backward=*/true,
                        [fetched](Result<Store::FetchGrant>) { fetched->set_value(); });
      wait(g, "BeginFetch");
    }
  }
  return Status::Ok();
}

}  // namespace adjsnap::fuzz

namespace adjsnap::fuzz {

std::string Field(v1::Dtype dtype, uint64_t ny, uint64_t nx, uint64_t step) {
  std::string out;
  for (uint64_t y = 0; y < ny; ++y) {
    for (uint64_t x = 0; x < nx; ++x) {
      const double v = std::sin(0.3 * x + 0.1 * step) * std::cos(0.2 * y) * 100.0;
      auto append = [&out](auto value) {
        out.append(reinterpret_cast<const char*>(&value), sizeof value);
      };
      switch (dtype) {
        case v1::DTYPE_FLOAT64: append(v); break;
        case v1::DTYPE_INT32: append(static_cast<int32_t>(v)); break;
        case v1::DTYPE_INT64: append(static_cast<int64_t>(v)); break;
        default: append(static_cast<float>(v)); break;
      }
    }
  }
  return out;
}

void PushStep(Store* store, uint64_t run_id, uint64_t step, const std::string& bytes) {
  auto ticket = std::make_shared<std::promise<Result<Store::PushTicket>>>();
  std::future<Result<Store::PushTicket>> f = ticket->get_future();
  store->BeginPush(run_id, step, bytes.size(),
                   [ticket](Result<Store::PushTicket> t) { ticket->set_value(std::move(t)); });
  Store::PushTicket t = Take(f.get(), "BeginPush");
  std::memcpy(t.block->data(), bytes.data(), bytes.size());
  Check(store->CommitPush(t), "CommitPush");
}

void WaitOnDisk(Store* store, const std::string& name, uint64_t steps) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (uint64_t step = 0; step < steps; ++step) {
    while (Take(store->Locate(name, step), "Locate").tier() != v1::TIER_DISK) {
      if (std::chrono::steady_clock::now() > deadline) {
        Check(Status::Internal("step not on disk within 10 s"), "WaitOnDisk");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace adjsnap::fuzz
