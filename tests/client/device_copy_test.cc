// libadjsnap's device copies (client/src/device_copy.h) over the copy-engine seam, through the
// host copy engine: the pieces of a copy into the pinned host tier land before `done` runs, a
// piece that crosses a pinned chunk is refused, a chunked pinning unpins what it pinned, and no
// engine is left installed.
#include "device_copy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "copy_engine.h"
#include "host_copy_engine.h"
#include "host_pinning.h"

namespace adjsnap::testing {
namespace {

constexpr uint64_t kChunk = 4096;

class DeviceCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = detail::SetCopyEngineForTesting(&engine_);
    ASSERT_TRUE(engine_.CreateStream(&stream_).ok());
  }
  void TearDown() override {
    engine_.DestroyStream(stream_);
    EXPECT_EQ(detail::SetCopyEngineForTesting(previous_), &engine_);
  }
  HostCopyEngine engine_{1 << 20};
  detail::CopyEngine* previous_ = nullptr;
  void* stream_ = nullptr;
};

TEST_F(DeviceCopyTest, PiecesLandInTheirChunksBeforeDoneRuns) {
  std::vector<char> tier(4 * kChunk, 0);
  detail::HostPinning pinning(tier.data(), tier.size(), kChunk, detail::PinHost, detail::UnpinHost);
  const uint64_t offset = kChunk - 100, bytes = 2 * kChunk + 50;  // in three chunks
  std::promise<Status> pinned;
  pinning.WhenPinned(offset, bytes, [&](Status s) { pinned.set_value(s); });
  ASSERT_TRUE(pinned.get_future().get().ok());
  void* device = nullptr;
  ASSERT_TRUE(detail::DeviceAllocate(bytes, &device).ok());
  std::vector<char> want(bytes);
  std::iota(want.begin(), want.end(), 7);
  ASSERT_TRUE(detail::CopyHostToDevice(device, want.data(), bytes, stream_).ok());

  std::promise<std::vector<char>> seen;  // what the tier holds when `done` runs
  auto pieces = pinning.Pieces(offset, bytes);
  ASSERT_EQ(pieces.size(), 3u);
  ASSERT_TRUE(
      detail::CopyDeviceToHostAsync(tier.data(), static_cast<char*>(device), pieces, stream_,
                                    [&](Status s) {
                                      EXPECT_TRUE(s.ok());
                                      seen.set_value(std::vector<char>(
                                          tier.begin() + offset, tier.begin() + offset + bytes));
                                    })
          .ok());
  EXPECT_EQ(seen.get_future().get(), want);
  EXPECT_EQ(engine_.copies_into_pinned(), 3u);

  // And back, from the tier into other device memory.
  void* other = nullptr;
  ASSERT_TRUE(detail::DeviceAllocate(bytes, &other).ok());
  std::promise<void> back;
  ASSERT_TRUE(detail::CopyHostToDeviceAsync(static_cast<char*>(other), tier.data(), pieces, stream_,
                                            [&](Status) { back.set_value(); })
                  .ok());
  back.get_future().wait();
  std::vector<char> got(bytes);
  ASSERT_TRUE(detail::CopyDeviceToHost(got.data(), other, bytes, stream_).ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(engine_.copies_from_pinned(), 3u);
  detail::DeviceRelease(device);
  detail::DeviceRelease(other);
  EXPECT_EQ(engine_.device_allocations(), 0u);
}

TEST_F(DeviceCopyTest, APieceAcrossTwoPinnedChunksIsRefused) {
  std::vector<char> tier(2 * kChunk);
  detail::HostPinning pinning(tier.data(), tier.size(), kChunk, detail::PinHost, detail::UnpinHost);
  std::promise<Status> pinned;
  pinning.WhenPinned(0, tier.size(), [&](Status s) { pinned.set_value(s); });
  ASSERT_TRUE(pinned.get_future().get().ok());
  void* device = nullptr;
  ASSERT_TRUE(detail::DeviceAllocate(tier.size(), &device).ok());
  bool called = false;
  Status s =
      detail::CopyDeviceToHostAsync(tier.data(), static_cast<char*>(device), {{kChunk / 2, kChunk}},
                                    stream_, [&](Status) { called = true; });
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("crosses the edge of a pinned range"), std::string::npos);
  ASSERT_TRUE(engine_.Synchronize(stream_, "test").ok());
  EXPECT_FALSE(called);
  detail::DeviceRelease(device);
}

