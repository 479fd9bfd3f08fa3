// adjsnap-bench: adjsnapd throughput against the physical limits, measured in the same run. One file
// per benchmark (host.cc, spill.cc, many.cc, codec.cc, restart.cc, device.cc); what they share
// is in common.h; the command line in args.cc.
//
// Forward: N pushes of S bytes through libadjsnap (two source buffers, each reused only after
// its push is released, as a solver does), timed until every snapshot is stored.
// Backward: N fetches in reverse step order into one buffer.
// Reference 1: single-thread memcpy of the same pattern: the two source buffers into N slots of
// one warm region, and the slots in reverse into one buffer (memcpy of S bytes between two warm
// buffers in --spill).
// Reference 2: a raw UCX put (ucp_put_nbx + flush) of S bytes between two UCX workers of this
// process, over the same UCX_TLS, with the target memory pre-registered.
// Each of two passes runs in a fresh process, as solvers start one per shot: its page tables
// hold none of the host tier, and its minor page faults per GiB are reported beside each rate.
// The first pass also shows what share of its tier pages adjsnapd itself touched for the first
// time (a daemon just started, without host_prefault); the second runs on pages adjsnapd has used.
// --in-process runs a warm-up pass and the measured pass in this one process instead (--cold
// skips the warm-up).
//
//   adjsnap-bench [--steps N] [--bytes S] [--socket PATH] [--in-process [--cold]] [--json]
//
// Spill mode (--spill): a run of 3x the daemon's host tier, so the oldest two thirds go to
// its disk tier. References, measured in the same run on the spool's filesystem: an O_DIRECT
// sequential write of the same bytes, and an O_DIRECT read of them (the per-step read time).
// (a) Forward with no compute: the disk tier's write rate while spilling (bytes over busy
//     time, from adjsnapd's counters) against the O_DIRECT write.
// (b) Backward with a simulated compute time per step >= the read time per step (a sleep: a
//     GPU solver's host thread waits on the device): time each fetch waited beyond a memcpy of
//     its bytes (the stall), as a fraction of the time reading the spilled steps takes.
//
//   adjsnap-bench --spill [--bytes S] [--compute-ms T] [--socket PATH] [--json]
//
// Codec mode (--codec): adjsnapd's zfp codec on a real wavefield (the example solver's, 2048 x
// 2048 float32 after 1500 steps), one worker and all of the daemon's workers, against one
// standalone zfp_compress/zfp_decompress call on the same field in the same run; plus the
// compression ratio, for each mode. No daemon needed.
//
//   adjsnap-bench --codec [--workers N] [--json]
//
// Copy mode (--copy): the copy that computes a push's checksum (adjsnap/checksum.h) against
// memcpy and against the checksum alone, one thread, same run (copy.cc). No daemon needed.
//
//   adjsnap-bench --copy [--steps N] [--bytes S] [--json]
//
// Device mode (--device, CUDA builds): device pushes and fetches against pinned cudaMemcpy of
// the same bytes, and the backward stall (device.cc).
//
//   adjsnap-bench --device [--steps N] [--bytes S] [--compute-ms T] [--socket PATH] [--json]
#include <cstdio>
#include <optional>

#include "common.h"
#include "device.h"

int main(int argc, char** argv) {
  adjsnap_bench::Args a;
  if (std::optional<int> exit_code = adjsnap_bench::ParseArgs(argc, argv, &a)) return *exit_code;
  if (a.codec) return adjsnap_bench::Codec(a);
  if (a.copy) return adjsnap_bench::CopyBench(a);
  if (a.many > 0) return adjsnap_bench::Many(a);  // forks its solvers before any client state exists
  if (!a.spill && !a.device && !a.fill && !a.verify) return adjsnap_bench::HostBench(a);
  adjsnap::ClientOptions opts;
  opts.socket_path = a.socket;
  opts.client_name = "adjsnap-bench";
  auto client = adjsnap::Client::Connect(opts);
  if (!client.ok()) return adjsnap_bench::Fail("", client.status());
  if (a.spill) return adjsnap_bench::Spill(**client, a);
  if (a.fill || a.verify) return adjsnap_bench::RestartRun(**client, a);
#if ADJSNAP_WITH_CUDA
  return DeviceBench(**client, a.steps, a.bytes, a.compute_ms, a.json);
#else
  std::fprintf(stderr, "adjsnap-bench --device: this build has no CUDA (ADJSNAP_WITH_CUDA=OFF)\n");
  return 1;
#endif
}
