// The real daemon over a real filesystem that fails: its only spool on an ext4 image mounted
// through a loop device, remounted read-only in the middle of a run. adjsnapd takes the spool out
// of the rotation, fails the push that needs the disk within spool_failure_timeout (UNAVAILABLE
// naming the spool and EROFS) while it sits idle and logs a few lines, says so in Stats; after
// a remount read-write, `adjsnap spool probe` brings the spool back and the run goes on.
// Needs root and a loop device; skipped, saying why, elsewhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

constexpr size_t kStep = 1 << 20;

// CPU seconds (user + system) process `pid` has used, from /proc/<pid>/stat.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The path of a system tool (RunProgram does not search PATH); "" if absent.
std::string Tool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    if (access((dir + name).c_str(), X_OK) == 0) return dir + name;
  }
  return "";
}

// An ext4 image loop-mounted at `dir`, unmounted (lazily if still busy) on destruction.
class LoopMount {
 public:
  // Empty `why` on success; otherwise why the machine cannot do it.
  static std::unique_ptr<LoopMount> Make(const std::string& image, const std::string& dir,
                                         std::string* why) {
    std::string out, err;
    if (Tool("mkfs.ext4").empty() || Tool("mount").empty() || Tool("umount").empty()) {
      *why = "mkfs.ext4, mount or umount is missing";
      return nullptr;
    }
    std::filesystem::create_directories(dir);
    { std::ofstream(image).close(); }
    std::filesystem::resize_file(image, 96 << 20);
    if (RunProgram({Tool("mkfs.ext4"), "-q", "-F", image}, &out, &err) != 0) {
      *why = "mkfs.ext4 failed or is missing: " + err;
      return nullptr;
    }
    if (RunProgram({Tool("mount"), "-o", "loop", image, dir}, &out, &err) != 0) {
      *why = "loop devices are unavailable here (mount -o loop: " + err + ")";
      return nullptr;
    }
    return std::unique_ptr<LoopMount>(new LoopMount(dir));
  }
  ~LoopMount() {
    std::string out, err;
    if (RunProgram({Tool("umount"), dir_}, &out, &err) != 0) {
      RunProgram({Tool("umount"), "-l", dir_}, &out, &err);
    }
  }
  // mount -o remount,<how>; a read-only remount waits for files open for writing (EBUSY).
  bool Remount(const std::string& how) {
    std::string out, err;
    for (int i = 0; i < 50; ++i) {
      if (RunProgram({Tool("mount"), "-o", "remount," + how, dir_}, &out, &err) == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "mount -o remount," << how << " " << dir_ << ": " << err;
    return false;
  }

 private:
  explicit LoopMount(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
};

class FailingDiskTest : public AdjsnapTest {
 protected:
  void TearDown() override {
    AdjsnapTest::TearDown();  // adjsnapd stops before its spool goes
    mount_.reset();
  }
  // Starts adjsnapd (16 MiB host tier) with its only spool, `*spool`, on a loop-mounted ext4
  // image; skips the test where the machine cannot loop-mount.
  void StartOnLoopSpool(const std::string& spool_failure_timeout, std::string* spool) {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root to loop-mount a filesystem (uid " << geteuid() << ")";
    }
    const std::string mnt = dir() + "/mnt";
    std::string why;
    mount_ = LoopMount::Make(dir() + "/spool.img", mnt, &why);
    if (!mount_) GTEST_SKIP() << why;
    *spool = mnt + "/spool";
    StartDaemon(Options("16M", {"--spool-dirs", *spool, "--disk-mem", "64M",
                                "--spool-failure-timeout", spool_failure_timeout}));
  }
  std::unique_ptr<LoopMount> mount_;
};

TEST_F(FailingDiskTest, ASpoolRemountedReadOnlyMidRunFailsThePushInBoundAndComesBack) {
  std::string spool;
  StartOnLoopSpool("2", &spool);
  if (IsSkipped() || HasFatalFailure()) return;
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunInfo run = OpenRun(*c, Spec("fwi", 0, kStep));  // steps unknown: the oldest spill
  ASSERT_NE(run.run_id, 0u);
  std::vector<char> buf(kStep);
  auto push = [&](uint64_t t) -> Status {
    FillPattern(buf.data(), kStep, 21, t);
    ADJSNAP_ASSIGN_OR_RETURN(PushHandle h, c->Push(run.run_id, t, buf.data(), kStep));
    return h.WaitStored();
  };
  uint64_t t = 0;
  for (; t < 24; ++t) ASSERT_TRUE(push(t).ok()) << t;  // some are on disk by now
  ASSERT_TRUE(WaitUntil([&] { return Stats().demotions() > 0; }, std::chrono::seconds(30)));

  ASSERT_TRUE(mount_->Remount("ro"));
  const size_t log_before = daemon().Log().size();
  const double cpu_before = ProcessCpuSeconds(daemon().pid());
  const auto started = std::chrono::steady_clock::now();
  Status s;
  for (; t < 64; ++t) {
    s = push(t);
    if (!s.ok()) break;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double cpu = ProcessCpuSeconds(daemon().pid()) - cpu_before;
  const std::string grown = daemon().Log().substr(log_before);
  const size_t lines = static_cast<size_t>(std::count(grown.begin(), grown.end(), '\n'));
  std::printf("[ figures  ] read-only remount: push failed after %.2f s, adjsnapd CPU %.1f%% of "
              "wall, %zu log lines\n",
              wall, 100.0 * cpu / wall, lines);
  ASSERT_EQ(s.code(), Code::kUnavailable) << t << ": " << s.ToString();
  EXPECT_NE(s.message().find(spool), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("EROFS"), std::string::npos) << s.ToString();
  EXPECT_LT(wall, 2.0 + 5.0);
  EXPECT_LT(cpu, 0.2 * wall) << cpu << " s of CPU in " << wall << " s";
  EXPECT_LT(lines, 15u) << grown;
  v1::StatsResponse stats = Stats();
  ASSERT_EQ(stats.spools_size(), 1);
  EXPECT_EQ(stats.spools(0).state(), "failed");
  EXPECT_EQ(stats.spools(0).error_name(), "EROFS");
  EXPECT_EQ(stats.spools(0).dir(), spool);
  EXPECT_EQ(stats.unavailable_pushes(), 1u);
  EXPECT_EQ(stats.unavailable_pushes_fast(), 0u);
  // The pushes after it fail at once while the spool stays read-only.
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Status fast = push(t);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
    EXPECT_EQ(fast.code(), Code::kUnavailable) << fast.ToString();
    EXPECT_NE(fast.message().find("EROFS"), std::string::npos) << fast.ToString();
  }
  stats = Stats();
  EXPECT_EQ(stats.unavailable_pushes(), 4u);
  EXPECT_EQ(stats.unavailable_pushes_fast(), 3u);
  std::string out, err;
  EXPECT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon().socket(), "status"}, &out, &err), 0)
      << err;
  EXPECT_NE(out.find("failed"), std::string::npos) << out;
  EXPECT_NE(out.find("Read-only file system"), std::string::npos) << out;

  // Read-write again: a probe on demand puts the spool back, and the run goes on.
  ASSERT_TRUE(mount_->Remount("rw"));
  EXPECT_EQ(RunProgram({ADJSNAP_BINARY, "--socket", daemon().socket(), "spool", "probe"}, &out,
                       &err),
            0)
      << out << err;
  EXPECT_EQ(Stats().spools(0).state(), "ok");
  for (uint64_t k = t; k < t + 4; ++k) ASSERT_TRUE(push(k).ok()) << k;
  std::vector<char> got(kStep);
  for (uint64_t k = t + 4; k-- > 0;) {
    ASSERT_TRUE(c->Fetch(run.run_id, k, got.data(), kStep).ok()) << k;
    FillPattern(buf.data(), kStep, 21, k);
    ASSERT_EQ(got, buf) << k;
  }
  ExpectRoundTrip();
}

