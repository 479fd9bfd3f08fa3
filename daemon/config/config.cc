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

#include "config/config_text.h"
#include "adjsnap/paths.h"
#include "adjsnap/units.h"

namespace adjsnap {

using config_text::Quoted;
using config_text::Trim;


namespace {


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
                                 "' (see `adjsnapd --help` for the list)");
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

// "a, b or c"; as a config file writes them (`toml`): strings quoted, true and false not.
std::string Choices(const std::vector<const char*>& choices, bool toml = false) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    out += i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ";
    std::string_view choice(choices[i]);
    bool quoted = toml && choice != "true" && choice != "false";
    out += quoted ? "\"" + std::string(choice) + "\"" : std::string(choice);
  }
  return out;
}

// "a number of seconds 1..3600" or "an integer 0..256 (0 = the cores minus one)".
std::string IntegerRange(const OptionDoc& o) {
  std::string range = std::to_string(o.min) + ".." + std::to_string(o.max);
  std::string what = std::string_view(o.value_name) == "SECONDS" ? "a number of seconds "
                                                                   : "an integer ";
  return what + range + (o.zero_means ? std::string(" (0 = ") + o.zero_means + ")" : "");
}

// Sets option `o` from its text, whatever the source. A failure's message says what was
// expected; the caller adds where the value came from and the value itself.
Status Parse(Config& c, const OptionDoc& o, const std::string& value) {
  auto expected = [](const std::string& what) {
    return Status::InvalidArgument("expected " + what);
  };
  if (o.set) return o.set(c, value);
  switch (o.kind) {
    case OptionKind::kText: {
      if (!o.choices.empty() &&
          std::none_of(o.choices.begin(), o.choices.end(),
                       [&](const char* choice) { return value == choice; })) {
        return expected(Choices(o.choices));
      }
      if (o.check) {
        if (const char* what = o.check(value)) return expected(what);
      }
      c.*o.text = value;
      return Status::Ok();
    }
    case OptionKind::kSize: {
      auto v = ParseBytes(value);
      if (!v.ok()) return expected("a size like 64G");
      c.*o.size = *v;
      return Status::Ok();
    }
    case OptionKind::kFraction: {
      char* end = nullptr;
      double d = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(d > 0.0 && d <= 1.0)) {
        return expected("a fraction in (0, 1] like 0.7");
      }
      c.*o.fraction = d;
      return Status::Ok();
    }
    case OptionKind::kInteger:
      if (!ParseInteger(value, o.min, o.max, &(c.*o.integer))) return expected(IntegerRange(o));
      return Status::Ok();
    case OptionKind::kMode: {
      char* end = nullptr;
      long mode = std::strtol(value.c_str(), &end, 8);
      if (end == value.c_str() || *end != '\0' || mode < 0 || mode > 0777) {
        return expected("octal permissions 0000..0777 like 0660");
      }
      c.*o.integer = static_cast<uint32_t>(mode);
      return Status::Ok();
    }
  }
  return Status::Internal(std::string("option '") + o.key + "' has no parser");
}

// The option's value as --print-config writes it (TOML).
std::string ValueToml(const Config& c, const OptionDoc& o) {
  if (o.get) return o.get(c);
  std::ostringstream out;
  switch (o.kind) {
    case OptionKind::kText: return Quoted(c.*o.text);
    case OptionKind::kSize: return "\"" + std::to_string(c.*o.size) + "\"";
    case OptionKind::kFraction: out << c.*o.fraction; return out.str();
    case OptionKind::kInteger: return std::to_string(c.*o.integer);
    case OptionKind::kMode: out << "\"0" << std::oct << c.*o.integer << "\""; return out.str();
  }
  return "";
}

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what TOML
// strings hold.
bool IsUtf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    int extra = *p < 0x80           ? 0
                : (*p >> 5) == 0x6  ? 1
                : (*p >> 4) == 0xe  ? 2
                : (*p >> 3) == 0x1e ? 3
                                    : -1;
    if (extra < 0 || end - p <= extra) return extra == 0;
    uint32_t cp = extra == 0 ? *p : *p & (0x3f >> extra);
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    static constexpr uint32_t kLeast[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    p += extra + 1;
  }
  return true;
}

