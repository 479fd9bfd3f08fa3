#include "disk_tier/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <vector>

#include "aligned_buffer.h"
#include "faulty_spool_io.h"
#include "temp_dir.h"

namespace adjsnap {
namespace {

using testing::AlignedBuffer;

class DiskTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<DiskTier> Open(uint64_t budget) {
    return std::move(DiskTier::Open({{dir_ + "/a", dir_ + "/b"}, budget, 0.7}).value());
  }
  testing::TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(DiskTierTest, WritesAndReadsBackAnUnalignedSnapshot) {
  auto disk = Open(1 << 20);
  constexpr uint64_t kRaw = 10000;
  AlignedBuffer out(kRaw), in(kRaw);
  for (uint64_t i = 0; i < kRaw; ++i) out.data.get()[i] = static_cast<char>(i * 7);
  auto space = disk->Reserve(kRaw);
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(disk->used(), DiskTier::FileBytes(kRaw));
  ASSERT_TRUE(disk->Write(*space, 3, "step-1", out.data.get(), kRaw).ok());
  ASSERT_TRUE(disk->Read(space->spool, 3, "step-1", in.data.get(), kRaw).ok());
  EXPECT_EQ(0, std::memcmp(out.data.get(), in.data.get(), kRaw));
  EXPECT_EQ(disk->writes().bytes, DiskTier::FileBytes(kRaw));
  disk->Remove(space->spool, 3, "step-1", kRaw);
  EXPECT_EQ(disk->used(), 0u);
  Status gone = disk->Read(space->spool, 3, "step-1", in.data.get(), kRaw);
  EXPECT_EQ(gone.code(), Code::kDataLoss) << gone.ToString();
}

// Runs `body` in a child process that has `dir` to itself: a 1 GiB tmpfs in a private user and
// mount namespace, so nothing else on the machine changes its free space meanwhile. Returns
// the child's exit status (what `body` returned), or -1 with `why` set when the namespace or
// the mount is not allowed here.
int InPrivateTmpfs(const std::string& dir, const std::function<int()>& body, std::string* why) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return *why = "pipe failed", -1;
  uid_t uid = getuid();
  gid_t gid = getgid();
  pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    auto fail = [&](const char* what) {
      std::string m = std::string(what) + ": " + std::strerror(errno);
      (void)!write(pipe_fds[1], m.data(), m.size());
      _exit(125);
    };
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) fail("unshare");
    auto put = [&](const char* file, const std::string& text) {
      int fd = open(file, O_WRONLY);
      if (fd < 0 || write(fd, text.data(), text.size()) < 0) fail(file);
      close(fd);
    };
    put("/proc/self/setgroups", "deny");
    put("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
    put("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
    if (mount("adjsnap-test", dir.c_str(), "tmpfs", 0, "size=1g,mode=0700") != 0) fail("mount");
    _exit(body());
  }
  close(pipe_fds[1]);
  char buf[256];
  ssize_t n = read(pipe_fds[0], buf, sizeof buf);
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 125) {
    *why = n > 0 ? std::string(buf, n) : "the child failed";
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// disk_mem_perc is a share of what the filesystem can give adjsnapd: free space plus the files
// adjsnapd already keeps in the spool, so a restart with recovered files gets the same budget.
// The spool is a filesystem of its own, so the budgets compare exactly.
TEST_F(DiskTierTest, APercentBudgetIsTheSameAfterTheSpoolFillsAndAdjsnapdRestarts) {
  const std::string spool = dir_ + "/spool";
  std::filesystem::create_directories(spool);
  std::string why;
  int rc = InPrivateTmpfs(spool, [&]() {
    auto first = DiskTier::Open({{spool}, 0, 0.5});
    if (!first.ok()) return std::fprintf(stderr, "%s\n", first.status().ToString().c_str()), 2;
    uint64_t before = (*first)->budget();
    first->reset();
    // 512 MiB of snapshot files, as a run's demoted steps would leave them: without counting
    // them the budget would shrink by half their size (256 MiB).
    std::filesystem::create_directories(spool + "/run-1");
    {
      std::ofstream f(spool + "/run-1/step-0", std::ios::binary);
      std::vector<char> block(1 << 20, 'x');
      for (int i = 0; i < 512; ++i) f.write(block.data(), block.size());
      if (!f.flush()) return std::fprintf(stderr, "writing 512 MiB failed\n"), 3;
    }
    auto second = DiskTier::Open({{spool}, 0, 0.5});
    if (!second.ok()) return std::fprintf(stderr, "%s\n", second.status().ToString().c_str()), 2;
    uint64_t after = (*second)->budget();
    // Only the directory's own blocks may differ.
    int64_t drift = static_cast<int64_t>(after) - static_cast<int64_t>(before);
    if (std::llabs(drift) > (int64_t{64} << 10)) {
      std::fprintf(stderr, "budget before %llu after %llu\n",
                   static_cast<unsigned long long>(before), static_cast<unsigned long long>(after));
      return 1;
    }
    return 0;
  }, &why);
  if (rc == -1) GTEST_SKIP() << "no private tmpfs here (" << why << ")";
  EXPECT_EQ(rc, 0) << "see the child's message above";
}

TEST_F(DiskTierTest, TheBudgetCannotBeExceededAndTheErrorSaysSo) {
  auto disk = Open(2 * 8192);  // 8 KiB per spool
  ASSERT_TRUE(disk->Reserve(8192).ok());
  ASSERT_TRUE(disk->Reserve(8192).ok());  // the other spool
  Status full = disk->Reserve(1).status();
  EXPECT_EQ(full.code(), Code::kResourceExhausted);
  EXPECT_NE(full.message().find("disk tier full"), std::string::npos) << full.ToString();
  EXPECT_NE(full.message().find("16.0 KiB of 16.0 KiB"), std::string::npos) << full.ToString();
}

TEST_F(DiskTierTest, AWriteKeepsWhatTheFileTakesOfItsReservation) {
  auto disk = Open(1 << 20);
  constexpr uint64_t kReserved = 5 * DiskTier::kAlignment, kWritten = 3000;  // compressed
  AlignedBuffer out(kWritten);
  std::memset(out.data.get(), 3, kWritten);
  auto space = disk->Reserve(kReserved);
  ASSERT_TRUE(space.ok());
  EXPECT_EQ(disk->used(), kReserved);
  ASSERT_TRUE(disk->Write(*space, 3, "step-1", out.data.get(), kWritten).ok());
  EXPECT_EQ(disk->used(), DiskTier::FileBytes(kWritten));
  disk->Remove(space->spool, 3, "step-1", kWritten);
  EXPECT_EQ(disk->used(), 0u);
}

TEST_F(DiskTierTest, RecoveryAdoptsCompleteFilesAndRemovesTheRest) {
  constexpr uint64_t kRaw = 8192;
  AlignedBuffer buf(kRaw);
  std::memset(buf.data.get(), 1, kRaw);
  {
    auto a_only = std::move(DiskTier::Open({{dir_ + "/a"}, 1 << 20, 0.7}).value());
    for (const char* name : {"kept", "orphan", "short"}) {
      auto space = a_only->Reserve(kRaw);
      ASSERT_TRUE(space.ok());
      ASSERT_TRUE(a_only->Write(*space, 9, name, buf.data.get(), kRaw).ok());
    }
  }
  std::ofstream(dir_ + "/a/run-9/interrupted.tmp") << "partial";
  std::filesystem::resize_file(dir_ + "/a/run-9/short", 100);
  auto disk = Open(1 << 20);
  EXPECT_EQ(disk->used(), 0u);
  EXPECT_TRUE(disk->Adopt(0, 9, "kept", kRaw).ok());
  EXPECT_EQ(disk->used(), kRaw);  // accounted, as a written file is
  AlignedBuffer back(kRaw);       // and read back as written
  ASSERT_TRUE(disk->Read(0, 9, "kept", back.data.get(), kRaw).ok());
  EXPECT_EQ(std::memcmp(back.data.get(), buf.data.get(), kRaw), 0);
  Status truncated = disk->Adopt(0, 9, "short", kRaw);
  EXPECT_EQ(truncated.code(), Code::kDataLoss);
  EXPECT_NE(truncated.message().find("holds 100 bytes"), std::string::npos)
      << truncated.ToString();
  EXPECT_EQ(disk->Adopt(5, 9, "kept", kRaw).code(), Code::kDataLoss);  // no such spool
  EXPECT_EQ(disk->RemoveOrphans({DiskTier::Key(0, 9, "kept")}).size(), 3u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/a/run-9/kept"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/a/run-9/orphan"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/a/run-9/interrupted.tmp"));
  EXPECT_EQ(disk->used(), DiskTier::FileBytes(kRaw));
}

// A catalog record's file name becomes a path only when it is one plain component: a damaged
// (or crafted) record naming "../../x" must not make a start stat, read, move or delete a file
// outside the run's spool directory.
TEST_F(DiskTierTest, ARecordedNameThatLeavesTheRunDirectoryNamesNoFile) {
  auto tier = Open(1 << 20);
  std::filesystem::create_directories(dir_ + "/a/run-1");  // so the name would resolve
  const std::string outside = dir_ + "/outside";
  { std::ofstream(outside) << std::string(8192, 'x'); }
  const std::string name = "../../outside";
  Status adopted = tier->Adopt(0, 1, name, 4096);
  EXPECT_EQ(adopted.code(), Code::kDataLoss) << adopted.ToString();
  EXPECT_NE(adopted.message().find("not a plain file name"), std::string::npos);
  EXPECT_EQ(tier->used(), 0u);
  std::vector<char> buf(8192);
  EXPECT_EQ(tier->Read(0, 1, name, buf.data(), 4096).code(), Code::kDataLoss);
  EXPECT_EQ(tier->Read(7, 1, "step-0", buf.data(), 4096).code(), Code::kDataLoss);
  auto moved = tier->Quarantine(0, 1, name, 0);
  EXPECT_EQ(moved.status().code(), Code::kNotFound);
  tier->Remove(0, 1, name, 4096);
  EXPECT_TRUE(std::filesystem::exists(outside));
  EXPECT_EQ(tier->used(), 0u);
  for (const char* bad : {"", ".", "..", "a/b"}) EXPECT_FALSE(DiskTier::PlainName(bad)) << bad;
  EXPECT_TRUE(DiskTier::PlainName("step-17.zfp"));
}

}  // namespace
}  // namespace adjsnap

namespace adjsnap {
namespace {

// Faults a real disk produces, injected behind the disk tier's I/O seam: each write or read
// fails with an error that names the file and the cause, leaves no file that could later be
// taken for a good snapshot, and the tier works again once the fault goes.
class DiskFaultTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kRaw = 3 * DiskTier::kAlignment + 100;
  void SetUp() override {
    auto d = DiskTier::Open({{tmp_.path() + "/spool"}, 1 << 20, 0.7, &io_});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    disk_ = std::move(d).value();
    for (uint64_t i = 0; i < kRaw; ++i) out_.data.get()[i] = static_cast<char>(i * 13 + 5);
  }
  Status WriteStep(const std::string& name) {
    ADJSNAP_ASSIGN_OR_RETURN(DiskTier::Space space, disk_->Reserve(kRaw));
    return disk_->Write(space, 7, name, out_.data.get(), kRaw);
  }
  // The snapshot reads back exactly what was written.
  void ExpectReadsBackExact(const std::string& name) {
    AlignedBuffer in(kRaw);
    ASSERT_TRUE(disk_->Read(0, 7, name, in.data.get(), kRaw).ok());
    EXPECT_EQ(0, std::memcmp(out_.data.get(), in.data.get(), kRaw));
  }
  // Nothing of the failed write is left: no file in the run's directory.
  void ExpectNoFile(const std::string& name) {
    std::string dir = tmp_.path() + "/spool/run-7";
    EXPECT_FALSE(std::filesystem::exists(dir + "/" + name));
    if (std::filesystem::exists(dir)) {
      EXPECT_TRUE(std::filesystem::is_empty(dir)) << name;
    }
  }

