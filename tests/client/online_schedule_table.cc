// Prints, as a Markdown table, the forward steps of an online run (adjsnap/online_schedule.h)
// stopped at N against Revolve's offline optimum p(N, s) and the one-sweep bound, and the
// worst ratio over every N <= 2000: the numbers docs/schedules.md quotes. Each run is checked
// with schedule::Replay; exits 1 if one fails or a bound is exceeded.
//
//   online_schedule_table [slots...]   (default 2 4 8 16 32)
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "adjsnap/online_schedule.h"

using adjsnap::schedule::Level;
using adjsnap::schedule::OnlineSchedule;
using adjsnap::schedule::RevolveForwardSteps;
using adjsnap::schedule::Schedule;

int main(int argc, char** argv) {
  std::vector<uint64_t> slot_counts;
  for (int i = 1; i < argc; ++i) slot_counts.push_back(std::strtoull(argv[i], nullptr, 10));
  if (slot_counts.empty()) slot_counts = {2, 4, 8, 16, 32};
  const uint64_t kMaxSteps = 2000;
  std::printf(
      "| slots s | N | online | offline p(N, s) | p + N - 1 | online / offline | "
      "worst online / offline, N <= %llu |\n| --- | --- | --- | --- | --- | --- | --- |\n",
      static_cast<unsigned long long>(kMaxSteps));
  for (uint64_t s : slot_counts) {
    auto online = OnlineSchedule::Create(s);
    if (!online.ok()) return 1;
    std::map<uint64_t, uint64_t> steps_at;
    double worst = 0;
    uint64_t worst_n = 0;
    for (uint64_t n = 1; n <= kMaxSteps; ++n) {
      OnlineSchedule stopped = *online;
      Schedule m;
      if (!stopped.Finish().ok() ||
          !Replay(stopped.schedule(), {Level{"memory", s, 0, 0}}, {1, 0}, &m).ok()) {
        std::fprintf(stderr, "N=%llu s=%llu: the online schedule does not replay\n",
                     static_cast<unsigned long long>(n), static_cast<unsigned long long>(s));
        return 1;
      }
      const uint64_t offline = *RevolveForwardSteps(n, s);
      if (m.forward_steps > offline + (n - 1)) return 1;
      if (offline > 0 && static_cast<double>(m.forward_steps) / offline > worst) {
        worst = static_cast<double>(m.forward_steps) / offline;
        worst_n = n;
      }
      steps_at[n] = m.forward_steps;
      if (!online->Advance().ok()) return 1;
    }
    for (uint64_t n : {uint64_t{100}, uint64_t{500}, kMaxSteps}) {
      const uint64_t offline = *RevolveForwardSteps(n, s);
      std::printf("| %llu | %llu | %llu | %llu | %llu | %.2f | %.2f (N = %llu) |\n",
                  static_cast<unsigned long long>(s), static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(steps_at[n]),
                  static_cast<unsigned long long>(offline),
                  static_cast<unsigned long long>(offline + n - 1),
                  static_cast<double>(steps_at[n]) / offline, worst,
                  static_cast<unsigned long long>(worst_n));
    }
  }
  return 0;
}