TEST_F(DeviceCopyTest, ADeviceToHostCopyFromHostMemoryIsRefused) {
  std::vector<char> a(64), b(64);
  Status s = detail::CopyDeviceToHost(a.data(), b.data(), b.size(), stream_);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not inside one device allocation"), std::string::npos);
}

TEST_F(DeviceCopyTest, AStreamItDidNotCreateIsRefusedAndCudasNamedOnesAreItsDefault) {
  void* device = nullptr;
  ASSERT_TRUE(detail::DeviceAllocate(64, &device).ok());
  std::vector<char> host(64, 'x');
  int not_a_stream = 0;
  Status s = detail::CopyHostToDevice(device, host.data(), host.size(), &not_a_stream);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("is not one it created"), std::string::npos) << s.message();
  for (uintptr_t named : {0, 1, 2}) {  // null, cudaStreamLegacy, cudaStreamPerThread
    EXPECT_TRUE(
        detail::CopyHostToDevice(device, host.data(), host.size(), reinterpret_cast<void*>(named))
            .ok())
        << named;
  }
  detail::DeviceRelease(device);
}

TEST_F(DeviceCopyTest, OnlyItsOwnAllocationsAreDeviceMemory) {
  void* device = nullptr;
  ASSERT_TRUE(detail::DeviceAllocate(1000, &device).ok());
  std::vector<char> host(1000);
  EXPECT_TRUE(engine_.IsDevice(device));
  EXPECT_TRUE(engine_.IsDevice(static_cast<char*>(device) + 999));
  EXPECT_FALSE(engine_.IsDevice(host.data()));
  uint64_t free_bytes = 0;
  ASSERT_TRUE(detail::DeviceFreeMemory(&free_bytes).ok());
  EXPECT_EQ(free_bytes, (1u << 20) - 1024);  // 1000 bytes take 1024: 256-byte granules
  detail::DeviceRelease(device);
  EXPECT_FALSE(engine_.IsDevice(device));
  ASSERT_TRUE(detail::DeviceFreeMemory(&free_bytes).ok());
  EXPECT_EQ(free_bytes, 1u << 20);
}

TEST_F(DeviceCopyTest, TheChunkedPinningUnpinsWhatItPinned) {
  std::vector<char> tier(5 * kChunk + 10);
  {
    detail::HostPinning pinning(tier.data(), tier.size(), kChunk, detail::PinHost,
                                detail::UnpinHost);
    std::promise<Status> pinned;
    pinning.WhenPinned(kChunk + 1, 2 * kChunk, [&](Status s) { pinned.set_value(s); });
    ASSERT_TRUE(pinned.get_future().get().ok());
    EXPECT_EQ(engine_.pinned_ranges(), 3u);
  }
  EXPECT_EQ(engine_.pins(), 3u);
  EXPECT_EQ(engine_.unpins(), 3u);
  EXPECT_EQ(engine_.pinned_ranges(), 0u);
}

TEST_F(DeviceCopyTest, TheNanScanFollowsTheStream) {
  std::vector<float> field(1000, 1.5f);
  field[777] = INFINITY;
  void* device = nullptr;
  ASSERT_TRUE(detail::DeviceAllocate(field.size() * 4, &device).ok());
  // The copy waits on the stream behind a gate that opens once the scan has been called: a scan
  // that did not wait for the stream would read the allocation's fill, all finite.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  ASSERT_TRUE(engine_.ThenDone(stream_, [opened](Status) { opened.wait(); }).ok());
  ASSERT_TRUE(engine_
                  .CopyAsync(device, field.data(), field.size() * 4,
                             detail::CopyEngine::Kind::kHostToDevice, stream_)
                  .ok());
  auto scan = std::async(std::launch::async, [&] {
    uint64_t index = 0;
    Status s = detail::FirstNonFiniteOnDevice(device, field.size(), false, stream_, &index);
    return std::make_pair(s, index);
  });
  gate.set_value();
  auto [status, index] = scan.get();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(index, 777u);
  detail::DeviceRelease(device);
}

}  // namespace
}  // namespace adjsnap::testing
