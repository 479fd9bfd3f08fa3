// snapbench: snapd throughput against the physical limits, measured in the same run.
//
// Forward: N pushes of S bytes through libsnapd (two source buffers, each reused only after
// its push is released, as a solver does), timed until every snapshot is stored.
// Backward: N fetches in reverse step order into one buffer.
// Reference 1: single-thread memcpy of the same pattern: the two source buffers into N slots of
// one warm region, and the slots in reverse into one buffer (memcpy of S bytes between two warm
// buffers in --spill).
// Reference 2: a raw UCX put (ucp_put_nbx + flush) of S bytes between two UCX workers of this
// process, over the same UCX_TLS, with the target memory pre-registered.
// Each of two passes runs in a fresh process, as solvers start one per shot: its page tables
// hold none of the host tier, and its minor page faults per GiB are reported beside each rate.
// The first pass also shows what share of its tier pages snapd itself touched for the first
// time (a daemon just started, without host_prefault); the second runs on pages snapd has used.
// --in-process runs a warm-up pass and the measured pass in this one process instead (--cold
// skips the warm-up).
//
//   snapbench [--steps N] [--bytes S] [--socket PATH] [--in-process [--cold]] [--json]
//
// Spill mode (--spill): a run of 3x the daemon's host tier, so the oldest two thirds go to
// its disk tier. References, measured in the same run on the spool's filesystem: an O_DIRECT
// sequential write of the same bytes, and an O_DIRECT read of them (the per-step read time).
// (a) Forward with no compute: the disk tier's write rate while spilling (bytes over busy
//     time, from snapd's counters) against the O_DIRECT write.
// (b) Backward with a simulated compute time per step >= the read time per step (a sleep: a
//     GPU solver's host thread waits on the device): time each fetch waited beyond a memcpy of
//     its bytes (the stall), as a fraction of the time reading the spilled steps takes.
//
//   snapbench --spill [--bytes S] [--compute-ms T] [--socket PATH] [--json]
//
// Codec mode (--codec): snapd's zfp codec on a real wavefield (the example solver's, 2048 x
// 2048 float32 after 1500 steps), one worker and all of the daemon's workers, against one
// standalone zfp_compress/zfp_decompress call on the same field in the same run; plus the
// compression ratio, for each mode. No daemon needed.
//
//   snapbench --codec [--workers N] [--json]
//
// Device mode (--device, CUDA builds): device pushes and fetches against pinned cudaMemcpy of
// the same bytes, and the backward stall (snapbench_device.cc).
//
//   snapbench --device [--steps N] [--bytes S] [--compute-ms T] [--socket PATH] [--json]
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <zfp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "acoustic_model.h"
#include "snapd/zfp_codec.h"
#include "snapd/paths.h"
#include "snapbench_device.h"
#include "snapd/client.h"
#include "snapd/v1/control.grpc.pb.h"
#include "snapd/units.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Args {
  uint64_t steps = 32;
  uint64_t bytes = 64ull << 20;
  std::string socket;
  bool cold = false;
  bool in_process = false;  // both passes in this process (warm pages) instead of fresh ones
  bool json = false;
  bool spill = false;
  bool codec = false;
  bool device = false;
  bool fill = false;    // push a kept run for the restart benchmark, then exit
  bool verify = false;  // fetch that run back and check every byte
  int workers = 0;  // codec: 0 = the daemon's default (cores minus one)
  int many = 0;     // many: solver processes at once
  int kill = 0;     // many: how many of them are killed mid-run
  bool uniform = false;  // many: every solver --steps x --bytes, mapped (not mixed sizes)
  double compute_ms = 0;  // spill: simulated compute per backward step; 0 = 1.25x read time
};

// Best of `reps` single-thread memcpy runs of `bytes`, in bytes per second.
double MemcpyRate(uint64_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    auto t1 = Clock::now();
    asm volatile("" : : "r"(b.data()) : "memory");
    best = std::max(best, bytes / Seconds(t0, t1));
  }
  return best;
}

// Raw UCX put between two workers in this process. Returns bytes per second (best of reps),
// or a negative value with `error` set.
double UcxPutRate(uint64_t bytes, int reps, std::string* error) {
  auto fail = [&](const char* what, ucs_status_t s) {
    *error = std::string(what) + ": " + ucs_status_string(s);
    return -1.0;
  };
  ucp_config_t* config = nullptr;
  if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) {
    return fail("ucp_config_read", s);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h ctx[2] = {};
  ucp_worker_h wrk[2] = {};
  for (int i = 0; i < 2; ++i) {
    if (ucs_status_t s = ucp_init(&params, config, &ctx[i]); s != UCS_OK) {
      return fail("ucp_init", s);
    }
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucs_status_t s = ucp_worker_create(ctx[i], &wp, &wrk[i]); s != UCS_OK) {
      return fail("ucp_worker_create", s);
    }
  }
  ucp_config_release(config);
  auto progress = [&] {
    ucp_worker_progress(wrk[0]);
    ucp_worker_progress(wrk[1]);
  };
  auto wait = [&](ucs_status_ptr_t req) -> ucs_status_t {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) progress();
    ucp_request_free(req);
    return s;
  };
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  ucp_worker_get_address(wrk[1], &addr, &addr_len);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = addr;
  ucp_ep_h ep = nullptr;
  if (ucs_status_t s = ucp_ep_create(wrk[0], &ep_params, &ep); s != UCS_OK) {
    return fail("ucp_ep_create", s);
  }
  ucp_worker_release_address(wrk[1], addr);

  std::vector<char> src(bytes, 3);
  std::vector<char> dst(bytes, 4);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = dst.data();
  mp.length = bytes;
  ucp_mem_h memh = nullptr;
  if (ucs_status_t s = ucp_mem_map(ctx[1], &mp, &memh); s != UCS_OK) {
    return fail("ucp_mem_map", s);
  }
  void* rkey_buf = nullptr;
  size_t rkey_len = 0;
  ucp_rkey_pack(ctx[1], memh, &rkey_buf, &rkey_len);
  ucp_rkey_h rkey = nullptr;
  ucs_status_t us = ucp_ep_rkey_unpack(ep, rkey_buf, &rkey);
  ucp_rkey_buffer_release(rkey_buf);
  if (us != UCS_OK) return fail("ucp_ep_rkey_unpack", us);

  double best = 0;
  ucp_request_param_t rp{};
  for (int r = 0; r < reps + 1; ++r) {  // the first put wires up lanes; not timed
    auto t0 = Clock::now();
    ucs_status_t s = wait(ucp_put_nbx(ep, src.data(), bytes,
                                      reinterpret_cast<uint64_t>(dst.data()), rkey, &rp));
    if (s == UCS_OK) s = wait(ucp_ep_flush_nbx(ep, &rp));
    auto t1 = Clock::now();
    if (s != UCS_OK) return fail("ucp_put_nbx", s);
    if (r > 0) best = std::max(best, bytes / Seconds(t0, t1));
  }
  if (std::memcmp(src.data(), dst.data(), bytes) != 0) {
    *error = "raw UCX put delivered different bytes";
    return -1.0;
  }
  ucp_rkey_destroy(rkey);
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  (void)wait(ucp_ep_close_nbx(ep, &cp));
  ucp_mem_unmap(ctx[1], memh);
  for (int i = 1; i >= 0; --i) {
    ucp_worker_destroy(wrk[i]);
    ucp_cleanup(ctx[i]);
  }
  return best;
}

