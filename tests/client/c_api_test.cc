#include "adjsnap/adjsnap.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "adjsnap/kernels.h"
#include "adjsnap_fixture.h"
#include "copy_engine.h"
#include "host_copy_engine.h"

namespace adjsnap::testing {
namespace {

// The C API against a real daemon; its client is the C one, not the fixture's.
class CApi : public AdjsnapTest {};

TEST_F(CApi, PushFetchLocateRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  adjsnap_client* c = nullptr;
  ASSERT_EQ(adjsnap_connect(daemon().socket().c_str(), &c), ADJSNAP_OK) << adjsnap_last_error();
  uint64_t shape[2] = {64, 64};
  const uint64_t bytes = 64 * 64 * sizeof(float);
  adjsnap_run_spec spec{"c-run", 4, bytes, 1, shape, 2, nullptr, /*keep=*/1, 0, 0, 0.0, 0};
  uint64_t run = 0;
  ASSERT_EQ(adjsnap_open_run(c, &spec, &run), ADJSNAP_OK) << adjsnap_last_error();
  std::vector<float> field(64 * 64), back(64 * 64);
  for (uint64_t t = 0; t < 4; ++t) {
    for (size_t i = 0; i < field.size(); ++i) field[i] = static_cast<float>(t * 10000 + i);
    adjsnap_push_handle* h = nullptr;
    ASSERT_EQ(adjsnap_push(c, run, t, field.data(), field.size() * sizeof(float), &h), ADJSNAP_OK);
    ASSERT_EQ(adjsnap_push_wait_released(h), ADJSNAP_OK);
    ASSERT_EQ(adjsnap_push_wait_stored(h), ADJSNAP_OK) << adjsnap_last_error();
    adjsnap_push_free(h);
  }
  ASSERT_EQ(adjsnap_fetch(c, run, 2, back.data(), back.size() * sizeof(float)), ADJSNAP_OK);
  for (size_t i = 0; i < field.size(); ++i) field[i] = static_cast<float>(2 * 10000 + i);
  EXPECT_EQ(back, field);  // every float of step 2
  adjsnap_location loc{};
  ASSERT_EQ(adjsnap_locate(c, "c-run", 3, &loc), ADJSNAP_OK);
  EXPECT_EQ(loc.tier, static_cast<int>(Tier::kHost));  // the C API reports the protocol's values
  EXPECT_EQ(loc.raw_bytes, bytes);
  EXPECT_EQ(adjsnap_fetch(c, run, 9, back.data(), back.size() * sizeof(float)), ADJSNAP_NOT_FOUND);
  EXPECT_NE(std::string(adjsnap_last_error()).find("never stored"), std::string::npos);
  EXPECT_EQ(adjsnap_delete_run(c, "c-run"), ADJSNAP_OK);
  adjsnap_disconnect(c);
}

// adjsnap_locate right after adjsnap_push_wait_released, on both data paths: the step is in flight
// (tier 5) or stored, never "was never stored".
TEST_F(CApi, ALocateRightAfterTheReleaseNeverSaysTheStepWasNeverStored) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  for (const char* path : {"ucx", "mapped"}) {
    setenv("ADJSNAP_DATA_PATH", path, 1);
    adjsnap_client* c = nullptr;
    ASSERT_EQ(adjsnap_connect(daemon().socket().c_str(), &c), ADJSNAP_OK) << adjsnap_last_error();
    unsetenv("ADJSNAP_DATA_PATH");
    const uint64_t bytes = 256 << 10;
    const std::string name = std::string("locate-") + path;
    adjsnap_run_spec spec{name.c_str(), 40, bytes, 0, nullptr, 0, nullptr, 1, 0, 0, 0.0, 0};
    uint64_t run = 0;
    ASSERT_EQ(adjsnap_open_run(c, &spec, &run), ADJSNAP_OK) << adjsnap_last_error();
    std::vector<char> step(bytes, 'x');
    int in_flight = 0;
    for (uint64_t t = 0; t < 40; ++t) {
      adjsnap_push_handle* h = nullptr;
      ASSERT_EQ(adjsnap_push(c, run, t, step.data(), bytes, &h), ADJSNAP_OK) << adjsnap_last_error();
      ASSERT_EQ(adjsnap_push_wait_released(h), ADJSNAP_OK) << adjsnap_last_error();
      adjsnap_location loc{};
      ASSERT_EQ(adjsnap_locate(c, name.c_str(), t, &loc), ADJSNAP_OK)
          << path << " step " << t << ": " << adjsnap_last_error();
      EXPECT_TRUE(loc.tier == 5 || loc.tier == static_cast<int>(Tier::kHost)) << loc.tier;
      in_flight += loc.tier == 5;
      ASSERT_EQ(adjsnap_push_wait_stored(h), ADJSNAP_OK) << adjsnap_last_error();
      adjsnap_push_free(h);
      ASSERT_EQ(adjsnap_locate(c, name.c_str(), t, &loc), ADJSNAP_OK) << adjsnap_last_error();
      EXPECT_EQ(loc.tier, static_cast<int>(Tier::kHost));
    }
    std::printf("[ figures  ] %s path: %d of 40 steps still in flight at the release\n", path,
                in_flight);
    adjsnap_disconnect(c);
  }
}

TEST_F(CApi, DeviceCallsSayWhatTheyNeedWithoutAGpu) {
  if (kernels::ProbeDevice().usable) GTEST_SKIP() << "a GPU is usable here";
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  adjsnap_client* c = nullptr;
  ASSERT_EQ(adjsnap_connect(daemon().socket().c_str(), &c), ADJSNAP_OK) << adjsnap_last_error();
  adjsnap_run_spec spec{"c-gpu", 4, 4096, 0, nullptr, 0, "HostDevice", 0, 0, 0, 0.0, 0};
  uint64_t run = 0;
  EXPECT_EQ(adjsnap_open_run(c, &spec, &run), ADJSNAP_FAILED_PRECONDITION);
  EXPECT_NE(std::string(adjsnap_last_error()).find("no GPU is usable"), std::string::npos)
      << adjsnap_last_error();
  spec.layers = "Host";
  ASSERT_EQ(adjsnap_open_run(c, &spec, &run), ADJSNAP_OK) << adjsnap_last_error();
  std::vector<char> buf(4096);
  adjsnap_push_handle* h = nullptr;
  EXPECT_EQ(adjsnap_push_device(c, run, 0, buf.data(), buf.size(), nullptr, &h),
            ADJSNAP_FAILED_PRECONDITION);
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(adjsnap_fetch_device(c, run, 0, buf.data(), buf.size(), nullptr),
            ADJSNAP_FAILED_PRECONDITION);
  EXPECT_NE(std::string(adjsnap_last_error()).find("device fetch of step 0"), std::string::npos)
      << adjsnap_last_error();
  adjsnap_disconnect(c);
}

// The C API's device calls on both data paths, to the daemon and to the device tier: through
// CUDA on a GPU, elsewhere through the host copy engine (support/host_copy_engine.h).
TEST_F(CApi, DevicePushesAndFetchesRoundTripOnBothPathsAndTheDeviceTier) {
  std::unique_ptr<HostCopyEngine> host;
  if (!kernels::ProbeDevice().usable) host = std::make_unique<HostCopyEngine>();
  struct Installed {  // removed however the test ends, after every client is gone
    explicit Installed(detail::CopyEngine* e) : on(e) {
      if (on) detail::SetCopyEngineForTesting(on);
    }
    ~Installed() {
      if (on) detail::SetCopyEngineForTesting(nullptr);
    }
    detail::CopyEngine* on;
  } installed(host.get());
  detail::CopyEngine& engine = detail::Engine();
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  void* stream = nullptr;
  ASSERT_TRUE(engine.CreateStream(&stream).ok());
  const uint64_t bytes = 64 << 10, steps = 6;
  void* d = nullptr;
  ASSERT_TRUE(engine.DeviceAllocate(bytes, &d).ok());
  std::vector<char> field(bytes), back(bytes);
  for (const char* path : {"mapped", "ucx"}) {
    for (const char* layers : {"Host", "HostDevice"}) {
      const std::string name = std::string("c-device-") + path + "-" + layers;
      setenv("ADJSNAP_DATA_PATH", path, 1);
      setenv("ADJSNAP_DEVICE_MEM", "1M", 1);
      adjsnap_client* c = nullptr;
      ASSERT_EQ(adjsnap_connect(daemon().socket().c_str(), &c), ADJSNAP_OK) << adjsnap_last_error();
      unsetenv("ADJSNAP_DATA_PATH");
      unsetenv("ADJSNAP_DEVICE_MEM");
      adjsnap_run_spec spec{name.c_str(), steps, bytes, 0, nullptr, 0, layers, 0, 0, 0, 0.0, 0};
      uint64_t run = 0;
      ASSERT_EQ(adjsnap_open_run(c, &spec, &run), ADJSNAP_OK) << name << ": " << adjsnap_last_error();
      for (uint64_t t = 0; t < steps; ++t) {
        FillPattern(field.data(), bytes, 11, t);
        ASSERT_TRUE(engine.CopyAsync(d, field.data(), bytes, detail::CopyEngine::Kind::kHostToDevice,
                                     stream)
                        .ok());
        adjsnap_push_handle* h = nullptr;
        ASSERT_EQ(adjsnap_push_device(c, run, t, d, bytes, stream, &h), ADJSNAP_OK)
            << name << " step " << t << ": " << adjsnap_last_error();
        ASSERT_EQ(adjsnap_push_wait_stored(h), ADJSNAP_OK) << adjsnap_last_error();
        adjsnap_push_free(h);
      }
      adjsnap_location loc{};
      ASSERT_EQ(adjsnap_locate(c, name.c_str(), steps - 1, &loc), ADJSNAP_OK);
      EXPECT_EQ(loc.tier, static_cast<int>(std::string(layers) == "Host" ? Tier::kHost
                                                                          : Tier::kDevice))
          << name;
      for (uint64_t t = steps; t-- > 0;) {
        ASSERT_EQ(adjsnap_fetch_device(c, run, t, d, bytes, stream), ADJSNAP_OK)
            << name << " step " << t << ": " << adjsnap_last_error();
        ASSERT_TRUE(engine.CopyAsync(back.data(), d, bytes,
                                     detail::CopyEngine::Kind::kDeviceToHost, stream)
                        .ok());
        ASSERT_TRUE(engine.Synchronize(stream, "test copy").ok());
        FillPattern(field.data(), bytes, 11, t);
        ASSERT_EQ(back, field) << name << " step " << t;
      }
      adjsnap_disconnect(c);
    }
  }
  engine.DeviceRelease(d);
  engine.DestroyStream(stream);
  if (host) {
    EXPECT_EQ(host->pins(), host->unpins());
    EXPECT_GT(host->copies_into_pinned(), 0u);  // the mapped path's pushes
    EXPECT_EQ(host->device_allocations(), 0u);  // the pools went with their clients
  }
}

TEST_F(CApi, AWrongSizeOrAMissingShapeFailsAtTheCall) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("64M")));
  adjsnap_client* c = nullptr;
  ASSERT_EQ(adjsnap_connect(daemon().socket().c_str(), &c), ADJSNAP_OK) << adjsnap_last_error();
  adjsnap_run_spec no_shape{"c-sizes", 4, 4096, 1, nullptr, 3, nullptr, 1, 0, 0, 0.0, 0};
  uint64_t run = 0;
  EXPECT_EQ(adjsnap_open_run(c, &no_shape, &run), ADJSNAP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(adjsnap_last_error()).find("shape is NULL but ndim is 3"), std::string::npos)
      << adjsnap_last_error();
  no_shape.ndim = 0;
  ASSERT_EQ(adjsnap_open_run(c, &no_shape, &run), ADJSNAP_OK) << adjsnap_last_error();
  std::vector<char> step(4096 + 8, 'x');
  adjsnap_push_handle* h = nullptr;
  EXPECT_EQ(adjsnap_push(c, run, 0, step.data(), 4096 + 8, &h), ADJSNAP_INVALID_ARGUMENT);
  EXPECT_EQ(h, nullptr);
  EXPECT_NE(std::string(adjsnap_last_error()).find("4104 bytes, but the run stores 4096 per step"),
            std::string::npos)
      << adjsnap_last_error();
  // The refused call left nothing behind: the right size is stored and comes back.
  ASSERT_EQ(adjsnap_push(c, run, 0, step.data(), 4096, &h), ADJSNAP_OK) << adjsnap_last_error();
  ASSERT_EQ(adjsnap_push_wait_stored(h), ADJSNAP_OK) << adjsnap_last_error();
  adjsnap_push_free(h);
  std::vector<char> back(4096);
  ASSERT_EQ(adjsnap_fetch(c, run, 0, back.data(), back.size()), ADJSNAP_OK) << adjsnap_last_error();
  EXPECT_EQ(back, std::vector<char>(4096, 'x'));
  adjsnap_disconnect(c);
}

