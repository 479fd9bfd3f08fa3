#include "config/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "snapd/paths.h"
#include "snapd/units.h"

namespace snapd {

const std::vector<OptionDoc>& ConfigOptions() {
  static const std::vector<OptionDoc> kOptions = {
      {"socket", "SNAPD_SOCKET",
       "control-plane unix socket (default /run/snapd/snapd.sock for root, else "
       "$XDG_RUNTIME_DIR/snapd/snapd.sock)"},
      {"state_dir", "SNAPD_STATE_DIR",
       "catalog directory (default /var/lib/snapd for root, else ~/.local/state/snapd)"},
      {"host_mem", "SNAPD_HOST_MEM",
       "host-tier budget, e.g. 8G; 0 = use host_mem_perc (default 0)"},
      {"host_mem_perc", "SNAPD_HOST_MEM_PERC",
       "host-tier budget as a fraction of MemAvailable at start (default 0.7)"},
      {"spool_dirs", "SNAPD_SPOOL_DIRS",
       "disk-tier spool directories, comma-separated (NVMe); none = no disk tier (default "
       "<state_dir>/spool)"},
      {"disk_mem", "SNAPD_DISK_MEM",
       "disk-tier budget over all spools, e.g. 500G; 0 = use disk_mem_perc (default 0)"},
      {"disk_mem_perc", "SNAPD_DISK_MEM_PERC",
       "disk-tier budget as a fraction of each spool's free space at start (default 0.7)"},
      {"io_threads", "SNAPD_IO_THREADS", "disk I/O threads (default 2)"},
      {"prefetch_depth", "SNAPD_PREFETCH_DEPTH",
       "most steps read ahead of the backward pass; the depth adapts below it (default 8)"},
      {"compress_threads", "SNAPD_COMPRESS_THREADS",
       "zfp compression workers; 0 = the cores minus one (default 0)"},
      {"session_connect_timeout", "SNAPD_SESSION_CONNECT_TIMEOUT",
       "seconds a new session has to say Hello on its UCX endpoint before it is closed "
       "(default 30)"},
      {"orphan_grace", "SNAPD_ORPHAN_GRACE",
       "seconds a run that is not kept survives the death of every client that opened it; "
       "0 = until removed (default 600)"},
      {"metrics_textfile", "SNAPD_METRICS_TEXTFILE",
       "file snapd writes its metrics to in the Prometheus text format, for node_exporter's "
       "textfile collector (e.g. /var/lib/node_exporter/textfile/snapd.prom); empty = off "
       "(default empty)"},
      {"metrics_interval", "SNAPD_METRICS_INTERVAL",
       "seconds between two writes of metrics_textfile, 1..3600 (default 15)"},
      {"log_level", "SNAPD_LOG_LEVEL", "debug, info, warn or error (default info)"},
      {"socket_mode", "SNAPD_SOCKET_MODE",
       "control socket permissions, octal; who connects is told by SO_PEERCRED (default 0666)"},
      {"admin_group", "SNAPD_ADMIN_GROUP",
       "group whose members see and manage every user's runs; root and snapd's own uid always "
       "do (default: none)"},
      {"tenant_quota", "SNAPD_TENANT_QUOTA",
       "bytes one uid may store over host and disk, e.g. 200G; 0 = no limit (default 0)"},
      {"tenant_host_share", "SNAPD_TENANT_HOST_SHARE",
       "fraction of the host tier one uid may fill with steps that cannot move to disk; its "
       "movable steps go to disk first when it holds more (admins exempt; default 0.5)"},
      {"admin_listen", "SNAPD_ADMIN_LISTEN",
       "HOST:PORT for remote snapctl over mutual TLS; empty = off (default empty)"},
      {"admin_tls_cert", "SNAPD_ADMIN_TLS_CERT", "PEM server certificate for admin_listen"},
      {"admin_tls_key", "SNAPD_ADMIN_TLS_KEY", "PEM private key for admin_listen"},
      {"admin_tls_ca", "SNAPD_ADMIN_TLS_CA",
       "PEM CA whose client certificates are admins on admin_listen"},
  };
  return kOptions;
}

namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A whole decimal integer in [lo, hi].
bool ParseInteger(const std::string& value, long lo, long hi, uint32_t* out) {
  char* end = nullptr;
  long n = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || n < lo || n > hi) return false;
  *out = static_cast<uint32_t>(n);
  return true;
}

