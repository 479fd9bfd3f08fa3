// How libadjsnap hands a solver's buffer to UCX on the copied path (a UCX endpoint to adjsnapd:
// a solver of another uid, or ADJSNAP_DATA_PATH=ucx).
//
// Host memory goes as it is (UCX's default memory type). Device memory goes to UCX as CUDA
// memory (ucp_request_param_t.memory_type = UCS_MEMORY_TYPE_CUDA), with no staging copy in the
// client, when three things hold: libadjsnap was built with CUDA, the copy engine says the
// buffer is device memory (copy_engine.h: CUDA's cudaPointerGetAttributes, or a test's engine),
// and the UCX context takes CUDA memory (a CUDA-aware UCX such as the libucx-cu13 wheel's, whose
// cuda_copy transport loaded because the NVIDIA driver is there). Otherwise, Debian's UCX 1.13
// above all (no CUDA transport), a device buffer is staged through host memory as before.
//
// Threading: any thread; UcxTakesCuda reads the context, which UCX allows from any thread.
#pragma once

#include <ucp/api/ucp.h>

namespace adjsnap::detail {

// How one buffer reaches UCX.
enum class UcxBuffer {
  kHost,    // host memory, handed to UCX as it is
  kCuda,    // device memory handed to UCX as CUDA memory: UCX moves it, no copy in the client
  kStaged,  // device memory this UCX cannot take: copied through host memory in the client
};

// Whether libadjsnap was built with CUDA (ADJSNAP_WITH_CUDA).
bool BuiltWithCuda();

// Whether `context` takes CUDA memory: ucp_context_query's memory types include
// UCS_MEMORY_TYPE_CUDA (false when the query fails).
bool UcxTakesCuda(ucp_context_h context);

// The rule above, on what is known of the buffer.
UcxBuffer ChooseUcxBuffer(bool device, bool ucx_takes_cuda, bool built_with_cuda);
// The same for `buffer`, asking the copy engine whether it is device memory.
UcxBuffer ChooseUcxBuffer(const void* buffer, bool ucx_takes_cuda);

// Adds to `param` the memory type a buffer of kind `buffer` has for UCX: kCuda sets
// UCP_OP_ATTR_FIELD_MEMORY_TYPE and UCS_MEMORY_TYPE_CUDA; kHost and kStaged (whose bytes UCX
// sees in host memory) leave `param` as it is, as every request was before.
void SetUcxMemoryType(UcxBuffer buffer, ucp_request_param_t* param);

}  // namespace adjsnap::detail
