#include "tiering/placement.h"

#include <gtest/gtest.h>

namespace adjsnap {
namespace {

TEST(HostBoundary, KeepsTheNewestStepsThatFitBesideTheStagingBlocks) {
  // 10 blocks of room, 2 kept for traffic: the last 8 of 100 steps stay in host memory.
  EXPECT_EQ(HostBoundary(v1::LAYERS_DISK_HOST, 100, 1, 10), 92u);
  // Everything fits: nothing goes to disk.
  EXPECT_EQ(HostBoundary(v1::LAYERS_DISK_HOST, 5, 1, 10), 0u);
  // Less room than the staging blocks: every step goes to disk.
  EXPECT_EQ(HostBoundary(v1::LAYERS_DISK_HOST, 5, 4, 6), 5u);
}

TEST(HostBoundary, DependsOnTheLayersAndTheDeclaredCount) {
  EXPECT_EQ(HostBoundary(v1::LAYERS_DISK, 7, 1, 100), 7u);  // disk only
  EXPECT_EQ(HostBoundary(v1::LAYERS_HOST, 70, 1, 10), 0u);  // no disk to go to
  EXPECT_EQ(HostBoundary(v1::LAYERS_DISK_HOST, 0, 1, 10), 0u);  // N unknown: decided live
}

TEST(PrefetchDepth, ReadsFarEnoughAheadToHideOneDiskRead) {
  EXPECT_EQ(PrefetchDepth(0, 0, 8), 8u);          // no read measured yet: as far as allowed
  EXPECT_EQ(PrefetchDepth(100, 0, 8), 8u);        // the pace known, still no read
  EXPECT_EQ(PrefetchDepth(0, 50, 8), 2u);         // a read measured, the pace not yet
  EXPECT_EQ(PrefetchDepth(100, 50, 8), 2u);       // compute slower than disk: 2 suffice
  EXPECT_EQ(PrefetchDepth(100, 450, 8), 6u);      // a read spans 4.5 steps
  EXPECT_EQ(PrefetchDepth(100, 450, 8, 2), 7u);   // a shared spool's step more of margin
  EXPECT_EQ(PrefetchDepth(1, 1000, 8), 8u);       // capped
}

TEST(Layers, ParseTheDevitoNames) {
  v1::Layers l;
  ASSERT_TRUE(ParseLayers("DiskHostDevice", &l));
  EXPECT_EQ(l, v1::LAYERS_DISK_HOST_DEVICE);
  EXPECT_TRUE(UsesDevice(l) && UsesHost(l) && UsesDisk(l));
  ASSERT_TRUE(ParseLayers("", &l));
  EXPECT_EQ(l, v1::LAYERS_DEFAULT);
  EXPECT_FALSE(ParseLayers("diskhost", &l));
  EXPECT_STREQ(LayersName(v1::LAYERS_NO_LAYERS), "NoLayers");
}

}  // namespace
}  // namespace adjsnap
