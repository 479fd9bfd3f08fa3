#include "store/store.h"

#include <gtest/gtest.h>

#include <cstring>

#include "checksum.h"
#include "temp_dir.h"

namespace snapd {
namespace {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override {
    store_.reset();
    catalog_.reset();
  }
  void Open() {
    store_.reset();
    catalog_.reset();
    catalog_ = std::move(Catalog::Open(dir_).value());
    if (!tier_) tier_ = std::move(HostTier::Create(1 << 20).value());
    uint64_t epoch = catalog_->BeginEpoch().value();
    store_ = std::move(Store::Open(catalog_.get(), tier_.get(), epoch).value());
  }
  uint64_t OpenRun(const std::string& name, uint64_t steps, uint64_t bytes) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_steps(steps);
    spec.set_bytes_per_step(bytes);
    bool created = false;
    auto run = store_->OpenRun(spec, 0, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  }

  testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
  std::unique_ptr<HostTier> tier_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreTest, AStepIsVisibleOnlyAfterCommit) {
  uint64_t id = OpenRun("r", 4, 4096);
  auto t = store_->BeginPush(id, 1, 4096);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(store_->Locate("r", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->BeginPush(id, 1, 4096).status().code(), Code::kAlreadyExists);
  ASSERT_TRUE(store_->CommitPush(*t).ok());
  EXPECT_TRUE(store_->Locate("r", 1).ok());
}

TEST_F(StoreTest, AnAbortedPushLeavesNoTraceAndFreesItsMemory) {
  uint64_t id = OpenRun("r", 4, 4096);
  {
    auto t = store_->BeginPush(id, 2, 4096);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(tier_->used(), 4096u);
    store_->AbortPush(*t);
  }
  EXPECT_EQ(tier_->used(), 0u);
  EXPECT_EQ(store_->Locate("r", 2).status().code(), Code::kNotFound);
  EXPECT_TRUE(store_->BeginPush(id, 2, 4096).ok());  // the step can be pushed again
}

TEST_F(StoreTest, RecordsTheChecksumOfTheStoredBytes) {
  uint64_t id = OpenRun("r", 1, 10000);
  auto t = store_->BeginPush(id, 0, 10000);
  ASSERT_TRUE(t.ok());
  std::memset(t->block->data(), 0x5a, 10000);
  ASSERT_TRUE(store_->CommitPush(*t).ok());
  store_->WaitChecksumsIdle();
  auto where = store_->Locate("r", 0);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->checksum_state(), v1::CHECKSUM_RECORDED);
  EXPECT_EQ(where->checksum(), Checksum(t->block->data(), 10000));
}

TEST_F(StoreTest, HostStepsFromAnEarlierStartAreLost) {
  uint64_t id = OpenRun("r", 2, 4096);
  auto t = store_->BeginPush(id, 0, 4096);
  ASSERT_TRUE(t.ok() && store_->CommitPush(*t).ok());
  t = Result<Store::PushTicket>(Status::Aborted("released"));
  Open();  // a new daemon start over the same catalog
  auto where = store_->Locate("r", 0);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tier(), v1::TIER_LOST);
  EXPECT_EQ(store_->BeginFetch(id, 0, 4096).status().code(), Code::kDataLoss);
  EXPECT_EQ(store_->Counters().lost_snapshots, 1u);
  ASSERT_TRUE(store_->DeleteRun("r").ok());
  EXPECT_EQ(store_->Counters().lost_snapshots, 0u);
}

TEST_F(StoreTest, DeletingARunDuringAFetchKeepsTheFetchedBytes) {
  uint64_t id = OpenRun("r", 1, 4096);
  auto t = store_->BeginPush(id, 0, 4096);
  ASSERT_TRUE(t.ok());
  std::memset(t->block->data(), 7, 4096);
  ASSERT_TRUE(store_->CommitPush(*t).ok());
  store_->WaitChecksumsIdle();  // the checksum job holds its own reference until done
  auto block = store_->BeginFetch(id, 0, 4096);
  ASSERT_TRUE(block.ok());
  t = Result<Store::PushTicket>(Status::Aborted("released"));
  ASSERT_EQ(*store_->DeleteRun("r"), 4096u);
  EXPECT_EQ(static_cast<char*>((*block)->data())[100], 7);
  EXPECT_EQ(tier_->used(), 4096u);  // still held by the fetch
  block = Result<std::shared_ptr<HostBlock>>(Status::Aborted("released"));
  EXPECT_EQ(tier_->used(), 0u);
}

TEST_F(StoreTest, ADeletedStepFreesItsMemoryAndCanBePushedAgain) {
  uint64_t id = OpenRun("r", 2, 4096);
  {
    auto t = store_->BeginPush(id, 1, 4096);
    ASSERT_TRUE(t.ok() && store_->CommitPush(*t).ok());
  }
  store_->WaitChecksumsIdle();
  EXPECT_EQ(*store_->DeleteSnapshot("r", 1), 4096u);
  EXPECT_EQ(tier_->used(), 0u);
  EXPECT_EQ(store_->Locate("r", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->DeleteSnapshot("r", 1).status().code(), Code::kNotFound);
  auto again = store_->BeginPush(id, 1, 4096);
  ASSERT_TRUE(again.ok() && store_->CommitPush(*again).ok());
}

TEST(RunSpecValidation, NamesTheProblem) {
  v1::RunSpec s;
  s.set_name("x");
  s.set_bytes_per_step(6);
  s.set_dtype(v1::DTYPE_FLOAT32);
  Status st = ValidateRunSpec(s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not a multiple"), std::string::npos) << st.message();
  s.set_bytes_per_step(8);
  s.add_shape(3);
  EXPECT_NE(ValidateRunSpec(s).message().find("shape holds 12 bytes"), std::string::npos);
  s.clear_shape();
  EXPECT_TRUE(ValidateRunSpec(s).ok());
}

}  // namespace
}  // namespace snapd