TEST_F(CApi, NullArgumentsAreInvalid) {
  EXPECT_EQ(adjsnap_connect(nullptr, nullptr), ADJSNAP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(adjsnap_last_error()).find("must not be NULL"), std::string::npos);
}

// A wait with a limit: a push that cannot get room (a Host-only run that blocks when full, on a
// daemon with no disk tier) passes it with ADJSNAP_DEADLINE_EXCEEDED saying what adjsnapd reports it
// waits for, and goes on; a limit that is no number of seconds is refused by name.
TEST_F(CApi, AWaitWithALimitSaysWhatThePushWaitsFor) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(Options("1M", {"--spool-dirs", "none"})));
  adjsnap_client* c = nullptr;
  ASSERT_EQ(adjsnap_connect(daemon().socket().c_str(), &c), ADJSNAP_OK) << adjsnap_last_error();
  constexpr size_t kStep = 512 << 10;
  adjsnap_run_spec spec{};
  spec.name = "full";
  spec.bytes_per_step = kStep;
  spec.layers = "Host";
  spec.keep = 1;
  spec.block_when_full = 1;
  uint64_t run = 0;
  ASSERT_EQ(adjsnap_open_run(c, &spec, &run), ADJSNAP_OK) << adjsnap_last_error();
  std::vector<char> data(kStep, 1);
  adjsnap_push_handle* h[3] = {};
  for (uint64_t t = 0; t < 3; ++t) {
    ASSERT_EQ(adjsnap_push(c, run, t, data.data(), kStep, &h[t]), ADJSNAP_OK) << adjsnap_last_error();
  }
  ASSERT_EQ(adjsnap_push_wait_stored(h[0]), ADJSNAP_OK) << adjsnap_last_error();
  ASSERT_EQ(adjsnap_push_wait_stored(h[1]), ADJSNAP_OK) << adjsnap_last_error();
  EXPECT_EQ(adjsnap_push_wait_released_for(h[2], 0.2), ADJSNAP_DEADLINE_EXCEEDED);
  std::string why = adjsnap_last_error();
  EXPECT_NE(why.find("push of step 2 of run id"), std::string::npos) << why;
  EXPECT_NE(why.find("adjsnapd reports it has waited"), std::string::npos) << why;
  EXPECT_NE(why.find("host room for"), std::string::npos) << why;
  EXPECT_EQ(adjsnap_push_wait_stored_for(h[2], -1), ADJSNAP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(adjsnap_last_error()).find("seconds >= 0"), std::string::npos);
  ASSERT_EQ(adjsnap_delete_snapshot(c, "full", 0), ADJSNAP_OK) << adjsnap_last_error();
  EXPECT_EQ(adjsnap_push_wait_stored_for(h[2], 30), ADJSNAP_OK) << adjsnap_last_error();
  for (adjsnap_push_handle* p : h) adjsnap_push_free(p);
  adjsnap_disconnect(c);
}

}  // namespace
}  // namespace adjsnap::testing
