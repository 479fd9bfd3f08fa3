#include "adjsnap/units.h"

#include <gtest/gtest.h>

namespace adjsnap {
namespace {

TEST(ParseBytes, AcceptsBinarySuffixes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64M"), 64ull << 20);
  EXPECT_EQ(*ParseBytes("4GiB"), 4ull << 30);
  EXPECT_EQ(*ParseBytes("2k"), 2048u);
  EXPECT_EQ(*ParseBytes("1T"), 1ull << 40);
}

TEST(ParseBytes, RejectsGarbageWithTheReason) {
  auto r = ParseBytes("12Q");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown suffix 'Q'"), std::string::npos);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("M").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999999").ok());
  EXPECT_FALSE(ParseBytes("20000000T").ok());
}

TEST(ParseCount, TakesDigitsOnlyWithinSixtyFourBits) {
  uint64_t v = 7;
  EXPECT_TRUE(ParseCount("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(ParseCount("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
  for (const char* bad : {"", "-3", "+3", " 3", "3 ", "2x", "0x10", "18446744073709551616"}) {
    v = 7;
    EXPECT_FALSE(ParseCount(bad, &v)) << "'" << bad << "'";
    EXPECT_EQ(v, 7u) << "'" << bad << "' changed the value";
  }
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(64ull << 20), "64.0 MiB");
}

}  // namespace
}  // namespace adjsnap
