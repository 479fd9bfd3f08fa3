// adjsnap against a real daemon: tables for people, --json for scripts, clear errors.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <utility>
#include <vector>

#include "raw_peer.h"
#include "adjsnap/client.h"
#include "adjsnap/kernels.h"
#include "adjsnap/schedule.h"
#include "adjsnap/v1/control.grpc.pb.h"
#include "adjsnap_fixture.h"

namespace adjsnap::testing {
namespace {

class AdjsnapCliTest : public AdjsnapTest {
 protected:
  // A run "shot-7" of three 1 MiB steps, pushed by a client that has left since.
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
    Client* c = Connect();
    ASSERT_NE(c, nullptr);
    RunInfo run = OpenRun(*c, Spec("shot-7", 3, 1 << 20));
    ASSERT_NE(run.run_id, 0u);
    std::vector<char> buf(1 << 20, 3);
    for (uint64_t t = 0; t < 3; ++t) {
      auto h = c->Push(run.run_id, t, buf.data(), buf.size());
      ASSERT_TRUE(h.ok() && h->WaitStored().ok());
    }
    ReleaseClients();
  }
  int AdjsnapCli(std::vector<std::string> args, std::string* out, std::string* err = nullptr) {
    args.insert(args.begin(), {ADJSNAP_BINARY, "--socket", daemon().socket()});
    return RunProgram(args, out, err);
  }
};

TEST_F(AdjsnapCliTest, StatusShowsHealthAndTheHostTier) {
  std::string out;
  ASSERT_EQ(AdjsnapCli({"status"}, &out), 0) << out;
  EXPECT_NE(out.find("SERVING"), std::string::npos) << out;
  EXPECT_NE(out.find("host"), std::string::npos);
  EXPECT_NE(out.find("3.0 MiB"), std::string::npos) << out;
  // What backs the host tier, as adjsnapd chose it, and what adjsnapd populated ahead of the pushes
  // (host_prefault = "background" by default: within the budget).
  EXPECT_TRUE(std::regex_search(out, std::regex("host pages  (4 KiB pages|shmem THP|hugetlb)[^\n]*; "
                                                "(not prefaulted|populated in the background: "
                                                "[0-9.]+ [KMG]iB|prefaulted);")))
      << out;
  // Whether a GPU is usable is found at run time and said either way. Compared without the
  // free memory, which another process (a test running beside this one) changes at any time.
  auto stable = [](const std::string& line) {
    return std::regex_replace(line, std::regex(", [0-9.]+ GiB free"), "");
  };
  kernels::DeviceProbe gpu = kernels::ProbeDevice();
  const size_t at = out.find("gpu       ");
  ASSERT_NE(at, std::string::npos) << out;
  const size_t from = at + std::string("gpu       ").size();
  EXPECT_EQ(stable(out.substr(from, out.find('\n', from) - from)), stable(gpu.description)) << out;
  ASSERT_EQ(AdjsnapCli({"--json", "status"}, &out), 0);
  EXPECT_NE(out.find("\"pushes\": 3"), std::string::npos) << out;
}

TEST_F(AdjsnapCliTest, RunsLsAndLocateDescribeTheRun) {
  std::string out;
  ASSERT_EQ(AdjsnapCli({"runs"}, &out), 0);
  EXPECT_NE(out.find("shot-7"), std::string::npos) << out;
  ASSERT_EQ(AdjsnapCli({"ls", "shot-7"}, &out), 0);
  EXPECT_NE(out.find("3 snapshots"), std::string::npos) << out;
  ASSERT_EQ(AdjsnapCli({"--json", "locate", "shot-7", "2"}, &out), 0);
  EXPECT_NE(out.find("\"tier\": \"host\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"raw_bytes\": 1048576"), std::string::npos) << out;
}

// A client keeping the newest steps of a HostDevice run in its GPU pool records them as
// libadjsnap does (HoldDeviceStep); adjsnap shows the three-way split and the device rows.
TEST_F(AdjsnapCliTest, LsShowsStepsKeptInAClientsGpuPool) {
  std::string error;
  auto peer = RawPeer::Open(stub(), &error);  // a session with a live UCX worker, as libadjsnap has
  ASSERT_NE(peer, nullptr) << error;
  const v1::OpenSessionResponse& session = peer->session();
  v1::OpenRunRequest open;
  open.mutable_spec()->set_name("pooled");
  open.mutable_spec()->set_steps(4);
  open.mutable_spec()->set_bytes_per_step(4096);
  open.mutable_spec()->set_layers(v1::LAYERS_HOST_DEVICE);
  open.set_device_steps(2);
  v1::OpenRunResponse run;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub().OpenRun(&ctx, open, &run).ok());
  }
  v1::HoldDeviceStepRequest hold;
  hold.set_session_id(session.session_id());
  hold.set_token(session.token());
  hold.set_run_id(run.run().run_id());
  hold.set_step(3);
  hold.set_bytes(4096);
  hold.set_held(true);
  v1::HoldDeviceStepResponse held;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub().HoldDeviceStep(&ctx, hold, &held).ok());
  }
  std::string out;
  ASSERT_EQ(AdjsnapCli({"ls", "pooled"}, &out), 0) << out;
  EXPECT_NE(out.find("placement: steps 0..1 in host memory, 2..3 in the creating client's GPU "
                     "pool"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("       3 device"), std::string::npos) << out;
  EXPECT_EQ(out.find("pending"), std::string::npos) << out;  // no checksum to wait for
  ASSERT_EQ(AdjsnapCli({"--json", "locate", "pooled", "3"}, &out), 0);
  EXPECT_NE(out.find("\"tier\": \"device\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"device_session\": " + std::to_string(session.session_id())),
            std::string::npos)
      << out;
}

