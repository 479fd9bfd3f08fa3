// adjsnap-bench against a real daemon: it finds adjsnapd where adjsnap and libadjsnap find it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class AdjsnapBench : public AdjsnapTest {
 protected:
  void TearDown() override {
    unsetenv("ADJSNAP_SOCKET");
    AdjsnapTest::TearDown();
  }
};

// With no --socket, $ADJSNAP_SOCKET names the daemon: in --help's default and in the run, whose
// fresh-process passes ask it for its Stats first.
TEST_F(AdjsnapBench, FindsTheDaemonThroughAdjsnapSocket) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  ASSERT_EQ(setenv("ADJSNAP_SOCKET", daemon().socket().c_str(), 1), 0);
  std::string out, err;
  ASSERT_EQ(RunProgram({ADJSNAP_BENCH_BINARY, "--help"}, &out, &err), 0) << err;
  EXPECT_NE(out.find(daemon().socket()), std::string::npos) << out;
  int rc = RunProgram({ADJSNAP_BENCH_BINARY, "--steps", "2", "--bytes", "64K", "--json"}, &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_EQ(err.find("empty address list"), std::string::npos) << err;
  EXPECT_NE(out.find("fresh process, second pass"), std::string::npos) << out;
}

}  // namespace
}  // namespace adjsnap::testing
