// snapbench against a real daemon: it finds snapd where snapctl and libsnapd find it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "snapd_fixture.h"

namespace snapd::testing {
namespace {

class Snapbench : public SnapdTest {
 protected:
  void TearDown() override {
    unsetenv("SNAPD_SOCKET");
    SnapdTest::TearDown();
  }
};

// With no --socket, $SNAPD_SOCKET names the daemon: in --help's default and in the run, whose
// fresh-process passes ask it for its Stats first.
TEST_F(Snapbench, FindsTheDaemonThroughSnapdSocket) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  ASSERT_EQ(setenv("SNAPD_SOCKET", daemon().socket().c_str(), 1), 0);
  std::string out, err;
  ASSERT_EQ(RunProgram({SNAPBENCH_BINARY, "--help"}, &out, &err), 0) << err;
  EXPECT_NE(out.find(daemon().socket()), std::string::npos) << out;
  int rc = RunProgram({SNAPBENCH_BINARY, "--steps", "2", "--bytes", "64K", "--json"}, &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_EQ(err.find("empty address list"), std::string::npos) << err;
  EXPECT_NE(out.find("fresh process, second pass"), std::string::npos) << out;
}

}  // namespace
}  // namespace snapd::testing
