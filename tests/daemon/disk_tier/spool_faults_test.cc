// What a network filesystem and a failing directory do to the disk tier, injected behind its I/O
// seam (FaultySpoolIo), every call of the tier going through it: a mount lost, a server that
// answers ENOTCONN, ESTALE or ETIMEDOUT, a call that hangs, EIO from readdir, a failed mkdir, a
// filesystem without O_DIRECT. Each fault names the spool and the file, leaves the other spool
// serving, loses no step whose file is intact, and once it clears the file reads back exact.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>

#include "disk_tier/disk_tier.h"
#include "aligned_buffer.h"
#include "faulty_spool_io.h"
#include "temp_dir.h"

namespace adjsnap {
namespace {

using testing::FaultySpoolIo;

using testing::AlignedBuffer;

// A tier of one local spool (0) and one shared spool (1), run 7 holding "step-1" in each.
class SpoolFaultsTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kRaw = 3 * DiskTier::kAlignment + 100;
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(OpenTier());
    disk_->Claim({});  // the first start: each spool gets its marker
    for (uint64_t i = 0; i < kRaw; ++i) out_.data.get()[i] = static_cast<char>(i * 11 + 1);
    for (SpoolClass c : {SpoolClass::kLocal, SpoolClass::kShared}) {
      auto space = disk_->Reserve(kRaw, c, /*fail_over=*/false);
      ASSERT_TRUE(space.ok()) << space.status().ToString();
      ASSERT_TRUE(disk_->Write(*space, 7, "step-1", out_.data.get(), kRaw).ok());
    }
  }
  // Blocked calls go on before the tier (and its caller threads) go.
  void TearDown() override { io_.Heal(); }
  void OpenTier() {
    disk_.reset();
    DiskTierOptions options{{Local()}, 1 << 20, 0.7, &io_};
    options.shared_spools = {Shared()};
    options.shared_budget_bytes = 1 << 20;
    auto d = DiskTier::Open(options);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    disk_ = std::move(d).value();
  }
  std::string Local() const { return tmp_.path() + "/local"; }
  std::string Shared() const { return tmp_.path() + "/shared"; }
  std::string File(uint32_t spool) const {
    return (spool == 0 ? Local() : Shared()) + "/run-7/step-1";
  }
  // Reads "step-1" of run 7 in `spool`; DATA_LOSS if the bytes differ from those written.
  Status ReadBack(uint32_t spool, const std::string& name = "step-1") {
    AlignedBuffer in(kRaw);
    Status s = disk_->Read(spool, 7, name, in.data.get(), kRaw);
    if (s.ok() && std::memcmp(out_.data.get(), in.data.get(), kRaw) != 0) {
      return Status::DataLoss("read back different bytes");
    }
    return s;
  }
  Status WriteTo(SpoolClass c, const std::string& name) {
    ADJSNAP_ASSIGN_OR_RETURN(DiskTier::Space space, disk_->Reserve(kRaw, c));
    return disk_->Write(space, 7, name, out_.data.get(), kRaw);
  }
  bool Failed(uint32_t spool) { return disk_->SpoolStates()[spool].failed; }

  testing::TempDir tmp_;
  FaultySpoolIo io_;
  std::unique_ptr<DiskTier> disk_;
  AlignedBuffer out_{kRaw};
};

// Every call under the shared spool fails: a FUSE client that died (ENOTCONN), or a mount gone
// (ENOENT: its files and its marker are missing, and a probe cannot write there either).
class MountLostTest : public SpoolFaultsTest, public ::testing::WithParamInterface<int> {};

TEST_P(MountLostTest, TheSpoolIsUnavailableNotLostTheOtherServesAndItComesBackExact) {
  const int err = GetParam();
  io_.LoseMount(Shared(), err);
  Status s = ReadBack(1);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(File(1)), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(ErrnoName(err)), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("stays recorded"), std::string::npos) << s.ToString();
  ASSERT_TRUE(Failed(1));
  EXPECT_EQ(disk_->SpoolStates()[1].read_errors, 0u) << "counted as a lost file";
  EXPECT_EQ(disk_->used(), 2 * DiskTier::FileBytes(kRaw)) << "the file left the budget";
  // The local spool goes on: reads, writes, and the shared class's room fails over to it.
  EXPECT_TRUE(ReadBack(0).ok());
  auto space = disk_->Reserve(kRaw, SpoolClass::kShared);
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  EXPECT_EQ(space->spool, 0u);
  ASSERT_TRUE(disk_->Write(*space, 7, "step-2", out_.data.get(), kRaw).ok());
  EXPECT_TRUE(ReadBack(0, "step-2").ok());
  EXPECT_FALSE(Failed(0));
  EXPECT_EQ(disk_->ProbeNow(), 0) << "a probe passed on a lost mount";
  EXPECT_EQ(ReadBack(1).code(), Code::kUnavailable) << "still gone: still not lost";
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadBack(1).ok());
  ASSERT_TRUE(WriteTo(SpoolClass::kShared, "step-3").ok());
  EXPECT_TRUE(ReadBack(1, "step-3").ok());
}