struct PassResult {
  double push_rate = 0;
  double fetch_rate = 0;
  double push_faults_per_gib = 0;   // minor page faults this process took while pushing
  double fetch_faults_per_gib = 0;  // and while fetching
  double new_pages = -1;  // share of the run's host-tier bytes snapd had never used; -1: not asked
  bool mapped = false;    // the pass ran on the mapped host tier (else the copied UCX path)
  int copy_threads = 1;   // threads libsnapd copied each push and fetch with (mapped path)
};

uint64_t MinorFaults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<uint64_t>(r.ru_minflt);
}

snapd::Result<PassResult> Pass(snapd::Client& c, const Args& a, const std::string& name,
                               std::vector<std::vector<char>>& src, std::vector<char>& dst) {
  (void)c.DeleteRun(name);
  snapd::RunSpec spec;
  spec.name = name;
  spec.steps = a.steps;
  spec.bytes_per_step = a.bytes;
  SNAPD_ASSIGN_OR_RETURN(snapd::RunInfo run, c.OpenRun(spec));
  std::vector<snapd::PushHandle> handles(a.steps);
  uint64_t f0 = MinorFaults();
  auto t0 = Clock::now();
  for (uint64_t t = 0; t < a.steps; ++t) {
    size_t b = t % src.size();
    if (t >= src.size()) SNAPD_RETURN_IF_ERROR(handles[t - src.size()].WaitReleased());
    SNAPD_ASSIGN_OR_RETURN(handles[t], c.Push(run.run_id, t, src[b].data(), a.bytes));
  }
  for (auto& h : handles) SNAPD_RETURN_IF_ERROR(h.WaitStored());
  auto t1 = Clock::now();
  uint64_t f1 = MinorFaults();
  for (uint64_t t = a.steps; t-- > 0;) {
    SNAPD_RETURN_IF_ERROR(c.Fetch(run.run_id, t, dst.data(), a.bytes));
  }
  auto t2 = Clock::now();
  uint64_t f2 = MinorFaults();
  // Spot-check the last fetch (step 0) against its source buffer.
  if (std::memcmp(dst.data(), src[0].data(), a.bytes) != 0) {
    return snapd::Status::DataLoss("step 0 came back with different bytes");
  }
  SNAPD_RETURN_IF_ERROR(c.DeleteRun(name));
  double total = static_cast<double>(a.steps) * a.bytes;
  double gib = total / (1ull << 30);
  return PassResult{total / Seconds(t0, t1), total / Seconds(t1, t2), (f1 - f0) / gib,
                    (f2 - f1) / gib, -1, c.data_path() == snapd::DataPath::kMappedHostTier,
                    c.copy_threads()};
}

// The solver's two alternating field buffers, each page marked so a fetch can be checked.
std::vector<std::vector<char>> SourceBuffers(uint64_t bytes) {
  std::vector<std::vector<char>> src(2, std::vector<char>(bytes));
  for (size_t b = 0; b < src.size(); ++b) {
    for (uint64_t i = 0; i < bytes; i += 4096) src[b][i] = static_cast<char>(i / 4096 + b);
  }
  return src;
}

snapd::Result<snapd::v1::StatsResponse> DaemonStats(const std::string& socket) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = snapd::v1::Control::NewStub(channel);
  grpc::ClientContext ctx;
  snapd::v1::StatsResponse r;
  grpc::Status s = stub->Stats(&ctx, snapd::v1::StatsRequest(), &r);
  if (!s.ok()) return snapd::Status::Unavailable("Stats: " + s.error_message());
  return r;
}

const snapd::v1::TierStats* FindTier(const snapd::v1::StatsResponse& r, snapd::v1::Tier tier) {
  for (const auto& t : r.tiers()) {
    if (t.tier() == tier) return &t;
  }
  return nullptr;
}

// One pass in a new process, as a solver starts one per shot: it connects, maps the host tier
// and pushes and fetches with nothing of the tier in its page tables. Before the pass it asks
// snapd how much of the host tier has ever held data (peak use), to tell what share of the
// run's pages the daemon itself touches for the first time.
snapd::Result<PassResult> FreshProcessPass(const Args& a, const std::string& name) {
  struct Report {
    int code;  // 0: ok; else a snapd::Code
    PassResult result;
    char message[512];
  };
  int fds[2];
  if (pipe(fds) != 0) return snapd::Status::Internal(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return snapd::Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    Report rep{};
    auto run = [&]() -> snapd::Result<PassResult> {
      SNAPD_ASSIGN_OR_RETURN(snapd::v1::StatsResponse before, DaemonStats(a.socket));
      const snapd::v1::TierStats* host = FindTier(before, snapd::v1::TIER_HOST);
      double need = static_cast<double>(a.steps) * ((a.bytes + 4095) / 4096 * 4096);
      double seen = host ? static_cast<double>(
                               std::max(host->peak_used_bytes(), host->prefaulted_bytes()))
                         : need;
      snapd::ClientOptions opts;
      opts.socket_path = a.socket;
      opts.client_name = "snapbench";
      SNAPD_ASSIGN_OR_RETURN(auto client, snapd::Client::Connect(opts));
      std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
      std::vector<char> dst(a.bytes, 0);
      SNAPD_ASSIGN_OR_RETURN(PassResult r, Pass(*client, a, name, src, dst));
      r.new_pages = std::max(0.0, need - seen) / need;
      return r;
    };
    snapd::Result<PassResult> r = run();
    if (r.ok()) {
      rep.result = *r;
    } else {
      rep.code = static_cast<int>(r.status().code());
      std::snprintf(rep.message, sizeof rep.message, "%s", r.status().message().c_str());
    }
    ssize_t n = write(fds[1], &rep, sizeof rep);
    _exit(n == static_cast<ssize_t>(sizeof rep) ? 0 : 1);
  }
  close(fds[1]);
  Report rep{};
  size_t got = 0;
  while (got < sizeof rep) {
    ssize_t n = read(fds[0], reinterpret_cast<char*>(&rep) + got, sizeof rep - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (got != sizeof rep) {
    return snapd::Status::Internal("the pass's process ended without a report (status " +
                                   std::to_string(wstatus) + ")");
  }
  if (rep.code != 0) return snapd::Status(static_cast<snapd::Code>(rep.code), rep.message);
  return rep.result;
}

// O_DIRECT sequential write then read of `steps` x `bytes` in `dir`; bytes per second each.
snapd::Status DirectIoRates(const std::string& dir, uint64_t steps, uint64_t bytes,
                            double* write_rate, double* read_rate) {
  std::string path = dir + "/snapbench-odirect.tmp";
  uint64_t chunk = (bytes + 4095) / 4096 * 4096;
  void* raw = std::aligned_alloc(4096, chunk);
  if (!raw) return snapd::Status::ResourceExhausted("aligned buffer");
  std::unique_ptr<void, void (*)(void*)> buf(raw, std::free);
  std::memset(buf.get(), 0x5c, chunk);
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return snapd::Status::Internal("O_DIRECT open of " + path + ": " + std::strerror(errno));
  }
  auto fail = [&](const char* what) {
    std::string msg = std::string(what) + " " + path + ": " + std::strerror(errno);
    close(fd);
    unlink(path.c_str());
    return snapd::Status::Internal(msg);
  };
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < steps; ++i) {
    if (pwrite(fd, buf.get(), chunk, static_cast<off_t>(i * chunk)) != static_cast<ssize_t>(chunk)) {
      return fail("write");
    }
  }
  if (fdatasync(fd) != 0) return fail("fdatasync");
  auto t1 = Clock::now();
  for (uint64_t i = 0; i < steps; ++i) {
    if (pread(fd, buf.get(), chunk, static_cast<off_t>(i * chunk)) != static_cast<ssize_t>(chunk)) {
      return fail("read");
    }
  }
  auto t2 = Clock::now();
  close(fd);
  unlink(path.c_str());
  *write_rate = steps * chunk / Seconds(t0, t1);
  *read_rate = steps * chunk / Seconds(t1, t2);
  return snapd::Status::Ok();
}

