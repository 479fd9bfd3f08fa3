// top: the daemon's Stats, live. Every refresh reads Stats (what `status` shows) and turns the
// counters' differences since the previous refresh into rates.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "adjsnap/units.h"

namespace adjsnap::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The command line of top, as given.
struct TopArgs {
  std::string interval = "2";
  std::string count;  // empty: forever
  bool once = false;  // one frame, with no screen control codes, then exit
};

// The write end is written by the SIGINT/SIGTERM handler, the read end polled by the wait
// between refreshes: a signal ends the wait with no race between testing a flag and sleeping.
int g_wake_write = -1;
int g_wake_read = -1;

extern "C" void OnStopSignal(int) {
  const int saved = errno;
  const char byte = 1;
  (void)!write(g_wake_write, &byte, 1);
  errno = saved;
}

// From here on SIGINT and SIGTERM end top's wait (and top, with status 0) rather than the
// process, and a closed stdout ends it through a failed write rather than SIGPIPE.
bool CatchStopSignals() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  g_wake_read = fds[0];
  g_wake_write = fds[1];
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, nullptr);
  return true;
}

// Sleeps until `deadline`; false if a stop signal came first.
bool WaitUntil(Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{g_wake_read, POLLIN, 0};
    int n = poll(&p, 1, left.count() > 0 ? static_cast<int>(left.count()) : 0);
    if (n > 0) return false;
    if (n == 0 && Clock::now() >= deadline) return true;
  }
}

// One Stats answer and when it arrived.
struct Sample {
  v1::StatsResponse stats;
  Clock::time_point at;
};

// Bytes written (`written`) or read over every disk entry (one per spool class).
uint64_t DiskBytes(const v1::StatsResponse& r, bool written) {
  uint64_t n = 0;
  for (const auto& t : r.tiers()) {
    if (t.tier() == v1::TIER_DISK) n += written ? t.write_bytes() : t.read_bytes();
  }
  return n;
}

// Every rejection in `r`, all surfaces and reasons together (the store's refused pushes too).
uint64_t Rejections(const v1::StatsResponse& r) {
  uint64_t n = 0;
  for (const auto& x : r.rejections()) n += x.count();
  return n;
}

// The count of `like`'s surface and reason in `r`; 0 when `r` has no such entry.
uint64_t RejectionCount(const v1::StatsResponse& r, const v1::RejectionCount& like) {
  for (const auto& x : r.rejections()) {
    if (x.surface() == like.surface() && x.reason() == like.reason()) return x.count();
  }
  return 0;
}

// Per second between two samples of the same daemon; none for the first sample, or when the
// daemon restarted in between (its counters began again).
struct Rates {
  double seconds = 0;
  double pushes = 0;
  double fetches = 0;
  double spill_bytes = 0;
  double disk_read_bytes = 0;
  double prefetch_hits = 0;
  double prefetch_misses = 0;
  double refused_pushes = 0;
  double rejections = 0;                     // all reasons together
  std::vector<double> rejections_by_reason;  // as the later sample's Stats.rejections
};

std::optional<Rates> RatesBetween(const std::optional<Sample>& before, const Sample& now) {
  if (!before || now.stats.uptime_ms() < before->stats.uptime_ms()) return std::nullopt;
  const v1::StatsResponse& a = before->stats;
  const v1::StatsResponse& b = now.stats;
  Rates r;
  r.seconds = std::chrono::duration<double>(now.at - before->at).count();
  if (r.seconds <= 0) return std::nullopt;
  auto per_second = [&](uint64_t from, uint64_t to) {
    return to >= from ? static_cast<double>(to - from) / r.seconds : 0.0;
  };
  r.pushes = per_second(a.pushes(), b.pushes());
  r.fetches = per_second(a.fetches(), b.fetches());
  r.spill_bytes = per_second(DiskBytes(a, /*written=*/true), DiskBytes(b, /*written=*/true));
  r.disk_read_bytes = per_second(DiskBytes(a, /*written=*/false), DiskBytes(b, /*written=*/false));
  r.prefetch_hits = per_second(a.prefetch_hits(), b.prefetch_hits());
  r.prefetch_misses = per_second(a.demand_reads(), b.demand_reads());
  r.refused_pushes = per_second(a.refused_pushes(), b.refused_pushes());
  r.rejections = per_second(Rejections(a), Rejections(b));
  for (const auto& x : b.rejections()) {
    r.rejections_by_reason.push_back(per_second(RejectionCount(a, x), x.count()));
  }
  return r;
}

