#include "ucx_memory.h"

#include "copy_engine.h"

namespace adjsnap::detail {

bool BuiltWithCuda() { return ADJSNAP_WITH_CUDA != 0; }

bool UcxTakesCuda(ucp_context_h context) {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context, &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

UcxBuffer ChooseUcxBuffer(bool device, bool ucx_takes_cuda, bool built_with_cuda) {
  if (!device) return UcxBuffer::kHost;
  return built_with_cuda && ucx_takes_cuda ? UcxBuffer::kCuda : UcxBuffer::kStaged;
}

UcxBuffer ChooseUcxBuffer(const void* buffer, bool ucx_takes_cuda) {
  return ChooseUcxBuffer(Engine().IsDevice(buffer), ucx_takes_cuda, BuiltWithCuda());
}

void SetUcxMemoryType(UcxBuffer buffer, ucp_request_param_t* param) {
  if (buffer != UcxBuffer::kCuda) return;
  param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param->memory_type = UCS_MEMORY_TYPE_CUDA;
}

}  // namespace adjsnap::detail