int Spill(snapd::Client& c, const Args& a) {
  auto fail = [](const std::string& what, const snapd::Status& s) {
    std::fprintf(stderr, "snapbench --spill: %s: %s\n", what.c_str(), s.ToString().c_str());
    return 1;
  };
  auto before = DaemonStats(c.socket_path());
  if (!before.ok()) return fail("stats", before.status());
  const auto* host = FindTier(*before, snapd::v1::TIER_HOST);
  const auto* disk = FindTier(*before, snapd::v1::TIER_DISK);
  if (!host || !disk) {
    return fail("setup", snapd::Status::FailedPrecondition("snapd runs without a disk tier"));
  }
  if (before->spool_dirs().empty()) {
    return fail("setup", snapd::Status::PermissionDenied(
                             "snapd names its spool directories (for the O_DIRECT reference) to "
                             "admins only: run as root, snapd's uid or the admin_group"));
  }
  uint64_t steps = 3 * host->budget_bytes() / a.bytes + 1;
  double total = static_cast<double>(steps) * a.bytes;
  double odirect_write = 0, odirect_read = 0;
  if (auto s = DirectIoRates(before->spool_dirs(0), steps, a.bytes, &odirect_write, &odirect_read);
      !s.ok()) {
    return fail("O_DIRECT reference", s);
  }
  double read_s = a.bytes / odirect_read;  // one step from disk
  double compute_s = a.compute_ms > 0 ? a.compute_ms / 1e3 : 1.25 * read_s;
  double copy_s = a.bytes / MemcpyRate(a.bytes, 3);

  std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
  std::string name = "snapbench-spill";
  (void)c.DeleteRun(name);
  snapd::RunSpec spec;
  spec.name = name;
  spec.steps = steps;
  spec.bytes_per_step = a.bytes;
  spec.layers = "DiskHost";
  auto run = c.OpenRun(spec);
  if (!run.ok()) return fail("open run", run.status());

  // (a) Forward, no compute.
  std::vector<snapd::PushHandle> handles(steps);
  auto t0 = Clock::now();
  for (uint64_t t = 0; t < steps; ++t) {
    if (t >= 2) {
      if (auto s = handles[t - 2].WaitReleased(); !s.ok()) return fail("push", s);
    }
    auto h = c.Push(run->run_id, t, src[t % 2].data(), a.bytes);
    if (!h.ok()) return fail("push", h.status());
    handles[t] = *h;
  }
  for (auto& h : handles) {
    if (auto s = h.WaitStored(); !s.ok()) return fail("push", s);
  }
  double forward_s = Seconds(t0, Clock::now());
  const uint64_t j = run->host_boundary;

  // (b) Backward right away, with compute per step.
  std::vector<char> dst(a.bytes);
  std::vector<double> fetch_s(steps);
  t0 = Clock::now();
  for (uint64_t t = steps; t-- > 0;) {
    auto f0 = Clock::now();
    if (auto s = c.Fetch(run->run_id, t, dst.data(), a.bytes); !s.ok()) return fail("fetch", s);
    fetch_s[t] = Seconds(f0, Clock::now());
    if (dst[4096] != src[t % 2][4096]) {
      return fail("fetch", snapd::Status::DataLoss("step " + std::to_string(t) + " differs"));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(compute_s));
  }
  double backward_s = Seconds(t0, Clock::now());
  // Stall of a spilled step: what its fetch took beyond the median fetch of a step that never
  // left host memory (the disk's share); and, stricter, beyond a bare memcpy of its bytes.
  std::vector<double> host_fetches(fetch_s.begin() + j, fetch_s.end());
  std::nth_element(host_fetches.begin(), host_fetches.begin() + host_fetches.size() / 2,
                   host_fetches.end());
  double host_fetch_s = host_fetches.empty() ? copy_s : host_fetches[host_fetches.size() / 2];
  double stall_disk = 0, stall_vs_copy = 0;
  for (uint64_t t = 0; t < j; ++t) {
    stall_disk += std::max(0.0, fetch_s[t] - host_fetch_s);
    stall_vs_copy += std::max(0.0, fetch_s[t] - copy_s);
  }
  auto after = DaemonStats(c.socket_path());
  if (!after.ok()) return fail("stats", after.status());
  (void)c.DeleteRun(name);
  const auto* disk_after = FindTier(*after, snapd::v1::TIER_DISK);
  uint64_t wbytes = disk_after->write_bytes() - disk->write_bytes();
  uint64_t wbusy = disk_after->write_busy_ns() - disk->write_busy_ns();
  double spill_write = wbusy ? wbytes * 1e9 / wbusy : 0;
  double disk_read_s = j * read_s;  // the spilled steps, at the O_DIRECT read rate
  uint64_t hits = after->prefetch_hits() - before->prefetch_hits();
  uint64_t demand = after->demand_reads() - before->demand_reads();
  auto gbs = [](double r) { return r / 1e9; };
  if (a.json) {
    std::printf(
        "{\"steps\": %llu, \"bytes\": %llu, \"host_budget\": %llu, \"disk_steps\": %llu,\n"
        " \"odirect_write_gbs\": %.3f, \"odirect_read_gbs\": %.3f, \"spill_write_gbs\": %.3f,"
        " \"spill_vs_odirect\": %.3f, \"forward_gbs\": %.3f,\n"
        " \"compute_ms\": %.3f, \"read_ms_per_step\": %.3f, \"host_fetch_ms\": %.3f,"
        " \"memcpy_ms\": %.3f, \"stall_ms\": %.3f, \"stall_vs_memcpy_ms\": %.3f,"
        " \"disk_read_ms\": %.3f, \"stall_fraction\": %.4f, \"stall_fraction_vs_memcpy\": %.4f,"
        " \"prefetch_hits\": %llu, \"demand_reads\": %llu, \"backward_s\": %.3f}\n",
        (unsigned long long)steps, (unsigned long long)a.bytes,
        (unsigned long long)host->budget_bytes(), (unsigned long long)j, gbs(odirect_write),
        gbs(odirect_read), gbs(spill_write), spill_write / odirect_write, gbs(total / forward_s),
        compute_s * 1e3, read_s * 1e3, host_fetch_s * 1e3, copy_s * 1e3, stall_disk * 1e3,
        stall_vs_copy * 1e3, disk_read_s * 1e3, disk_read_s > 0 ? stall_disk / disk_read_s : 0.0,
        disk_read_s > 0 ? stall_vs_copy / disk_read_s : 0.0, (unsigned long long)hits,
        (unsigned long long)demand, backward_s);
    return 0;
  }
  std::printf("snapbench --spill: %llu steps x %s = %s through a %s host tier; steps 0..%llu "
              "spill to %s\n",
              (unsigned long long)steps, snapd::FormatBytes(a.bytes).c_str(),
              snapd::FormatBytes(static_cast<uint64_t>(total)).c_str(),
              snapd::FormatBytes(host->budget_bytes()).c_str(), (unsigned long long)j - 1,
              before->spool_dirs(0).c_str());
  std::printf("O_DIRECT sequential write   %8.2f GB/s   read %8.2f GB/s (%.2f ms per step)\n",
              gbs(odirect_write), gbs(odirect_read), read_s * 1e3);
  std::printf("(a) spill write             %8.2f GB/s = %.2f x O_DIRECT write   (forward "
              "end to end %.2f GB/s)\n",
              gbs(spill_write), spill_write / odirect_write, gbs(total / forward_s));
  std::printf("(b) backward, compute %.2f ms/step: %llu spilled steps stalled %.1f ms beyond a "
              "host-tier fetch (%.2f ms) = %.1f%% of their %.1f ms disk read time\n"
              "    (beyond a bare memcpy, %.2f ms: %.1f ms = %.1f%%); %llu prefetch hits, %llu "
              "waited on disk\n",
              compute_s * 1e3, (unsigned long long)j, stall_disk * 1e3, host_fetch_s * 1e3,
              disk_read_s > 0 ? 100.0 * stall_disk / disk_read_s : 0.0, disk_read_s * 1e3,
              copy_s * 1e3, stall_vs_copy * 1e3,
              disk_read_s > 0 ? 100.0 * stall_vs_copy / disk_read_s : 0.0,
              (unsigned long long)hits, (unsigned long long)demand);
  return 0;
}