Status Set(Config& c, const std::string& key, const std::string& value,
           const std::string& source) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(source + ": " + key + " = '" + value + "': " + why);
  };
  if (key == "socket") {
    if (value.empty()) return bad("must not be empty");
    c.socket = value;
  } else if (key == "state_dir") {
    if (value.empty()) return bad("must not be empty");
    c.state_dir = value;
  } else if (key == "host_mem") {
    auto v = ParseBytes(value);
    if (!v.ok()) return bad(v.status().message());
    c.host_mem = *v;
  } else if (key == "host_mem_perc" || key == "disk_mem_perc" || key == "tenant_host_share") {
    char* end = nullptr;
    double d = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !(d > 0.0 && d <= 1.0)) {
      return bad("must be a fraction in (0, 1], e.g. 0.7");
    }
    (key == "host_mem_perc"   ? c.host_mem_perc
     : key == "disk_mem_perc" ? c.disk_mem_perc
                              : c.tenant_host_share) = d;
  } else if (key == "disk_mem") {
    auto v = ParseBytes(value);
    if (!v.ok()) return bad(v.status().message());
    c.disk_mem = *v;
  } else if (key == "spool_dirs") {
    std::vector<std::string> dirs;
    std::stringstream in(value);
    for (std::string d; std::getline(in, d, ',');) {
      d = Trim(d);
      if (d.empty()) return bad("empty directory in the list");
      dirs.push_back(d);
    }
    if (dirs.empty()) return bad("must name a directory, or be none");
    if (dirs.size() == 1 && dirs[0] == "none") dirs.clear();
    c.spool_dirs = dirs;
    c.spool_dirs_set = true;
  } else if (key == "compress_threads") {
    if (!ParseInteger(value, 0, 256, &c.compress_threads)) {
      return bad("must be an integer 0..256 (0 = the cores minus one)");
    }
  } else if (key == "io_threads" || key == "prefetch_depth") {
    if (!ParseInteger(value, 1, 256, key == "io_threads" ? &c.io_threads : &c.prefetch_depth)) {
      return bad("must be an integer 1..256");
    }
  } else if (key == "metrics_textfile") {
    c.metrics_textfile = value;
  } else if (key == "metrics_interval") {
    if (!ParseInteger(value, 1, 3600, &c.metrics_interval)) {
      return bad("must be a number of seconds 1..3600");
    }
  } else if (key == "orphan_grace") {
    if (!ParseInteger(value, 0, 7 * 24 * 3600, &c.orphan_grace)) {
      return bad("must be a number of seconds 0..604800 (0 = never remove)");
    }
  } else if (key == "session_connect_timeout") {
    if (!ParseInteger(value, 1, 3600, &c.session_connect_timeout)) {
      return bad("must be a number of seconds 1..3600");
    }
  } else if (key == "socket_mode") {
    char* end = nullptr;
    long mode = std::strtol(value.c_str(), &end, 8);
    if (end == value.c_str() || *end != '\0' || mode < 0 || mode > 0777) {
      return bad("must be octal permissions 0000..0777, e.g. 0660");
    }
    c.socket_mode = static_cast<uint32_t>(mode);
  } else if (key == "admin_group") {
    c.admin_group = value;
  } else if (key == "admin_listen") {
    if (!value.empty() && value.rfind(':') == std::string::npos) {
      return bad("must be HOST:PORT, e.g. 0.0.0.0:7443");
    }
    c.admin_listen = value;
  } else if (key == "admin_tls_cert" || key == "admin_tls_key" || key == "admin_tls_ca") {
    (key == "admin_tls_cert" ? c.admin_tls_cert
     : key == "admin_tls_key" ? c.admin_tls_key
                              : c.admin_tls_ca) = value;
  } else if (key == "tenant_quota") {
    auto v = ParseBytes(value);
    if (!v.ok()) return bad(v.status().message());
    c.tenant_quota = *v;
  } else if (key == "log_level") {
    if (value != "debug" && value != "info" && value != "warn" && value != "error") {
      return bad("must be debug, info, warn or error");
    }
    c.log_level = value;
  } else {
    return Status::InvalidArgument(source + ": unknown option '" + key +
                                   "' (see `snapd --help` for the list)");
  }
  return Status::Ok();
}

Status LoadFile(Config& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("config file '" + path + "' cannot be opened");
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string source = path + ":" + std::to_string(lineno);
    size_t hash = line.find('#');
    if (hash != std::string::npos && line.find('"') > hash) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty() || line[0] == '[') continue;  // TOML table headers carry no options
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(source + ": expected 'key = value', got '" + line + "'");
    }
    std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    SNAPD_RETURN_IF_ERROR(Set(c, key, value, source));
  }
  return Status::Ok();
}