INSTANTIATE_TEST_SUITE_P(Errno, MountLostTest, ::testing::Values(ENOTCONN, ENOENT),
                         [](const auto& p) { return ErrnoName(p.param); });

// A server gone answers a read, or the open before it, with a network errno. The step's file is
// out of reach, not lost: UNAVAILABLE naming the file and the errno, the spool out of the
// rotation; a probe brings it back and the same file reads back exact.
class NetworkErrorTest : public SpoolFaultsTest,
                         public ::testing::WithParamInterface<std::tuple<int, FaultySpoolIo::Op>> {
};

TEST_P(NetworkErrorTest, AReadIsUnavailableNotLostAndServedExactOnceTheSpoolAnswers) {
  const auto [err, op] = GetParam();
  io_.Add(op, err, Shared());
  Status s = ReadBack(1);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(File(1) + ": " + std::strerror(err) + " (" + ErrnoName(err) + ")"),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("spool " + Shared() + " failed"), std::string::npos) << s.ToString();
  ASSERT_TRUE(Failed(1));
  EXPECT_EQ(disk_->SpoolStates()[1].error, err);
  EXPECT_EQ(disk_->SpoolStates()[1].read_errors, 0u);
  EXPECT_TRUE(std::filesystem::exists(File(1))) << "the file was moved or removed";
  EXPECT_TRUE(ReadBack(0).ok());
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadBack(1).ok());
}

INSTANTIATE_TEST_SUITE_P(
    Errno, NetworkErrorTest,
    ::testing::Combine(::testing::Values(ENOTCONN, ESTALE, ETIMEDOUT, EHOSTDOWN),
                       ::testing::Values(FaultySpoolIo::kRead, FaultySpoolIo::kOpenForRead)),
    [](const auto& p) {
      return ErrnoName(std::get<0>(p.param)) +
             (std::get<1>(p.param) == FaultySpoolIo::kRead ? "OnPread" : "OnOpen");
    });

