// adjsnap-bench's default mode: pushes and fetches through libadjsnap, each pass in a fresh
// process (or --in-process), against memcpy of the same pattern and a raw UCX put (main.cc).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common.h"
#include "adjsnap/client.h"
#include "adjsnap/paths.h"
#include "adjsnap/units.h"
#include "adjsnap/v1/control.grpc.pb.h"

namespace adjsnap_bench {

struct PassResult {
  double push_rate = 0;
  double fetch_rate = 0;
  double push_faults_per_gib = 0;   // minor page faults this process took while pushing
  double fetch_faults_per_gib = 0;  // and while fetching
  double new_pages = -1;  // share of the run's host-tier bytes adjsnapd had never used; -1: not asked
  bool mapped = false;    // the pass ran on the mapped host tier (else the copied UCX path)
  int copy_threads = 1;   // threads libadjsnap copied each push and fetch with (mapped path)
};

uint64_t MinorFaults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<uint64_t>(r.ru_minflt);
}

adjsnap::Result<PassResult> Pass(adjsnap::Client& c, const Args& a, const std::string& name,
                               std::vector<std::vector<char>>& src, std::vector<char>& dst) {
  (void)c.DeleteRun(name);
  adjsnap::RunSpec spec;
  spec.name = name;
  spec.steps = a.steps;
  spec.bytes_per_step = a.bytes;
  ADJSNAP_ASSIGN_OR_RETURN(adjsnap::RunInfo run, c.OpenRun(spec));
  std::vector<adjsnap::PushHandle> handles(a.steps);
  uint64_t f0 = MinorFaults();
  auto t0 = Clock::now();
  for (uint64_t t = 0; t < a.steps; ++t) {
    size_t b = t % src.size();
    if (t >= src.size()) ADJSNAP_RETURN_IF_ERROR(handles[t - src.size()].WaitReleased());
    ADJSNAP_ASSIGN_OR_RETURN(handles[t], c.Push(run.run_id, t, src[b].data(), a.bytes));
  }
  for (auto& h : handles) ADJSNAP_RETURN_IF_ERROR(h.WaitStored());
  auto t1 = Clock::now();
  uint64_t f1 = MinorFaults();
  for (uint64_t t = a.steps; t-- > 0;) {
    ADJSNAP_RETURN_IF_ERROR(c.Fetch(run.run_id, t, dst.data(), a.bytes));
  }
  auto t2 = Clock::now();
  uint64_t f2 = MinorFaults();
  // Spot-check the last fetch (step 0) against its source buffer.
  if (std::memcmp(dst.data(), src[0].data(), a.bytes) != 0) {
    return adjsnap::Status::DataLoss("step 0 came back with different bytes");
  }
  ADJSNAP_RETURN_IF_ERROR(c.DeleteRun(name));
  double total = static_cast<double>(a.steps) * a.bytes;
  double gib = total / (1ull << 30);
  return PassResult{total / Seconds(t0, t1),
                    total / Seconds(t1, t2),
                    (f1 - f0) / gib,
                    (f2 - f1) / gib,
                    -1,
                    c.data_path() == adjsnap::DataPath::kMappedHostTier,
                    c.copy_threads()};
}

// One pass in a new process, as a solver starts one per shot: it connects, maps the host tier
// and pushes and fetches with nothing of the tier in its page tables. Before the pass it asks
// adjsnapd how much of the host tier has ever held data (peak use), to tell what share of the
// run's pages the daemon itself touches for the first time.
adjsnap::Result<PassResult> FreshProcessPass(const Args& a, const std::string& name) {
  struct Report {
    int code;  // 0: ok; else an adjsnap::Code
    PassResult result;
    char message[512];
  };
  int fds[2];
  if (pipe(fds) != 0) return adjsnap::Status::Internal(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return adjsnap::Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    Report rep{};
    auto run = [&]() -> adjsnap::Result<PassResult> {
      ADJSNAP_ASSIGN_OR_RETURN(adjsnap::v1::StatsResponse before, DaemonStats(a.socket));
      const adjsnap::v1::TierStats* host = FindTier(before, adjsnap::v1::TIER_HOST);
      double need = static_cast<double>(a.steps) * ((a.bytes + 4095) / 4096 * 4096);
      double seen =
          host ? static_cast<double>(std::max(host->peak_used_bytes(), host->prefaulted_bytes()))
               : need;
      adjsnap::ClientOptions opts;
      opts.socket_path = a.socket;
      opts.client_name = "adjsnap-bench";
      ADJSNAP_ASSIGN_OR_RETURN(auto client, adjsnap::Client::Connect(opts));
      std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
      std::vector<char> dst(a.bytes, 0);
      ADJSNAP_ASSIGN_OR_RETURN(PassResult r, Pass(*client, a, name, src, dst));
      r.new_pages = std::max(0.0, need - seen) / need;
      return r;
    };
    adjsnap::Result<PassResult> r = run();
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
    return adjsnap::Status::Internal("the pass's process ended without a report (status " +
                                   std::to_string(wstatus) + ")");
  }
  if (rep.code != 0) return adjsnap::Status(static_cast<adjsnap::Code>(rep.code), rep.message);
  return rep.result;
}

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