std::string FlagKey(std::string flag) {
  for (char& ch : flag) {
    if (ch == '-') ch = '_';
  }
  return flag;
}

}  // namespace

Result<LoadedConfig> LoadConfig(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env) {
  LoadedConfig out;
  Config& c = out.config;
  c.socket = DefaultSocketPath();
  c.state_dir = DefaultStateDir();

  // Flags are parsed first only to find --config; they are applied last.
  std::vector<std::pair<std::string, std::string>> flags;
  std::string config_file;
  if (auto it = env.find("SNAPD_CONFIG"); it != env.end()) config_file = it->second;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      continue;
    }
    if (a == "--print-config") {
      out.print_config = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      return Status::InvalidArgument("unexpected argument '" + a + "' (see `snapd --help`)");
    }
    std::string name = a.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Status::InvalidArgument("flag --" + name + " needs a value");
    }
    if (name == "config") {
      config_file = value;
    } else {
      flags.emplace_back(FlagKey(name), value);
    }
  }
  if (!config_file.empty()) SNAPD_RETURN_IF_ERROR(LoadFile(c, config_file));
  for (const OptionDoc& o : ConfigOptions()) {
    if (auto it = env.find(o.env); it != env.end()) {
      SNAPD_RETURN_IF_ERROR(Set(c, o.key, it->second, std::string("environment ") + o.env));
    }
  }
  for (const auto& [key, value] : flags) {
    SNAPD_RETURN_IF_ERROR(Set(c, key, value, "flag --" + key));
  }
  if (!c.admin_listen.empty() &&
      (c.admin_tls_cert.empty() || c.admin_tls_key.empty() || c.admin_tls_ca.empty())) {
    return Status::InvalidArgument(
        "admin_listen = '" + c.admin_listen +
        "' needs admin_tls_cert, admin_tls_key and admin_tls_ca: remote administration is "
        "served over mutual TLS only");
  }
  return out;
}

std::string FormatConfig(const Config& c) {
  std::ostringstream o;
  o << "socket = \"" << c.socket << "\"\n"
    << "state_dir = \"" << c.state_dir << "\"\n"
    << "host_mem = \"" << c.host_mem << "\"\n"
    << "host_mem_perc = " << c.host_mem_perc << "\n"
    << "spool_dirs = \"" << SpoolDirsText(c) << "\"\n"
    << "disk_mem = \"" << c.disk_mem << "\"\n"
    << "disk_mem_perc = " << c.disk_mem_perc << "\n"
    << "io_threads = " << c.io_threads << "\n"
    << "prefetch_depth = " << c.prefetch_depth << "\n"
    << "compress_threads = " << c.compress_threads << "\n"
    << "session_connect_timeout = " << c.session_connect_timeout << "\n"
    << "orphan_grace = " << c.orphan_grace << "\n"
    << "metrics_textfile = \"" << c.metrics_textfile << "\"\n"
    << "metrics_interval = " << c.metrics_interval << "\n"
    << "log_level = \"" << c.log_level << "\"\n"
    << "socket_mode = \"0" << std::oct << c.socket_mode << std::dec << "\"\n"
    << "admin_group = \"" << c.admin_group << "\"\n"
    << "tenant_quota = \"" << c.tenant_quota << "\"\n"
    << "tenant_host_share = " << c.tenant_host_share << "\n"
    << "admin_listen = \"" << c.admin_listen << "\"\n"
    << "admin_tls_cert = \"" << c.admin_tls_cert << "\"\n"
    << "admin_tls_key = \"" << c.admin_tls_key << "\"\n"
    << "admin_tls_ca = \"" << c.admin_tls_ca << "\"\n";
  return o.str();
}

std::vector<std::string> SpoolDirs(const Config& c) {
  if (!c.spool_dirs_set) return {c.state_dir + "/spool"};
  return c.spool_dirs;
}

std::string SpoolDirsText(const Config& c) {
  std::vector<std::string> dirs = SpoolDirs(c);
  if (dirs.empty()) return "none";
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ",") + d;
  return out;
}

uint64_t HostBudget(const Config& c, uint64_t mem_available) {
  if (c.host_mem != 0) return c.host_mem;
  return static_cast<uint64_t>(static_cast<double>(mem_available) * c.host_mem_perc);
}

Result<uint64_t> MemInfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == field + ":") return kib * 1024;
  }
  return Status::Internal(field + " not found in /proc/meminfo");
}

}  // namespace snapd
