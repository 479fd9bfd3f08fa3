#include "host_tier/host_tier.h"

#include <gtest/gtest.h>

#include <vector>

namespace snapd {
namespace {

TEST(HostTier, NeverHandsOutMoreThanItsBudget) {
  auto tier = HostTier::Create(1 << 20);
  ASSERT_TRUE(tier.ok());
  std::vector<std::shared_ptr<HostBlock>> blocks;
  for (;;) {
    auto b = (*tier)->Allocate(100 * 1000);  // not page-aligned: rounded up to pages
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), Code::kResourceExhausted);
      EXPECT_NE(b.status().message().find("host tier full"), std::string::npos);
      break;
    }
    blocks.push_back(std::move(b).value());
  }
  EXPECT_EQ(blocks.size(), 10u);  // 10 x 25 pages fit in 256 pages, 11 do not
  EXPECT_LE((*tier)->used(), (*tier)->budget());
  for (auto& b : blocks) {  // every block lies inside the arena and none overlap
    EXPECT_LE(b->offset() + b->size(), (*tier)->budget());
    EXPECT_EQ(b->offset() % HostTier::kAlignment, 0u);
  }
}

TEST(HostTier, FreedNeighboursCoalesceIntoOneBlock) {
  auto tier = HostTier::Create(1 << 20);
  ASSERT_TRUE(tier.ok());
  {
    auto a = (*tier)->Allocate(512 << 10);
    auto b = (*tier)->Allocate(512 << 10);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_FALSE((*tier)->Allocate(4096).ok());
  }
  EXPECT_EQ((*tier)->used(), 0u);
  auto whole = (*tier)->Allocate(1 << 20);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
}

TEST(HostTier, BlocksAreWritableSharedMemory) {
  auto tier = HostTier::Create(1 << 20);
  ASSERT_TRUE(tier.ok());
  EXPECT_GE((*tier)->fd(), 0);
  auto b = (*tier)->Allocate(4096);
  ASSERT_TRUE(b.ok());
  static_cast<char*>((*b)->data())[4095] = 42;
  EXPECT_EQ(static_cast<char*>((*b)->data())[4095], 42);
}

TEST(HostTier, TopAllocationsLeaveWholeHolesAtTheBottom) {
  auto tier = std::move(HostTier::Create(64 * 4096).value());
  auto low = tier->Allocate(16 * 4096).value();
  auto high = tier->Allocate(4096, /*from_top=*/true).value();
  EXPECT_EQ(low->offset(), 0u);
  EXPECT_EQ(high->offset(), 63u * 4096);  // the end of the arena
  low.reset();
  // The 16 pages at the bottom are whole again: a raw block of that size fits there.
  EXPECT_EQ(tier->Allocate(16 * 4096).value()->offset(), 0u);
}

TEST(HostTier, ShrinkingABlockReturnsItsTail) {
  auto tier = std::move(HostTier::Create(16 * 4096).value());
  auto b = tier->Allocate(8 * 4096).value();
  b->ShrinkTo(4096 + 1);  // rounds up to two pages
  EXPECT_EQ(b->size(), 2u * 4096);
  EXPECT_EQ(tier->used(), 2u * 4096);
  auto rest = tier->Allocate(14 * 4096);  // the tail is free and coalesced
  EXPECT_TRUE(rest.ok());
  b.reset();
  EXPECT_EQ(tier->used(), 14u * 4096);
}

TEST(HostTier, RejectsABudgetBelowOnePage) {
  auto tier = HostTier::Create(100);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace snapd