TEST_F(AdjsnapCliTest, RmDeletesAndErrorsAreClear) {
  std::string out, err;
  ASSERT_EQ(AdjsnapCli({"rm", "shot-7"}, &out), 0);
  EXPECT_NE(out.find("freed 3.0 MiB"), std::string::npos) << out;
  EXPECT_EQ(AdjsnapCli({"ls", "shot-7"}, &out, &err), 1);
  EXPECT_NE(err.find("run 'shot-7' does not exist"), std::string::npos) << err;
  EXPECT_EQ(AdjsnapCli({"locate", "shot-7", "minus-one"}, &out, &err), 2);
  EXPECT_EQ(AdjsnapCli({"frobnicate"}, &out, &err), 2);
  EXPECT_NE(err.find("unknown command 'frobnicate'"), std::string::npos) << err;
}

// A smooth float32 field (so zfp shrinks it), as bytes.
void SmoothField(std::vector<char>& buf, uint64_t step) {
  std::vector<float> v(buf.size() / sizeof(float));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.01f * i + 0.3f * step);
  std::memcpy(buf.data(), v.data(), buf.size());
}

// Private by default, whatever the umask: adjsnapd's state and spool directories are 0700, a dump
// is 0700/0600 unless --mode widens it.
TEST_F(AdjsnapCliTest, StateSpoolAndDumpArePrivateByDefaultAndModeWidensADump) {
  auto mode = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(dir() + "/state"), 0700u);
  EXPECT_EQ(mode(dir() + "/state/spool"), 0700u);
  mode_t old = umask(0);  // the widest umask: the modes below come from adjsnap, not from it
  std::string mine = dir() + "/mine", shared = dir() + "/shared", out, err;
  int rc_private = AdjsnapCli({"dump", "shot-7", "--to", mine}, &out, &err);
  int rc_shared = AdjsnapCli({"dump", "shot-7", "--to", shared, "--mode", "0644"}, &out, &err);
  int rc_bad = AdjsnapCli({"dump", "shot-7", "--to", dir() + "/bad", "--mode", "rw"}, &out, &err);
  umask(old);
  ASSERT_EQ(rc_private, 0);
  ASSERT_EQ(rc_shared, 0);
  EXPECT_EQ(mode(mine), 0700u);
  EXPECT_EQ(mode(mine + "/manifest.json"), 0600u);
  EXPECT_EQ(mode(mine + "/step-00000000.npy"), 0600u);
  EXPECT_EQ(mode(shared), 0755u);
  EXPECT_EQ(mode(shared + "/step-00000002.npy"), 0644u);
  EXPECT_EQ(rc_bad, 2);
  EXPECT_NE(err.find("--mode must be octal permission bits"), std::string::npos) << err;
}