// A stop while no spool works and a push waits for one: the waiting push is answered, the
// drain that would write the host-only steps to disk fails at once saying why, and adjsnapd exits
// cleanly within a second: not after spool_failure_timeout (30 s here) or stop_timeout, nor
// after gRPC's grace for a connected client to hang up.
TEST_F(FailingDiskTest, AStopWhileNoSpoolWorksDoesNotWaitForTheDisk) {
  std::string spool;
  StartOnLoopSpool("30", &spool);
  if (IsSkipped() || HasFatalFailure()) return;
  auto connected = ConnectClient(daemon());
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  std::unique_ptr<Client> c = std::move(connected).value();
  c->set_reconnect_timeout(0);  // its push fails with the stop rather than wait for a restart
  RunInfo run = OpenRun(*c, Spec("fwi", 0, kStep));
  ASSERT_NE(run.run_id, 0u);
  auto push = [&](uint64_t t) -> Status {
    std::vector<char> buf(kStep);
    FillPattern(buf.data(), kStep, 21, t);
    ADJSNAP_ASSIGN_OR_RETURN(PushHandle h, c->Push(run.run_id, t, buf.data(), kStep));
    return h.WaitStored();
  };
  for (uint64_t t = 0; t < 8; ++t) ASSERT_TRUE(push(t).ok()) << t;  // host-only, for the drain
  ASSERT_TRUE(mount_->Remount("ro"));
  Status last;
  std::thread pusher([&] {  // fills the host tier, then waits for a spool
    for (uint64_t t = 8; t < 64 && last.ok(); ++t) last = push(t);
  });
  const bool failed = WaitUntil([&] { return Stats().spools(0).state() == "failed"; },
                                std::chrono::seconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the push is waiting
  const auto started = std::chrono::steady_clock::now();
  const int rc = daemon().Stop();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  pusher.join();
  const std::string log = daemon().Log();
  std::printf("[ figures  ] stop with no spool working and a push waiting: %.2f s\n", wall);
  ASSERT_TRUE(failed) << log;
  EXPECT_EQ(last.code(), Code::kUnavailable) << last.ToString();
  EXPECT_EQ(rc, 0) << log;
  EXPECT_LT(wall, 1.0) << log;
  EXPECT_NE(log.find("no spool works"), std::string::npos) << log;
  c.reset();
  StopDaemon();  // the fixture's daemon has exited: nothing left to stop
}

}  // namespace
}  // namespace adjsnap::testing