// Sets `o` from `value`; `shown` is the value as its source wrote it, for the error.
Status Set(Config& c, const OptionDoc& o, const std::string& value, const std::string& source,
           const std::string& shown) {
  if (!IsUtf8(value)) {
    // --print-config writes the configuration as TOML, whose strings are UTF-8: a value it
    // could not write back is refused here (the config fuzzer found a --state-dir of raw bytes).
    return Status::InvalidArgument(source + ": not valid UTF-8; a config file cannot hold it");
  }
  Status s = Parse(c, o, value);
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
  if (const auto* b = value.as_boolean(); b != nullptr && o.reads_toml_bool) {
    return std::string(b->get() ? "true" : "false");
  }
  if (o.kind != OptionKind::kText) {
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
  if (o.set) {  // spool_dirs
    return Status::InvalidArgument(
        "expected one string of comma-separated directories like \"/nvme0/adjsnap,/nvme1/adjsnap\"");
  }
  if (o.reads_toml_bool) {
    return Status::InvalidArgument("expected " + Choices(o.choices, /*toml=*/true));
  }
  return Status::InvalidArgument(o.kind == OptionKind::kText ? "expected a string in quotes"
                                                             : "expected a number or a string");
}

// A config file: TOML with the options at the top level or in a [adjsnapd] table.
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
      if (key.str() != "adjsnapd") {
        return Status::InvalidArgument(path + ":" + std::to_string(node.source().begin.line) +
                                       ": unknown table [" + std::string(key.str()) +
                                       "]; options go at the top level or in [adjsnapd]");
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
    ADJSNAP_RETURN_IF_ERROR(Set(c, *o, *value, prefix, shown));
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
  app.add_option("--config", flags.config_file, "config file (TOML)\nenv ADJSNAP_CONFIG")
      ->type_name("FILE");
  app.add_flag("--print-config", flags.print_config,
               "print the effective configuration in the config file format and exit");
  app.add_flag("--version", flags.version, "print adjsnapd's version and exit");
  const std::vector<OptionDoc>& options = ConfigOptions();
  for (size_t i = 0; i < options.size(); ++i) {
    const OptionDoc& o = options[i];
    flags.options.push_back(
        app.add_option(FlagName(o), flags.values[i], OptionHelp(o) + "\nenv " + o.env)
            ->type_name(o.value_name));
  }
}

// CLI11 names flags with dashes; adjsnapd also takes underscores (--host_mem) as before.
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
  CLI::App app("", "adjsnapd");
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
  for (const OptionDoc& o : ConfigOptions()) {
    if (o.default_text == nullptr) continue;
    Status s = Parse(c, o, o.default_text);
    if (!s.ok()) {
      return Status::Internal(std::string("the embedded default of ") + o.key + " does not parse: " +
                              s.message());
    }
  }

  CLI::App app("", "adjsnapd");
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
                                   " needs a value (see `adjsnapd --help`)");
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(std::string(e.what()) + " (see `adjsnapd --help`)");
  }
  if (std::vector<std::string> extra = app.remaining(); !extra.empty()) {
    const std::string& a = extra.front();
    if (a.rfind("--", 0) == 0) {
      std::string flag = a.substr(0, a.find('='));
      return UnknownOption("flag " + flag, FlagKey(flag.substr(2)));
    }
    return Status::InvalidArgument("unexpected argument '" + a + "' (see `adjsnapd --help`)");
  }
  out.print_config = flags.print_config;
  if (flags.version) {  // before the config file: --version answers whatever the config says
    out.version = true;
    return out;
  }

  std::string config_file = flags.config_file;
  if (app.get_option("--config")->count() == 0) {
    if (auto it = env.find("ADJSNAP_CONFIG"); it != env.end()) config_file = it->second;
  }
  if (!config_file.empty()) ADJSNAP_RETURN_IF_ERROR(LoadFile(c, config_file));
  for (const OptionDoc& o : ConfigOptions()) {
    if (auto it = env.find(o.env); it != env.end()) {
      ADJSNAP_RETURN_IF_ERROR(
          Set(c, o, it->second, std::string("environment ") + o.env, Quoted(it->second)));
    }
  }
  const std::vector<OptionDoc>& options = ConfigOptions();
  for (size_t i = 0; i < options.size(); ++i) {
    if (flags.options[i]->count() == 0) continue;
    ADJSNAP_RETURN_IF_ERROR(Set(c, options[i], flags.values[i], "flag " + FlagName(options[i]),
                              Quoted(flags.values[i])));
  }
  if (!c.admin_listen.empty() &&
      (c.admin_tls_cert.empty() || c.admin_tls_key.empty() || c.admin_tls_ca.empty())) {
    return Status::InvalidArgument(
        "admin_listen = '" + c.admin_listen +
        "' needs admin_tls_cert, admin_tls_key and admin_tls_ca: remote administration is "
        "served over mutual TLS only");
  }
  if (!c.spool_dirs_set) {
    // --print-config writes the default spool directory in spool_dirs, which is comma-separated
    // with each directory trimmed of spaces: it must read back as itself (the config fuzzer
    // found a state_dir with a comma, then one that began with a space).
    const std::string dir = SpoolDirsText(c);
    Config probe;
    const OptionDoc* spool = FindOption("spool_dirs");
    if (!spool->set(probe, dir).ok() || probe.spool_dirs != std::vector<std::string>{dir}) {
      return Status::InvalidArgument(
          "state_dir = '" + c.state_dir + "' gives the default spool directory '" + dir +
          "', which spool_dirs cannot hold (a comma, or a space at either end of a directory); "
          "set spool_dirs");
    }
  }
  return out;
}

Config DefaultConfig() {
  Result<LoadedConfig> loaded = LoadConfig({}, {});
  // Every default parses (Config.EveryDefaultComesFromTheTable); what can fail is a default
  // state_dir under a $HOME that spool_dirs cannot hold (LoadConfig), which tests do not have.
  return loaded.ok() ? loaded->config : Config{};
}

std::string FormatConfig(const Config& c) {
  std::string out;
  for (const OptionDoc& o : ConfigOptions()) out += std::string(o.key) + " = " + ValueToml(c, o) + "\n";
  return out;
}

std::string OptionHelp(const OptionDoc& o) {
  std::string notes;
  if (o.kind == OptionKind::kInteger) {
    notes = std::to_string(o.min) + ".." + std::to_string(o.max);
    if (o.zero_means) notes += std::string(", 0 = ") + o.zero_means;
  }
  if (o.default_text) {
    notes += std::string(notes.empty() ? "" : ", ") + "default " +
             (*o.default_text ? o.default_text : "empty");
  }
  return notes.empty() ? o.help : std::string(o.help) + " (" + notes + ")";
}

std::vector<std::string> SpoolDirs(const Config& c) {
  if (!c.spool_dirs_set) return {c.state_dir + "/spool"};
  return c.spool_dirs;
}

std::string DirsText(const std::vector<std::string>& dirs) {
  if (dirs.empty()) return "none";
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ",") + d;
  return out;
}

std::string SpoolDirsText(const Config& c) { return DirsText(SpoolDirs(c)); }

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

}  // namespace adjsnap
