// The option table (config.h, OptionDoc): every option once, with its key, variable, type,
// range, default, help and the member it sets. Everything else about options (the file, the
// environment, the flags, --help, --print-config, docs/configuration.md's table) reads it.
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_text.h"

namespace adjsnap {

using config_text::Quoted;
using config_text::Trim;

namespace {

const char* NonEmptyPath(const std::string& v) { return v.empty() ? "a path" : nullptr; }
const char* AbsoluteOrEmpty(const std::string& v) {
  return !v.empty() && v.front() != '/' ? "an absolute directory or \"\"" : nullptr;
}
const char* HostPortOrEmpty(const std::string& v) {
  return !v.empty() && v.rfind(':') == std::string::npos ? "HOST:PORT like 0.0.0.0:7443"
                                                          : nullptr;
}

Status SetSpoolDirs(Config& c, const std::string& value) {
  std::vector<std::string> dirs;
  std::stringstream in(value);
  for (std::string d; std::getline(in, d, ',');) {
    d = Trim(d);
    if (d.empty()) {
      return Status::InvalidArgument(
          "expected comma-separated directories with none empty, or none");
    }
    dirs.push_back(d);
  }
  if (dirs.empty()) return Status::InvalidArgument("expected comma-separated directories, or none");
  if (dirs.size() == 1 && dirs[0] == "none") dirs.clear();
  c.spool_dirs = dirs;
  c.spool_dirs_set = true;
  return Status::Ok();
}

std::string GetSpoolDirs(const Config& c) { return Quoted(SpoolDirsText(c)); }

Status SetSharedSpoolDirs(Config& c, const std::string& value) {
  if (Trim(value).empty() || Trim(value) == "none") {
    c.shared_spool_dirs.clear();
    return Status::Ok();
  }
  Config parsed;
  ADJSNAP_RETURN_IF_ERROR(SetSpoolDirs(parsed, value));  // the same list, the same checks
  c.shared_spool_dirs = parsed.spool_dirs;
  return Status::Ok();
}

std::string GetSharedSpoolDirs(const Config& c) { return Quoted(DirsText(c.shared_spool_dirs)); }

}  // namespace

const std::vector<OptionDoc>& ConfigOptions() {
  using K = OptionKind;
  using C = Config;
  static const std::vector<OptionDoc> table = {
      {.key = "socket", .env = "ADJSNAP_SOCKET", .kind = K::kText, .value_name = "PATH",
       .help = "control-plane unix socket (default /run/adjsnap/adjsnap.sock for root, else "
               "$XDG_RUNTIME_DIR/adjsnap/adjsnap.sock)",
       .default_text = nullptr, .check = NonEmptyPath, .text = &C::socket},
      {.key = "state_dir", .env = "ADJSNAP_STATE_DIR", .kind = K::kText, .value_name = "DIR",
       .help = "catalog directory (default /var/lib/adjsnap for root, else "
               "~/.local/state/adjsnap)",
       .default_text = nullptr, .check = NonEmptyPath, .text = &C::state_dir},
      {.key = "host_mem", .env = "ADJSNAP_HOST_MEM", .kind = K::kSize, .value_name = "SIZE",
       .help = "host-tier budget, e.g. 8G; 0 = use host_mem_perc", .default_text = "0",
       .size = &C::host_mem},
      {.key = "host_mem_perc", .env = "ADJSNAP_HOST_MEM_PERC", .kind = K::kFraction,
       .value_name = "FRACTION",
       .help = "host-tier budget as a fraction of MemAvailable at start",
       .default_text = "0.7", .fraction = &C::host_mem_perc},
      {.key = "host_huge_pages", .env = "ADJSNAP_HOST_HUGE_PAGES", .kind = K::kText,
       .value_name = "MODE",
       .help = "host-tier pages: auto (hugetlb when the pool holds the whole tier, else shmem "
               "THP on a tmpfs with huge=always, else shmem THP where the kernel allows it), "
               "hugetlb or thp (or refuse to start), off",
       .default_text = "auto", .choices = {"auto", "hugetlb", "thp", "off"},
       .text = &C::host_huge_pages},
      {.key = "host_tmpfs", .env = "ADJSNAP_HOST_TMPFS", .kind = K::kText, .value_name = "DIR",
       .help = "a tmpfs mounted with huge=always for the host tier's file (the systemd unit's "
               "TemporaryFileSystem=); empty: adjsnapd mounts one in a namespace of its own",
       .default_text = "", .check = AbsoluteOrEmpty, .text = &C::host_tmpfs},
      {.key = "host_arenas", .env = "ADJSNAP_HOST_ARENAS", .kind = K::kText, .value_name = "MODE",
       .help = "per-uid (each uid maps an arena of its own steps: the mapped path for every "
               "local solver) or shared (one arena that only root and adjsnapd's uid map; other "
               "uids copy over UCX)",
       .default_text = "per-uid", .choices = {"per-uid", "shared"}, .text = &C::host_arenas},
      {.key = "host_prefault", .env = "ADJSNAP_HOST_PREFAULT", .kind = K::kText,
       .value_name = "MODE",
       .help = "background (populate each user's arena ahead of its pushes, from its first "
               "session, one 2 MiB piece at a time and within host_mem), true (all of adjsnapd's "
               "own arena at start, the whole tier with host_arenas = shared: commits host_mem "
               "of RAM) or false",
       .default_text = "background", .choices = {"background", "true", "false"},
       .reads_toml_bool = true, .text = &C::host_prefault},
      {.key = "host_release_after", .env = "ADJSNAP_HOST_RELEASE_AFTER", .kind = K::kInteger,
       .value_name = "SECONDS",
       .help = "give free host-tier memory back to the OS once no push has taken any for this "
               "long (a job ended); not with host_prefault = true",
       .default_text = "300", .min = 0, .max = 7 * 24 * 3600, .zero_means = "keep it",
       .integer = &C::host_release_after},
      {.key = "spool_dirs", .env = "ADJSNAP_SPOOL_DIRS", .kind = K::kText, .value_name = "DIRS",
       .help = "disk-tier spool directories, comma-separated (NVMe); none = no disk tier "
               "(default <state_dir>/spool)",
       .default_text = nullptr, .set = SetSpoolDirs, .get = GetSpoolDirs},
      {.key = "disk_mem", .env = "ADJSNAP_DISK_MEM", .kind = K::kSize, .value_name = "SIZE",
       .help = "disk-tier budget over all spools, e.g. 500G; 0 = use disk_mem_perc",
       .default_text = "0", .size = &C::disk_mem},
      {.key = "disk_mem_perc", .env = "ADJSNAP_DISK_MEM_PERC", .kind = K::kFraction,
       .value_name = "FRACTION",
       .help = "disk-tier budget as a fraction of each spool's free space at start",
       .default_text = "0.7", .fraction = &C::disk_mem_perc},
      {.key = "shared_spool_dirs", .env = "ADJSNAP_SHARED_SPOOL_DIRS", .kind = K::kText,
       .value_name = "DIRS",
       .help = "spool directories on a filesystem the nodes share (Lustre, GPFS, BeeGFS, "
               "GlusterFS), comma-separated: a third tier, larger and slower than spool_dirs, "
               "that holds the oldest steps; none = no such tier",
       .default_text = "none", .set = SetSharedSpoolDirs, .get = GetSharedSpoolDirs},
      {.key = "shared_disk_mem", .env = "ADJSNAP_SHARED_DISK_MEM", .kind = K::kSize,
       .value_name = "SIZE",
       .help = "budget over the shared spools, e.g. 10T; 0 = use disk_mem_perc of their free "
               "space",
       .default_text = "0", .size = &C::shared_disk_mem},
      {.key = "spool_failure_timeout", .env = "ADJSNAP_SPOOL_FAILURE_TIMEOUT", .kind = K::kInteger,
       .value_name = "SECONDS",
       .help = "seconds a push that needs the disk tier waits while no spool works before it "
               "fails with UNAVAILABLE; later ones fail at once until a spool works",
       .default_text = "10", .min = 1, .max = 3600, .integer = &C::spool_failure_timeout},
      {.key = "wait_warn_after", .env = "ADJSNAP_WAIT_WARN_AFTER", .kind = K::kInteger,
       .value_name = "SECONDS",
       .help = "seconds after which a push or fetch that still waits (for host room, a disk "
               "read) is logged with what it waits for, and every 6 times as long after",
       .default_text = "10", .min = 1, .max = 3600, .integer = &C::wait_warn_after},
      {.key = "scrub_rate", .env = "ADJSNAP_SCRUB_RATE", .kind = K::kSize, .value_name = "SIZE",
       .help = "bytes per second the background scrub reads to re-verify spool files, e.g. "
               "64M; 0 = off",
       .default_text = "0", .size = &C::scrub_rate},
      {.key = "io_threads", .env = "ADJSNAP_IO_THREADS", .kind = K::kInteger, .value_name = "N",
       .help = "disk I/O threads", .default_text = "0", .min = 0, .max = 256,
       .zero_means = "4, or 8 with shared_spool_dirs", .integer = &C::io_threads},
      {.key = "prefetch_depth", .env = "ADJSNAP_PREFETCH_DEPTH", .kind = K::kInteger,
       .value_name = "N",
       .help = "most steps read ahead of the backward pass; the depth adapts below it",
       .default_text = "8", .min = 1, .max = 256, .integer = &C::prefetch_depth},
      {.key = "compress_threads", .env = "ADJSNAP_COMPRESS_THREADS", .kind = K::kInteger,
       .value_name = "N", .help = "zfp compression workers", .default_text = "0", .min = 0,
       .max = 256, .zero_means = "the cores minus one", .integer = &C::compress_threads},
      {.key = "session_connect_timeout", .env = "ADJSNAP_SESSION_CONNECT_TIMEOUT",
       .kind = K::kInteger, .value_name = "SECONDS",
       .help = "seconds a new session has to say Hello on its UCX endpoint before it is closed",
       .default_text = "30", .min = 1, .max = 3600, .integer = &C::session_connect_timeout},
      {.key = "max_sessions_per_uid", .env = "ADJSNAP_MAX_SESSIONS_PER_UID", .kind = K::kInteger,
       .value_name = "N",
       .help = "sessions one uid may hold open at once (each connected client holds one); "
               "more are refused, so that no user can take every other one's fds",
       .default_text = "1024", .min = 1, .max = 1u << 20, .integer = &C::max_sessions_per_uid},
      {.key = "orphan_grace", .env = "ADJSNAP_ORPHAN_GRACE", .kind = K::kInteger,
       .value_name = "SECONDS",
       .help = "seconds a run that is not kept survives the death of every client that opened "
               "it",
       .default_text = "600", .min = 0, .max = 7 * 24 * 3600, .zero_means = "until removed",
       .integer = &C::orphan_grace},
      {.key = "stop_timeout", .env = "ADJSNAP_STOP_TIMEOUT", .kind = K::kInteger,
       .value_name = "SECONDS",
       .help = "seconds a stop may spend writing host-only steps to disk; what is not written "
               "by then is named in the log and marked lost",
       .default_text = "45", .min = 1, .max = 3600, .integer = &C::stop_timeout},
      {.key = "fdstore", .env = "ADJSNAP_FDSTORE", .kind = K::kText, .value_name = "auto|only|off",
       .help = "auto: on stop, write the host-only steps to disk and also hand the host tier to "
               "systemd's fd store when systemd keeps one ($FDSTORE), so a restart serves them "
               "from memory and a stop or reboot from disk; only: hand it over without writing "
               "to disk (a restart copies nothing at any size; a reboot or a flushed fd store "
               "loses the host-only steps); off: write to disk only",
       .default_text = "auto", .choices = {"auto", "only", "off"}, .text = &C::fdstore},
      {.key = "metrics_textfile", .env = "ADJSNAP_METRICS_TEXTFILE", .kind = K::kText,
       .value_name = "FILE",
       .help = "file adjsnapd writes its metrics to in the Prometheus text format, for "
               "node_exporter's textfile collector (e.g. "
               "/var/lib/node_exporter/textfile/adjsnap.prom); empty = off",
       .default_text = "", .text = &C::metrics_textfile},
      {.key = "metrics_interval", .env = "ADJSNAP_METRICS_INTERVAL", .kind = K::kInteger,
       .value_name = "SECONDS", .help = "seconds between two writes of metrics_textfile",
       .default_text = "15", .min = 1, .max = 3600, .integer = &C::metrics_interval},
      {.key = "log_level", .env = "ADJSNAP_LOG_LEVEL", .kind = K::kText, .value_name = "LEVEL",
       .help = "debug, info, warn or error: what adjsnapd logs to stderr", .default_text = "info",
       .choices = {"debug", "info", "warn", "error"}, .text = &C::log_level},
      {.key = "socket_mode", .env = "ADJSNAP_SOCKET_MODE", .kind = K::kMode, .value_name = "MODE",
       .help = "control socket permissions, octal; who connects is told by SO_PEERCRED",
       .default_text = "0666", .integer = &C::socket_mode},
      {.key = "admin_group", .env = "ADJSNAP_ADMIN_GROUP", .kind = K::kText, .value_name = "GROUP",
       .help = "group whose members see and manage every user's runs; root and adjsnapd's own uid "
               "always do; empty = none",
       .default_text = "", .text = &C::admin_group},
      {.key = "tenant_quota", .env = "ADJSNAP_TENANT_QUOTA", .kind = K::kSize, .value_name = "SIZE",
       .help = "bytes one uid may store over host and disk, e.g. 200G; 0 = no limit",
       .default_text = "0", .size = &C::tenant_quota},
      {.key = "tenant_host_share", .env = "ADJSNAP_TENANT_HOST_SHARE", .kind = K::kFraction,
       .value_name = "FRACTION",
       .help = "fraction of the host tier one uid may fill with steps that cannot move to "
               "disk, admins exempt; its movable steps go to disk first when it holds more",
       .default_text = "0.5", .fraction = &C::tenant_host_share},
      {.key = "admin_listen", .env = "ADJSNAP_ADMIN_LISTEN", .kind = K::kText,
       .value_name = "HOST:PORT",
       .help = "HOST:PORT for remote adjsnap over mutual TLS; empty = off", .default_text = "",
       .check = HostPortOrEmpty, .text = &C::admin_listen},
      {.key = "admin_tls_cert", .env = "ADJSNAP_ADMIN_TLS_CERT", .kind = K::kText,
       .value_name = "FILE", .help = "PEM server certificate for admin_listen",
       .default_text = "", .text = &C::admin_tls_cert},
      {.key = "admin_tls_key", .env = "ADJSNAP_ADMIN_TLS_KEY", .kind = K::kText,
       .value_name = "FILE", .help = "PEM private key for admin_listen", .default_text = "",
       .text = &C::admin_tls_key},
      {.key = "admin_tls_ca", .env = "ADJSNAP_ADMIN_TLS_CA", .kind = K::kText,
       .value_name = "FILE", .help = "PEM CA whose client certificates are admins on "
                                     "admin_listen",
       .default_text = "", .text = &C::admin_tls_ca},
  };
  return table;
}

namespace config_text {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// `s` as a TOML basic string, quotes included.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(ch));
      out += escaped;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace config_text
}  // namespace adjsnap