// EIO from a local disk is that file's loss, as before: DATA_LOSS, counted, the spool kept.
TEST_F(SpoolFaultsTest, EioReadingALocalFileIsItsLossNotTheSpools) {
  io_.Add(FaultySpoolIo::kRead, EIO, File(0));
  Status s = ReadBack(0);
  EXPECT_EQ(s.code(), Code::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find(File(0) + ": Input/output error (EIO)"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(disk_->SpoolStates()[0].read_errors, 1u);
  EXPECT_FALSE(Failed(0));
}

// A hard-mounted server that stops answering: the read blocks in the kernel. Only its caller
// waits: the other spool reads and writes, reservations and the spools' states answer. When the
// call comes back with ETIMEDOUT (a soft mount's answer) the read is UNAVAILABLE as any network
// error is, and once the server answers the file reads back exact; one that comes back late
// but whole serves the step.
TEST_F(SpoolFaultsTest, AHungReadHoldsUpOnlyItsCallerAndIsReportedWhenItReturns) {
  io_.Hang(FaultySpoolIo::kRead, Shared());
  auto hung = std::async(std::launch::async, [this] { return ReadBack(1); });
  ASSERT_TRUE(io_.AwaitHung(1));
  EXPECT_TRUE(ReadBack(0).ok());
  ASSERT_TRUE(WriteTo(SpoolClass::kLocal, "step-2").ok());
  EXPECT_TRUE(ReadBack(0, "step-2").ok());
  EXPECT_EQ(disk_->SpoolStates().size(), 2u);
  EXPECT_FALSE(Failed(1)) << "nothing has said the spool failed yet";
  EXPECT_EQ(disk_->ProbeNow(), 0);
  EXPECT_EQ(io_.hung(), 1);
  io_.Release(ETIMEDOUT);
  Status s = hung.get();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(File(1) + ": Connection timed out (ETIMEDOUT)"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("stays recorded"), std::string::npos) << s.ToString();
  EXPECT_TRUE(Failed(1));
  EXPECT_EQ(disk_->SpoolStates()[1].read_errors, 0u);
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadBack(1).ok());

  io_.Hang(FaultySpoolIo::kRead, Shared());
  auto late = std::async(std::launch::async, [this] { return ReadBack(1); });
  ASSERT_TRUE(io_.AwaitHung(1));
  io_.Release();
  EXPECT_TRUE(late.get().ok());
  EXPECT_FALSE(Failed(1));
}

// A write whose sync hangs holds up that write alone: the other spool takes writes meanwhile.
TEST_F(SpoolFaultsTest, AHungSyncOfOneSpoolLeavesTheOtherWriting) {
  io_.Hang(FaultySpoolIo::kSync, Shared());
  auto hung = std::async(std::launch::async, [this] { return WriteTo(SpoolClass::kShared, "s"); });
  ASSERT_TRUE(io_.AwaitHung(1));
  ASSERT_TRUE(WriteTo(SpoolClass::kLocal, "step-2").ok());
  EXPECT_TRUE(ReadBack(0, "step-2").ok());
  io_.Release(ETIMEDOUT);
  Status s = hung.get();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("syncing " + Shared() + "/run-7/s"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(Shared() + "/run-7/s")) << "a file left unsynced";
  EXPECT_TRUE(Failed(1));
  EXPECT_EQ(disk_->used(), 3 * DiskTier::FileBytes(kRaw)) << "the failed write's room not returned";
}

// EIO from readdir while a start removes the files of interrupted writes: nothing is removed
// from the directory that cannot be listed whole, the other spool is cleaned, the recorded
// files read back exact; once readdir works, the next start removes the orphan.
TEST_F(SpoolFaultsTest, EioInReaddirAtStartRemovesNothingThereAndTheOtherSpoolIsCleaned) {
  for (const std::string& dir : {Local(), Shared()}) {
    std::ofstream(dir + "/run-7/orphan") << "a write a crash interrupted";
  }
  const std::string local_run = Local() + "/run-7";
  io_.Add(FaultySpoolIo::kReadDir, EIO, local_run);
  ASSERT_NO_FATAL_FAILURE(OpenTier());  // its budget's walk meets the EIO too
  disk_->Claim({{0, 7, "step-1"}, {1, 7, "step-1"}});
  ASSERT_TRUE(disk_->Adopt(0, 7, "step-1", kRaw).ok());
  ASSERT_TRUE(disk_->Adopt(1, 7, "step-1", kRaw).ok());
  ::testing::internal::CaptureStderr();
  std::vector<std::string> removed =
      disk_->RemoveOrphans({DiskTier::Key(0, 7, "step-1"), DiskTier::Key(1, 7, "step-1")});
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(removed, std::vector<std::string>{Shared() + "/run-7/orphan"});
  EXPECT_TRUE(std::filesystem::exists(local_run + "/orphan"));
  EXPECT_NE(log.find("listing " + local_run), std::string::npos) << log;
  EXPECT_NE(log.find("Input/output error (EIO)"), std::string::npos) << log;
  EXPECT_FALSE(Failed(0)) << "a directory's listing says nothing of the spool's writes";
  EXPECT_TRUE(ReadBack(0).ok());
  EXPECT_TRUE(ReadBack(1).ok());
  EXPECT_EQ(disk_->used(), 2 * DiskTier::FileBytes(kRaw));
  io_.Heal();
  EXPECT_EQ(disk_->RemoveOrphans({DiskTier::Key(0, 7, "step-1"), DiskTier::Key(1, 7, "step-1")}),
            std::vector<std::string>{local_run + "/orphan"});
  EXPECT_TRUE(ReadBack(0).ok());
}

// A restart while the shared spool's servers answer ESTALE for its files: the recorded file is
// accounted unread, not lost (Adopt is OK), the spool fails naming the errno, nothing is
// removed there, and once it answers the step is served exact.
TEST_F(SpoolFaultsTest, AFileOutOfReachAtRestartIsAccountedUnreadNotLost) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  std::ofstream(Shared() + "/run-7/orphan") << "a write a crash interrupted";
  io_.Add(FaultySpoolIo::kStat, ESTALE, Shared() + "/run-7");
  io_.Add(FaultySpoolIo::kOpenForRead, ESTALE, Shared() + "/run-7");
  disk_->Claim({{0, 7, "step-1"}, {1, 7, "step-1"}});
  EXPECT_TRUE(disk_->Adopt(0, 7, "step-1", kRaw).ok());
  Status adopted = disk_->Adopt(1, 7, "step-1", kRaw);
  EXPECT_TRUE(adopted.ok()) << adopted.ToString();
  EXPECT_EQ(disk_->used(), 2 * DiskTier::FileBytes(kRaw));
  ASSERT_TRUE(Failed(1));
  EXPECT_EQ(disk_->SpoolStates()[1].error, ESTALE);
  EXPECT_NE(disk_->SpoolStates()[1].reason.find(File(1)), std::string::npos);
  EXPECT_TRUE(disk_->RemoveOrphans({DiskTier::Key(0, 7, "step-1")}).empty());
  EXPECT_TRUE(std::filesystem::exists(File(1)));
  EXPECT_EQ(ReadBack(1).code(), Code::kUnavailable);
  EXPECT_TRUE(ReadBack(0).ok());
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadBack(1).ok());
  // A file really gone is still lost, on a spool that answers.
  std::filesystem::remove(File(0));
  EXPECT_EQ(disk_->Adopt(0, 7, "step-1", kRaw).code(), Code::kDataLoss);
}

