// adjsnap-bench --fill / --verify: a kept run pushed before a restart and checked after it
// (client/tools/restart_bench.sh).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "adjsnap/client.h"

namespace adjsnap_bench {

// The restart benchmark's run: --fill pushes it (kept) and waits until every step is stored;
// --verify fetches every step and checks its bytes (word i of step t holds t * 2^32 + i).
int RestartRun(adjsnap::Client& c, const Args& a) {
  const char* name = "adjsnap-bench-restart";
  auto fail = [](const char* what, const adjsnap::Status& s) {
    std::fprintf(stderr, "adjsnap-bench: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };
  std::vector<uint64_t> buf(a.bytes / 8), want(a.bytes / 8);
  auto pattern = [&](std::vector<uint64_t>& v, uint64_t t) {
    for (uint64_t i = 0; i < v.size(); ++i) v[i] = (t << 32) + i;
  };
  if (a.fill) {
    adjsnap::RunSpec spec;
    spec.name = name;
    spec.steps = a.n_unknown ? 0 : a.steps;  // 0: N unknown (pushes --steps all the same)
    spec.bytes_per_step = buf.size() * 8;
    spec.keep = true;
    auto run = c.OpenRun(spec);
    if (!run.ok()) return fail("open", run.status());
    for (uint64_t t = 0; t < a.steps; ++t) {
      pattern(buf, t);
      auto h = c.Push(run->run_id, t, buf.data(), buf.size() * 8);
      adjsnap::Status s = h.ok() ? h->WaitStored() : h.status();
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
  if (id == 0) return fail("verify", adjsnap::Status::NotFound("no run adjsnap-bench-restart"));
  auto t0 = Clock::now();
  for (uint64_t t = 0; t < a.steps; ++t) {
    adjsnap::Status s = c.Fetch(id, t, buf.data(), buf.size() * 8);
    if (!s.ok()) return fail("fetch", s);
    pattern(want, t);
    if (buf != want) {
      return fail("verify", adjsnap::Status::DataLoss("step " + std::to_string(t) + " differs"));
    }
  }
  std::printf("verified %llu steps exact in %.2f s\n", (unsigned long long)a.steps,
              Seconds(t0, Clock::now()));
  return 0;
}

}  // namespace adjsnap_bench