  testing::TempDir tmp_;
  testing::FaultySpoolIo io_;
  std::unique_ptr<DiskTier> disk_;
  AlignedBuffer out_{kRaw};
};

TEST_F(DiskFaultTest, EioOnWriteNamesTheFileFailsTheSpoolAndLeavesNothingBehind) {
  io_.Fail(testing::FaultySpoolIo::kWrite, EIO);
  Status s = WriteStep("step-1");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("writing"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("run-7/step-1: Input/output error (EIO)"), std::string::npos)
      << s.ToString();
  ExpectNoFile("step-1");
  EXPECT_EQ(disk_->used(), 0u);
  // The spool left the rotation: nothing is reserved on it until a probe finds it writable.
  ASSERT_TRUE(disk_->SpoolStates()[0].failed);
  EXPECT_EQ(disk_->SpoolStates()[0].error, EIO);
  EXPECT_FALSE(disk_->usable());
  EXPECT_EQ(disk_->Reserve(kRaw).status().code(), Code::kUnavailable);
  EXPECT_EQ(disk_->ProbeNow(), 0);  // still failing
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(disk_->usable());
  ASSERT_TRUE(WriteStep("step-1").ok());
  ExpectReadsBackExact("step-1");
}

TEST(SpoolErrors, EachErrnoHasOneClass) {
  for (int err : {EINTR, EAGAIN, ENOMEM, EMFILE, ENFILE, EBUSY}) {
    EXPECT_EQ(ClassifySpoolError(err), SpoolError::kTransient) << err;
  }
  for (int err : {ENOSPC, EDQUOT}) EXPECT_EQ(ClassifySpoolError(err), SpoolError::kFull) << err;
  for (int err : {EROFS, EIO, ENODEV, ENXIO, EACCES, ENOENT}) {
    EXPECT_EQ(ClassifySpoolError(err), SpoolError::kDeviceFailed) << err;
  }
  for (int err : {ENOTCONN, ETIMEDOUT, ESTALE, EHOSTDOWN, ECONNREFUSED}) {
    EXPECT_EQ(ClassifySpoolError(err), SpoolError::kUnreachable) << err;
  }
  EXPECT_EQ(ErrnoName(EROFS), "EROFS");
  EXPECT_EQ(ErrnoName(ETIMEDOUT), "ETIMEDOUT");
}

// A shared filesystem whose server or brick is gone: the step's file may be intact, only out
// of reach. Its read is UNAVAILABLE (never DATA_LOSS: the step stays recorded), the spool
// leaves the rotation, and once a probe brings it back the same file reads back exact. A file
// really gone from a working spool is still the loss of that step.
class UnreachableSpoolTest : public DiskFaultTest {
 protected:
  void SetUp() override {
    DiskTierOptions options{{tmp_.path() + "/spool"}, 1 << 20, 0.7, &io_};
    options.shared_spools = {tmp_.path() + "/shared"};
    options.shared_budget_bytes = 1 << 20;
    auto d = DiskTier::Open(options);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    disk_ = std::move(d).value();
    for (uint64_t i = 0; i < kRaw; ++i) out_.data.get()[i] = static_cast<char>(i * 7 + 3);
    auto space = disk_->Reserve(kRaw, SpoolClass::kShared);
    ASSERT_TRUE(space.ok()) << space.status().ToString();
    ASSERT_EQ(space->spool, 1u);
    ASSERT_TRUE(disk_->Write(*space, 7, "step-1", out_.data.get(), kRaw).ok());
  }
  Status ReadShared() {
    AlignedBuffer in(kRaw);
    Status s = disk_->Read(1, 7, "step-1", in.data.get(), kRaw);
    if (s.ok() && std::memcmp(out_.data.get(), in.data.get(), kRaw) != 0) {
      return Status::DataLoss("read back different bytes");
    }
    return s;
  }
  std::string File() { return tmp_.path() + "/shared/run-7/step-1"; }
};

TEST_F(UnreachableSpoolTest, ENotConnIsUnavailableNotALossAndTheFileServesOnceTheSpoolIsBack) {
  io_.Fail(testing::FaultySpoolIo::kRead, ENOTCONN, 0, tmp_.path() + "/shared");
  Status s = ReadShared();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("reading " + File() +
                             ": Transport endpoint is not connected "
                             "(ENOTCONN)"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("cannot be reached"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("stays recorded"), std::string::npos) << s.ToString();
  ASSERT_TRUE(disk_->SpoolStates()[1].failed);
  EXPECT_EQ(disk_->SpoolStates()[1].error, ENOTCONN);
  EXPECT_FALSE(disk_->SpoolStates()[0].failed) << "the local spool is not touched";
  io_.Fail(testing::FaultySpoolIo::kOpenForWrite, ENOTCONN, 0, tmp_.path() + "/shared");
  EXPECT_EQ(disk_->ProbeNow(), 0);  // still unreachable
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadShared().ok());
}

TEST_F(UnreachableSpoolTest, AFileMissingWhileAProbeFailsIsUnavailableAndServesOnceItIsBack) {
  // GlusterFS shows the files of a dead brick as missing (ENOENT), and its other bricks work.
  std::filesystem::rename(File(), File() + ".on-the-dead-brick");
  io_.Fail(testing::FaultySpoolIo::kOpenForWrite, ENOTCONN, 0,
           tmp_.path() + "/shared/.adjsnap-probe-3");
  Status s = ReadShared();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("snapshot file " + File() + " is missing while spool"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find(".adjsnap-probe-3: Transport endpoint is not connected (ENOTCONN)"),
            std::string::npos)
      << s.ToString();
  ASSERT_TRUE(disk_->SpoolStates()[1].failed);
  // Missing again while the spool is out of the rotation: the same answer, no probe needed.
  EXPECT_EQ(ReadShared().code(), Code::kUnavailable);
  std::filesystem::rename(File() + ".on-the-dead-brick", File());
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadShared().ok());
}

// The mount under a spool goes (unmounted): its path now leads to another filesystem. A write
// there fails the spool naming both devices and leaves nothing behind, and probes keep it out of
// the rotation until the mount is back. (A symlink to /dev/shm stands in for the directory the
// mount leaves uncovered.)
TEST_F(DiskFaultTest, AMountGoneFromUnderASpoolFailsItAndNothingIsWrittenElsewhere) {
  ASSERT_TRUE(WriteStep("step-1").ok());
  const std::string spool = tmp_.path() + "/spool";
  char other_dir[] = "/dev/shm/adjsnap-test-XXXXXX";
  ASSERT_NE(mkdtemp(other_dir), nullptr);
  const std::string other = other_dir;
  struct stat a {
  }, b{};
  ASSERT_EQ(stat(spool.c_str(), &a), 0);
  ASSERT_EQ(stat(other.c_str(), &b), 0);
  if (a.st_dev == b.st_dev) {
    std::filesystem::remove_all(other);
    GTEST_SKIP() << "the test directory is on /dev/shm's filesystem";
  }
  std::filesystem::rename(spool, spool + ".mounted");
  std::filesystem::create_directory_symlink(other, spool);
  Status s = WriteStep("step-2");
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("its mount is gone"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("not on the filesystem of " + spool), std::string::npos)
      << s.ToString();
  ASSERT_TRUE(disk_->SpoolStates()[0].failed);
  EXPECT_EQ(disk_->SpoolStates()[0].error, ENODEV);
  EXPECT_FALSE(std::filesystem::exists(other + "/run-7/step-2")) << "written to the wrong disk";
  EXPECT_EQ(disk_->ProbeNow(), 0) << "still on the wrong filesystem";
  std::filesystem::remove(spool);
  std::filesystem::rename(spool + ".mounted", spool);
  std::filesystem::remove_all(other);
  EXPECT_EQ(disk_->ProbeNow(), 1);
  ASSERT_TRUE(WriteStep("step-3").ok());
  ExpectReadsBackExact("step-3");
}

// A shared spool's run directory is made and opened once (on a network filesystem each is a
// round trip to its servers) until the run is deleted; one removed by hand since is made again
// by the next write. A local spool keeps nothing open.
TEST_F(DiskFaultTest, ARunDirectoryIsMadeOnceInASharedSpoolAndAgainWhenItWasRemoved) {
  uint64_t c0 = io_.calls();
  ASSERT_TRUE(WriteStep("step-1").ok());
  uint64_t c1 = io_.calls();
  ASSERT_TRUE(WriteStep("step-2").ok());
  EXPECT_EQ(io_.calls() - c1, c1 - c0) << "a local spool's run directory was kept open";

  DiskTierOptions options{{}, 0, 0.7, &io_};
  options.shared_spools = {tmp_.path() + "/shared"};
  options.shared_budget_bytes = 1 << 20;
  auto d = DiskTier::Open(options);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  disk_ = std::move(d).value();
  c0 = io_.calls();
  ASSERT_TRUE(WriteStep("step-1").ok());
  c1 = io_.calls();
  ASSERT_TRUE(WriteStep("step-2").ok());
  uint64_t c2 = io_.calls();
  EXPECT_EQ(c2 - c1 + 2, c1 - c0) << "the second write made or opened the run directory again";
  disk_->ForgetRunDirs(7);  // the run deleted: its directory closed, opened again for a new one
  ASSERT_TRUE(WriteStep("step-3").ok());
  EXPECT_EQ(io_.calls() - c2, c1 - c0);
  std::filesystem::remove_all(tmp_.path() + "/shared/run-7");
  Status s = WriteStep("step-4");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(disk_->SpoolStates()[0].failed);
  ExpectReadsBackExact("step-4");
  ASSERT_TRUE(WriteStep("step-5").ok());
  ExpectReadsBackExact("step-5");
}

// A restart with a spool's filesystem not mounted: adjsnapd makes the directory anew on what is
// below. Its recorded steps must not be lost and nothing may be written there; once the
// filesystem is back, they are served.
TEST_F(DiskFaultTest, ASpoolNotMountedAtStartFailsKeepsItsStepsAndComesBackWithItsMarker) {
  disk_->Claim({});
  const std::string spool = tmp_.path() + "/spool";
  EXPECT_TRUE(std::filesystem::exists(spool + "/" + DiskTier::kMarker));
  ASSERT_TRUE(WriteStep("step-1").ok());
  disk_.reset();
  std::filesystem::rename(spool, spool + ".mounted");  // "unmounted"
  auto reopened = DiskTier::Open({{spool}, 1 << 20, 0.7, &io_});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  disk_ = std::move(reopened).value();
  disk_->Claim({{0, 7, "step-1"}});
  auto state = disk_->SpoolStates()[0];
  ASSERT_TRUE(state.failed);
  EXPECT_EQ(state.error, ENOENT);
  EXPECT_NE(state.reason.find("not the filesystem adjsnapd wrote them to"), std::string::npos)
      << state.reason;
  EXPECT_FALSE(std::filesystem::exists(spool + "/" + DiskTier::kMarker));
  ASSERT_TRUE(disk_->Adopt(0, 7, "step-1", kRaw).ok());  // recorded, accounted, not looked at
  EXPECT_EQ(disk_->used(), DiskTier::FileBytes(kRaw));
  AlignedBuffer in(kRaw);
  Status s = disk_->Read(0, 7, "step-1", in.data.get(), kRaw);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_EQ(disk_->ProbeNow(), 0) << "a probe wrote to the filesystem below the mount";
  EXPECT_FALSE(WriteStep("step-2").ok());
  std::filesystem::remove_all(spool);  // "mounted" again
  std::filesystem::rename(spool + ".mounted", spool);
  EXPECT_EQ(disk_->ProbeNow(), 1);
  ExpectReadsBackExact("step-1");
  ASSERT_TRUE(WriteStep("step-3").ok());
  ExpectReadsBackExact("step-3");
}

// A spool from before markers, its files there: claimed as it is, marker written.
TEST_F(DiskFaultTest, ASpoolWithItsFilesButNoMarkerGetsOne) {
  ASSERT_TRUE(WriteStep("step-1").ok());
  disk_->Claim({{0, 7, "step-1"}, {0, 7, "step-9"}});
  EXPECT_FALSE(disk_->SpoolStates()[0].failed);
  EXPECT_TRUE(std::filesystem::exists(tmp_.path() + "/spool/" + DiskTier::kMarker));
  ExpectReadsBackExact("step-1");
}

TEST_F(UnreachableSpoolTest, AFileMissingFromAWorkingSharedSpoolIsLost) {
  std::filesystem::remove(File());
  Status s = ReadShared();
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("snapshot file " + File() + " is missing"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(disk_->SpoolStates()[1].failed) << "the probe wrote every name";
}

TEST_F(DiskFaultTest, ATransientErrorIsRetriedAndTheWriteSucceeds) {
  // After ~4 KiB, EAGAIN on three writes in a row, then fine: each retry waits a little
  // longer. (It healed after 5 ms of a thread's sleep, which a loaded machine did not keep to.)
  io_.Fail(testing::FaultySpoolIo::kWrite, EAGAIN, /*after_bytes=*/DiskTier::kAlignment);
  io_.HealAfter(3);
  Status s = WriteStep("step-t");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(io_.failures(), 3u);
  EXPECT_FALSE(disk_->SpoolStates()[0].failed);
  ExpectReadsBackExact("step-t");
}

TEST_F(DiskFaultTest, EnospcPartWayThroughASpillIsADiskFullError) {
  io_.Fail(testing::FaultySpoolIo::kWrite, ENOSPC, 2 * DiskTier::kAlignment);
  Status s = WriteStep("step-2");
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("disk tier full"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.ToString();
  ExpectNoFile("step-2");
  EXPECT_EQ(disk_->writes().bytes, 0u);  // a failed write moved nothing that counts
  EXPECT_EQ(disk_->used(), 0u);          // and its reservation went back to the budget
}

TEST_F(DiskFaultTest, ShortWritesAreContinuedUntilEveryByteIsOnDisk) {
  io_.ShortWrites(true);
  ASSERT_TRUE(WriteStep("step-3").ok());
  io_.Heal();
  ExpectReadsBackExact("step-3");
}

TEST_F(DiskFaultTest, AFailedFdatasyncLeavesNoFileUnderTheFinalName) {
  io_.Fail(testing::FaultySpoolIo::kSync, EIO);
  Status s = WriteStep("step-4");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("syncing"), std::string::npos) << s.ToString();
  ExpectNoFile("step-4");
  EXPECT_TRUE(disk_->SpoolStates()[0].failed);  // the kernel may have dropped the pages
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  AlignedBuffer in(kRaw);
  EXPECT_EQ(disk_->Read(0, 7, "step-4", in.data.get(), kRaw).code(), Code::kDataLoss);
}

TEST_F(DiskFaultTest, EioOnReadIsAnErrorNeverWrongBytes) {
  ASSERT_TRUE(WriteStep("step-5").ok());
  io_.Fail(testing::FaultySpoolIo::kRead, EIO);
  AlignedBuffer in(kRaw);
  std::memset(in.data.get(), 0, kRaw);
  Status s = disk_->Read(0, 7, "step-5", in.data.get(), kRaw);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("reading"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("run-7/step-5: Input/output error (EIO)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(disk_->SpoolStates()[0].read_errors, 1u);
  EXPECT_FALSE(disk_->SpoolStates()[0].failed);  // a read error loses a file, not the spool
  io_.Heal();
  ExpectReadsBackExact("step-5");  // the file itself was never touched
}

TEST_F(DiskFaultTest, ATornFileFoundAtRestartIsLostNotAdopted) {
  ASSERT_TRUE(WriteStep("step-6").ok());
  std::string path = tmp_.path() + "/spool/run-7/step-6";
  std::filesystem::resize_file(path, DiskTier::kAlignment);  // torn: a quarter survived
  auto again = DiskTier::Open({{tmp_.path() + "/spool"}, 1 << 20, 0.7, &io_});
  ASSERT_TRUE(again.ok());
  Status s = (*again)->Adopt(0, 7, "step-6", kRaw);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("holds 4096 bytes, " + std::to_string(kRaw) + " recorded"),
            std::string::npos)
      << s.ToString();
}

// Spool classes: a reservation goes to the class asked for, and fails over to the other when
// that class is full or has no working spool; a failed shared filesystem (EIO on its files)
// leaves its class out of the rotation without taking the local spools with it.
TEST(SpoolClasses, AReservationTakesItsClassAndFailsOverWhenItIsFullOrFailed) {
  testing::TempDir tmp;
  testing::FaultySpoolIo io;
  DiskTierOptions options{{tmp.path() + "/local"}, 2 * 8192, 0.7, &io};
  options.shared_spools = {tmp.path() + "/shared"};
  options.shared_budget_bytes = 4 * 8192;
  auto opened = DiskTier::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<DiskTier> disk = std::move(opened).value();
  ASSERT_EQ(disk->spools(), 2u);
  EXPECT_TRUE(disk->has_shared());
  EXPECT_EQ(disk->ClassOf(0), SpoolClass::kLocal);  // local spools first: their numbers stay
  EXPECT_EQ(disk->ClassOf(1), SpoolClass::kShared);
  std::vector<SpoolStatus> states = disk->SpoolStates();
  EXPECT_EQ(states[1].spool_class, SpoolClass::kShared);
  EXPECT_EQ(std::string(SpoolClassName(states[1].spool_class)), "shared");
  EXPECT_EQ(disk->room(SpoolClass::kShared), 4u * 8192);

  auto shared = disk->Reserve(8192, SpoolClass::kShared);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->spool, 1u);
  auto local = disk->Reserve(8192, SpoolClass::kLocal);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->spool, 0u);
  // The local class holds 16 KiB: the next local reservation fails over to the shared spool.
  auto second = disk->Reserve(8192);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->spool, 0u);
  auto over = disk->Reserve(8192, SpoolClass::kLocal);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->spool, 1u) << "a full local class fails over to the shared one";
  EXPECT_EQ(disk->room(SpoolClass::kLocal), 0u);

  // The shared filesystem fails (EIO on its files): its writes fail, it leaves the rotation,
  // and a shared reservation then goes to a local spool with room.
  AlignedBuffer data(8192);
  io.Fail(testing::FaultySpoolIo::kWrite, EIO, 0, tmp.path() + "/shared");
  Status s = disk->Write(*shared, 3, "step-0", data.data.get(), 8192);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(tmp.path() + "/shared"), std::string::npos) << s.ToString();
  EXPECT_TRUE(disk->SpoolStates()[1].failed);
  EXPECT_TRUE(disk->usable());
  // Room comes back in the local class (a step written there goes): a shared reservation goes
  // to it now.
  ASSERT_TRUE(disk->Write(*local, 3, "step-l", data.data.get(), 8192).ok());
  disk->Remove(0, 3, "step-l", 8192);
  auto failed_over = disk->Reserve(8192, SpoolClass::kShared);
  ASSERT_TRUE(failed_over.ok()) << failed_over.status().ToString();
  EXPECT_EQ(failed_over->spool, 0u);
  ASSERT_TRUE(disk->Write(*failed_over, 3, "step-1", data.data.get(), 8192).ok());
}