// The spool's servers gone before a start looks for its marker: the spool fails with that
// errno and is treated as not mounted (steps accounted unread, nothing removed there).
TEST_F(SpoolFaultsTest, AMarkerOutOfReachAtStartFailsTheSpoolAndKeepsItsSteps) {
  ASSERT_NO_FATAL_FAILURE(OpenTier());
  io_.LoseMount(Shared(), ENOTCONN);
  disk_->Claim({{0, 7, "step-1"}, {1, 7, "step-1"}});
  ASSERT_TRUE(Failed(1));
  EXPECT_EQ(disk_->SpoolStates()[1].error, ENOTCONN);
  EXPECT_NE(disk_->SpoolStates()[1].reason.find(DiskTier::kMarker), std::string::npos);
  EXPECT_FALSE(Failed(0));
  EXPECT_TRUE(disk_->Adopt(0, 7, "step-1", kRaw).ok());
  EXPECT_TRUE(disk_->Adopt(1, 7, "step-1", kRaw).ok());
  EXPECT_EQ(disk_->used(), 2 * DiskTier::FileBytes(kRaw));
  std::ofstream(Shared() + "/run-7/orphan") << "a write a crash interrupted";
  EXPECT_TRUE(disk_->RemoveOrphans({DiskTier::Key(0, 7, "step-1")}).empty());
  EXPECT_TRUE(std::filesystem::exists(File(1)));
  EXPECT_EQ(ReadBack(1).code(), Code::kUnavailable);
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadBack(1).ok());
}

// A run directory that cannot be made fails the write and the spool, naming the directory.
TEST_F(SpoolFaultsTest, AFailedMkdirFailsTheWriteAndTheSpoolNamingTheDirectory) {
  io_.Add(FaultySpoolIo::kMkdir, EIO, Local() + "/run-8");
  auto space = disk_->Reserve(kRaw, SpoolClass::kLocal, /*fail_over=*/false);
  ASSERT_TRUE(space.ok());
  Status s = disk_->Write(*space, 8, "step-1", out_.data.get(), kRaw);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("creating directory " + Local() + "/run-8: Input/output error (EIO)"),
            std::string::npos)
      << s.ToString();
  EXPECT_TRUE(Failed(0));
  EXPECT_EQ(disk_->used(), 2 * DiskTier::FileBytes(kRaw));
  io_.Heal();
  EXPECT_EQ(disk_->ProbeNow(), 1);
  EXPECT_TRUE(ReadBack(0).ok());
}

// A filesystem without O_DIRECT (tmpfs, some FUSE ones) answers EINVAL to it: the spool falls
// back to buffered I/O once, and its files read back exact.
TEST_F(SpoolFaultsTest, ASpoolRefusingODirectIsWrittenAndReadBuffered) {
  io_.Add(FaultySpoolIo::kOpenDirect, EINVAL, Shared());
  ASSERT_NO_FATAL_FAILURE(OpenTier());  // O_DIRECT not yet tried
  ASSERT_TRUE(WriteTo(SpoolClass::kShared, "step-2").ok());
  EXPECT_TRUE(ReadBack(1, "step-2").ok());
  EXPECT_TRUE(ReadBack(1).ok());
  EXPECT_EQ(io_.added_failures(), 1u) << "O_DIRECT asked for again after it was refused";
  EXPECT_FALSE(Failed(1));
}

// The tier's start goes through the seam too: a spool whose filesystem cannot be reached is
// refused by name, with the errno.
TEST(SpoolFaultsAtOpen, ASpoolThatCannotBeReachedAtStartIsRefusedByName) {
  testing::TempDir tmp;
  FaultySpoolIo io;
  io.LoseMount(tmp.path() + "/gone", ENOTCONN);
  auto d = DiskTier::Open({{tmp.path() + "/ok", tmp.path() + "/gone"}, 1 << 20, 0.7, &io});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(tmp.path() + "/gone"), std::string::npos)
      << d.status().ToString();
  EXPECT_NE(d.status().message().find("ENOTCONN"), std::string::npos) << d.status().ToString();
  io.Heal();
  EXPECT_TRUE(DiskTier::Open({{tmp.path() + "/ok", tmp.path() + "/gone"}, 1 << 20, 0.7, &io}).ok());
}

}  // namespace
}  // namespace adjsnap