// The Stats fields as `status --json` names them, and "rates" (null on the first refresh).
Json RefreshJson(const Sample& now, const std::optional<Rates>& rates) {
  Json j = ProtoJson(now.stats);
  if (!rates) {
    j["rates"] = nullptr;
    return j;
  }
  j["rates"] = {{"interval_seconds", rates->seconds},
                {"pushes_per_second", rates->pushes},
                {"fetches_per_second", rates->fetches},
                {"spill_bytes_per_second", rates->spill_bytes},
                {"disk_read_bytes_per_second", rates->disk_read_bytes},
                {"prefetch_hits_per_second", rates->prefetch_hits},
                {"prefetch_misses_per_second", rates->prefetch_misses},
                {"refused_pushes_per_second", rates->refused_pushes},
                {"rejections_per_second", rates->rejections}};
  return j;
}

// One screen for people; `live`: one of a series redrawn every `interval` seconds.
std::string Frame(const Sample& now, const std::optional<Rates>& rates, double interval,
                  bool live) {
  const v1::StatsResponse& r = now.stats;
  std::string out =
      Format("adjsnapd %s  up %.1f s  sessions %llu  runs %llu", r.version().c_str(),
             static_cast<double>(r.uptime_ms()) / 1000.0, (unsigned long long)r.sessions(),
             (unsigned long long)r.runs());
  out += live ? Format("  (every %g s; Ctrl-C quits)\n\n", interval) : "\n\n";
  auto count = [&](double Rates::*field) {
    return rates ? Format("%.1f", (*rates).*field) : std::string("-");
  };
  auto bytes = [&](double Rates::*field) {
    return rates ? FormatBytes(static_cast<uint64_t>(std::llround((*rates).*field))) + "/s"
                 : std::string("-");
  };
  Table counters({{"", 16, true}, {"TOTAL", 12}, {"PER SECOND", 14}});
  counters.Add({"pushes", std::to_string(r.pushes()), count(&Rates::pushes)});
  counters.Add({"fetches", std::to_string(r.fetches()), count(&Rates::fetches)});
  counters.Add({"spill", FormatBytes(DiskBytes(r, /*written=*/true)), bytes(&Rates::spill_bytes)});
  counters.Add(
      {"disk reads", FormatBytes(DiskBytes(r, /*written=*/false)), bytes(&Rates::disk_read_bytes)});
  counters.Add({"prefetch hits", std::to_string(r.prefetch_hits()), count(&Rates::prefetch_hits)});
  counters.Add(
      {"prefetch misses", std::to_string(r.demand_reads()), count(&Rates::prefetch_misses)});
  counters.Add(
      {"refused pushes", std::to_string(r.refused_pushes()), count(&Rates::refused_pushes)});
  counters.Add({"rejections", std::to_string(Rejections(r)), count(&Rates::rejections)});
  counters.Add({"lost snapshots", std::to_string(r.lost_snapshots()), ""});
  counters.Add({"waiting pushes", std::to_string(r.waiting_pushes()), ""});
  counters.Add({"waiting fetches", std::to_string(r.waiting_fetches()), ""});
  counters.Add({"oldest wait", Format("%.1f s", r.oldest_wait_seconds()), ""});
  out += counters.Render() + "\n";
  // Only the reasons that happened: most never do.
  Table rejected({{"REJECTED", 16, true}, {"REASON", 24, true}, {"TOTAL", 12}, {"PER SECOND", 14}});
  bool any = false;
  for (int i = 0; i < r.rejections_size(); ++i) {
    const v1::RejectionCount& x = r.rejections(i);
    if (x.count() == 0) continue;
    any = true;
    rejected.Add({x.surface(), x.reason(), std::to_string(x.count()),
                  rates ? Format("%.1f", rates->rejections_by_reason[i]) : std::string("-")});
  }
  if (any) out += rejected.Render() + "\n";
  Table tiers({{"TIER", 8, true},
               {"USED", 12},
               {"BUDGET", 12},
               {"USE%", 7},
               {"PEAK", 12},
               {"SNAPSHOTS", 10}});
  for (const auto& t : r.tiers()) {
    double pct = t.budget_bytes() ? 100.0 * t.used_bytes() / t.budget_bytes() : 0.0;
    // Only the host tier keeps its peak.
    std::string peak = t.tier() == v1::TIER_HOST ? FormatBytes(t.peak_used_bytes()) : "-";
    tiers.Add({TierLabel(t), FormatBytes(t.used_bytes()), FormatBytes(t.budget_bytes()),
               Format("%.1f%%", pct), peak, std::to_string(t.snapshots())});
  }
  return out + tiers.Render();
}

