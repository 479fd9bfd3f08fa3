#include "config/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "temp_dir.h"

namespace snapd {
namespace {

TEST(Config, LaterLayersWinFileThenEnvironmentThenFlags) {
  testing::TempDir tmp;
  std::string path = tmp.path() + "/snapd.toml";
  {
    std::ofstream f(path);
    f << "# snapd\n[snapd]\nhost_mem = \"1G\"\nlog_level = \"warn\"\nsession_connect_timeout = 700\n";
  }
  auto c = LoadConfig({"--config", path, "--session-connect-timeout=702"},
                      {{"SNAPD_LOG_LEVEL", "debug"}, {"SNAPD_SESSION_CONNECT_TIMEOUT", "701"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.host_mem, 1ull << 30);      // file
  EXPECT_EQ(c->config.log_level, "debug");        // environment over file
  EXPECT_EQ(c->config.session_connect_timeout, 702u);  // flag over environment
}

// deploy/snapd.toml is the one documented config file: it loads, and names every option with
// its environment variable.
TEST(Config, TheShippedConfigFileLoadsAndDocumentsEveryOption) {
  std::string path = std::string(SNAPD_SOURCE_DIR) + "/deploy/snapd.toml";
  auto c = LoadConfig({"--config", path}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->config.socket, "/run/snapd/snapd.sock");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  for (const OptionDoc& o : ConfigOptions()) {
    EXPECT_NE(text.str().find(std::string(o.key) + " ="), std::string::npos) << o.key;
    EXPECT_NE(text.str().find(o.env), std::string::npos) << o.env;
  }
}

TEST(Config, TenancyOptionsParseAndRejectBadValues) {
  auto c = LoadConfig({"--socket_mode", "0660", "--tenant_quota", "2G", "--admin_group", "hpc"},
                      {});
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
  EXPECT_EQ(HostBudget(c->config, 1000), 700u);
  c->config.host_mem = 123;
  EXPECT_EQ(HostBudget(c->config, 1000), 123u);
}

TEST(Config, ErrorsNameTheSourceAndTheValue) {
  auto bad_env = LoadConfig({}, {{"SNAPD_HOST_MEM_PERC", "1.5"}});
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().message().find("environment SNAPD_HOST_MEM_PERC"),
            std::string::npos);
  auto bad_flag = LoadConfig({"--nonsense", "1"}, {});
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("unknown option 'nonsense'"), std::string::npos);
  auto missing = LoadConfig({"--config", "/nonexistent/snapd.toml"}, {});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

TEST(Config, PrintConfigRoundTripsThroughTheFileParser) {
  auto c = LoadConfig({"--host-mem", "2G", "--socket", "/tmp/x.sock"}, {});
  ASSERT_TRUE(c.ok());
  testing::TempDir tmp;
  std::string path = tmp.path() + "/snapd.toml";
  {
    std::ofstream f(path);
    f << FormatConfig(c->config);
  }
  auto again = LoadConfig({"--config", path}, {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->config.host_mem, 2ull << 30);
  EXPECT_EQ(again->config.socket, "/tmp/x.sock");
}

}  // namespace
}  // namespace snapd