TEST_F(AdjsnapCliTest, DumpWritesNumpyFilesEqualToWhatWasPushed) {
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec;
  spec.name = "field";
  spec.steps = 6;
  spec.bytes_per_step = 24 * 40 * sizeof(float);
  spec.dtype = Dtype::kFloat32;
  spec.shape = {24, 40};
  spec.layers = "Disk";  // the dump comes back from disk files,
  spec.codec = Codec::kZfpReversible;  // compressed there: the dump holds the decoded bytes
  auto run = c->OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::vector<char> buf(spec.bytes_per_step);
  for (uint64_t t = 0; t < 6; ++t) {
    SmoothField(buf, t);
    auto h = c->Push(run->run_id, t, buf.data(), buf.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  // Every step is compressed on disk before the dump starts.
  size_t packed = 0;
  for (int i = 0; i < 1000 && packed < 6; ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto list = c->ListSnapshots("field");
    ASSERT_TRUE(list.ok());
    packed = 0;
    for (const auto& l : *list) packed += l.codec == Codec::kZfpReversible;
  }
  ASSERT_EQ(packed, 6u);
  std::string npy = dir() + "/npy", raw = dir() + "/raw", out, err;
  ASSERT_EQ(AdjsnapCli({"dump", "field", "--to", npy}, &out, &err), 0) << err;
  EXPECT_NE(out.find("dumped 6 steps"), std::string::npos) << out;
  ASSERT_EQ(AdjsnapCli({"dump", "field", "--to", raw, "--format", "raw", "--steps", "2:5"}, &out,
                    &err),
            0)
      << err;
  // The raw files hold exactly the pushed bytes.
  for (uint64_t t = 2; t < 5; ++t) {
    char name[32];
    std::snprintf(name, sizeof name, "/step-%08llu.raw", (unsigned long long)t);
    std::ifstream f(raw + name, std::ios::binary);
    std::vector<char> got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    SmoothField(buf, t);
    EXPECT_EQ(got, buf) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(raw + "/step-00000005.raw"));
  // numpy loads every .npy with the run's dtype and shape, equal to the raw bytes.
  std::string script =
      "import json, sys, numpy as np\n"
      "npy, raw = sys.argv[1], sys.argv[2]\n"
      "m = json.load(open(npy + '/manifest.json'))\n"
      "assert len(m['steps']) == 6, m\n"
      "for e in m['steps']:\n"
      "    a = np.load(npy + '/' + e['file'])\n"
      "    assert a.dtype == np.float32 and a.shape == (24, 40), (a.dtype, a.shape)\n"
      "    if 2 <= e['step'] < 5:\n"
      "        r = open(raw + '/step-%08d.raw' % e['step'], 'rb').read()\n"
      "        assert a.tobytes() == r, e\n"
      "print('numpy ok')\n";
  ASSERT_EQ(RunProgram({"/usr/bin/python3", "-c", script, npy, raw}, &out, &err), 0) << err;
  EXPECT_NE(out.find("numpy ok"), std::string::npos) << out;
  // A second dump into the same directory is refused rather than mixed in.
  EXPECT_EQ(AdjsnapCli({"dump", "field", "--to", npy}, &out, &err), 1);
  EXPECT_NE(err.find("already holds a dump"), std::string::npos) << err;
  EXPECT_EQ(AdjsnapCli({"dump", "field", "--to", npy, "--steps", "5:2"}, &out, &err), 2);
  EXPECT_NE(err.find("A:B with A < B"), std::string::npos) << err;
}

TEST_F(AdjsnapCliTest, DrainMovesEveryHostSnapshotToDisk) {
  std::string out, err;
  ASSERT_EQ(AdjsnapCli({"drain"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("moved 3 snapshots (3.0 MiB)"), std::string::npos) << out;
  ASSERT_EQ(AdjsnapCli({"ls", "shot-7"}, &out), 0);
  EXPECT_EQ(out.find(" host "), std::string::npos) << out;
  EXPECT_NE(out.find(" disk "), std::string::npos) << out;
  // Drained steps are still whole.
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  std::vector<char> got(1 << 20), want(1 << 20, 3);
  ASSERT_TRUE(c->Fetch(1, 2, got.data(), got.size()).ok());
  EXPECT_EQ(got, want);
}

TEST_F(AdjsnapCliTest, PlanRevolvesWhenTheHostTierCannotHoldEveryStep) {
  // A node without a disk tier: the 64 MiB host tier has 64 free 1 MiB slots for 100 steps
  // (the fixture's host steps did not survive the restart).
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M", {"--spool-dirs", "none"})));
  std::string out;
  ASSERT_EQ(AdjsnapCli({"--json", "plan", "--steps", "100", "--bytes-per-step", "1M"}, &out), 0);
  EXPECT_NE(out.find("\"method\": \"h-revolve\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"slots_available\": 64"), std::string::npos) << out;
  uint64_t expected = *schedule::RevolveForwardSteps(100, 64);
  EXPECT_NE(out.find("\"forward_steps\": " + std::to_string(expected) + ","), std::string::npos)
      << out;
  ASSERT_EQ(AdjsnapCli({"plan", "--steps", "100", "--bytes-per-step", "1M", "--compute-time",
                     "0.01"},
                    &out),
            0);
  EXPECT_NE(out.find("overhead"), std::string::npos) << out;
}

// A node with shared spools (shared_spool_dirs): status lists each spool with its class, the
// disk tier comes as one entry per class, and plan makes the shared spools a third level.
TEST_F(AdjsnapCliTest, SharedSpoolsAreAClassOfTheirOwnAndAThirdLevelOfThePlan) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("64M", {"--spool-dirs", dir() + "/local", "--disk-mem", "32M", "--shared-spool-dirs",
                      dir() + "/shared", "--shared-disk-mem", "128M"})));
  std::string out;
  ASSERT_EQ(AdjsnapCli({"status"}, &out), 0) << out;
  EXPECT_NE(out.find(dir() + "/shared"), std::string::npos) << out;
  EXPECT_NE(out.find("shared-disk"), std::string::npos) << out;
  ASSERT_EQ(AdjsnapCli({"--json", "status"}, &out), 0);
  nlohmann::json status = nlohmann::json::parse(out);
  std::map<std::string, uint64_t> budgets;
  for (const auto& t : status["tiers"]) {
    if (t["tier"] == "disk") budgets[t["spool_class"]] = t["budget_bytes"];
  }
  EXPECT_EQ(budgets["local"], 32u << 20);
  EXPECT_EQ(budgets["shared"], 128u << 20);
  ASSERT_EQ(status["spools"].size(), 2u);
  EXPECT_EQ(status["spools"][1]["spool_class"], "shared");
  ASSERT_EQ(AdjsnapCli({"--json", "plan", "--steps", "400", "--bytes-per-step", "1M"}, &out), 0)
      << out;
  nlohmann::json plan = nlohmann::json::parse(out);
  std::vector<std::string> levels;
  for (const auto& t : plan["tiers"]) levels.push_back(t["tier"]);
  EXPECT_EQ(levels, (std::vector<std::string>{"host", "disk", "shared-disk"})) << out;
}

// Costs come from adjsnapd's fits at the step's size: a node that has moved no 4 MiB step
// prices none (and says so), --calibrate pushes a few through each tier and then prices them,
// and a later plan finds them measured. The calibration's runs are gone after it.
TEST_F(AdjsnapCliTest, PlanCalibratesTheStepSizeOnEveryTierAndSaysWhereEachCostCameFrom) {
  // The fixture's run goes first: its steps, drained to the default spool at the restart, would
  // be recorded in spool 0, which the restart makes a new directory without them (out of the
  // rotation until they come back).
  std::string out, err;
  ASSERT_EQ(AdjsnapCli({"rm", "shot-7"}, &out, &err), 0) << err;
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      Options("64M", {"--spool-dirs", dir() + "/local", "--disk-mem", "32M", "--shared-spool-dirs",
                      dir() + "/shared", "--shared-disk-mem", "128M"})));
  const std::vector<std::string> base = {"--json",           "plan", "--steps",        "400",
                                         "--bytes-per-step", "4M",   "--compute-time", "0.01"};
  auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    std::string out, err;
    EXPECT_EQ(AdjsnapCli(args, &out, &err), 0) << out << err;
    return nlohmann::json::parse(out, nullptr, false);
  };
  nlohmann::json before = plan({});
  ASSERT_TRUE(before.is_object());
  ASSERT_EQ(before["tiers"].size(), 3u) << before.dump(2);
  for (const auto& t : before["tiers"]) {
    EXPECT_EQ(t["costs_from"], "default") << t.dump(2);
    EXPECT_NE(t["costs"].get<std::string>().find("--calibrate"), std::string::npos) << t.dump(2);
    EXPECT_EQ(t["write_seconds"], 0.0);
  }

  nlohmann::json calibrated = plan({"--calibrate"});
  ASSERT_TRUE(calibrated.is_object());
  for (const auto& t : calibrated["tiers"]) {
    EXPECT_EQ(t["costs_from"], "calibrated") << t.dump(2);
    EXPECT_NE(t["costs"].get<std::string>().find("calibrated at 4.0 MiB"), std::string::npos)
        << t.dump(2);
    EXPECT_GT(t["write_seconds"].get<double>(), 0) << t.dump(2);
    EXPECT_GT(t["read_seconds"].get<double>(), 0) << t.dump(2);
    for (const char* fit : {"write_fit", "read_fit"}) {
      EXPECT_GE(t[fit]["samples"].get<uint64_t>(), 1u) << t.dump(2);
      EXPECT_EQ(t[fit]["max_bytes"].get<uint64_t>(), 4u << 20) << t.dump(2);
    }
  }
  nlohmann::json again = plan({});
  for (const auto& t : again["tiers"]) {
    EXPECT_EQ(t["costs_from"], "measured") << t.dump(2);
    EXPECT_NE(t["costs"].get<std::string>().find("of 4.0 MiB"), std::string::npos) << t.dump(2);
  }
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  auto runs = c->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty()) << (*runs)[0].spec.name;

  EXPECT_EQ(
      AdjsnapCli({"plan", "--steps", "400", "--bytes-per-step", "4M", "--calibrate"}, &out, &err),
      2);
  EXPECT_NE(err.find("--calibrate measures the costs that --compute-time weighs"),
            std::string::npos)
      << err;
  EXPECT_EQ(AdjsnapCli({"plan", "--steps", "4", "--bytes-per-step", "4M", "--compute-time", "1",
                        "--calibrate", "--level", "host:1:0:0"},
                       &out, &err),
            2);
  EXPECT_NE(err.find("--calibrate measures this node's tiers"), std::string::npos) << err;
}

