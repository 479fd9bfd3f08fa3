// Which memory type libadjsnap's copied path gives UCX for a buffer (client/src/ucx_memory.h):
// host memory as it is; device memory as CUDA memory when the build has CUDA and the UCX takes
// it, staged through host memory otherwise; the copy engine (here the host one, whose
// allocations stand for device memory) tells device buffers from host ones; and a UCX with no
// CUDA transport loaded, as on a machine without the NVIDIA driver, takes no CUDA memory.
#include "ucx_memory.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <vector>

#include "copy_engine.h"
#include "host_copy_engine.h"
#include "adjsnap/ucx.h"

namespace adjsnap::testing {
namespace {

using detail::UcxBuffer;

// What the copied path's send and receive parameters hold before the memory type is added.
ucp_request_param_t RequestParam() {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;
  return p;
}

TEST(UcxMemory, HostMemoryIsHandedAsItIs) {
  for (bool takes : {false, true}) {
    for (bool built : {false, true}) {
      EXPECT_EQ(detail::ChooseUcxBuffer(/*device=*/false, takes, built), UcxBuffer::kHost);
    }
  }
  ucp_request_param_t p = RequestParam();
  detail::SetUcxMemoryType(UcxBuffer::kHost, &p);
  EXPECT_EQ(p.op_attr_mask, RequestParam().op_attr_mask);  // UCX's default: host memory
}

TEST(UcxMemory, DeviceMemoryGoesToACudaAwareUcxAsCudaMemory) {
  EXPECT_EQ(detail::ChooseUcxBuffer(/*device=*/true, /*ucx_takes_cuda=*/true,
                                    /*built_with_cuda=*/true),
            UcxBuffer::kCuda);
  ucp_request_param_t p = RequestParam();
  detail::SetUcxMemoryType(UcxBuffer::kCuda, &p);
  EXPECT_EQ(p.op_attr_mask, RequestParam().op_attr_mask | UCP_OP_ATTR_FIELD_MEMORY_TYPE);
  EXPECT_EQ(p.memory_type, UCS_MEMORY_TYPE_CUDA);
  EXPECT_EQ(p.flags, UCP_AM_SEND_FLAG_REPLY);  // what was set stays
}

TEST(UcxMemory, DeviceMemoryIsStagedWithoutCudaInTheUcxOrTheBuild) {
  EXPECT_EQ(detail::ChooseUcxBuffer(true, /*ucx_takes_cuda=*/false, /*built_with_cuda=*/true),
            UcxBuffer::kStaged);
  EXPECT_EQ(detail::ChooseUcxBuffer(true, /*ucx_takes_cuda=*/true, /*built_with_cuda=*/false),
            UcxBuffer::kStaged);
  EXPECT_EQ(detail::ChooseUcxBuffer(true, false, false), UcxBuffer::kStaged);
  ucp_request_param_t p = RequestParam();
  detail::SetUcxMemoryType(UcxBuffer::kStaged, &p);  // UCX sees the host copy
  EXPECT_EQ(p.op_attr_mask, RequestParam().op_attr_mask);
}

TEST(UcxMemory, TheCopyEngineTellsDeviceBuffersFromHostOnes) {
  HostCopyEngine engine(1 << 20);
  detail::CopyEngine* previous = detail::SetCopyEngineForTesting(&engine);
  void* device = nullptr;
  ASSERT_TRUE(engine.DeviceAllocate(4096, &device).ok());
  std::vector<char> host(4096);
  EXPECT_EQ(detail::ChooseUcxBuffer(device, /*ucx_takes_cuda=*/true),
            detail::BuiltWithCuda() ? UcxBuffer::kCuda : UcxBuffer::kStaged);
  EXPECT_EQ(detail::ChooseUcxBuffer(device, /*ucx_takes_cuda=*/false), UcxBuffer::kStaged);
  EXPECT_EQ(detail::ChooseUcxBuffer(host.data(), true), UcxBuffer::kHost);
  EXPECT_EQ(detail::ChooseUcxBuffer(host.data(), false), UcxBuffer::kHost);
  engine.DeviceRelease(device);
  EXPECT_EQ(detail::SetCopyEngineForTesting(previous), &engine);
}

// Without the driver UCX's CUDA transports do not load (the wheel's libuct_cuda needs
// libcuda.so.1; Debian's UCX has none): the copied path then stages device buffers, as before.
TEST(UcxMemory, AUcxWithoutTheNvidiaDriverTakesNoCudaMemory) {
  if (void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(cuda);
    GTEST_SKIP() << "the NVIDIA driver is here: whether UCX takes CUDA memory depends on its build";
  }
  auto loop = ucx::WorkerLoop::Create("ucx-memory-test");
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  EXPECT_FALSE(detail::UcxTakesCuda((*loop)->context()));
}

}  // namespace
}  // namespace adjsnap::testing