// A file copied from a local spool to a shared one (a run's oldest step moving on): the copy
// reads back exact and the source stays; a reservation that must not fail over stays in its
// class; a read error on the source fails the copy alone, leaving nothing in the shared spool
// and neither spool failed.
TEST(SpoolClasses, ACopyToASharedSpoolIsExactAndAFailedReadOfItsSourceFailsNeitherSpool) {
  testing::TempDir tmp;
  testing::FaultySpoolIo io;
  constexpr uint64_t kRaw = 3 * DiskTier::kAlignment + 100;
  const uint64_t file = DiskTier::FileBytes(kRaw);
  DiskTierOptions options{{tmp.path() + "/local"}, 4 * file, 0.7, &io};
  options.shared_spools = {tmp.path() + "/shared"};
  options.shared_budget_bytes = 2 * file;
  auto opened = DiskTier::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<DiskTier> disk = std::move(opened).value();
  AlignedBuffer out(kRaw);
  for (uint64_t i = 0; i < kRaw; ++i) out.data.get()[i] = static_cast<char>(i * 7 + 3);
  for (const char* name : {"step-0", "step-1"}) {
    auto local = disk->Reserve(kRaw, SpoolClass::kLocal);
    ASSERT_TRUE(local.ok());
    ASSERT_EQ(local->spool, 0u);
    ASSERT_TRUE(disk->Write(*local, 3, name, out.data.get(), kRaw).ok());
  }

  auto to = disk->Reserve(kRaw, SpoolClass::kShared, /*fail_over=*/false);
  ASSERT_TRUE(to.ok()) << to.status().ToString();
  ASSERT_EQ(to->spool, 1u);
  ASSERT_TRUE(disk->Copy(0, 3, "step-0", kRaw, *to).ok());
  AlignedBuffer in(kRaw);
  ASSERT_TRUE(disk->Read(1, 3, "step-0", in.data.get(), kRaw).ok());
  EXPECT_EQ(0, std::memcmp(out.data.get(), in.data.get(), kRaw));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() + "/local/run-3/step-0")) << "the source stays";
  EXPECT_EQ(disk->used(SpoolClass::kShared), file);
  EXPECT_EQ(disk->reads(SpoolClass::kLocal).bytes, file) << "the copy's read is the local's";
  // Each class's fits take whole step files: the two local writes, the copy's write to the
  // shared spool and the read from it; the copy's read, whose time is the whole move, is none.
  EXPECT_EQ(disk->write_fit(SpoolClass::kLocal).samples, 2u);
  EXPECT_EQ(disk->write_fit(SpoolClass::kShared).samples, 1u);
  EXPECT_EQ(disk->read_fit(SpoolClass::kShared).samples, 1u);
  EXPECT_EQ(disk->read_fit(SpoolClass::kLocal).samples, 0u);
  EXPECT_EQ(disk->read_fit(SpoolClass::kShared).min_bytes, file);
  EXPECT_GT(disk->read_fit(SpoolClass::kShared).bytes_per_second, 0);

  io.Fail(testing::FaultySpoolIo::kRead, EIO, 0, tmp.path() + "/local");
  to = disk->Reserve(kRaw, SpoolClass::kShared, /*fail_over=*/false);
  ASSERT_TRUE(to.ok());
  Status s = disk->Copy(0, 3, "step-1", kRaw, *to);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("reading " + tmp.path() + "/local/run-3/step-1 to copy it"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("(EIO)"), std::string::npos) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/shared/run-3/step-1"));
  EXPECT_EQ(disk->used(SpoolClass::kShared), file) << "the failed copy's room went back";
  for (const SpoolStatus& st : disk->SpoolStates()) EXPECT_FALSE(st.failed) << st.dir;
  io.Heal();

  // The shared spool holds two files: with one more there, a reservation that must stay in the
  // shared class is refused while the local spool has room.
  ASSERT_TRUE(disk->Reserve(kRaw, SpoolClass::kShared, /*fail_over=*/false).ok());
  auto full = disk->Reserve(kRaw, SpoolClass::kShared, /*fail_over=*/false);
  EXPECT_EQ(full.status().code(), Code::kResourceExhausted) << full.status().ToString();
  EXPECT_GT(disk->room(SpoolClass::kLocal), file);
}

}  // namespace
}  // namespace adjsnap
