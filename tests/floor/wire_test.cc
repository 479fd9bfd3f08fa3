// The wire format's one helper: a reply's message field.
#include "snapd/wire.h"

#include <gtest/gtest.h>

#include <string>

namespace snapd::wire {
namespace {

TEST(FitReplyMessage, AShortMessageGoesWhole) {
  Reply reply{};
  EXPECT_EQ(FitReplyMessage("step 3 is lost", reply.message), 14u);
  EXPECT_EQ(std::string(reply.message, 14), "step 3 is lost");
  std::string exact(kMaxReplyMessage, 'x');
  EXPECT_EQ(FitReplyMessage(exact, reply.message), kMaxReplyMessage);
  EXPECT_EQ(std::string(reply.message, kMaxReplyMessage), exact);
}

// A long error keeps its beginning (what failed) and its end (the cause, which the data plane
// cut off before: "... and the others failed (ENO").
TEST(FitReplyMessage, ALongMessageKeepsItsBeginningAndItsEnd) {
  const std::string head = "no host memory free to read step 0 of run 'shot-17' back from disk";
  const std::string tail =
      "the working spools are full and the others failed (ENOTCONN on "
      "/lustre/snapd)";
  const std::string message = head + std::string(300, '.') + tail;
  Reply reply{};
  const uint32_t n = FitReplyMessage(message, reply.message);
  ASSERT_EQ(n, kMaxReplyMessage);
  const std::string fitted(reply.message, n);
  EXPECT_EQ(fitted.rfind(head, 0), 0u) << fitted;
  EXPECT_EQ(fitted.substr(fitted.size() - tail.size()), tail) << fitted;
  EXPECT_NE(fitted.find(" ... "), std::string::npos) << fitted;
}

}  // namespace
}  // namespace snapd::wire
