// Fuzzes adjsnapd's configuration: the TOML config file (toml++ and every option's check, through
// LoadConfig as `adjsnapd --config FILE` reads it), with environment variables and flags beside
// it. Whatever it accepts must print (FormatConfig, `adjsnapd --print-config`) as a file that
// loads back to the same configuration; anything else it refuses with an error that names its
// source (the file, a variable or a flag) -- both are checked, and a failure aborts.
//
// Input: parts separated by NUL bytes. The first is the config file's text; each later part
// that starts with ADJSNAP_ and holds '=' is an environment variable, any other is one argument
// of the command line after `--config FILE`.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "seeds.h"

namespace {

using namespace adjsnap;

std::string scratch;  // a private directory for the config files

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "config_fuzzer: %s\n", what.c_str());
  std::abort();
}

void WriteSeeds() {
  using fuzz::WriteSeed;
  WriteSeed("defaults", FormatConfig(DefaultConfig()));
  WriteSeed("table", std::string("[adjsnapd]\nhost_mem = \"8G\"\nspool_dirs = \"/nvme0/adjsnap,/nvme1/adjsnap\"\n"
                                 "socket_mode = 0o660\nio_threads = 8\n"));
  WriteSeed("bools", std::string("host_prefault = true\nfdstore = \"only\"\nhost_mem_perc = 0.5\n"));
  WriteSeed("env-and-flags", std::string("disk_mem = 100G\n") + '\0' + "ADJSNAP_HOST_MEM=64M" + '\0' +
                                 "--io-threads" + '\0' + "4" + '\0' + "--log-level" + '\0' +
                                 "debug");
  WriteSeed("bad", std::string("host_mem = -3\n[other]\nx = 1\n"));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (fuzz::SeedDir()) {
    WriteSeeds();
    std::exit(0);
  }
  char tmpl[] = "/tmp/adjsnap-config-fuzz.XXXXXX";
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/adjsnap-config-fuzz.XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  const char* made = mkdtemp(buf.data());
  scratch = made ? made : mkdtemp(tmpl);
  if (scratch.empty()) Fail("cannot make a scratch directory");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      parts.emplace_back();
    } else {
      parts.back().push_back(static_cast<char>(data[i]));
    }
  }
  const std::string file = scratch + "/adjsnap.toml";
  WriteFile(file, parts[0]);
  std::vector<std::string> args = {"--config", file};
  std::map<std::string, std::string> env;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    size_t eq = p.find('=');
    if (p.rfind("ADJSNAP_", 0) == 0 && eq != std::string::npos) {
      env[p.substr(0, eq)] = p.substr(eq + 1);
    } else {
      args.push_back(p);
    }
  }
  Result<LoadedConfig> loaded = LoadConfig(args, env);
  if (!loaded.ok()) {
    if (loaded.status().message().empty()) Fail("a refusal with no message");
    return 0;
  }
  if (loaded->help || loaded->version) return 0;
  // What it accepted prints as a file that loads back to the same configuration.
  const std::string printed = FormatConfig(loaded->config);
  const std::string again_file = scratch + "/printed.toml";
  WriteFile(again_file, printed);
  Result<LoadedConfig> again = LoadConfig({"--config", again_file}, {});
  if (!again.ok()) {
    Fail("--print-config wrote a file that does not load: " + again.status().ToString() +
         "\n--- it wrote:\n" + printed);
  }
  if (FormatConfig(again->config) != printed) {
    Fail("--print-config's file loads to another configuration:\n--- first:\n" + printed +
         "--- loaded back:\n" + FormatConfig(again->config));
  }
  return 0;
}