TEST_F(AdjsnapCliTest, PlanWithAGpuCodecShrinksHostSlotsByTheGivenRatio) {
  // 64 MiB of host tier, no disk: 64 raw 1 MiB steps fit, 100 do not.
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M", {"--spool-dirs", "none"})));
  auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--json", "plan", "--steps", "100", "--bytes-per-step", "1M"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string out;
    EXPECT_EQ(AdjsnapCli(args, &out), 0) << out;
    return nlohmann::json::parse(out, nullptr, false);
  };
  nlohmann::json raw = plan({});
  ASSERT_TRUE(raw.is_object());
  const uint64_t raw_slots = raw["tiers"][0]["slots_available"].get<uint64_t>();
  EXPECT_EQ(raw["method"], "h-revolve");
  // zfp compresses on the way to disk: the host tier's slots stay as they were.
  nlohmann::json zfp = plan({"--codec", "zfp-reversible", "--codec-ratio", "4"});
  EXPECT_EQ(zfp["tiers"][0]["slots_available"].get<uint64_t>(), raw_slots) << zfp.dump(2);
  EXPECT_EQ(zfp["compressed_in"], nlohmann::json::array({"disk"}));
  // bitcomp compresses on the GPU: the host tier holds frames a quarter of the size, plus their
  // header and table, so close to four times the steps, and all 100 fit.
  nlohmann::json gpu = plan({"--codec", "bitcomp", "--codec-ratio", "4"});
  const uint64_t gpu_slots = gpu["tiers"][0]["slots_available"].get<uint64_t>();
  EXPECT_LE(gpu_slots, 4 * raw_slots) << gpu.dump(2);
  EXPECT_GE(gpu_slots, 4 * raw_slots * 95 / 100) << gpu.dump(2);
  EXPECT_EQ(gpu["method"], "store-all") << gpu.dump(2);
  EXPECT_EQ(gpu["compression_ratio"], 4.0);
  EXPECT_EQ(gpu["compression"], "given by --codec-ratio");
  EXPECT_EQ(gpu["compressed_in"], nlohmann::json::array({"host", "disk"}));
  // Without a ratio the plan treats it as 1 and says so.
  nlohmann::json unknown = plan({"--codec", "ans"});
  EXPECT_EQ(unknown["tiers"][0]["slots_available"].get<uint64_t>(), raw_slots) << unknown.dump(2);
  EXPECT_NE(unknown["compression"].get<std::string>().find("pass --codec-ratio"),
            std::string::npos);
  nlohmann::json lossy =
      plan({"--codec", "bitcomp-lossy", "--codec-param", "1e-4", "--codec-ratio", "12"});
  EXPECT_EQ(lossy["codec_param"], 1e-4);

  std::string out, err;
  const std::vector<std::string> base = {"plan", "--steps", "100", "--bytes-per-step", "1M"};
  auto refused = [&](std::vector<std::string> extra, const std::string& why) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(AdjsnapCli(args, &out, &err), 2) << out;
    EXPECT_NE(err.find(why), std::string::npos) << err;
  };
  refused({"--codec", "bitcomp-lossy"},
          "--codec bitcomp-lossy needs --codec-param (absolute "
          "error bound)");
  refused({"--codec", "bitcomp-lossy", "--codec-param", "inf"},
          "--codec-param must be a finite number > 0, got 'inf'");
  refused({"--codec", "bitcomp", "--codec-param", "2"}, "--codec bitcomp takes no --codec-param");
  refused({"--codec", "bitcomp", "--codec-ratio", "0.5"},
          "--codec-ratio must be a finite number >= 1");
  refused({"--codec-ratio", "2"}, "--codec none takes no --codec-ratio");
  refused({"--codec", "zfp-rate", "--codec-param", "8", "--codec-ratio", "2"},
          "--codec zfp-rate takes no --codec-ratio");
}

