// The example solver runs a full forward and backward pass against a real daemon.
#include <gtest/gtest.h>

#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class Acoustic2d : public AdjsnapTest {};

TEST_F(Acoustic2d, ForwardAndBackwardPassVerifyEveryStep) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("256M")));
  std::string out, err;
  int rc = RunProgram({ACOUSTIC2D_BINARY, "--socket", daemon().socket(), "--nx", "256", "--ny",
                       "256", "--steps", "120"},
                      &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_NE(out.find("120/120 checksums match"), std::string::npos) << out;
  EXPECT_NE(out.find("on the host tier"), std::string::npos) << out;
}

}  // namespace
}  // namespace adjsnap::testing
