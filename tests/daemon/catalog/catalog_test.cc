#include "catalog/catalog.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "temp_dir.h"

namespace adjsnap {
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

// Writes `format` as the catalog's format version, as an adjsnapd of that format would.
void SetFormat(const std::string& dir, std::optional<uint64_t> format) {
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  if (!format) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), "m:format").ok());
    return;
  }
  std::string be;
  for (int i = 7; i >= 0; --i) be.push_back(static_cast<char>((*format >> (8 * i)) & 0xff));
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "m:format", be).ok());
}

TEST_F(CatalogTest, ACatalogFromBeforeFormatVersionsIsReadAndMarkedCurrent) {
  {
    auto c = Catalog::Open(dir_);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ((*c)->opened_format(), Catalog::kFormatVersion);  // a new catalog
    ASSERT_TRUE((*c)->BeginEpoch().ok());
    ASSERT_TRUE((*c)->PutSnapshot(Snap(1, 7)).ok());
  }
  ASSERT_NO_FATAL_FAILURE(SetFormat(dir_, std::nullopt));  // as format 1 left it
  {
    auto c = Catalog::Open(dir_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ((*c)->opened_format(), 1u);
    std::vector<v1::RunRecord> runs;
    std::vector<v1::SnapshotRecord> snaps;
    ASSERT_TRUE((*c)->LoadAll(&runs, &snaps).ok());
    ASSERT_EQ(snaps.size(), 1u);
    EXPECT_EQ(snaps[0].step(), 7u);
    auto kept = (*c)->TakeHostTierKept();
    ASSERT_TRUE(kept.ok());
    EXPECT_FALSE(kept->has_value());
  }
  auto c = Catalog::Open(dir_);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->opened_format(), Catalog::kFormatVersion);
}

TEST_F(CatalogTest, ANewerFormatIsRefusedNamingBothVersions) {
  { ASSERT_TRUE(Catalog::Open(dir_).ok()); }
  ASSERT_NO_FATAL_FAILURE(SetFormat(dir_, Catalog::kFormatVersion + 1));
  auto c = Catalog::Open(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kFailedPrecondition);
  const std::string m = c.status().message();  // status() returns a copy
  EXPECT_NE(m.find("format version " + std::to_string(Catalog::kFormatVersion + 1)),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("newer than this adjsnapd's " + std::to_string(Catalog::kFormatVersion)),
            std::string::npos)
      << m;
}

TEST_F(CatalogTest, TheKeptHostTierMarkerIsReadOnce) {
  auto c = Catalog::Open(dir_);
  ASSERT_TRUE(c.ok());
  v1::HostTierKept kept;
  kept.set_epoch(4);
  kept.set_arena_bytes(1 << 20);
  kept.set_steps(1);
  v1::SnapshotRecord s = Snap(1, 2);
  s.mutable_host_copy()->set_offset(8192);
  ASSERT_TRUE((*c)->PutHostTierKept(kept, {s}).ok());
  auto taken = (*c)->TakeHostTierKept();
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->epoch(), 4u);
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snaps;
  ASSERT_TRUE((*c)->LoadAll(&runs, &snaps).ok());
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].host_copy().offset(), 8192u);
  taken = (*c)->TakeHostTierKept();
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(taken->has_value());
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

// Writes queued while the writer is busy go to RocksDB as one batch, applied and answered in the
// order they were made: the last write of a key wins, a delete after a put removes it.
TEST_F(CatalogTest, WritesQueuedBehindAnotherGoInOneBatchInTheirOrder) {
  auto catalog = std::move(Catalog::Open(dir_).value());
  std::promise<void> inside, release;
  std::shared_future<void> released = release.get_future().share();
  catalog->DeleteSnapshotThen(9, 9, [&](Status s) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    inside.set_value();
    released.wait();  // holds the writer here, so what follows queues up behind it
  });
  inside.get_future().wait();
  std::mutex mu;
  std::vector<uint64_t> answered;
  for (uint64_t i = 0; i < 50; ++i) {
    v1::SnapshotRecord r = Snap(1, i % 5);
    r.set_stored_bytes(i);
    catalog->PutSnapshotThen(r, [&, i](Status s) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      std::lock_guard<std::mutex> lock(mu);
      answered.push_back(i);
    });
  }
  catalog->DeleteSnapshotThen(1, 4, [&](Status s) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::lock_guard<std::mutex> lock(mu);
    answered.push_back(50);
  });
  release.set_value();
  catalog->Flush();
  Catalog::WriterCounts counts = catalog->writer_counts();
  EXPECT_EQ(counts.queued, 52u);
  EXPECT_EQ(counts.written, 52u);
  EXPECT_EQ(counts.batches, 2u);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(answered.size(), 51u);
    for (uint64_t i = 0; i < answered.size(); ++i) EXPECT_EQ(answered[i], i);
  }
  std::vector<v1::RunRecord> runs;
  std::vector<v1::SnapshotRecord> snaps;
  ASSERT_TRUE(catalog->LoadAll(&runs, &snaps).ok());
  ASSERT_EQ(snaps.size(), 4u);  // steps 0-3; step 4's delete came after its last put
  for (const auto& r : snaps) EXPECT_EQ(r.stored_bytes(), 45 + r.step()) << "step " << r.step();
}

TEST_F(CatalogTest, SecondOpenOfTheSameDirectoryFailsClearly) {
  auto a = Catalog::Open(dir_);
  ASSERT_TRUE(a.ok());
  auto b = Catalog::Open(dir_);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("another adjsnapd"), std::string::npos);
}

// A catalog another user wrote, as a quickstart run as root leaves one in the state_dir of the
// service's own user: the error says "permission denied" and names the owner, not another
// adjsnapd.
TEST_F(CatalogTest, ACatalogThisUserMayNotWriteIsRefusedNamingItsOwner) {
  { ASSERT_TRUE(Catalog::Open(dir_).ok()); }
  std::string message;
  if (geteuid() == 0) {
    // Root may write anything: the catalog is opened again by nobody, in a child.
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      auto c = Catalog::Open(dir_);
      std::string m = c.ok() ? "opened" : c.status().ToString();
      (void)!write(fds[1], m.data(), m.size());
      _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    ssize_t n = 0;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) message.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << message;
    EXPECT_NE(message.find("' belongs to root (uid 0), and this adjsnapd runs as "),
              std::string::npos)
        << message;
  } else {
    // Not root: a catalog directory this user may not write stands for another user's.
    ASSERT_EQ(chmod(dir_.c_str(), 0500), 0);
    auto c = Catalog::Open(dir_);
    ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
    ASSERT_FALSE(c.ok());
    message = c.status().ToString();
    EXPECT_NE(message.find("' belongs to "), std::string::npos) << message;
  }
  EXPECT_EQ(message.rfind("PERMISSION_DENIED: ", 0), 0u) << message;
  EXPECT_NE(message.find("permission denied: '" + dir_), std::string::npos) << message;
  EXPECT_EQ(message.find("another adjsnapd"), std::string::npos) << message;
}

}  // namespace
}  // namespace adjsnap
