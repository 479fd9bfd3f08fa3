// Test helper: connects to adjsnapd, opens run NAME with BYTES per step, and pushes steps until it
// is killed, printing "pushed T" after issuing each push. Used to kill a client mid-push.
// Before issuing push T it has seen push T-4 stored, so "pushed T" guarantees steps 0..T-4
// are in the catalog while later ones are still in flight. BYTES 0: connect, print
// "connected", and stay idle until killed. A fifth argument "keep" opens the run with keep;
// "block" opens it host-only with block_when_full, so that pushes wait for room; "idle" opens
// it (not kept), pushes step 0, prints "stored 0" once it is stored and stays idle until killed.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "adjsnap/client.h"

int main(int argc, char** argv) {
  const std::string mode = argc == 5 ? argv[4] : "";
  if (argc != 4 && !(argc == 5 && (mode == "keep" || mode == "block" || mode == "idle"))) {
    std::fprintf(stderr, "usage: push_until_killed SOCKET RUN BYTES [keep|block|idle]\n");
    return 2;
  }
  // A reader that stops reading must not end it: only the test's kill does.
  std::signal(SIGPIPE, SIG_IGN);
  adjsnap::ClientOptions o;
  o.socket_path = argv[1];
  auto client = adjsnap::Client::Connect(o);
  if (!client.ok()) return 1;
  uint64_t bytes = std::strtoull(argv[3], nullptr, 10);
  if (bytes == 0) {  // connected and idle until killed: no traffic that would notice a failure
    std::printf("connected\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  adjsnap::RunSpec spec;
  spec.name = argv[2];
  spec.bytes_per_step = bytes;
  spec.keep = mode == "keep";
  if (mode == "block") {
    spec.layers = "Host";
    spec.block_when_full = true;
  }
  auto run = (*client)->OpenRun(spec);
  if (!run.ok()) return 1;
  std::vector<std::vector<char>> buf(2, std::vector<char>(bytes));
  if (mode == "idle") {
    adjsnap::testing::FillPattern(buf[0].data(), bytes, 7, 0);
    auto h = (*client)->Push(run->run_id, 0, buf[0].data(), bytes);
    if (!h.ok() || !h->WaitStored().ok()) return 1;
    std::printf("stored 0\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  std::vector<adjsnap::PushHandle> handles;
  for (uint64_t t = 0;; ++t) {
    auto& b = buf[t % 2];
    if (t >= 2 && !handles[t - 2].WaitReleased().ok()) return 1;
    if (t >= 4 && !handles[t - 4].WaitStored().ok()) return 1;
    adjsnap::testing::FillPattern(b.data(), bytes, 7, t);
    auto h = (*client)->Push(run->run_id, t, b.data(), bytes);
    if (!h.ok()) return 1;
    handles.push_back(*h);
    std::printf("pushed %llu\n", static_cast<unsigned long long>(t));
    std::fflush(stdout);
  }
}
