#include "catalog/catalog.h"

#include <gtest/gtest.h>
#include "temp_dir.h"

namespace snapd {
namespace {

class CatalogTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

v1::SnapshotRecord Snap(uint64_t run, uint64_t step) {
  v1::SnapshotRecord s;
  s.set_run_id(run);
  s.set_step(step);
  s.set_tier(v1::TIER_HOST);
  s.set_raw_bytes(100);
  return s;
}

TEST_F(CatalogTest, RecordsSurviveReopening) {
  {
    auto c = Catalog::Open(dir_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(*(*c)->BeginEpoch(), 1u);
    v1::RunRecord r;
    r.set_run_id(*(*c)->AllocateRunId());
    r.mutable_spec()->set_name("a");
    ASSERT_TRUE((*c)->PutRun(r).ok());
    ASSERT_TRUE((*c)->PutSnapshot(Snap(r.run_id(), 3)).ok());
  }
  auto c = Catalog::Open(dir_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*(*c)->BeginEpoch(), 2u);
  EXPECT_EQ(*(*c)->AllocateRunId(), 2u);  // ids never repeat
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snaps;
  ASSERT_TRUE((*c)->LoadAll(&runs, &snaps).ok());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].spec().name(), "a");
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].step(), 3u);
}

TEST_F(CatalogTest, DeletingARunRemovesOnlyItsSnapshots) {
  auto c = Catalog::Open(dir_);
  ASSERT_TRUE(c.ok());
  for (uint64_t run : {1, 2, 256}) {
    v1::RunRecord r;
    r.set_run_id(run);
    ASSERT_TRUE((*c)->PutRun(r).ok());
    for (uint64_t step : {0, 1, 255, 256}) ASSERT_TRUE((*c)->PutSnapshot(Snap(run, step)).ok());
  }
  ASSERT_TRUE((*c)->DeleteRun(2).ok());
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snaps;
  ASSERT_TRUE((*c)->LoadAll(&runs, &snaps).ok());
  EXPECT_EQ(runs.size(), 2u);
  EXPECT_EQ(snaps.size(), 8u);
  for (const auto& s : snaps) EXPECT_NE(s.run_id(), 2u);
}

TEST_F(CatalogTest, SecondOpenOfTheSameDirectoryFailsClearly) {
  auto a = Catalog::Open(dir_);
  ASSERT_TRUE(a.ok());
  auto b = Catalog::Open(dir_);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("another snapd"), std::string::npos);
}

}  // namespace
}  // namespace snapd
