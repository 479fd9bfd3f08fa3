// adjsnapd: the per-node snapshot storage daemon. main() loads the configuration and blocks the
// stop signals; the Daemon (daemon.h) starts every part in dependency order and, on SIGTERM or
// SIGINT, stops them in reverse.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "daemon.h"
#include "data_plane/address_check.h"
#include "log.h"

extern char** environ;

namespace adjsnap {
namespace {

int Run(int argc, char** argv) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    if (size_t eq = kv.find('='); eq != std::string::npos)
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto loaded = LoadConfig(std::vector<std::string>(argv + 1, argv + argc), env);
  if (!loaded.ok()) {
    std::fprintf(stderr, "adjsnap: %s\n", loaded.status().message().c_str());
    return 2;
  }
  if (loaded->help) {
    std::fputs(CommandLineHelp().c_str(), stdout);
    return 0;
  }
  if (loaded->version) {
    std::printf("adjsnapd %s\n", ADJSNAP_VERSION);
    return 0;
  }
  const Config& config = loaded->config;
  if (loaded->print_config) {
    std::fputs(FormatConfig(config).c_str(), stdout);
    return 0;
  }
  log::Level level;
  if (log::ParseLevel(config.log_level.c_str(), &level)) log::SetLevel(level);

  // Block the shutdown signals before any thread starts so only sigwait() below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = Daemon::Start(config, std::move(env));
  if (!daemon.ok()) {
    ADJSNAP_LOG_ERROR("%s", daemon.status().ToString().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  (*daemon)->Stop(sig);
  daemon->reset();
  ADJSNAP_LOG_INFO("stopped cleanly");
  return 0;
}

}  // namespace
}  // namespace adjsnap

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], adjsnap::kCheckUcxAddressFlag) == 0) {
    adjsnap::RunUcxAddressCheck();
  }
  // The scratch buffers of compression, decoding and scrubbing (up to a step's size, on the
  // I/O and compression threads) are mapped for each use and unmapped when freed. glibc's
  // adaptive threshold would serve them from per-thread heaps once the first one is freed,
  // and keep that memory: in the soak (tests/soak), adjsnapd's anonymous memory grew from 70 to
  // 216 MiB within one six-minute life; mapped per use, it stayed under 35 MiB.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  return adjsnap::Run(argc, argv);
}
