// adjsnapd's configuration: embedded defaults, overridden by a config file, then by ADJSNAP_*
// environment variables, then by command-line flags (each layer wins over the one before).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "adjsnap/status.h"

namespace adjsnap {

// The effective configuration. LoadConfig fills every member: the embedded defaults are
// ConfigOptions()' `default_text`s, not initializers here.
struct Config {
  std::string socket;           // gRPC control-plane unix socket
  std::string state_dir;        // holds the RocksDB catalog
  uint64_t host_mem = 0;        // host-tier budget in bytes; 0 = host_mem_perc of MemAvailable
  double host_mem_perc = 0;     // fraction of MemAvailable at start, used when host_mem is 0
  std::string host_huge_pages;  // auto, hugetlb, thp or off (host_tier.h, HugePages)
  std::string host_tmpfs;       // a huge=always tmpfs for the tier; "" = a private one
  std::string host_arenas;      // per-uid or shared (host_tier.h, HostTierOptions)
  // background (populate each arena ahead of its pushes), true (all of adjsnapd's own arena at
  // start) or false (host_tier.h, HostTierOptions)
  std::string host_prefault;
  uint32_t host_release_after = 0;  // seconds idle before free host memory goes back; 0 = keep
  std::vector<std::string> spool_dirs;  // disk-tier spools; see SpoolDirs()
  bool spool_dirs_set = false;          // false: the default, <state_dir>/spool
  uint64_t disk_mem = 0;                // disk-tier budget; 0 = disk_mem_perc of free space
  double disk_mem_perc = 0;
  // Spools of class shared (a parallel filesystem), which hold the oldest steps; empty: none.
  std::vector<std::string> shared_spool_dirs;
  uint64_t shared_disk_mem = 0;        // their budget; 0 = disk_mem_perc of their free space
  uint32_t spool_failure_timeout = 0;  // seconds a push needing disk waits with no spool working
  uint32_t wait_warn_after = 0;  // seconds before a push or fetch still waiting is logged
  uint64_t scrub_rate = 0;       // background scrub, bytes/s; 0 = off
  uint32_t io_threads = 0;
  uint32_t prefetch_depth = 0;
  uint32_t compress_threads = 0;         // 0 = the cores minus one
  uint32_t session_connect_timeout = 0;  // seconds from OpenSession to the client's Hello
  uint32_t max_sessions_per_uid = 0;     // sessions one uid may hold open at once
  uint32_t orphan_grace = 0;  // seconds a non-keep run outlives its dead clients; 0 = forever
  // Seconds a stop may spend writing host-only steps to disk (SIGTERM, `adjsnap shutdown`);
  // the systemd unit's TimeoutStopSec leaves a margin above it.
  uint32_t stop_timeout = 0;
  // auto, only or off: whether a stop hands the host tier to systemd's fd store ($FDSTORE)
  // and/or drains it to disk.
  std::string fdstore;
  std::string metrics_textfile;   // Prometheus text file for node_exporter; empty = off
  uint32_t metrics_interval = 0;  // seconds between two writes of it
  std::string log_level;
  uint32_t socket_mode = 0;     // control socket permissions; tenancy is per uid regardless
  std::string admin_group;      // members see and manage every tenant's runs (root always does)
  uint64_t tenant_quota = 0;    // bytes one uid may store (host + disk); 0 = no limit
  double tenant_host_share = 0;  // of the host tier, one uid's steps that cannot move to disk
  // Remote administration (adjsnap --remote): gRPC over mutual TLS on this address; empty =
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
  kInteger,   // a whole number in [min, max]: 8 or "8"
  kMode,      // octal permissions: "0660", 0o660 or 660
};

// One option: everything about it, once. Its config-file key, its ADJSNAP_* variable and its
// --flag (the key with dashes); its type and range; its embedded default; its help; the
// member of Config it sets and reads. The file parser, the environment, the command line,
// `adjsnapd --help`, `--print-config` and the defaults all come from this table, and a test
// checks docs/configuration.md's table against it.
struct OptionDoc {
  const char* key;
  const char* env;
  OptionKind kind;
  const char* value_name;  // placeholder in `adjsnapd --help`, e.g. SIZE
  const char* help;        // `adjsnapd --help` adds the range and the default
  // The embedded default as --print-config writes it (unquoted); nullptr where adjsnapd computes
  // it at start, which `help` then says (socket, state_dir, spool_dirs).
  const char* default_text;
  uint32_t min = 0, max = 0;               // kInteger: the range
  const char* zero_means = nullptr;        // kInteger: what 0 stands for, if anything
  std::vector<const char*> choices = {};   // kText: the only values allowed, if any
  // kText: what else a value must be; returns what was expected, or nullptr if it is fine.
  const char* (*check)(const std::string&) = nullptr;
  bool reads_toml_bool = false;  // kText: `key = true` in the file reads as "true"
  // The member it sets and reads: one of these, by kind (kMode and kInteger: `integer`)...
  std::string Config::*text = nullptr;
  uint64_t Config::*size = nullptr;
  double Config::*fraction = nullptr;
  uint32_t Config::*integer = nullptr;
  // ...or, for an option with a shape of its own (spool_dirs), these two.
  Status (*set)(Config&, const std::string&) = nullptr;  // a failure says what was expected
  std::string (*get)(const Config&) = nullptr;           // as --print-config writes it
};
const std::vector<OptionDoc>& ConfigOptions();

// `adjsnapd --help`'s description of `o`: its help, range and default.
std::string OptionHelp(const OptionDoc& o);

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

// The embedded defaults (what LoadConfig gives with no file, environment or flag).
Config DefaultConfig();

// `adjsnapd --help`: every flag of ConfigOptions() with its variable and description.
std::string CommandLineHelp();

// `key = value` lines (TOML-compatible) with every effective value.
std::string FormatConfig(const Config& config);

// The spool directories in effect (empty: no disk tier), and as written in a config file.
std::vector<std::string> SpoolDirs(const Config& config);
std::string SpoolDirsText(const Config& config);
// Directories as one comma-separated list, as the options write them; "none" for none.
std::string DirsText(const std::vector<std::string>& dirs);

// Host-tier budget in bytes: host_mem, or host_mem_perc of `mem_available`.
uint64_t HostBudget(const Config& config, uint64_t mem_available);

// A field of /proc/meminfo ("MemAvailable", "MemTotal"), in bytes.
Result<uint64_t> MemInfo(const std::string& field);

}  // namespace adjsnap