TEST_F(AdjsnapCliTest, PlanStoresAllWhenEverythingFitsAndRejectsBadOptions) {
  std::string out, err;
  ASSERT_EQ(AdjsnapCli({"--json", "plan", "--steps", "20", "--bytes-per-step", "1M"}, &out), 0);
  EXPECT_NE(out.find("\"method\": \"store-all\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"forward_steps\": 19,"), std::string::npos) << out;
  EXPECT_EQ(AdjsnapCli({"plan", "--steps", "20", "--bytes-per-step", "1M", "--codec", "zfp-rate"},
                    &out, &err),
            2);
  EXPECT_NE(err.find("--codec zfp-rate needs --codec-param"), std::string::npos) << err;
  EXPECT_EQ(AdjsnapCli({"plan", "--steps", "0", "--bytes-per-step", "1M"}, &out, &err), 2);
  EXPECT_NE(err.find("--steps must be a positive integer"), std::string::npos) << err;
  // A step near 2^64 bytes once wrapped a slot's size to 0 and divided by it (SIGFPE).
  for (const char* huge : {"18446744073709551615", "2000000T"}) {
    EXPECT_EQ(AdjsnapCli({"plan", "--steps", "2", "--bytes-per-step", huge, "--codec", "ans"}, &out,
                      &err),
              2)
        << huge;
    EXPECT_NE(err.find("more than any node holds"), std::string::npos) << err;
  }
}

