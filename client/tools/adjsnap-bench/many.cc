// adjsnap-bench --many: N solver processes of mixed step sizes at once, their throughput and the
// latency of each push and fetch (main.cc).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common.h"
#include "adjsnap/client.h"
#include "adjsnap/units.h"
#include "adjsnap/v1/control.grpc.pb.h"

namespace adjsnap_bench {

// Many mode (--many N): N solver processes at once on one adjsnapd, with mixed step sizes (1, 4,
// 16 and 64 MiB, and 3 MiB + 17 bytes), odd-numbered ones on the copied UCX path, each pushing
// its steps then fetching them in reverse and checking every byte; --kill K of them are killed
// with SIGKILL mid-run. Each solver is forked before any gRPC or UCX state exists here, and
// reports through a pipe. Printed: refusals, bytes exact, the host tier's peak use against its
// budget, fetches served from memory, and each solver's throughput beside a memcpy and the
// O_DIRECT disk measured in the same run; and the latency of every push (until stored) and
// every fetch, p50/p99/max over all solvers and over those of the smallest steps (whose
// latency is the daemon's queueing more than their copy).
//
//   adjsnap-bench --many N [--uniform --bytes S] [--compute-ms T] [--kill K] [--steps S] [--socket
//   PATH] [--json]
struct SolverReport {
  static constexpr size_t kMaxOps = 192;  // latencies kept per solver (the report is one write)
  uint64_t bytes = 0, steps = 0, pushed = 0, refused = 0, exact = 0, wrong = 0, failed = 0;
  double forward_s = 0, backward_s = 0;
  uint32_t pushes_timed = 0, fetches_timed = 0;
  float push_ms[kMaxOps] = {}, fetch_ms[kMaxOps] = {};
};
static_assert(sizeof(SolverReport) <= 4096, "a report is written to its pipe at once (PIPE_BUF)");

// p50, p99 and max of `ms`, in ms (zeros when empty).
std::array<double, 3> Percentiles(std::vector<float> ms) {
  if (ms.empty()) return {0, 0, 0};
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  return {at(0.5), at(0.99), ms.back()};
}

SolverReport RunOneSolver(const std::string& socket, int id, uint64_t bytes, uint64_t steps,
                          bool mapped, double compute_ms) {
  SolverReport r;
  r.bytes = bytes;
  r.steps = steps;
  adjsnap::ClientOptions o;
  o.socket_path = socket;
  o.client_name = "adjsnap-bench-many";
  o.map_host_tier = mapped;
  auto c = adjsnap::Client::Connect(o);
  if (!c.ok()) {
    r.failed = 1;
    return r;
  }
  adjsnap::RunSpec spec;
  spec.name = "adjsnap-bench-many-" + std::to_string(getpid()) + "-" + std::to_string(id);
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
    auto p0 = Clock::now();
    auto h = (*c)->Push(run->run_id, t, in.data(), bytes);
    adjsnap::Status s = h.ok() ? h->WaitStored() : h.status();
    if (s.ok() && r.pushes_timed < SolverReport::kMaxOps) {
      r.push_ms[r.pushes_timed++] = static_cast<float>(1e3 * Seconds(p0, Clock::now()));
    }
    if (s.code() == adjsnap::Code::kResourceExhausted)
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
    auto f0 = Clock::now();
    if (!(*c)->Fetch(run->run_id, t, out.data(), bytes).ok()) continue;
    if (r.fetches_timed < SolverReport::kMaxOps) {
      r.fetch_ms[r.fetches_timed++] = static_cast<float>(1e3 * Seconds(f0, Clock::now()));
    }
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
  constexpr uint64_t kMiB = 1 << 20;
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
    std::fprintf(stderr, "adjsnap-bench --many: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  double odirect_write = 0, odirect_read = 0;
  if (!stats->spool_dirs().empty()) {
    (void)DirectIoRates(stats->spool_dirs(0), 64, 16 * kMiB, &odirect_write, &odirect_read);
  }
  const auto* host = FindTier(*stats, adjsnap::v1::TIER_HOST);
  const auto* disk = FindTier(*stats, adjsnap::v1::TIER_DISK);
  // The disk tier's reads while at least one was in flight (the daemon's own counters).
  double disk_read =
      disk && disk->read_busy_ns() ? disk->read_bytes() / (disk->read_busy_ns() / 1e9) : 0;
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
  // Latencies: over every surviving solver, and over those of the smallest steps.
  uint64_t smallest = UINT64_MAX;
  for (const auto& r : reports) smallest = std::min(smallest, r.bytes);
  std::vector<float> push_all, fetch_all, push_small, fetch_small;
  for (const auto& r : reports) {
    push_all.insert(push_all.end(), r.push_ms, r.push_ms + r.pushes_timed);
    fetch_all.insert(fetch_all.end(), r.fetch_ms, r.fetch_ms + r.fetches_timed);
    if (r.bytes == smallest) {
      push_small.insert(push_small.end(), r.push_ms, r.push_ms + r.pushes_timed);
      fetch_small.insert(fetch_small.end(), r.fetch_ms, r.fetch_ms + r.fetches_timed);
    }
  }
  const auto push_lat = Percentiles(push_all), fetch_lat = Percentiles(fetch_all);
  const auto push_small_lat = Percentiles(push_small), fetch_small_lat = Percentiles(fetch_small);
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
        "\"push_ms\": [%.3f, %.3f, %.3f], \"fetch_ms\": [%.3f, %.3f, %.3f], "
        "\"smallest_step_bytes\": %llu, \"smallest_push_ms\": [%.3f, %.3f, %.3f], "
        "\"smallest_fetch_ms\": [%.3f, %.3f, %.3f], \"solvers_detail\": [",
        a.many, killed, (unsigned long long)steps, (unsigned long long)refused,
        (unsigned long long)exact, (unsigned long long)wrong, (unsigned long long)failed,
        (unsigned long long)stats->refused_pushes(), peak, (unsigned long long)from_disk,
        (unsigned long long)stats->prefetch_hits(), gbs(memcpy_rate), gbs(odirect_write),
        gbs(odirect_read), gbs(disk_read), gbs(moved / wall_s), push_lat[0], push_lat[1],
        push_lat[2], fetch_lat[0], fetch_lat[1], fetch_lat[2],
        (unsigned long long)(reports.empty() ? 0 : smallest), push_small_lat[0], push_small_lat[1],
        push_small_lat[2], fetch_small_lat[0], fetch_small_lat[1], fetch_small_lat[2]);
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
    std::printf("adjsnap-bench --many: %d solvers (%d killed), host tier %s\n", a.many, killed,
                host ? adjsnap::FormatBytes(host->budget_bytes()).c_str() : "?");
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
        "%llu; adjsnapd refused_pushes %llu\n",
        (unsigned long long)steps, (unsigned long long)refused, (unsigned long long)exact,
        (unsigned long long)wrong, (unsigned long long)failed,
        (unsigned long long)stats->refused_pushes());
    std::printf("all solvers: %.2f GB pushed and fetched back in %.1f s = %.2f GB/s\n", moved / 1e9,
                wall_s, gbs(moved / wall_s));
    std::printf(
        "latency ms, p50 / p99 / max: push (stored) %.2f / %.2f / %.2f, fetch %.2f / "
        "%.2f / %.2f\n",
        push_lat[0], push_lat[1], push_lat[2], fetch_lat[0], fetch_lat[1], fetch_lat[2]);
    if (!reports.empty()) {
      std::printf("  %s steps only: push %.2f / %.2f / %.2f, fetch %.2f / %.2f / %.2f\n",
                  adjsnap::FormatBytes(smallest).c_str(), push_small_lat[0], push_small_lat[1],
                  push_small_lat[2], fetch_small_lat[0], fetch_small_lat[1], fetch_small_lat[2]);
    }
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

}  // namespace adjsnap_bench