// Many mode (--many N): N solver processes at once on one snapd, with mixed step sizes (1, 4,
// 16 and 64 MiB, and 3 MiB + 17 bytes), odd-numbered ones on the copied UCX path, each pushing
// its steps then fetching them in reverse and checking every byte; --kill K of them are killed
// with SIGKILL mid-run. Each solver is forked before any gRPC or UCX state exists here, and
// reports through a pipe. Printed: refusals, bytes exact, the host tier's peak use against its
// budget, fetches served from memory, and each solver's throughput beside a memcpy and the
// O_DIRECT disk measured in the same run.
//
//   snapbench --many N [--uniform --bytes S] [--compute-ms T] [--kill K] [--steps S] [--socket PATH] [--json]
struct SolverReport {
  uint64_t bytes = 0, steps = 0, pushed = 0, refused = 0, exact = 0, wrong = 0, failed = 0;
  double forward_s = 0, backward_s = 0;
};

SolverReport RunOneSolver(const std::string& socket, int id, uint64_t bytes, uint64_t steps,
                          bool mapped, double compute_ms) {
  SolverReport r;
  r.bytes = bytes;
  r.steps = steps;
  snapd::ClientOptions o;
  o.socket_path = socket;
  o.client_name = "snapbench-many";
  o.map_host_tier = mapped;
  auto c = snapd::Client::Connect(o);
  if (!c.ok()) {
    r.failed = 1;
    return r;
  }
  snapd::RunSpec spec;
  spec.name = "snapbench-many-" + std::to_string(getpid()) + "-" + std::to_string(id);
  spec.steps = steps;
  spec.bytes_per_step = bytes;
  auto run = (*c)->OpenRun(spec);
  if (!run.ok()) {
    r.failed = 1;
    return r;
  }
  auto pattern = [&](std::vector<uint64_t>& w, uint64_t t) {
    for (size_t i = 0; i < w.size(); i += 512)
      w[i] = (static_cast<uint64_t>(id) << 48) ^ (t << 24) ^ i;
  };
  std::vector<uint64_t> in(bytes / 8 + 1), out(bytes / 8 + 1);
  auto t0 = Clock::now();
  for (uint64_t t = 0; t < steps; ++t) {
    pattern(in, t);
    auto h = (*c)->Push(run->run_id, t, in.data(), bytes);
    snapd::Status s = h.ok() ? h->WaitStored() : h.status();
    if (s.code() == snapd::Code::kResourceExhausted)
      ++r.refused;
    else if (!s.ok())
      ++r.failed;
    else
      ++r.pushed;
  }
  auto t1 = Clock::now();
  for (uint64_t t = steps; t-- > 0;) {
    pattern(in, t);
    std::fill(out.begin(), out.end(), 0);
    if (compute_ms > 0) {  // the adjoint step's compute, as a solver's host thread waits for it
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms));
    }
    if (!(*c)->Fetch(run->run_id, t, out.data(), bytes).ok()) continue;
    if (std::memcmp(in.data(), out.data(), bytes) == 0)
      ++r.exact;
    else
      ++r.wrong;
  }
  auto t2 = Clock::now();
  r.forward_s = Seconds(t0, t1);
  r.backward_s = Seconds(t1, t2);
  (void)(*c)->DeleteRun(spec.name);
  return r;
}