// The forward pattern's memcpy split into `threads` stripes per step, as libadjsnap copies a
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
    std::printf(
        "{\"steps\": %llu, \"bytes\": %llu, \"data_path\": \"%s\", \"ucx_tls\": \"%s\",\n"
        " \"mode\": \"%s\", \"memcpy_gbs\": %.3f, \"memcpy_back_gbs\": %.3f,"
        " \"ucx_put_gbs\": %.3f, \"copy_threads\": %d, \"memcpy_threads_gbs\": %.3f,\n",
        (unsigned long long)a.steps, (unsigned long long)a.bytes, run.data_path.c_str(),
        tls ? tls : "default", a.in_process ? "in-process" : "fresh-process", gbs(memcpy_rate),
        gbs(memcpy_back_rate), gbs(put_rate), copy_threads, gbs(threaded_rate));
    std::printf(" \"passes\": [");
    for (size_t i = 0; i < run.passes.size(); ++i) {
      const PassResult& r = run.passes[i].second;
      std::printf(
          "%s\n  {\"pass\": \"%s\", \"push_gbs\": %.3f, \"fetch_gbs\": %.3f,"
          " \"push_vs_memcpy\": %.3f, \"fetch_vs_memcpy\": %.3f,"
          " \"push_faults_per_gib\": %.0f, \"fetch_faults_per_gib\": %.0f,"
          " \"new_daemon_pages\": %.3f}",
          i ? "," : "", run.passes[i].first.c_str(), gbs(r.push_rate), gbs(r.fetch_rate),
          r.push_rate / memcpy_rate, r.fetch_rate / memcpy_back_rate, r.push_faults_per_gib,
          r.fetch_faults_per_gib, r.new_pages);
    }
    // The last pass's figures at the top level, as before the passes were listed.
    std::printf(
        "],\n \"push_gbs\": %.3f, \"fetch_gbs\": %.3f, \"push_vs_memcpy\": %.3f,"
        " \"fetch_vs_memcpy\": %.3f, \"push_vs_ucx_put\": %.3f,"
        " \"fetch_vs_ucx_put\": %.3f}\n",
        gbs(last.push_rate), gbs(last.fetch_rate), last.push_rate / memcpy_rate,
        last.fetch_rate / memcpy_back_rate, put_rate > 0 ? last.push_rate / put_rate : 0.0,
        put_rate > 0 ? last.fetch_rate / put_rate : 0.0);
    return 0;
  }
  std::printf("adjsnap-bench: %llu steps x %s, data path %s, UCX_TLS=%s, %s\n",
              (unsigned long long)a.steps, adjsnap::FormatBytes(a.bytes).c_str(),
              run.data_path.c_str(), tls ? tls : "default",
              a.in_process ? "passes in this process" : "each pass in a fresh process");
  std::printf("%-34s %8s %10s %10s %12s\n", "", "GB/s", "vs memcpy", "vs UCX put", "faults/GiB");
  std::printf("%-34s %8.2f %10s %10s\n", "memcpy, push pattern", gbs(memcpy_rate), "1.00", "");
  std::printf("%-34s %8.2f %10s %10s\n", "memcpy, fetch pattern", gbs(memcpy_back_rate), "1.00",
              "");
  if (copy_threads > 1) {  // what libadjsnap's copy threads could reach together
    std::printf("%-34s %8.2f %10.2f %10s\n",
                ("memcpy, push pattern, " + std::to_string(copy_threads) + " threads").c_str(),
                gbs(threaded_rate), threaded_rate / memcpy_rate, "");
  }
  if (put_rate > 0) {
    std::printf("%-34s %8.2f %10.2f %10s\n", "raw UCX put", gbs(put_rate), put_rate / memcpy_rate,
                "1.00");
  } else {
    std::printf("%-34s  unavailable: %s\n", "raw UCX put", put_error.c_str());
  }
  for (const auto& [label, r] : run.passes) {
    if (r.new_pages >= 0) {
      std::printf("%s (%.0f%% of its tier pages new to adjsnapd)\n", label.c_str(), 100 * r.new_pages);
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

int HostBench(const Args& a) {
  DefaultRun run;
  if (!a.in_process) {  // before any client state exists in this process: each pass forks its own
    for (const char* label : {"fresh process, first pass", "fresh process, second pass"}) {
      auto r = FreshProcessPass(a, "adjsnap-bench");
      if (!r.ok()) return Fail(std::string(label) + ": ", r.status());
      run.passes.emplace_back(label, *r);
    }
    run.data_path = run.passes.back().second.mapped ? "mapped-host-tier" : "ucx";
    return PrintDefault(a, run);
  }
  adjsnap::ClientOptions opts;
  opts.socket_path = a.socket;
  opts.client_name = "adjsnap-bench";
  auto client = adjsnap::Client::Connect(opts);
  if (!client.ok()) return Fail("", client.status());
  std::vector<std::vector<char>> src = SourceBuffers(a.bytes);
  std::vector<char> dst(a.bytes, 0);
  if (!a.cold) {
    auto warm = Pass(**client, a, "adjsnap-bench-warmup", src, dst);
    if (!warm.ok()) return Fail("warm-up: ", warm.status());
    run.passes.emplace_back("this process, warm-up pass", *warm);
  }
  auto r = Pass(**client, a, "adjsnap-bench", src, dst);
  if (!r.ok()) return Fail("", r.status());
  run.passes.emplace_back(a.cold ? "this process, cold" : "this process, warm pages", *r);
  run.data_path = r->mapped ? "mapped-host-tier" : "ucx";
  return PrintDefault(a, run);
}

}  // namespace adjsnap_bench
