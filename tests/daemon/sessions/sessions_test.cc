// SessionTable: tokens, and the per-uid limit on open sessions (max_sessions_per_uid).
#include "sessions/sessions.h"

#include <gtest/gtest.h>

#include <vector>

namespace adjsnap {
namespace {

TEST(SessionTable, OneUidHoldsAtMostItsLimitAndOthersAreNotHeldToIt) {
  SessionTable table;
  table.set_max_per_uid(2);
  Result<Session> a1 = table.Open("a", 1000);
  Result<Session> a2 = table.Open("a", 1000, /*socket_link=*/true);
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_NE(a1->token, a2->token);
  Result<Session> a3 = table.Open("a", 1000);
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), Code::kResourceExhausted);
  EXPECT_NE(a3.status().message().find("uid 1000 already holds 2 open sessions"), std::string::npos)
      << a3.status().message();
  EXPECT_NE(a3.status().message().find("max_sessions_per_uid = 2"), std::string::npos);
  // Another uid, root included, has a limit of its own.
  EXPECT_TRUE(table.Open("b", 1001).ok());
  EXPECT_TRUE(table.Open("root", 0).ok());
  EXPECT_EQ(table.size(), 4u);
  // A wrong token closes nothing and frees no room; the right one does.
  EXPECT_EQ(table.Close(a1->id, a1->token + 1).code(), Code::kNotFound);
  EXPECT_FALSE(table.Open("a", 1000).ok());
  ASSERT_TRUE(table.Close(a1->id, a1->token).ok());
  EXPECT_EQ(table.Close(a1->id, a1->token).code(), Code::kNotFound);  // closed once only
  Result<Session> again = table.Open("a", 1000);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(table.Open("a", 1000).ok());
  EXPECT_TRUE(table.Find(again->id, again->token).has_value());
}

TEST(SessionTable, NoLimitByDefault) {
  SessionTable table;
  std::vector<Session> open;
  for (int i = 0; i < 3000; ++i) {
    Result<Session> s = table.Open("many", 1000);
    ASSERT_TRUE(s.ok()) << i << ": " << s.status().ToString();
    open.push_back(*s);
  }
  for (const Session& s : open) EXPECT_TRUE(table.Close(s.id, s.token).ok());
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace adjsnap