int Top(Session& s, const TopArgs& a) {
  char* end = nullptr;
  const double interval = std::strtod(a.interval.c_str(), &end);
  if (a.interval.empty() || *end != '\0' || !(interval > 0) || interval > 86400) {
    return UsageError("top",
                      "--interval must be seconds > 0 (up to 86400), got '" + a.interval + "'");
  }
  uint64_t count = a.once ? 1 : 0;  // 0: forever
  if (!a.count.empty() && (!ParseCount(a.count, &count) || count == 0)) {
    return UsageError("top", "--count must be a positive integer, got '" + a.count + "'");
  }
  if (!CatchStopSignals()) {
    Error("top", std::string("cannot watch for Ctrl-C: ") + std::strerror(errno));
    return kExitFailed;
  }
  Output& out = s.out();
  // Redrawn in place on a terminal; JSON lines for --json or a pipe; --once: one frame for
  // people (or one JSON line with --json) wherever stdout goes.
  const bool lines = out.json() || (!a.once && !isatty(STDOUT_FILENO));
  const auto period =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
  const Clock::time_point start = Clock::now();
  std::optional<Sample> previous;
  for (uint64_t n = 0; count == 0 || n < count; ++n) {
    if (n > 0 && !WaitUntil(start + n * period)) break;
    Sample now;
    grpc::Status st = s.stub().Stats(ShortContext().get(), v1::StatsRequest(), &now.stats);
    if (!st.ok()) return s.Fail("top", st);
    now.at = Clock::now();
    std::optional<Rates> rates = RatesBetween(previous, now);
    if (lines) {
      out.PrintLine(RefreshJson(now, rates));
    } else if (a.once) {
      out.Text(Frame(now, rates, interval, /*live=*/false));
    } else {
      out.Text("\x1b[H\x1b[2J");  // cursor home, clear the screen
      out.Text(Frame(now, rates, interval, /*live=*/true));
    }
    if (!out.Flush()) break;  // whoever read stdout went away
    previous = std::move(now);
  }
  return kExitOk;
}

}  // namespace

void AddTopCommand(CLI::App& app, Action* action) {
  auto a = std::make_shared<TopArgs>();
  CLI::App* top = app.add_subcommand(
      "top",
      "tiers, sessions and counters live, with pushes, fetches, spill and rejections per second");
  top->footer(
      "On a terminal the screen is redrawn in place. With --json, or when stdout is not a\n"
      "terminal, it prints one JSON object per refresh: the Stats fields as `status --json`\n"
      "names them plus \"rates\" (per second since the previous refresh; null on the first).\n"
      "--once prints one frame (one JSON object with --json) and exits: no screen control\n"
      "codes, and no rates, which need two refreshes. Ctrl-C quits with status 0.");
  CLI::Option* interval =
      top->add_option("--interval", a->interval, "seconds between refreshes (fractions allowed)")
          ->type_name("SECONDS")
          ->capture_default_str();
  CLI::Option* count =
      top->add_option("--count", a->count, "stop after N refreshes (default: run until Ctrl-C)")
          ->type_name("N");
  top->add_flag("--once", a->once, "print one frame, without screen control codes, and exit")
      ->excludes(interval)
      ->excludes(count);
  top->callback([action, a] { *action = [a](Session& s) { return Top(s, *a); }; });
}

}  // namespace adjsnap::cli
