// adjsnap-bench --spill: a run of 3x the host tier against O_DIRECT I/O on the spool's
// filesystem, and the backward stall (main.cc).
#include <fcntl.h>

#include <algorithm>
#include <chrono>
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

int Spill(adjsnap::Client& c, const Args& a) {
  auto fail = [](const std::string& what, const adjsnap::Status& s) {
    std::fprintf(stderr, "adjsnap-bench --spill: %s: %s\n", what.c_str(), s.ToString().c_str());
    return 1;
  };
  auto before = DaemonStats(c.socket_path());
  if (!before.ok()) return fail("stats", before.status());
  const auto* host = FindTier(*before, adjsnap::v1::TIER_HOST);
  const auto* disk = FindTier(*before, adjsnap::v1::TIER_DISK);
  if (!host || !disk) {
    return fail("setup", adjsnap::Status::FailedPrecondition("adjsnapd runs without a disk tier"));
  }
  if (before->spool_dirs().empty()) {
    return fail("setup", adjsnap::Status::PermissionDenied(
                             "adjsnapd names its spool directories (for the O_DIRECT reference) to "
                             "admins only: run as root, adjsnapd's uid or the admin_group"));
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
  std::string name = "adjsnap-bench-spill";
  (void)c.DeleteRun(name);
  adjsnap::RunSpec spec;
  spec.name = name;
  spec.steps = steps;
  spec.bytes_per_step = a.bytes;
  spec.layers = "DiskHost";
  auto run = c.OpenRun(spec);
  if (!run.ok()) return fail("open run", run.status());

  // (a) Forward, no compute.
  std::vector<adjsnap::PushHandle> handles(steps);
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
      return fail("fetch", adjsnap::Status::DataLoss("step " + std::to_string(t) + " differs"));
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
  const auto* disk_after = FindTier(*after, adjsnap::v1::TIER_DISK);
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
        " \"prefetch_hits\": %llu, \"demand_reads\": %llu, \"backward_s\": %.3f,\n",
        (unsigned long long)steps, (unsigned long long)a.bytes,
        (unsigned long long)host->budget_bytes(), (unsigned long long)j, gbs(odirect_write),
        gbs(odirect_read), gbs(spill_write), spill_write / odirect_write, gbs(total / forward_s),
        compute_s * 1e3, read_s * 1e3, host_fetch_s * 1e3, copy_s * 1e3, stall_disk * 1e3,
        stall_vs_copy * 1e3, disk_read_s * 1e3, disk_read_s > 0 ? stall_disk / disk_read_s : 0.0,
        disk_read_s > 0 ? stall_vs_copy / disk_read_s : 0.0, (unsigned long long)hits,
        (unsigned long long)demand, backward_s);
    // Each backward fetch's time, newest step first (where a stall came from).
    std::printf(" \"fetch_ms\": [");
    for (uint64_t t = steps; t-- > 0;) {
      std::printf("%s%.2f", t + 1 == steps ? "" : ", ", fetch_s[t] * 1e3);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf(
      "adjsnap-bench --spill: %llu steps x %s = %s through a %s host tier; steps 0..%llu "
      "spill to %s\n",
      (unsigned long long)steps, adjsnap::FormatBytes(a.bytes).c_str(),
      adjsnap::FormatBytes(static_cast<uint64_t>(total)).c_str(),
      adjsnap::FormatBytes(host->budget_bytes()).c_str(), (unsigned long long)j - 1,
      before->spool_dirs(0).c_str());
  std::printf("O_DIRECT sequential write   %8.2f GB/s   read %8.2f GB/s (%.2f ms per step)\n",
              gbs(odirect_write), gbs(odirect_read), read_s * 1e3);
  std::printf(
      "(a) spill write             %8.2f GB/s = %.2f x O_DIRECT write   (forward "
      "end to end %.2f GB/s)\n",
      gbs(spill_write), spill_write / odirect_write, gbs(total / forward_s));
  std::printf(
      "(b) backward, compute %.2f ms/step: %llu spilled steps stalled %.1f ms beyond a "
      "host-tier fetch (%.2f ms) = %.1f%% of their %.1f ms disk read time\n"
      "    (beyond a bare memcpy, %.2f ms: %.1f ms = %.1f%%); %llu prefetch hits, %llu "
      "waited on disk\n",
      compute_s * 1e3, (unsigned long long)j, stall_disk * 1e3, host_fetch_s * 1e3,
      disk_read_s > 0 ? 100.0 * stall_disk / disk_read_s : 0.0, disk_read_s * 1e3, copy_s * 1e3,
      stall_vs_copy * 1e3, disk_read_s > 0 ? 100.0 * stall_vs_copy / disk_read_s : 0.0,
      (unsigned long long)hits, (unsigned long long)demand);
  return 0;
}

}  // namespace adjsnap_bench