int Many(const Args& a) {
  const uint64_t kMiB = 1 << 20;
  const uint64_t sizes[] = {1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB, 3 * kMiB + 17};
  struct Child {
    pid_t pid;
    int fd;
    bool killed;
  };
  std::vector<Child> children;
  auto start = Clock::now();
  for (int i = 0; i < a.many; ++i) {
    int p[2];
    if (pipe(p) != 0) return 1;
    uint64_t bytes = a.uniform ? a.bytes : sizes[i % 5];
    uint64_t steps = a.uniform ? a.steps  // else S, 1.5 S, 2 S
                               : a.steps + (a.steps * static_cast<uint64_t>(i % 3)) / 2;
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      SolverReport r =
          RunOneSolver(a.socket, i, bytes, steps, a.uniform || i % 2 == 0, a.compute_ms);
      (void)!write(p[1], &r, sizeof r);
      _exit(0);
    }
    close(p[1]);
    children.push_back({pid, p[0], false});
  }
  // Kill K of them at spread-out moments while they push.
  for (int k = 0; k < a.kill && k < a.many; ++k) {
    usleep(400000);
    Child& victim = children[static_cast<size_t>(a.many - 1 - k)];
    kill(victim.pid, SIGKILL);
    victim.killed = true;
  }
  // A victim that finished before its signal came was not killed: it reports like the others.
  std::vector<SolverReport> reports;
  int killed = 0;
  for (Child& ch : children) {
    SolverReport r;
    ssize_t n = read(ch.fd, &r, sizeof r);
    close(ch.fd);
    int status = 0;
    waitpid(ch.pid, &status, 0);
    ch.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (ch.killed) ++killed;
    if (!ch.killed && n == static_cast<ssize_t>(sizeof r)) reports.push_back(r);
  }
  double wall_s = Seconds(start, Clock::now());
  // References in the same run, after the load: memcpy of a 16 MiB step and O_DIRECT on the
  // spool's filesystem.
  double memcpy_rate = MemcpyRate(16 * kMiB, 5);
  auto stats = DaemonStats(a.socket);
  if (!stats.ok()) {
    std::fprintf(stderr, "snapbench --many: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  double odirect_write = 0, odirect_read = 0;
  if (!stats->spool_dirs().empty()) {
    (void)DirectIoRates(stats->spool_dirs(0), 64, 16 * kMiB, &odirect_write, &odirect_read);
  }
  const auto* host = FindTier(*stats, snapd::v1::TIER_HOST);
  const auto* disk = FindTier(*stats, snapd::v1::TIER_DISK);
  // The disk tier's reads while at least one was in flight (the daemon's own counters).
  double disk_read = disk && disk->read_busy_ns() ? disk->read_bytes() / (disk->read_busy_ns() / 1e9)
                                                  : 0;
  uint64_t refused = 0, exact = 0, wrong = 0, failed = 0, steps = 0;
  double moved = 0;  // bytes pushed and fetched back by the surviving solvers
  for (const auto& r : reports) {
    moved += 2.0 * r.bytes * r.steps;
    refused += r.refused;
    exact += r.exact;
    wrong += r.wrong;
    failed += r.failed;
    steps += r.steps;
  }
  double peak = host ? static_cast<double>(host->peak_used_bytes()) / host->budget_bytes() : 0;
  uint64_t from_disk = stats->demand_reads();
  auto gbs = [](double rate) { return rate / 1e9; };
  if (a.json) {
    std::printf(
        "{\"solvers\": %d, \"killed\": %d, \"steps\": %llu, \"refused\": %llu, "
        "\"exact\": %llu, \"wrong\": %llu, \"failed\": %llu, \"daemon_refused_pushes\": "
        "%llu, \"host_peak_fraction\": %.3f, \"fetches_waited_on_disk\": %llu, "
        "\"prefetch_hits\": %llu, \"memcpy_gbs\": %.3f, \"odirect_write_gbs\": %.3f, "
        "\"odirect_read_gbs\": %.3f, \"disk_read_gbs\": %.3f, \"aggregate_gbs\": %.3f, "
        "\"solvers_detail\": [",
        a.many, killed, (unsigned long long)steps, (unsigned long long)refused,
        (unsigned long long)exact, (unsigned long long)wrong, (unsigned long long)failed,
        (unsigned long long)stats->refused_pushes(), peak, (unsigned long long)from_disk,
        (unsigned long long)stats->prefetch_hits(), gbs(memcpy_rate), gbs(odirect_write),
        gbs(odirect_read), gbs(disk_read), gbs(moved / wall_s));
    for (size_t i = 0; i < reports.size(); ++i) {
      const auto& r = reports[i];
      std::printf(
          "%s{\"bytes\": %llu, \"steps\": %llu, \"forward_gbs\": %.3f, "
          "\"backward_gbs\": %.3f}",
          i ? ", " : "", (unsigned long long)r.bytes, (unsigned long long)r.steps,
          gbs(r.bytes * r.steps / r.forward_s), gbs(r.bytes * r.steps / r.backward_s));
    }
    std::printf("]}\n");
  } else {
    std::printf("snapbench --many: %d solvers (%d killed), host tier %s\n", a.many, killed,
                host ? snapd::FormatBytes(host->budget_bytes()).c_str() : "?");
    std::printf("memcpy %.2f GB/s   O_DIRECT write %.2f GB/s   read %.2f GB/s (same run)\n",
                gbs(memcpy_rate), gbs(odirect_write), gbs(odirect_read));
    std::printf("%12s %6s %12s %8s %12s %8s\n", "step bytes", "steps", "forward GB/s", "/memcpy",
                "backward GB/s", "/memcpy");
    for (const auto& r : reports) {
      double f = r.bytes * r.steps / r.forward_s, b = r.bytes * r.steps / r.backward_s;
      std::printf("%12llu %6llu %12.2f %8.2f %12.2f %8.2f\n", (unsigned long long)r.bytes,
                  (unsigned long long)r.steps, gbs(f), f / memcpy_rate, gbs(b), b / memcpy_rate);
    }
    std::printf(
        "surviving solvers: %llu steps, refused %llu, exact %llu, wrong %llu, failed "
        "%llu; snapd refused_pushes %llu\n",
        (unsigned long long)steps, (unsigned long long)refused, (unsigned long long)exact,
        (unsigned long long)wrong, (unsigned long long)failed,
        (unsigned long long)stats->refused_pushes());
    std::printf("all solvers: %.2f GB pushed and fetched back in %.1f s = %.2f GB/s\n", moved / 1e9,
                wall_s, gbs(moved / wall_s));
    std::printf(
        "host tier peak use %.1f%% of its budget; fetches that waited on disk %llu, "
        "prefetch hits %llu\n",
        100 * peak, (unsigned long long)from_disk, (unsigned long long)stats->prefetch_hits());
    if (disk_read > 0) {
      std::printf("disk tier reads %.2f GB at %.2f GB/s while busy = %.2fx O_DIRECT read\n",
                  disk->read_bytes() / 1e9, gbs(disk_read),
                  odirect_read > 0 ? disk_read / odirect_read : 0);
    }
  }
  return refused == 0 && wrong == 0 && failed == 0 ? 0 : 1;
}

// Best of `reps` runs of `f`, in seconds.
template <typename F>
double BestSeconds(int reps, F f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  return best;
}

// One standalone zfp call over the whole 2-D field (the reference); seconds of compress and
// decompress, best of `reps`.
bool StandaloneZfp(const snapd::compress::CodecSpec& c, std::vector<float>& field, int nx, int ny,
                   double* compress_s, double* decompress_s) {
  zfp_field* f = zfp_field_2d(field.data(), zfp_type_float, nx, ny);
  zfp_stream* z = zfp_stream_open(nullptr);
  switch (c.codec) {
    case snapd::v1::CODEC_ZFP_REVERSIBLE: zfp_stream_set_reversible(z); break;
    case snapd::v1::CODEC_ZFP_RATE: zfp_stream_set_rate(z, c.param, zfp_type_float, 2, zfp_false); break;
    case snapd::v1::CODEC_ZFP_PRECISION: zfp_stream_set_precision(z, static_cast<uint>(c.param)); break;
    default: zfp_stream_set_accuracy(z, c.param); break;
  }
  std::vector<char> buf(zfp_stream_maximum_size(z, f));
  bitstream* bits = stream_open(buf.data(), buf.size());
  zfp_stream_set_bit_stream(z, bits);
  size_t n = 0;
  *compress_s = BestSeconds(3, [&] {
    zfp_stream_rewind(z);
    n = zfp_compress(z, f);
  });
  std::vector<float> out(field.size());
  zfp_field_set_pointer(f, out.data());
  *decompress_s = BestSeconds(3, [&] {
    zfp_stream_rewind(z);
    zfp_decompress(z, f);
  });
  stream_close(bits);
  zfp_stream_close(z);
  zfp_field_free(f);
  return n > 0;
}

int Codec(const Args& a) {
  constexpr int kN = 2048, kSteps = 1500;
  std::vector<float> field = acoustic::Wavefield(kN, kN, kSteps);
  float peak = 0;
  for (float v : field) peak = std::max(peak, std::fabs(v));
  int workers = a.workers ? a.workers : snapd::compress::DefaultCompressThreads();
  snapd::compress::CompressPool pool(workers);
  snapd::compress::FieldSpec spec{snapd::v1::DTYPE_FLOAT32, {kN, kN}, field.size() * 4};
  struct Mode {
    snapd::compress::CodecSpec codec;
  };
  const Mode modes[] = {{{snapd::v1::CODEC_ZFP_REVERSIBLE, 0}},
                        {{snapd::v1::CODEC_ZFP_RATE, 8}},
                        {{snapd::v1::CODEC_ZFP_PRECISION, 16}},
                        {{snapd::v1::CODEC_ZFP_ACCURACY, 1e-5 * peak}}};
  double raw = static_cast<double>(spec.bytes);
  if (!a.json) {
    std::printf("snapbench --codec: acoustic wavefield %dx%d float32 (%s) after %d steps, %d "
                "worker(s)\n",
                kN, kN, snapd::FormatBytes(spec.bytes).c_str(), kSteps, workers);
    std::printf("%-26s %6s %9s %9s %9s %7s %7s %9s %9s %9s %7s\n", "mode", "ratio", "zfp GB/s",
                "1 wkr", "all wkrs", "1/zfp", "all/zfp", "unzfp", "1 wkr", "all wkrs", "1/zfp");
  } else {
    std::printf("[");
  }
  bool first = true;
  for (const Mode& m : modes) {
    auto max = snapd::compress::MaxCompressedBytes(m.codec, spec);
    if (!max.ok()) {
      std::fprintf(stderr, "snapbench --codec: %s\n", max.status().ToString().c_str());
      return 1;
    }
    std::vector<uint64_t> out(*max / 8 + 1);
    std::vector<float> back(field.size());
    uint64_t stored = 0;
    auto time_compress = [&](snapd::compress::CompressPool* p) {
      return BestSeconds(3, [&] {
        stored = *snapd::compress::Compress(m.codec, spec, field.data(), out.data(), *max, p);
      });
    };
    auto time_decompress = [&](snapd::compress::CompressPool* p) {
      return BestSeconds(3, [&] {
        (void)snapd::compress::Decompress(m.codec, spec, out.data(), stored, back.data(), p);
      });
    };
    double c1 = time_compress(nullptr), call = time_compress(&pool);
    double d1 = time_decompress(nullptr), dall = time_decompress(&pool);
    double zc = 0, zd = 0;
    if (!StandaloneZfp(m.codec, field, kN, kN, &zc, &zd)) {
      std::fprintf(stderr, "snapbench --codec: standalone zfp failed\n");
      return 1;
    }
    std::string name = snapd::compress::CodecName(m.codec);
    auto gbs = [&](double s) { return raw / s / 1e9; };
    if (a.json) {
      std::printf("%s\n {\"mode\": \"%s\", \"ratio\": %.3f, \"zfp_compress_gbs\": %.3f, "
                  "\"compress_1_worker_gbs\": %.3f, \"compress_all_workers_gbs\": %.3f, "
                  "\"compress_1_worker_vs_zfp\": %.3f, \"zfp_decompress_gbs\": %.3f, "
                  "\"decompress_1_worker_gbs\": %.3f, \"decompress_all_workers_gbs\": %.3f, "
                  "\"decompress_1_worker_vs_zfp\": %.3f, \"workers\": %d}",
                  first ? "" : ",", name.c_str(), raw / stored, gbs(zc), gbs(c1), gbs(call),
                  zc / c1, gbs(zd), gbs(d1), gbs(dall), zd / d1, workers);
    } else {
      std::printf("%-26s %5.1fx %9.3f %9.3f %9.3f %7.2f %7.2f %9.3f %9.3f %9.3f %7.2f\n",
                  name.c_str(), raw / stored, gbs(zc), gbs(c1), gbs(call), zc / c1, zc / call,
                  gbs(zd), gbs(d1), gbs(dall), zd / d1);
    }
    first = false;
  }
  if (a.json) std::printf("\n]\n");
  return 0;
}

constexpr int kExitUsage = 2;

constexpr const char* kFooter =
    "Modes, one at a time (none: push and fetch against memcpy and a raw UCX put):\n"
    "  snapbench [--steps N] [--bytes S] [--socket PATH] [--cold] [--json]\n"
    "  snapbench --spill [--bytes S] [--compute-ms T] [--socket PATH] [--json]\n"
    "  snapbench --codec [--workers N] [--json]\n"
    "  snapbench --many N [--uniform --bytes S] [--compute-ms T] [--kill K] [--steps S] [--socket PATH] [--json]\n"
    "  snapbench --device [--steps N] [--bytes S] [--compute-ms T] [--socket PATH] [--json]\n"
    "The socket defaults to $SNAPD_SOCKET, else snapd's default socket.\n"
    "Exit status: 0 done, 1 a benchmark or snapd failed, 2 bad command line.";

// "snapbench: WHAT" and how to get help, for an error CLI11 found.
std::string FailureMessage(const CLI::App* /*app*/, const CLI::Error& e) {
  return std::string("snapbench: ") + e.what() + "\nRun 'snapbench --help' for more information.\n";
}

// CLI11's help, less its "Needs:" and "Excludes:" lists, which the descriptions and the footer
// give in words: each option's line is its name, its argument and its default.
class HelpFormatter final : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";  // a flag
    std::string out = " " + opt->get_type_name();
    if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
    return out;
  }
};

