// snapd's configuration: embedded defaults, overridden by a config file, then by SNAPD_*
// environment variables, then by command-line flags (each layer wins over the one before).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "snapd/status.h"

namespace snapd {

struct Config {
  std::string socket;           // gRPC control-plane unix socket
  std::string state_dir;        // holds the RocksDB catalog
  uint64_t host_mem = 0;        // host-tier budget in bytes; 0 = host_mem_perc of MemAvailable
  double host_mem_perc = 0.7;   // fraction of MemAvailable at start, used when host_mem is 0
  std::string host_huge_pages = "auto";  // auto, hugetlb, thp or off (host_tier.h, HugePages)
  std::string host_tmpfs;                // a huge=always tmpfs for the tier; "" = a private one
  std::string host_arenas = "per-uid";  // per-uid or shared (host_tier.h, HostTierOptions)
  // background (populate each arena ahead of its pushes), true (all of snapd's own arena at
  // start) or false (host_tier.h, HostTierOptions)
  std::string host_prefault = "background";
  uint32_t host_release_after = 300;  // seconds idle before free host memory goes back; 0 = keep
  std::vector<std::string> spool_dirs;  // disk-tier spools; see SpoolDirs()
  bool spool_dirs_set = false;          // false: the default, <state_dir>/spool
  uint64_t disk_mem = 0;                // disk-tier budget; 0 = disk_mem_perc of free space
  double disk_mem_perc = 0.7;
  uint32_t spool_failure_timeout = 10;  // seconds a push needing disk waits with no spool working
  uint32_t wait_warn_after = 10;  // seconds before a push or fetch still waiting is logged
  uint64_t scrub_rate = 0;              // background scrub, bytes/s; 0 = off
  uint32_t io_threads = 4;
  uint32_t prefetch_depth = 8;
  uint32_t compress_threads = 0;  // 0 = the cores minus one
  uint32_t session_connect_timeout = 30;  // seconds from OpenSession to the client's Hello
  std::string metrics_textfile;   // Prometheus text file for node_exporter; empty = off
  uint32_t metrics_interval = 15;  // seconds between two writes of it
  uint32_t orphan_grace = 600;  // seconds a non-keep run outlives its dead clients; 0 = forever
  // Seconds a stop may spend writing host-only steps to disk (SIGTERM, `snapctl shutdown`);
  // the systemd unit's TimeoutStopSec leaves a margin above it.
  uint32_t stop_timeout = 45;
  // "auto": hand the host tier to systemd's fd store on stop when systemd keeps one ($FDSTORE),
  // and take it back on start; "off": always drain to disk on stop.
  std::string fdstore = "auto";
  std::string log_level = "info";
  uint32_t socket_mode = 0666;  // control socket permissions; tenancy is per uid regardless
  std::string admin_group;      // members see and manage every tenant's runs (root always does)
  uint64_t tenant_quota = 0;    // bytes one uid may store (host + disk); 0 = no limit
  double tenant_host_share = 0.5;  // of the host tier, one uid's steps that cannot move to disk
  // Remote administration (snapctl --remote): gRPC over mutual TLS on this address; empty =
  // off. Every peer whose client certificate admin_tls_ca signed is an admin.
  std::string admin_listen;
  std::string admin_tls_cert;   // PEM server certificate (chain)
  std::string admin_tls_key;    // PEM private key
  std::string admin_tls_ca;     // PEM CA that signs the admins' client certificates
};

// What an option's value is: how a config file may write it (TOML type) and how it is checked.
enum class OptionKind {
  kText,      // a TOML string
  kSize,      // bytes: "64G" or an integer
  kFraction,  // a number in (0, 1]: 0.7 or "0.7"
  kInteger,   // a whole number: 8 or "8"
  kMode,      // octal permissions: "0660", 0o660 or 660
  kBool,      // true or false (or "true"/"false")
};

// One option of the config file, its SNAPD_* variable and its --flag (the key with dashes).
// This table is the only list: the file parser, the environment, the command line and
// `snapd --help` all read it.
struct OptionDoc {
  const char* key;
  const char* env;
  OptionKind kind;
  const char* value_name;  // placeholder in `snapd --help`, e.g. SIZE
  const char* help;
};
const std::vector<OptionDoc>& ConfigOptions();

struct LoadedConfig {
  Config config;
  bool print_config = false;
  bool help = false;     // --help: print CommandLineHelp() and exit
  bool version = false;  // --version: print the version and exit
};

// Builds the effective configuration from the command line `args` (without the program name).
// `env` holds the process environment (tests pass their own). Errors name the source
// (file:line and key, variable or flag) and the offending value.
Result<LoadedConfig> LoadConfig(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env);

// `snapd --help`: every flag of ConfigOptions() with its variable and description.
std::string CommandLineHelp();

// `key = value` lines (TOML-compatible) with every effective value.
std::string FormatConfig(const Config& config);

// The spool directories in effect (empty: no disk tier), and as written in a config file.
std::vector<std::string> SpoolDirs(const Config& config);
std::string SpoolDirsText(const Config& config);

// Host-tier budget in bytes: host_mem, or host_mem_perc of `mem_available`.
uint64_t HostBudget(const Config& config, uint64_t mem_available);

// A field of /proc/meminfo ("MemAvailable", "MemTotal"), in bytes.
Result<uint64_t> MemInfo(const std::string& field);

}  // namespace snapd
