// adjsnap-bench's command line.
#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "adjsnap/client.h"
#include "adjsnap/paths.h"
#include "adjsnap/units.h"

namespace adjsnap_bench {

constexpr int kExitUsage = 2;

constexpr const char* kFooter =
    "Modes, one at a time (none: push and fetch against memcpy and a raw UCX put):\n"
    "  adjsnap-bench [--steps N] [--bytes S] [--socket PATH] [--cold] [--json]\n"
    "  adjsnap-bench --spill [--bytes S] [--compute-ms T] [--socket PATH] [--json]\n"
    "  adjsnap-bench --codec [--workers N] [--json]\n"
    "  adjsnap-bench --copy [--steps N] [--bytes S] [--json]\n"
    "  adjsnap-bench --many N [--uniform --bytes S] [--compute-ms T] [--kill K] [--steps S] [--socket "
    "PATH] [--json]\n"
    "  adjsnap-bench --device [--steps N] [--bytes S] [--compute-ms T] [--socket PATH] [--json]\n"
    "The socket defaults to $ADJSNAP_SOCKET, else adjsnapd's default socket.\n"
    "Exit status: 0 done, 1 a benchmark or adjsnapd failed, 2 bad command line.";

// "adjsnap-bench: WHAT" and how to get help, for an error CLI11 found.
std::string FailureMessage(const CLI::App* /*app*/, const CLI::Error& e) {
  return std::string("adjsnap-bench: ") + e.what() + "\nRun 'adjsnap-bench --help' for more information.\n";
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
        if (!adjsnap::ParseCount(text, &v) || v < min || v > max) {
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

// Fills `a` from the command line. Returns the exit status when adjsnap-bench should stop here
// (--help: 0, after printing it; a bad command line: kExitUsage, after saying why), else
// nullopt. CLI11's exceptions stay inside.
std::optional<int> ParseArgs(int argc, char** argv, Args* a) {
  CLI::App app("adjsnap-bench: adjsnapd's throughput against the physical limits, in the same run.",
               "adjsnap-bench");
  app.footer(kFooter);
  app.failure_message(FailureMessage);
  app.formatter(std::make_shared<HelpFormatter>());
  app.get_formatter()->column_width(26);
  app.set_version_flag("--version", "adjsnap-bench " ADJSNAP_VERSION, "Print adjsnap-bench's version");
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
  CLI::Option* copy =
      app.add_flag("--copy", a->copy,
                   "The copy that computes a push's checksum against memcpy; no daemon [off]")
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
                   "Push a kept run 'adjsnap-bench-restart' of --steps x --bytes and exit (the "
                   "restart benchmark, client/tools/restart_bench.sh) [off]")
          ->group("Modes");
  CLI::Option* verify = app.add_flag("--verify", a->verify,
                                     "Fetch 'adjsnap-bench-restart' back, checking every byte [off]")
                            ->group("Modes");
  app.add_flag("--n-unknown", a->n_unknown,
               "--fill: open the run without declaring its number of steps, as a solver that "
               "does not know it does [off]")
      ->needs(fill);
  const std::vector<CLI::Option*> modes = {spill, codec, copy, many, device, fill, verify};
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
         "--bytes", [a](const std::string& text) { a->bytes = *adjsnap::ParseBytes(text); },
         "Bytes per step, e.g. 64M or 4GiB (--many: with --uniform; not --codec)")
      ->type_name("S")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            adjsnap::Result<uint64_t> b = adjsnap::ParseBytes(text);
            if (!b.ok()) return b.status().message();
            return *b == 0 ? "must be more than 0" : "";
          },
          "", "SIZE"))
      ->default_str("64MiB");
  // Resolved here, as adjsnap and libadjsnap resolve it: every mode and its forked solvers use
  // a->socket as it stands.
  a->socket = adjsnap::ClientSocketPath();
  app.add_option("--socket", a->socket, "adjsnapd's control socket (not --codec)")
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
                 "adjsnap-bench: --kill %d is more than --many %d\n"
                 "Run 'adjsnap-bench --help' for more information.\n",
                 a->kill, a->many);
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace adjsnap_bench
