#include "config/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace adjsnap {
namespace {

TEST(Config, LaterLayersWinFileThenEnvironmentThenFlags) {
  testing::TempDir tmp;
  std::string path = tmp.path() + "/adjsnap.toml";
  {
    std::ofstream f(path);
    f << "# adjsnapd\n[adjsnapd]\nhost_mem = \"1G\"\nlog_level = \"warn\"\nsession_connect_timeout = "
         "700\n";
  }
  auto c = LoadConfig({"--config", path, "--session-connect-timeout=702"},
                      {{"ADJSNAP_LOG_LEVEL", "debug"}, {"ADJSNAP_SESSION_CONNECT_TIMEOUT", "701"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.host_mem, 1ull << 30);           // file
  EXPECT_EQ(c->config.log_level, "debug");             // environment over file
  EXPECT_EQ(c->config.session_connect_timeout, 702u);  // flag over environment
}

// deploy/adjsnap.toml is the one documented config file: it loads, and names every option with
// its environment variable.
TEST(Config, TheShippedConfigFileLoadsAndDocumentsEveryOption) {
  std::string path = std::string(ADJSNAP_SOURCE_DIR) + "/deploy/adjsnap.toml";
  auto c = LoadConfig({"--config", path}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.socket, "/run/adjsnap/adjsnap.sock");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  for (const OptionDoc& o : ConfigOptions()) {
    EXPECT_NE(text.str().find(std::string(o.key) + " ="), std::string::npos) << o.key;
    EXPECT_NE(text.str().find(o.env), std::string::npos) << o.env;
  }
}

TEST(Config, TenancyOptionsParseAndRejectBadValues) {
  auto c =
      LoadConfig({"--socket_mode", "0660", "--tenant_quota", "2G", "--admin_group", "hpc"}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.socket_mode, 0660u);
  EXPECT_EQ(c->config.tenant_quota, 2ull << 30);
  EXPECT_EQ(c->config.admin_group, "hpc");
  auto bad = LoadConfig({"--socket_mode", "0999"}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("octal"), std::string::npos);
}

TEST(Config, DefaultsAreDocumentedValues) {
  auto c = LoadConfig({}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->config.host_mem, 0u);
  EXPECT_DOUBLE_EQ(c->config.host_mem_perc, 0.7);
  EXPECT_EQ(c->config.host_huge_pages, "auto");
  EXPECT_EQ(c->config.host_prefault, "background");
  EXPECT_EQ(HostBudget(c->config, 1000), 700u);
  c->config.host_mem = 123;
  EXPECT_EQ(HostBudget(c->config, 1000), 123u);
}

TEST(Config, ErrorsNameTheSourceAndTheValue) {
  auto bad_env = LoadConfig({}, {{"ADJSNAP_HOST_MEM_PERC", "1.5"}});
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().message().find("environment ADJSNAP_HOST_MEM_PERC"), std::string::npos);
  auto bad_flag = LoadConfig({"--nonsense", "1"}, {});
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("unknown option 'nonsense'"), std::string::npos);
  auto missing = LoadConfig({"--config", "/nonexistent/adjsnap.toml"}, {});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

// A path is any bytes to Linux, but --print-config writes TOML, whose strings are UTF-8: a value
// it could not write back is refused where it comes in, naming where (the config fuzzer's find).
TEST(Config, AValueThatIsNotUtf8IsRefusedNamingItsSource) {
  for (const char* bad : {"/tmp/\xe9t\xe9", "/tmp/\xc0\xaf", "/tmp/\xed\xa0\x80",
                          "/tmp/\xf4\x90\x80\x80", "/tmp/\xe2\x82"}) {
    auto flag = LoadConfig({"--state-dir", bad}, {});
    ASSERT_FALSE(flag.ok()) << bad;
    EXPECT_EQ(flag.status().code(), Code::kInvalidArgument);
    EXPECT_NE(flag.status().message().find("flag --state-dir: not valid UTF-8"), std::string::npos)
        << flag.status().message();
    auto env = LoadConfig({}, {{"ADJSNAP_SOCKET", bad}});
    ASSERT_FALSE(env.ok()) << bad;
    EXPECT_NE(env.status().message().find("environment ADJSNAP_SOCKET: not valid UTF-8"),
              std::string::npos)
        << env.status().message();
  }
  auto fine = LoadConfig({"--state-dir", "/tmp/\xc3\xa9t\xc3\xa9/\xf0\x9f\x8c\x8a"}, {});
  EXPECT_TRUE(fine.ok()) << fine.status().ToString();
}

// Writes `text` to adjsnap.toml in `dir` and returns its path.
std::string WriteConfig(const testing::TempDir& dir, const std::string& text) {
  std::string path = dir.path() + "/adjsnap.toml";
  std::ofstream f(path);
  f << text;
  return path;
}

TEST(Config, AStateDirThatSpoolDirsCannotHoldNeedsItsOwnSpoolDirs) {
  for (const char* dir : {"/tmp/a ,b", " et/x", "\t/tmp/y"}) {
    auto bare = LoadConfig({"--state-dir", dir}, {});
    ASSERT_FALSE(bare.ok()) << dir;
    EXPECT_EQ(bare.status().code(), Code::kInvalidArgument);
    EXPECT_NE(bare.status().message().find("state_dir = '" + std::string(dir) +
                                           "' gives the default spool directory '" + dir +
                                           "/spool', which spool_dirs cannot hold"),
              std::string::npos)
        << bare.status().message();
  }
  // With spool_dirs given, the state directory may hold a comma, and the file round-trips.
  auto given = LoadConfig({"--state-dir", "/tmp/a ,b", "--spool-dirs", "/tmp/s0, /tmp/s1"}, {});
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  testing::TempDir tmp;
  auto again = LoadConfig({"--config", WriteConfig(tmp, FormatConfig(given->config))}, {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->config.state_dir, "/tmp/a ,b");
  EXPECT_EQ(again->config.spool_dirs, (std::vector<std::string>{"/tmp/s0", "/tmp/s1"}));
}

TEST(Config, PrintConfigRoundTripsThroughTheFileParser) {
  auto c = LoadConfig({"--host-mem", "2G", "--socket", "/tmp/x.sock"}, {});
  ASSERT_TRUE(c.ok());
  testing::TempDir tmp;
  auto again = LoadConfig({"--config", WriteConfig(tmp, FormatConfig(c->config))}, {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->config.host_mem, 2ull << 30);
  EXPECT_EQ(again->config.socket, "/tmp/x.sock");
}


TEST(Config, ABadValueInTheFileNamesFileLineKeyAndValue) {
  testing::TempDir tmp;
  std::string path =
      WriteConfig(tmp, "# adjsnapd\n[adjsnapd]\nlog_level = \"info\"\nhost_mem = \"lots\"\n");
  auto c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.status().message(), path + ":4: host_mem: expected a size like 64G, got \"lots\"");
  path = WriteConfig(tmp, "io_threads = 300\nlog_level = true\n");
  c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), path +
                                      ":1: io_threads: expected an integer 0..256 (0 = 4, or 8 "
                                      "with shared_spool_dirs), got 300");
  path = WriteConfig(tmp, "log_level = true\n");
  c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), path + ":1: log_level: expected a string in quotes, got true");
}

