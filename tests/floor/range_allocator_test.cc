#include "adjsnap/range_allocator.h"

#include <gtest/gtest.h>

namespace adjsnap {
namespace {

TEST(RangeAllocator, ReusesAndMergesFreedRanges) {
  RangeAllocator r(1000);
  auto a = r.Allocate(400), b = r.Allocate(400);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 400u);
  EXPECT_FALSE(r.Allocate(400));
  EXPECT_FALSE(r.Allocate(0));
  EXPECT_EQ(r.largest_free(), 200u);
  r.Free(*a, 400);
  EXPECT_EQ(r.free_bytes(), 600u);
  EXPECT_EQ(r.largest_free(), 400u);  // not adjacent to the free tail
  r.Free(*b, 400);
  EXPECT_EQ(r.largest_free(), 1000u);  // merged with both neighbours
  EXPECT_EQ(r.free_bytes(), 1000u);
}

TEST(RangeAllocator, AllocateAtTakesExactlyAFreeRangeOrNothing) {
  RangeAllocator r(1000);
  EXPECT_TRUE(r.AllocateAt(300, 100));
  EXPECT_FALSE(r.AllocateAt(350, 100));  // overlaps the range just taken
  EXPECT_FALSE(r.AllocateAt(950, 100));  // past the end
  EXPECT_FALSE(r.AllocateAt(0, 0));
  EXPECT_TRUE(r.AllocateAt(0, 300));     // the whole piece below it
  EXPECT_EQ(r.free_bytes(), 600u);
  EXPECT_EQ(*r.Allocate(600), 400u);     // the rest is one piece
  r.Free(300, 100);
  EXPECT_TRUE(r.AllocateAt(300, 100));
}

TEST(RangeAllocator, FromTopTakesTheHighestRangeThatFits) {
  RangeAllocator r(1000);
  auto low = r.Allocate(100);
  auto top = r.Allocate(300, /*from_top=*/true);
  ASSERT_TRUE(low && top);
  EXPECT_EQ(*low, 0u);
  EXPECT_EQ(*top, 700u);
  EXPECT_EQ(*r.Allocate(600, true), 100u);  // the rest exactly, from its top
  EXPECT_FALSE(r.Allocate(1, true));
  r.Free(*low, 100);
  r.Free(*top, 300);
  EXPECT_EQ(r.free_bytes(), 400u);
  EXPECT_EQ(r.largest_free(), 300u);
}

}  // namespace
}  // namespace adjsnap
