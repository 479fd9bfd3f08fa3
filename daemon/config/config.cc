#include "config/config.h"

#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "snapd/paths.h"
#include "snapd/units.h"

namespace snapd {

const std::vector<OptionDoc>& ConfigOptions() {
  using K = OptionKind;
  static const std::vector<OptionDoc> kOptions = {
      {"socket", "SNAPD_SOCKET", K::kText, "PATH",
       "control-plane unix socket (default /run/snapd/snapd.sock for root, else "
       "$XDG_RUNTIME_DIR/snapd/snapd.sock)"},
      {"state_dir", "SNAPD_STATE_DIR", K::kText, "DIR",
       "catalog directory (default /var/lib/snapd for root, else ~/.local/state/snapd)"},
      {"host_mem", "SNAPD_HOST_MEM", K::kSize, "SIZE",
       "host-tier budget, e.g. 8G; 0 = use host_mem_perc (default 0)"},
      {"host_mem_perc", "SNAPD_HOST_MEM_PERC", K::kFraction, "FRACTION",
       "host-tier budget as a fraction of MemAvailable at start (default 0.7)"},
      {"host_huge_pages", "SNAPD_HOST_HUGE_PAGES", K::kText, "MODE",
       "host-tier pages: auto (hugetlb when the pool holds the whole tier, else shmem THP "
       "on a tmpfs with huge=always, else shmem THP where the kernel allows it), hugetlb or "
       "thp (or refuse to start), off (default auto)"},
      {"host_tmpfs", "SNAPD_HOST_TMPFS", K::kText, "DIR",
       "a tmpfs mounted with huge=always for the host tier's file (the systemd unit's "
       "TemporaryFileSystem=); empty: snapd mounts one in a namespace of its own (default "
       "empty)"},
      {"host_arenas", "SNAPD_HOST_ARENAS", K::kText, "MODE",
       "per-uid (each uid maps an arena of its own steps: the mapped path for every local "
       "solver) or shared (one arena that only root and snapd's uid map; other uids copy "
       "over UCX) (default per-uid)"},
      {"host_prefault", "SNAPD_HOST_PREFAULT", K::kText, "MODE",
       "background (populate each user's arena ahead of its pushes, from its first session, "
       "one 2 MiB piece at a time and within host_mem), true (all of snapd's own arena at "
       "start, the whole tier with host_arenas = shared: commits host_mem of RAM) or false "
       "(default background)"},
      {"host_release_after", "SNAPD_HOST_RELEASE_AFTER", K::kInteger, "SECONDS",
       "give free host-tier memory back to the OS once no push has taken any for this long "
       "(a job ended); 0 = keep it; not with host_prefault (default 300)"},
      {"spool_dirs", "SNAPD_SPOOL_DIRS", K::kText, "DIRS",
       "disk-tier spool directories, comma-separated (NVMe); none = no disk tier (default "
       "<state_dir>/spool)"},
      {"disk_mem", "SNAPD_DISK_MEM", K::kSize, "SIZE",
       "disk-tier budget over all spools, e.g. 500G; 0 = use disk_mem_perc (default 0)"},
      {"disk_mem_perc", "SNAPD_DISK_MEM_PERC", K::kFraction, "FRACTION",
       "disk-tier budget as a fraction of each spool's free space at start (default 0.7)"},
      {"spool_failure_timeout", "SNAPD_SPOOL_FAILURE_TIMEOUT", K::kInteger, "SECONDS",
       "seconds a push that needs the disk tier waits while no spool works before it fails "
       "with UNAVAILABLE, 1..3600 (default 10)"},
      {"wait_warn_after", "SNAPD_WAIT_WARN_AFTER", K::kInteger, "SECONDS",
       "seconds after which a push or fetch that still waits (for host room, a disk read) is "
       "logged with what it waits for, and every 6 times as long after, 1..3600 (default 10)"},
      {"scrub_rate", "SNAPD_SCRUB_RATE", K::kSize, "SIZE",
       "bytes per second the background scrub reads to re-verify spool files, e.g. 64M; 0 = "
       "off (default 0)"},
      {"io_threads", "SNAPD_IO_THREADS", K::kInteger, "N", "disk I/O threads (default 4)"},
      {"prefetch_depth", "SNAPD_PREFETCH_DEPTH", K::kInteger, "N",
       "most steps read ahead of the backward pass; the depth adapts below it (default 8)"},
      {"compress_threads", "SNAPD_COMPRESS_THREADS", K::kInteger, "N",
       "zfp compression workers; 0 = the cores minus one (default 0)"},
      {"session_connect_timeout", "SNAPD_SESSION_CONNECT_TIMEOUT", K::kInteger, "SECONDS",
       "seconds a new session has to say Hello on its UCX endpoint before it is closed "
       "(default 30)"},
      {"orphan_grace", "SNAPD_ORPHAN_GRACE", K::kInteger, "SECONDS",
       "seconds a run that is not kept survives the death of every client that opened it; "
       "0 = until removed (default 600)"},
      {"stop_timeout", "SNAPD_STOP_TIMEOUT", K::kInteger, "SECONDS",
       "seconds a stop may spend writing host-only steps to disk; what is not written by then "
       "is named in the log and marked lost, 1..3600 (default 45)"},
      {"fdstore", "SNAPD_FDSTORE", K::kText, "auto|only|off",
       "auto: on stop, write the host-only steps to disk and also hand the host tier to "
       "systemd's fd store when systemd keeps one ($FDSTORE), so a restart serves them from "
       "memory and a stop or reboot from disk; only: hand it over without writing to disk "
       "(a restart copies nothing at any size; a reboot or a flushed fd store loses the "
       "host-only steps); off: write to disk only (default auto)"},
      {"metrics_textfile", "SNAPD_METRICS_TEXTFILE", K::kText, "FILE",
       "file snapd writes its metrics to in the Prometheus text format, for node_exporter's "
       "textfile collector (e.g. /var/lib/node_exporter/textfile/snapd.prom); empty = off "
       "(default empty)"},
      {"metrics_interval", "SNAPD_METRICS_INTERVAL", K::kInteger, "SECONDS",
       "seconds between two writes of metrics_textfile, 1..3600 (default 15)"},
      {"log_level", "SNAPD_LOG_LEVEL", K::kText, "LEVEL",
       "debug, info, warn or error (default info)"},
      {"socket_mode", "SNAPD_SOCKET_MODE", K::kMode, "MODE",
       "control socket permissions, octal; who connects is told by SO_PEERCRED (default 0666)"},
      {"admin_group", "SNAPD_ADMIN_GROUP", K::kText, "GROUP",
       "group whose members see and manage every user's runs; root and snapd's own uid always "
       "do (default: none)"},
      {"tenant_quota", "SNAPD_TENANT_QUOTA", K::kSize, "SIZE",
       "bytes one uid may store over host and disk, e.g. 200G; 0 = no limit (default 0)"},
      {"tenant_host_share", "SNAPD_TENANT_HOST_SHARE", K::kFraction, "FRACTION",
       "fraction of the host tier one uid may fill with steps that cannot move to disk; its "
       "movable steps go to disk first when it holds more (admins exempt; default 0.5)"},
      {"admin_listen", "SNAPD_ADMIN_LISTEN", K::kText, "HOST:PORT",
       "HOST:PORT for remote snapctl over mutual TLS; empty = off (default empty)"},
      {"admin_tls_cert", "SNAPD_ADMIN_TLS_CERT", K::kText, "FILE",
       "PEM server certificate for admin_listen"},
      {"admin_tls_key", "SNAPD_ADMIN_TLS_KEY", K::kText, "FILE",
       "PEM private key for admin_listen"},
      {"admin_tls_ca", "SNAPD_ADMIN_TLS_CA", K::kText, "FILE",
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

std::string FlagName(const OptionDoc& o) {
  std::string flag = std::string("--") + o.key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// The key a flag name stands for: --host-mem and --host_mem both set host_mem.
std::string FlagKey(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

const OptionDoc* FindOption(std::string_view key) {
  for (const OptionDoc& o : ConfigOptions()) {
    if (key == o.key) return &o;
  }
  return nullptr;
}

Status UnknownOption(const std::string& source, const std::string& key) {
  return Status::InvalidArgument(source + ": unknown option '" + key +
                                 "' (see `snapd --help` for the list)");
}

// A whole decimal integer in [lo, hi].
bool ParseInteger(const std::string& value, long lo, long hi, uint32_t* out) {
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno == ERANGE || n < lo || n > hi) return false;
  *out = static_cast<uint32_t>(n);
  return true;
}

// Sets option `key` from its text, whatever the source. A failure's message says what was
// expected; the caller adds where the value came from and the value itself.
Status Parse(Config& c, const std::string& key, const std::string& value) {
  auto expected = [](const std::string& what) {
    return Status::InvalidArgument("expected " + what);
  };
  if (key == "socket") {
    if (value.empty()) return expected("a socket path");
    c.socket = value;
  } else if (key == "state_dir") {
    if (value.empty()) return expected("a directory");
    c.state_dir = value;
  } else if (key == "host_mem" || key == "disk_mem" || key == "tenant_quota" ||
             key == "scrub_rate") {
    auto v = ParseBytes(value);
    if (!v.ok()) return expected("a size like 64G");
    (key == "host_mem"   ? c.host_mem
     : key == "disk_mem" ? c.disk_mem
     : key == "scrub_rate" ? c.scrub_rate
                           : c.tenant_quota) = *v;
  } else if (key == "spool_failure_timeout" || key == "wait_warn_after") {
    if (!ParseInteger(value, 1, 3600,
                      key == "wait_warn_after" ? &c.wait_warn_after : &c.spool_failure_timeout)) {
      return expected("a number of seconds 1..3600");
    }
  } else if (key == "host_mem_perc" || key == "disk_mem_perc" || key == "tenant_host_share") {
    char* end = nullptr;
    double d = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !(d > 0.0 && d <= 1.0)) {
      return expected("a fraction in (0, 1] like 0.7");
    }
    (key == "host_mem_perc"   ? c.host_mem_perc
     : key == "disk_mem_perc" ? c.disk_mem_perc
                              : c.tenant_host_share) = d;
  } else if (key == "host_huge_pages") {
    if (value != "auto" && value != "hugetlb" && value != "thp" && value != "off") {
      return expected("auto, hugetlb, thp or off");
    }
    c.host_huge_pages = value;
  } else if (key == "host_tmpfs") {
    if (!value.empty() && value.front() != '/') return expected("an absolute directory or \"\"");
    c.host_tmpfs = value;
  } else if (key == "host_arenas") {
    if (value != "per-uid" && value != "shared") return expected("per-uid or shared");
    c.host_arenas = value;
  } else if (key == "host_prefault") {
    if (value != "true" && value != "false" && value != "background") {
      return expected("background, true or false");
    }
    c.host_prefault = value;
  } else if (key == "host_release_after") {
    if (!ParseInteger(value, 0, 7 * 24 * 3600, &c.host_release_after)) {
      return expected("a number of seconds 0..604800 (0 = keep free memory)");
    }
  } else if (key == "spool_dirs") {
    std::vector<std::string> dirs;
    std::stringstream in(value);
    for (std::string d; std::getline(in, d, ',');) {
      d = Trim(d);
      if (d.empty()) return expected("comma-separated directories with none empty, or none");
      dirs.push_back(d);
    }
    if (dirs.empty()) return expected("comma-separated directories, or none");
    if (dirs.size() == 1 && dirs[0] == "none") dirs.clear();
    c.spool_dirs = dirs;
    c.spool_dirs_set = true;
  } else if (key == "compress_threads") {
    if (!ParseInteger(value, 0, 256, &c.compress_threads)) {
      return expected("an integer 0..256 (0 = the cores minus one)");
    }
  } else if (key == "io_threads" || key == "prefetch_depth") {
    if (!ParseInteger(value, 1, 256, key == "io_threads" ? &c.io_threads : &c.prefetch_depth)) {
      return expected("an integer 1..256");
    }
  } else if (key == "metrics_textfile") {
    c.metrics_textfile = value;
  } else if (key == "metrics_interval" || key == "session_connect_timeout") {
    if (!ParseInteger(
            value, 1, 3600,
            key == "metrics_interval" ? &c.metrics_interval : &c.session_connect_timeout)) {
      return expected("a number of seconds 1..3600");
    }
  } else if (key == "stop_timeout") {
    if (!ParseInteger(value, 1, 3600, &c.stop_timeout)) {
      return expected("a number of seconds 1..3600");
    }
  } else if (key == "fdstore") {
    if (value != "auto" && value != "only" && value != "off") {
      return expected("auto, only or off");
    }
    c.fdstore = value;
  } else if (key == "orphan_grace") {
    if (!ParseInteger(value, 0, 7 * 24 * 3600, &c.orphan_grace)) {
      return expected("a number of seconds 0..604800 (0 = never remove)");
    }
  } else if (key == "socket_mode") {
    char* end = nullptr;
    long mode = std::strtol(value.c_str(), &end, 8);
    if (end == value.c_str() || *end != '\0' || mode < 0 || mode > 0777) {
      return expected("octal permissions 0000..0777 like 0660");
    }
    c.socket_mode = static_cast<uint32_t>(mode);
  } else if (key == "admin_group") {
    c.admin_group = value;
  } else if (key == "admin_listen") {
    if (!value.empty() && value.rfind(':') == std::string::npos) {
      return expected("HOST:PORT like 0.0.0.0:7443");
    }
    c.admin_listen = value;
  } else if (key == "admin_tls_cert" || key == "admin_tls_key" || key == "admin_tls_ca") {
    (key == "admin_tls_cert"  ? c.admin_tls_cert
     : key == "admin_tls_key" ? c.admin_tls_key
                              : c.admin_tls_ca) = value;
  } else if (key == "log_level") {
    if (value != "debug" && value != "info" && value != "warn" && value != "error") {
      return expected("debug, info, warn or error");
    }
    c.log_level = value;
  } else {
    return Status::Internal("option '" + key + "' is in the table but has no parser");
  }
  return Status::Ok();
}

// Sets `o` from `value`; `shown` is the value as its source wrote it, for the error.
Status Set(Config& c, const OptionDoc& o, const std::string& value, const std::string& source,
           const std::string& shown) {
  Status s = Parse(c, o.key, value);
  if (s.ok() || s.code() != Code::kInvalidArgument) return s;
  return Status::InvalidArgument(source + ": " + s.message() + ", got " + shown);
}

std::string Printed(const toml::node& value) {
  std::ostringstream out;
  value.visit([&out](const auto& v) { out << v; });
  return out.str();
}

// The text Parse() reads for a TOML value: strings as they are; numbers, for the options that
// take numbers, as decimal text (an octal 0o660 for socket_mode as octal text).
Result<std::string> ValueText(const OptionDoc& o, const toml::node& value) {
  if (const auto* s = value.as_string()) return s->get();
  // host_prefault was a switch before it took "background": `host_prefault = true` still reads.
  if (const auto* b = value.as_boolean();
      b != nullptr && (o.kind == OptionKind::kBool || std::strcmp(o.key, "host_prefault") == 0)) {
    return std::string(b->get() ? "true" : "false");
  }
  if (o.kind != OptionKind::kText && o.kind != OptionKind::kBool) {
    if (const auto* i = value.as_integer()) {
      if (o.kind == OptionKind::kMode &&
          (i->flags() & toml::value_flags::format_as_octal) != toml::value_flags::none) {
        std::ostringstream octal;
        octal << '0' << std::oct << i->get();
        return octal.str();
      }
      return std::to_string(i->get());
    }
    if (const auto* f = value.as_floating_point()) {
      char text[64];
      auto [end, ec] = std::to_chars(text, text + sizeof text, f->get());
      if (ec == std::errc()) return std::string(text, end);
    }
  }
  if (std::string_view(o.key) == "spool_dirs") {
    return Status::InvalidArgument(
        "expected one string of comma-separated directories like \"/nvme0/snapd,/nvme1/snapd\"");
  }
  if (o.kind == OptionKind::kBool) return Status::InvalidArgument("expected true or false");
  if (std::strcmp(o.key, "host_prefault") == 0) {
    return Status::InvalidArgument("expected \"background\", true or false");
  }
  return Status::InvalidArgument(o.kind == OptionKind::kText ? "expected a string in quotes"
                                                             : "expected a number or a string");
}

// A config file: TOML with the options at the top level or in a [snapd] table.
Status LoadFile(Config& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("config file '" + path + "' cannot be opened");
  std::stringstream text;
  text << in.rdbuf();
  toml::table root;
  try {
    root = toml::parse(text.str(), path);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(path + ":" + std::to_string(e.source().begin.line) + ":" +
                                   std::to_string(e.source().begin.column) + ": " +
                                   std::string(e.description()));
  }
  struct Entry {
    toml::source_index line;
    std::string key;
    const toml::node* value;
  };
  std::vector<Entry> entries;
  for (const auto& [key, node] : root) {
    if (const toml::table* table = node.as_table()) {
      if (key.str() != "snapd") {
        return Status::InvalidArgument(path + ":" + std::to_string(node.source().begin.line) +
                                       ": unknown table [" + std::string(key.str()) +
                                       "]; options go at the top level or in [snapd]");
      }
      for (const auto& [inner_key, inner] : *table) {
        entries.push_back({inner.source().begin.line, std::string(inner_key.str()), &inner});
      }
    } else {
      entries.push_back({node.source().begin.line, std::string(key.str()), &node});
    }
  }
  // toml++ keeps keys sorted; errors are reported in the order of the file.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.line < b.line; });
  std::map<std::string, toml::source_index> seen;
  for (const Entry& e : entries) {
    std::string source = path + ":" + std::to_string(e.line);
    const OptionDoc* o = FindOption(e.key);
    if (!o) return UnknownOption(source, e.key);
    if (auto [it, fresh] = seen.emplace(e.key, e.line); !fresh) {
      return Status::InvalidArgument(source + ": " + e.key + " is set twice (also on line " +
                                     std::to_string(it->second) + ")");
    }
    std::string prefix = source + ": " + e.key;
    auto value = ValueText(*o, *e.value);
    if (!value.ok()) {
      return Status::InvalidArgument(prefix + ": " + value.status().message() + ", got " +
                                     Printed(*e.value));
    }
    std::string shown = e.value->is_string() ? Quoted(*value) : Printed(*e.value);
    SNAPD_RETURN_IF_ERROR(Set(c, *o, *value, prefix, shown));
  }
  return Status::Ok();
}

// The command line as CLI11 sees it. Every option of the table is a flag holding its raw
// text; LoadConfig applies the flags given after the file and the environment.
struct Flags {
  std::string config_file;
  bool print_config = false;
  bool version = false;
  std::vector<std::string> values = std::vector<std::string>(ConfigOptions().size());
  std::vector<CLI::Option*> options;
};

void DefineFlags(CLI::App& app, Flags& flags) {
  app.description("Per-node snapshot storage daemon for adjoint solvers.");
  app.footer(
      "Each option is read from the config file (KEY = VALUE, TOML), then its environment\n"
      "variable, then the flag --KEY (dashes or underscores), the later winning.\n");
  app.set_help_flag("-h,--help", "print this help and exit");
  app.get_formatter()->column_width(38);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras();  // reported by LoadConfig, which names the first one
  app.add_option("--config", flags.config_file, "config file (TOML)\nenv SNAPD_CONFIG")
      ->type_name("FILE");
  app.add_flag("--print-config", flags.print_config,
               "print the effective configuration in the config file format and exit");
  app.add_flag("--version", flags.version, "print snapd's version and exit");
  const std::vector<OptionDoc>& options = ConfigOptions();
  for (size_t i = 0; i < options.size(); ++i) {
    const OptionDoc& o = options[i];
    flags.options.push_back(
        app.add_option(FlagName(o), flags.values[i], std::string(o.help) + "\nenv " + o.env)
            ->type_name(o.value_name));
  }
}

// CLI11 names flags with dashes; snapd also takes underscores (--host_mem) as before.
std::vector<std::string> DashedFlags(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool options_end = false;
  for (std::string a : args) {
    if (a == "--") options_end = true;
    if (!options_end && a.rfind("--", 0) == 0) {
      size_t name_end = std::min(a.find('='), a.size());
      std::replace(a.begin(), a.begin() + static_cast<long>(name_end), '_', '-');
      if (name_end == a.size() - 1) {  // --key= : an empty value, not the next argument
        out.push_back(a.substr(0, name_end));
        out.push_back("");
        continue;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

std::string CommandLineHelp() {
  CLI::App app("", "snapd");
  Flags flags;
  DefineFlags(app, flags);
  return app.help();
}

Result<LoadedConfig> LoadConfig(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env) {
  LoadedConfig out;
  Config& c = out.config;
  c.socket = DefaultSocketPath();
  c.state_dir = DefaultStateDir();

  CLI::App app("", "snapd");
  Flags flags;
  DefineFlags(app, flags);
  std::vector<std::string> reversed = DashedFlags(args);
  std::reverse(reversed.begin(), reversed.end());  // CLI11 takes them last first
  try {
    app.parse(std::move(reversed));
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    return out;
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--flag: 1 required TYPE missing".
    std::string what = e.what();
    return Status::InvalidArgument("flag " + what.substr(0, what.find(':')) +
                                   " needs a value (see `snapd --help`)");
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(std::string(e.what()) + " (see `snapd --help`)");
  }
  if (std::vector<std::string> extra = app.remaining(); !extra.empty()) {
    const std::string& a = extra.front();
    if (a.rfind("--", 0) == 0) {
      std::string flag = a.substr(0, a.find('='));
      return UnknownOption("flag " + flag, FlagKey(flag.substr(2)));
    }
    return Status::InvalidArgument("unexpected argument '" + a + "' (see `snapd --help`)");
  }
  out.print_config = flags.print_config;
  if (flags.version) {  // before the config file: --version answers whatever the config says
    out.version = true;
    return out;
  }

  std::string config_file = flags.config_file;
  if (app.get_option("--config")->count() == 0) {
    if (auto it = env.find("SNAPD_CONFIG"); it != env.end()) config_file = it->second;
  }
  if (!config_file.empty()) SNAPD_RETURN_IF_ERROR(LoadFile(c, config_file));
  for (const OptionDoc& o : ConfigOptions()) {
    if (auto it = env.find(o.env); it != env.end()) {
      SNAPD_RETURN_IF_ERROR(
          Set(c, o, it->second, std::string("environment ") + o.env, Quoted(it->second)));
    }
  }
  const std::vector<OptionDoc>& options = ConfigOptions();
  for (size_t i = 0; i < options.size(); ++i) {
    if (flags.options[i]->count() == 0) continue;
    SNAPD_RETURN_IF_ERROR(Set(c, options[i], flags.values[i], "flag " + FlagName(options[i]),
                              Quoted(flags.values[i])));
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
  o << "socket = " << Quoted(c.socket) << "\n"
    << "state_dir = " << Quoted(c.state_dir) << "\n"
    << "host_mem = \"" << c.host_mem << "\"\n"
    << "host_mem_perc = " << c.host_mem_perc << "\n"
    << "host_huge_pages = " << Quoted(c.host_huge_pages) << "\n"
    << "host_tmpfs = " << Quoted(c.host_tmpfs) << "\n"
    << "host_arenas = " << Quoted(c.host_arenas) << "\n"
    << "host_prefault = " << Quoted(c.host_prefault) << "\n"
    << "host_release_after = " << c.host_release_after << "\n"
    << "spool_dirs = " << Quoted(SpoolDirsText(c)) << "\n"
    << "disk_mem = \"" << c.disk_mem << "\"\n"
    << "disk_mem_perc = " << c.disk_mem_perc << "\n"
    << "spool_failure_timeout = " << c.spool_failure_timeout << "\n"
    << "wait_warn_after = " << c.wait_warn_after << "\n"
    << "scrub_rate = \"" << c.scrub_rate << "\"\n"
    << "io_threads = " << c.io_threads << "\n"
    << "prefetch_depth = " << c.prefetch_depth << "\n"
    << "compress_threads = " << c.compress_threads << "\n"
    << "session_connect_timeout = " << c.session_connect_timeout << "\n"
    << "orphan_grace = " << c.orphan_grace << "\n"
    << "stop_timeout = " << c.stop_timeout << "\n"
    << "fdstore = " << Quoted(c.fdstore) << "\n"
    << "metrics_textfile = " << Quoted(c.metrics_textfile) << "\n"
    << "metrics_interval = " << c.metrics_interval << "\n"
    << "log_level = " << Quoted(c.log_level) << "\n"
    << "socket_mode = \"0" << std::oct << c.socket_mode << std::dec << "\"\n"
    << "admin_group = " << Quoted(c.admin_group) << "\n"
    << "tenant_quota = \"" << c.tenant_quota << "\"\n"
    << "tenant_host_share = " << c.tenant_host_share << "\n"
    << "admin_listen = " << Quoted(c.admin_listen) << "\n"
    << "admin_tls_cert = " << Quoted(c.admin_tls_cert) << "\n"
    << "admin_tls_key = " << Quoted(c.admin_tls_key) << "\n"
    << "admin_tls_ca = " << Quoted(c.admin_tls_ca) << "\n";
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
