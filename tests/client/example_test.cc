// The example solver runs a full forward and backward pass against a real daemon.
#include <gtest/gtest.h>

#include "daemon_process.h"

namespace snapd::testing {
namespace {

TEST(Acoustic2d, ForwardAndBackwardPassVerifyEveryStep) {
  TempDir dir;
  auto d = DaemonProcess::Start({dir.path(), "256M", {}, {}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::string out, err;
  int rc = RunProgram({ACOUSTIC2D_BINARY, "--socket", (*d)->socket(), "--nx", "256", "--ny",
                       "256", "--steps", "120"},
                      &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_NE(out.find("120/120 checksums match"), std::string::npos) << out;
  EXPECT_NE(out.find("on the host tier"), std::string::npos) << out;
  EXPECT_EQ((*d)->Stop(), 0);
}

}  // namespace
}  // namespace snapd::testing