// CLI11 checks that say what they want in words (CLI11's own print the type's whole range).
// A whole number in [min, max], digits only: no sign, so "-3" is refused, not wrapped around.
CLI::Validator WholeNumber(uint64_t min, uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        std::string want = "a whole number >= " + std::to_string(min);
        if (max != std::numeric_limits<uint64_t>::max()) {
          want += " and <= " + std::to_string(max);
        }
        uint64_t v = 0;
        if (!snapd::ParseCount(text, &v) || v < min || v > max) {
          return "'" + text + "' is not " + want;
        }
        return "";
      },
      "", "WHOLE");
}

// A finite number of milliseconds, >= 0.
CLI::Validator NonNegativeMs() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0) {
          return "'" + text + "' is not a number of milliseconds >= 0";
        }
        return "";
      },
      "", "MS");
}

// The restart benchmark's run: --fill pushes it (kept) and waits until every step is stored;
// --verify fetches every step and checks its bytes (word i of step t holds t * 2^32 + i).
int RestartRun(snapd::Client& c, const Args& a) {
  const char* name = "snapbench-restart";
  auto fail = [](const char* what, const snapd::Status& s) {
    std::fprintf(stderr, "snapbench: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };
  std::vector<uint64_t> buf(a.bytes / 8), want(a.bytes / 8);
  auto pattern = [&](std::vector<uint64_t>& v, uint64_t t) {
    for (uint64_t i = 0; i < v.size(); ++i) v[i] = (t << 32) + i;
  };
  if (a.fill) {
    snapd::RunSpec spec;
    spec.name = name;
    spec.steps = a.steps;
    spec.bytes_per_step = buf.size() * 8;
    spec.keep = true;
    auto run = c.OpenRun(spec);
    if (!run.ok()) return fail("open", run.status());
    for (uint64_t t = 0; t < a.steps; ++t) {
      pattern(buf, t);
      auto h = c.Push(run->run_id, t, buf.data(), buf.size() * 8);
      snapd::Status s = h.ok() ? h->WaitStored() : h.status();
      if (!s.ok()) return fail("push", s);
    }
    std::printf("pushed %llu steps of %llu bytes\n", (unsigned long long)a.steps,
                (unsigned long long)(buf.size() * 8));
    return 0;
  }
  uint64_t id = 0;
  auto runs = c.ListRuns();
  if (!runs.ok()) return fail("list", runs.status());
  for (const auto& r : *runs) {
    if (r.spec.name == name) id = r.run_id;
  }
  if (id == 0) return fail("verify", snapd::Status::NotFound("no run snapbench-restart"));
  auto t0 = Clock::now();
  for (uint64_t t = 0; t < a.steps; ++t) {
    snapd::Status s = c.Fetch(id, t, buf.data(), buf.size() * 8);
    if (!s.ok()) return fail("fetch", s);
    pattern(want, t);
    if (buf != want) {
      return fail("verify", snapd::Status::DataLoss("step " + std::to_string(t) + " differs"));
    }
  }
  std::printf("verified %llu steps exact in %.2f s\n", (unsigned long long)a.steps,
              Seconds(t0, Clock::now()));
  return 0;
}

// Fills `a` from the command line. Returns the exit status when snapbench should stop here
// (--help: 0, after printing it; a bad command line: kExitUsage, after saying why), else
// nullopt. CLI11's exceptions stay inside.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  CLI::App app("snapbench: snapd's throughput against the physical limits, in the same run.",
               "snapbench");
  app.footer(kFooter);
  app.failure_message(FailureMessage);
  app.formatter(std::make_shared<HelpFormatter>());
  app.get_formatter()->column_width(26);
  app.set_version_flag("--version", "snapbench " SNAPD_VERSION, "Print snapbench's version");
  // A repeated option takes its last value, as on every command line before CLI11.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  CLI::Option* spill =
      app.add_flag("--spill", a->spill,
                   "Spill a run of 3x the daemon's host tier to disk, against O_DIRECT [off]")
          ->group("Modes");
  CLI::Option* codec =
      app.add_flag("--codec", a->codec,
                   "zfp codec on a wavefield against standalone zfp; no daemon [off]")
          ->group("Modes");
  CLI::Option* many =
      app.add_option("--many", a->many, "N solver processes of mixed step sizes at once [off]")
          ->type_name("N")
          ->check(WholeNumber(1, std::numeric_limits<int>::max()))
          ->group("Modes");
  CLI::Option* device =
      app.add_flag("--device", a->device,
                   "Device pushes and fetches against pinned cudaMemcpy (CUDA builds) [off]")
          ->group("Modes");
  CLI::Option* fill =
      app.add_flag("--fill", a->fill,
                   "Push a kept run 'snapbench-restart' of --steps x --bytes and exit (the "
                   "restart benchmark, client/tools/restart_bench.sh) [off]")
          ->group("Modes");
  CLI::Option* verify =
      app.add_flag("--verify", a->verify,
                   "Fetch 'snapbench-restart' back, checking every byte [off]")
          ->group("Modes");
  const std::vector<CLI::Option*> modes = {spill, codec, many, device, fill, verify};
  for (CLI::Option* m : modes) {
    for (CLI::Option* other : modes) {
      if (other != m) m->excludes(other);
    }
  }

  app.add_option("--steps", a->steps,
                 "Steps per run (--many: S, 1.5 S or 2 S per solver; not --spill)")
      ->type_name("N")
      ->check(WholeNumber(2, std::numeric_limits<uint64_t>::max()))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--bytes", [a](const std::string& text) { a->bytes = *snapd::ParseBytes(text); },
         "Bytes per step, e.g. 64M or 4GiB (--many: with --uniform; not --codec)")
      ->type_name("S")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            snapd::Result<uint64_t> b = snapd::ParseBytes(text);
            if (!b.ok()) return b.status().message();
            return *b == 0 ? "must be more than 0" : "";
          },
          "", "SIZE"))
      ->default_str("64MiB");
  // Resolved here, as snapctl and libsnapd resolve it: every mode and its forked solvers use
  // a->socket as it stands.
  a->socket = snapd::ClientSocketPath();
  app.add_option("--socket", a->socket, "snapd's control socket (not --codec)")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--compute-ms", a->compute_ms,
                 "--spill, --device: compute per backward step, ms; 0: 1.25x a step's transfer; "
                 "--many: 0 = none")
      ->type_name("T")
      ->check(NonNegativeMs())
      ->capture_default_str();
  app.add_option("--workers", a->workers,
                 "--codec: the pool's workers; 0: the daemon's default, cores minus one")
      ->type_name("N")
      ->check(WholeNumber(0, std::numeric_limits<int>::max()))
      ->capture_default_str()
      ->needs(codec);
  app.add_flag("--uniform", a->uniform,
               "--many: every solver --steps steps of --bytes, on the mapped path, instead of "
               "mixed sizes [off]")
      ->needs(many);
  app.add_option("--kill", a->kill, "--many: how many solvers are killed mid-run")
      ->type_name("K")
      ->check(WholeNumber(0, std::numeric_limits<int>::max()))
      ->capture_default_str()
      ->needs(many);
  app.add_flag("--in-process", a->in_process,
               "Both passes in this process, the second on warm pages (no mode given) [off]");
  app.add_flag("--cold", a->cold, "--in-process: skip the warm-up pass [off]");
  app.add_flag("--json", a->json, "JSON for scripts instead of tables [off]");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  if (a->kill > a->many) {
    std::fprintf(stderr,
                 "snapbench: --kill %d is more than --many %d\n"
                 "Run 'snapbench --help' for more information.\n",
                 a->kill, a->many);
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace

// memcpy of the pass's own pattern, the physical limit of a push and a fetch: forward, the two
// source buffers in turn into `steps` slots of one warm region (no page faults); backward,
// the slots in reverse order into one warm buffer. Best of `reps`, bytes per second each.
std::pair<double, double> MemcpyWorkloadRates(const Args& a, int reps) {
  std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
  std::vector<char> region(a.steps * a.bytes, 0), dst(a.bytes, 0);
  double forward = 0, backward = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (uint64_t t = 0; t < a.steps; ++t) {
      std::memcpy(region.data() + t * a.bytes, src[t % src.size()].data(), a.bytes);
    }
    auto t1 = Clock::now();
    for (uint64_t t = a.steps; t-- > 0;) {
      std::memcpy(dst.data(), region.data() + t * a.bytes, a.bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    auto t2 = Clock::now();
    double total = static_cast<double>(a.steps) * a.bytes;
    forward = std::max(forward, total / Seconds(t0, t1));
    backward = std::max(backward, total / Seconds(t1, t2));
  }
  return {forward, backward};
}

// The forward pattern's memcpy split into `threads` stripes per step, as libsnapd copies a
// large push with ClientOptions.copy_threads threads: what several cores together can copy.
double ThreadedMemcpyRate(const Args& a, int threads, int reps) {
  std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
  std::vector<char> region(a.steps * a.bytes, 0);
  const uint64_t stripe = (a.bytes + threads - 1) / threads;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (uint64_t t = 0; t < a.steps; ++t) {
      std::vector<std::thread> helpers;
      for (int i = 0; i < threads; ++i) {
        uint64_t begin = i * stripe, n = begin < a.bytes ? std::min(stripe, a.bytes - begin) : 0;
        if (n == 0) continue;
        helpers.emplace_back([&, begin, n] {
          std::memcpy(region.data() + t * a.bytes + begin, src[t % 2].data() + begin, n);
        });
      }
      for (auto& h : helpers) h.join();
    }
    best = std::max(best, static_cast<double>(a.steps) * a.bytes / Seconds(t0, Clock::now()));
  }
  return best;
}

// The default mode's figures: the passes, then the references measured after them.
struct DefaultRun {
  std::vector<std::pair<std::string, PassResult>> passes;  // label, figures
  std::string data_path;
};

int PrintDefault(const Args& a, const DefaultRun& run) {
  auto [memcpy_rate, memcpy_back_rate] = MemcpyWorkloadRates(a, 3);
  const int copy_threads = run.passes.back().second.copy_threads;
  double threaded_rate = copy_threads > 1 ? ThreadedMemcpyRate(a, copy_threads, 3) : memcpy_rate;
  std::string put_error;
  double put_rate = UcxPutRate(a.bytes, 5, &put_error);
  const char* tls = std::getenv("UCX_TLS");
  auto gbs = [](double r) { return r / 1e9; };
  const PassResult& last = run.passes.back().second;
  if (a.json) {
    std::printf("{\"steps\": %llu, \"bytes\": %llu, \"data_path\": \"%s\", \"ucx_tls\": \"%s\",\n"
                " \"mode\": \"%s\", \"memcpy_gbs\": %.3f, \"memcpy_back_gbs\": %.3f,"
                " \"ucx_put_gbs\": %.3f, \"copy_threads\": %d, \"memcpy_threads_gbs\": %.3f,\n",
                (unsigned long long)a.steps, (unsigned long long)a.bytes, run.data_path.c_str(),
                tls ? tls : "default", a.in_process ? "in-process" : "fresh-process",
                gbs(memcpy_rate), gbs(memcpy_back_rate), gbs(put_rate), copy_threads,
                gbs(threaded_rate));
    std::printf(" \"passes\": [");
    for (size_t i = 0; i < run.passes.size(); ++i) {
      const PassResult& r = run.passes[i].second;
      std::printf("%s\n  {\"pass\": \"%s\", \"push_gbs\": %.3f, \"fetch_gbs\": %.3f,"
                  " \"push_vs_memcpy\": %.3f, \"fetch_vs_memcpy\": %.3f,"
                  " \"push_faults_per_gib\": %.0f, \"fetch_faults_per_gib\": %.0f,"
                  " \"new_daemon_pages\": %.3f}",
                  i ? "," : "", run.passes[i].first.c_str(), gbs(r.push_rate),
                  gbs(r.fetch_rate), r.push_rate / memcpy_rate, r.fetch_rate / memcpy_back_rate,
                  r.push_faults_per_gib, r.fetch_faults_per_gib, r.new_pages);
    }
    // The last pass's figures at the top level, as before the passes were listed.
    std::printf("],\n \"push_gbs\": %.3f, \"fetch_gbs\": %.3f, \"push_vs_memcpy\": %.3f,"
                " \"fetch_vs_memcpy\": %.3f, \"push_vs_ucx_put\": %.3f,"
                " \"fetch_vs_ucx_put\": %.3f}\n",
                gbs(last.push_rate), gbs(last.fetch_rate), last.push_rate / memcpy_rate,
                last.fetch_rate / memcpy_back_rate,
                put_rate > 0 ? last.push_rate / put_rate : 0.0,
                put_rate > 0 ? last.fetch_rate / put_rate : 0.0);
    return 0;
  }
  std::printf("snapbench: %llu steps x %s, data path %s, UCX_TLS=%s, %s\n",
              (unsigned long long)a.steps, snapd::FormatBytes(a.bytes).c_str(),
              run.data_path.c_str(), tls ? tls : "default",
              a.in_process ? "passes in this process" : "each pass in a fresh process");
  std::printf("%-34s %8s %10s %10s %12s\n", "", "GB/s", "vs memcpy", "vs UCX put",
              "faults/GiB");
  std::printf("%-34s %8.2f %10s %10s\n", "memcpy, push pattern", gbs(memcpy_rate), "1.00", "");
  std::printf("%-34s %8.2f %10s %10s\n", "memcpy, fetch pattern", gbs(memcpy_back_rate), "1.00",
              "");
  if (copy_threads > 1) {  // what libsnapd's copy threads could reach together
    std::printf("%-34s %8.2f %10.2f %10s\n",
                ("memcpy, push pattern, " + std::to_string(copy_threads) + " threads").c_str(),
                gbs(threaded_rate), threaded_rate / memcpy_rate, "");
  }
  if (put_rate > 0) {
    std::printf("%-34s %8.2f %10.2f %10s\n", "raw UCX put", gbs(put_rate),
                put_rate / memcpy_rate, "1.00");
  } else {
    std::printf("%-34s  unavailable: %s\n", "raw UCX put", put_error.c_str());
  }
  for (const auto& [label, r] : run.passes) {
    if (r.new_pages >= 0) {
      std::printf("%s (%.0f%% of its tier pages new to snapd)\n", label.c_str(),
                  100 * r.new_pages);
    } else {
      std::printf("%s\n", label.c_str());
    }
    for (auto [what, rate, limit, faults] :
         {std::tuple<const char*, double, double, double>{"  push (stored)", r.push_rate,
                                                          memcpy_rate, r.push_faults_per_gib},
          {"  fetch (reverse)", r.fetch_rate, memcpy_back_rate, r.fetch_faults_per_gib}}) {
      std::printf("%-34s %8.2f %10.2f %10.2f %12.0f\n", what, gbs(rate), rate / limit,
                  put_rate > 0 ? rate / put_rate : 0.0, faults);
    }
  }
  return 0;
}

int Fail(const std::string& what, const snapd::Status& s) {
  std::fprintf(stderr, "snapbench: %s%s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

int main(int argc, char** argv) {
  Args a;
  if (std::optional<int> exit_code = ParseArgs(argc, argv, &a)) return *exit_code;
  if (a.codec) return Codec(a);
  if (a.many > 0) return Many(a);  // forks its solvers before any client state exists here
  const bool fresh = !a.spill && !a.device && !a.fill && !a.verify && !a.in_process;
  DefaultRun run;
  if (fresh) {  // before any client state exists in this process: each pass forks its own
    for (const char* label : {"fresh process, first pass", "fresh process, second pass"}) {
      auto r = FreshProcessPass(a, "snapbench");
      if (!r.ok()) return Fail(std::string(label) + ": ", r.status());
      run.passes.emplace_back(label, *r);
    }
    run.data_path = run.passes.back().second.mapped ? "mapped-host-tier" : "ucx";
    return PrintDefault(a, run);
  }
  snapd::ClientOptions opts;
  opts.socket_path = a.socket;
  opts.client_name = "snapbench";
  auto client = snapd::Client::Connect(opts);
  if (!client.ok()) return Fail("", client.status());
  if (a.spill) return Spill(**client, a);
  if (a.fill || a.verify) return RestartRun(**client, a);
  if (a.device) {
#if SNAPD_WITH_CUDA
    return DeviceBench(**client, a.steps, a.bytes, a.compute_ms, a.json);
#else
    std::fprintf(stderr, "snapbench --device: this build has no CUDA (SNAPD_WITH_CUDA=OFF)\n");
    return 1;
#endif
  }
  std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
  std::vector<char> dst(a.bytes, 0);
  if (!a.cold) {
    auto warm = Pass(**client, a, "snapbench-warmup", src, dst);
    if (!warm.ok()) return Fail("warm-up: ", warm.status());
    run.passes.emplace_back("this process, warm-up pass", *warm);
  }
  auto r = Pass(**client, a, "snapbench", src, dst);
  if (!r.ok()) return Fail("", r.status());
  run.passes.emplace_back(a.cold ? "this process, cold" : "this process, warm pages", *r);
  run.data_path = r->mapped ? "mapped-host-tier" : "ucx";
  return PrintDefault(a, run);
}