// A program whose stdout is read line by line while it runs.
class Streaming {
 public:
  explicit Streaming(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
  }
  ~Streaming() {
    if (out_) std::fclose(out_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The next line without its newline; false at the end of the output.
  bool ReadLine(std::string* line) {
    char* text = nullptr;
    size_t size = 0;
    ssize_t n = out_ ? getline(&text, &size, out_) : -1;
    if (n > 0) line->assign(text, text[n - 1] == '\n' ? n - 1 : n);
    std::free(text);
    return n > 0;
  }
  // The exit status (-1 if it did not exit).
  int Wait() {
    int status = 0;
    pid_t pid = std::exchange(pid_, -1);
    if (pid <= 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }

 private:
  pid_t pid_ = -1;
  std::FILE* out_ = nullptr;
};

uint64_t Counter(const nlohmann::json& stats, const char* name) {
  return stats.at(name).get<uint64_t>();  // a JSON number (docs/adjsnap-json.md)
}

TEST_F(AdjsnapCliTest, TopPrintsOneJsonLinePerRefreshFollowingAClientsPushes) {
  Client* c = Connect();
  ASSERT_NE(c, nullptr);
  RunSpec spec;
  spec.name = "watched";
  spec.steps = 5;
  spec.bytes_per_step = 4096;
  auto run = c->OpenRun(spec);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // A long interval: top's second refresh must come after the pushes below. With 0.2 s and a
  // SIGSTOP after the first line, a loaded machine (the clang ASan pass beside a soak) let top
  // take its second Stats before the stop landed, and the line showed 3 pushes.
  Streaming top({ADJSNAP_BINARY, "--socket", daemon().socket(), "top", "--count", "2", "--interval",
                 "5", "--json"});
  ASSERT_GT(top.pid(), 0);
  std::string first, second, more;
  ASSERT_TRUE(top.ReadLine(&first));
  // Stopped as well while the client pushes, so a slow push cannot outlast the interval.
  ASSERT_EQ(kill(top.pid(), SIGSTOP), 0);
  std::vector<char> buf(4096, 7);
  for (uint64_t t = 0; t < 5; ++t) {
    auto h = c->Push(run->run_id, t, buf.data(), buf.size());
    ASSERT_TRUE(h.ok() && h->WaitStored().ok());
  }
  ASSERT_EQ(kill(top.pid(), SIGCONT), 0);
  ASSERT_TRUE(top.ReadLine(&second));
  EXPECT_FALSE(top.ReadLine(&more)) << more;  // --count 2: two lines, then it ends
  EXPECT_EQ(top.Wait(), 0);

  auto a = nlohmann::json::parse(first, nullptr, /*allow_exceptions=*/false);
  auto b = nlohmann::json::parse(second, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(a.is_object()) << first;
  ASSERT_TRUE(b.is_object()) << second;
  EXPECT_EQ(Counter(a, "pushes"), 3u) << first;  // the fixture's
  EXPECT_EQ(Counter(b, "pushes"), 8u) << second;
  EXPECT_EQ(Counter(b, "runs"), 2u) << second;
  // The same fields as `status --json`, and the rates: none yet at the first refresh.
  for (const char* field : {"version", "sessions", "fetches", "refused_pushes", "prefetch_hits",
                            "demand_reads", "tiers"}) {
    EXPECT_TRUE(b.contains(field)) << field << " " << second;
  }
  EXPECT_TRUE(a.at("rates").is_null()) << first;
  const auto& rates = b.at("rates");
  ASSERT_TRUE(rates.is_object()) << second;
  double seconds = rates.at("interval_seconds").get<double>();
  ASSERT_GT(seconds, 0);
  EXPECT_NEAR(rates.at("pushes_per_second").get<double>() * seconds, 5.0, 1e-6) << second;
  EXPECT_EQ(rates.at("fetches_per_second").get<double>(), 0.0) << second;
  for (const char* field : {"spill_bytes_per_second", "prefetch_hits_per_second",
                            "prefetch_misses_per_second", "refused_pushes_per_second"}) {
    EXPECT_TRUE(rates.contains(field)) << field << " " << second;
  }
  bool host = false;
  for (const auto& tier : b.at("tiers")) {
    if (tier.at("tier") != "host") continue;
    host = true;
    EXPECT_TRUE(tier.contains("used_bytes") && tier.contains("budget_bytes") &&
                tier.contains("peak_used_bytes"))
        << tier;
  }
  EXPECT_TRUE(host) << second;
}

// Into a pipe without --json, top prints JSON lines too (it redraws only a terminal).
TEST_F(AdjsnapCliTest, TopIntoAPipeIsJsonLines) {
  std::string out, err;
  ASSERT_EQ(AdjsnapCli({"top", "--count", "1", "--interval", "0.1"}, &out, &err), 0) << err;
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(Counter(j, "pushes"), 3u) << out;
}

// --once: one frame for people, into a pipe too, with no screen control codes; with --json, one
// JSON line.
TEST_F(AdjsnapCliTest, TopOncePrintsOneFrameWithoutScreenControlCodes) {
  std::string out, err;
  ASSERT_EQ(AdjsnapCli({"top", "--once"}, &out, &err), 0) << err;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find("Ctrl-C"), std::string::npos) << out;  // nothing to quit
  EXPECT_TRUE(std::regex_search(out, std::regex("\npushes +3 +- *\n"))) << out;
  EXPECT_EQ(out.find("TIER"), out.rfind("TIER")) << out;  // one frame
  ASSERT_EQ(AdjsnapCli({"--json", "top", "--once"}, &out, &err), 0) << err;
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(Counter(j, "pushes"), 3u) << out;
  EXPECT_TRUE(j.at("rates").is_null()) << out;
  EXPECT_EQ(AdjsnapCli({"top", "--once", "--count", "2"}, &out, &err), 2) << out;
}

TEST_F(AdjsnapCliTest, JsonMayFollowTheCommand) {
  std::string out;
  ASSERT_EQ(AdjsnapCli({"status", "--json"}, &out), 0);
  EXPECT_NE(out.find("\"pushes\": 3"), std::string::npos) << out;
  ASSERT_EQ(AdjsnapCli({"runs", "--json"}, &out), 0);
  EXPECT_NE(out.find("\"name\": \"shot-7\""), std::string::npos) << out;
}

// The command line, without a daemon: help for every command, and clear refusals.
std::map<std::string, std::vector<std::string>> CommandsAndWhatTheirHelpNames() {
  return {{"status", {}},
          {"runs", {}},
          {"ls", {"RUN"}},
          {"locate", {"RUN", "STEP"}},
          {"rm", {"RUN"}},
          {"drain", {}},
          {"quota", {"--uid", "--set"}},
          {"purge", {"--uid", "--job"}},
          {"dump", {"RUN", "--to", "--format", "--steps", "--mode"}},
          {"plan", {"--steps", "--bytes-per-step", "--compute-time", "--backward-time", "--codec"}},
          {"top", {"--interval", "--count", "--once"}}};
}

TEST(AdjsnapCliCommandLine, HelpDescribesEveryCommandAndItsOptions) {
  std::string out, err;
  ASSERT_EQ(RunProgram({ADJSNAP_BINARY, "--help"}, &out, &err), 0) << err;
  for (const char* option :
       {"--socket", "--remote", "--tls-ca", "--tls-cert", "--tls-key", "--json"}) {
    EXPECT_NE(out.find(option), std::string::npos) << option << "\n" << out;
  }
  for (const auto& [command, names] : CommandsAndWhatTheirHelpNames()) {
    EXPECT_NE(out.find("  " + command + " "), std::string::npos) << command << "\n" << out;
    std::string help;
    ASSERT_EQ(RunProgram({ADJSNAP_BINARY, command, "--help"}, &help, &err), 0)
        << command << ": " << err;
    EXPECT_NE(help.find("Usage: adjsnap " + command), std::string::npos) << help;
    for (const std::string& name : names) {
      EXPECT_NE(help.find(name), std::string::npos) << command << " " << name << "\n" << help;
    }
  }
}

TEST(AdjsnapCliCommandLine, RefusesWhatItDoesNotKnowNamingIt) {
  std::string out, err;
  // No daemon is needed to refuse a command line: none of these connects.
  const std::string socket = "/nonexistent/adjsnap.sock";
  auto adjsnap = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {ADJSNAP_BINARY, "--socket", socket});
    return RunProgram(args, &out, &err);
  };
  EXPECT_EQ(adjsnap({"ls", "shot-7", "--frobnicate"}), 2);
  EXPECT_NE(err.find("--frobnicate"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"--frobnicate", "status"}), 2);
  EXPECT_NE(err.find("--frobnicate"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"ls"}), 2);
  EXPECT_NE(err.find("RUN is required"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"dump", "shot-7"}), 2);
  EXPECT_NE(err.find("--to is required"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"dump", "shot-7", "--to", "/nonexistent/d", "--format", "tiff"}), 2);
  EXPECT_NE(err.find("--format"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"top", "--interval", "-1"}), 2);
  EXPECT_NE(err.find("--interval must be seconds > 0"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"top", "--count", "abc"}), 2);
  EXPECT_NE(err.find("--count must be a positive integer, got 'abc'"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({"quota", "--uid", "alice"}), 2);
  EXPECT_NE(err.find("--uid must be a numeric uid"), std::string::npos) << err;
  EXPECT_EQ(adjsnap({}), 2);
  EXPECT_NE(err.find("subcommand is required"), std::string::npos) << err;
  EXPECT_TRUE(out.empty()) << out;
}

TEST(AdjsnapCliNoDaemon, SaysHowToStartIt) {
  TempDir dir;
  std::string out, err;
  int rc = RunProgram({ADJSNAP_BINARY, "--socket", dir.path() + "/none.sock", "status"}, &out,
                      &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("Start it with `adjsnapd`"), std::string::npos) << err;
}

}  // namespace
}  // namespace adjsnap::testing