TEST(Config, ATomlSyntaxErrorNamesLineAndColumn) {
  testing::TempDir tmp;
  std::string path = WriteConfig(tmp, "[adjsnapd]\nlog_level = \"info\"\nhost_mem = \"1G\n");
  auto c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().rfind(path + ":3:", 0), 0u) << c.status().message();
  // Unquoted text is not TOML: the old parser's leniency ends at the first line it reaches.
  path = WriteConfig(tmp, "log_level = info\n");
  c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().rfind(path + ":1:", 0), 0u) << c.status().message();
}

TEST(Config, AnUnknownKeyOrTableInTheFileIsRefusedByName) {
  testing::TempDir tmp;
  std::string path = WriteConfig(tmp, "[adjsnapd]\nhost_mem = \"1G\"\nhots_mem = \"1G\"\n");
  auto c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            path + ":3: unknown option 'hots_mem' (see `adjsnapd --help` for the list)");
  path = WriteConfig(tmp, "[snpad]\nhost_mem = \"1G\"\n");
  c = LoadConfig({"--config", path}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(path + ":1: unknown table [snpad]"), std::string::npos)
      << c.status().message();
}

TEST(Config, HostPageOptionsParseAndRejectBadValues) {
  testing::TempDir tmp;
  auto c = LoadConfig({"--config", WriteConfig(tmp, "host_huge_pages = \"hugetlb\"\n"
                                                    "host_prefault = true\n")},
                      {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.host_huge_pages, "hugetlb");
  EXPECT_EQ(c->config.host_prefault, "true");  // a TOML boolean, as when it was a switch
  c = LoadConfig({"--host-prefault", "false"}, {{"ADJSNAP_HOST_PREFAULT", "true"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.host_prefault, "false");
  c = LoadConfig({}, {{"ADJSNAP_HOST_PREFAULT", "background"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.host_prefault, "background");
  EXPECT_FALSE(LoadConfig({"--host-prefault", "sometimes"}, {}).ok());
  auto bad = LoadConfig({"--host-huge-pages", "always"}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, hugetlb, thp or off"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("always"), std::string::npos);
  bad = LoadConfig({"--config", WriteConfig(tmp, "host_prefault = 1\n")}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected \"background\", true or false"),
            std::string::npos)
      << bad.status().message();
}

TEST(Config, NumbersMayBeWrittenAsStringsOrAsTomlNumbers) {
  testing::TempDir tmp;
  std::string path = WriteConfig(tmp,
                                 "host_mem = 1073741824\n"
                                 "disk_mem = \"2G\"\n"
                                 "host_mem_perc = \"0.5\"\n"
                                 "disk_mem_perc = 0.25\n"
                                 "tenant_host_share = 1\n"
                                 "io_threads = \"6\"\n"
                                 "prefetch_depth = 3\n"
                                 "socket_mode = 0o660\n");
  auto c = LoadConfig({"--config", path}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.host_mem, 1ull << 30);
  EXPECT_EQ(c->config.disk_mem, 2ull << 30);
  EXPECT_DOUBLE_EQ(c->config.host_mem_perc, 0.5);
  EXPECT_DOUBLE_EQ(c->config.disk_mem_perc, 0.25);
  EXPECT_DOUBLE_EQ(c->config.tenant_host_share, 1.0);
  EXPECT_EQ(c->config.io_threads, 6u);
  EXPECT_EQ(c->config.prefetch_depth, 3u);
  EXPECT_EQ(c->config.socket_mode, 0660u);
  // A bare 660 reads as octal, as the string "660" does.
  path = WriteConfig(tmp, "socket_mode = 660\n");
  c = LoadConfig({"--config", path}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.socket_mode, 0660u);
}

TEST(Config, TheEnvironmentOverridesTheFileAndAFlagOverridesTheEnvironment) {
  testing::TempDir tmp;
  std::string path = WriteConfig(tmp, "[adjsnapd]\nhost_mem = \"1G\"\n");
  auto from_env = LoadConfig({}, {{"ADJSNAP_CONFIG", path}, {"ADJSNAP_HOST_MEM", "2G"}});
  ASSERT_TRUE(from_env.ok()) << from_env.status().ToString();
  EXPECT_EQ(from_env->config.host_mem, 2ull << 30);
  auto from_flag =
      LoadConfig({"--host_mem=3G"}, {{"ADJSNAP_CONFIG", path}, {"ADJSNAP_HOST_MEM", "2G"}});
  ASSERT_TRUE(from_flag.ok()) << from_flag.status().ToString();
  EXPECT_EQ(from_flag->config.host_mem, 3ull << 30);
  auto last_flag = LoadConfig({"--host-mem", "4G", "--host-mem", "5G"}, {});
  ASSERT_TRUE(last_flag.ok()) << last_flag.status().ToString();
  EXPECT_EQ(last_flag->config.host_mem, 5ull << 30);
}

TEST(Config, BadFlagsAreNamed) {
  auto bad_value = LoadConfig({"--host-mem", "lots"}, {});
  ASSERT_FALSE(bad_value.ok());
  EXPECT_EQ(bad_value.status().message(),
            "flag --host-mem: expected a size like 64G, got \"lots\"");
  auto unknown = LoadConfig({"--nope=1"}, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(),
            "flag --nope: unknown option 'nope' (see `adjsnapd --help` for the list)");
  auto no_value = LoadConfig({"--log-level"}, {});
  ASSERT_FALSE(no_value.ok());
  EXPECT_EQ(no_value.status().message(), "flag --log-level needs a value (see `adjsnapd --help`)");
  // `--config=` is an empty value (no file), not a name for the argument after it.
  auto empty = LoadConfig({"--config=", "--print-config"}, {{"ADJSNAP_CONFIG", "/nonexistent"}});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->print_config);
  auto stray = LoadConfig({"serve"}, {});
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find("unexpected argument 'serve'"), std::string::npos)
      << stray.status().message();
}

// docs/configuration.md's table lists the options of ConfigOptions(), in its order, each with
// its variable and its embedded default (`TEXT`, or "empty"; where adjsnapd computes the default
// at start, the doc says how).
TEST(Config, TheDocumentedTableIsTheOptionTable) {
  std::ifstream in(std::string(ADJSNAP_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md";
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream fields(line.substr(1));
    for (std::string cell; std::getline(fields, cell, '|');) {
      size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
    }
    if (cells.size() >= 4) rows.push_back(cells);
  }
  const std::vector<OptionDoc>& options = ConfigOptions();
  ASSERT_EQ(rows.size(), options.size()) << "rows of the option table in docs/configuration.md";
  for (size_t i = 0; i < options.size(); ++i) {
    const OptionDoc& o = options[i];
    EXPECT_EQ(rows[i][0], "`" + std::string(o.key) + "`") << "row " << i;
    EXPECT_EQ(rows[i][1], "`" + std::string(o.env) + "`") << o.key;
    if (o.default_text == nullptr) {
      EXPECT_FALSE(rows[i][2].empty()) << o.key;
    } else if (*o.default_text == '\0') {
      EXPECT_EQ(rows[i][2], "empty") << o.key;
    } else {
      EXPECT_EQ(rows[i][2], "`" + std::string(o.default_text) + "`") << o.key;
    }
    EXPECT_FALSE(rows[i][3].empty()) << o.key;
  }
}

// Every option's embedded default is what a config with nothing set holds, and what
// --print-config shows for it.
TEST(Config, EveryDefaultComesFromTheTable) {
  auto c = LoadConfig({}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string printed = FormatConfig(c->config);
  for (const OptionDoc& o : ConfigOptions()) {
    if (o.default_text == nullptr) continue;
    std::string text = o.default_text;
    std::string line = std::string(o.key) + " = ";
    bool quoted = o.kind == OptionKind::kText || o.kind == OptionKind::kSize ||
                  o.kind == OptionKind::kMode;
    line += quoted ? "\"" + text + "\"" : text;
    EXPECT_NE(printed.find("\n" + line + "\n"), std::string::npos) << line << " in\n" << printed;
    EXPECT_NE(CommandLineHelp().find(OptionHelp(o)), std::string::npos) << o.key;
    EXPECT_NE(OptionHelp(o).find("default " + (text.empty() ? "empty" : text)), std::string::npos)
        << OptionHelp(o);
  }
}

TEST(Config, HelpListsEveryOptionOfTheTable) {
  auto c = LoadConfig({"--help"}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->help);
  std::string help = CommandLineHelp();
  for (const char* flag : {"--config FILE", "--print-config", "--help"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  for (const OptionDoc& o : ConfigOptions()) {
    std::string flag = std::string("--") + o.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_NE(help.find(flag + " " + o.value_name), std::string::npos) << flag;
    EXPECT_NE(help.find(o.help), std::string::npos) << o.help;
    EXPECT_NE(help.find(std::string("env ") + o.env), std::string::npos) << o.env;
  }
}

}  // namespace
}  // namespace adjsnap
