// CPU references of the kernels (include/adjsnap/kernels.h).
#include <cstring>
#include <string>

#include "kernel_math.h"
#include "adjsnap/kernels.h"

namespace adjsnap::kernels {

Status ValidateBox(const Box& b) {
  if (b.elem_bytes == 0) return Status::InvalidArgument("box: elem_bytes must be > 0");
  static constexpr const char* kAxis[3] = {"z", "y", "x"};
  for (int a = 0; a < 3; ++a) {
    if (b.dims[a] == 0 || b.extent[a] == 0) {
      return Status::InvalidArgument(std::string("box: axis ") + kAxis[a] +
                                     " has a zero dimension or extent");
    }
    if (b.origin[a] > b.dims[a] || b.extent[a] > b.dims[a] - b.origin[a]) {
      return Status::InvalidArgument(
          std::string("box: axis ") + kAxis[a] + " spans " + std::to_string(b.origin[a]) + ".." +
          std::to_string(b.origin[a] + b.extent[a]) + ", beyond the array's " +
          std::to_string(b.dims[a]));
    }
  }
  return Status::Ok();
}

namespace {

template <bool kPack>
Status CopyBox(const void* from, void* to, const Box& b) {
  ADJSNAP_RETURN_IF_ERROR(ValidateBox(b));
  const auto* src = static_cast<const unsigned char*>(from);
  auto* dst = static_cast<unsigned char*>(to);
  for (uint64_t p = 0, n = BoxElements(b); p < n; ++p) {
    uint64_t f = math::BoxSourceIndex(b.dims, b.origin, b.extent, p);
    if (kPack) {
      std::memcpy(dst + p * b.elem_bytes, src + f * b.elem_bytes, b.elem_bytes);
    } else {
      std::memcpy(dst + f * b.elem_bytes, src + p * b.elem_bytes, b.elem_bytes);
    }
  }
  return Status::Ok();
}

}  // namespace

Status PackBoxCpu(const void* full, void* packed, const Box& box) {
  return CopyBox<true>(full, packed, box);
}

Status UnpackBoxCpu(const void* packed, void* full, const Box& box) {
  return CopyBox<false>(packed, full, box);
}

uint64_t FirstNonFiniteCpu(const void* data, uint64_t count, Real type) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < count; ++i) {
    bool bad;
    if (type == Real::kFloat32) {
      uint32_t bits;
      std::memcpy(&bits, p + i * 4, 4);
      bad = math::NonFinite32(bits);
    } else {
      uint64_t bits;
      std::memcpy(&bits, p + i * 8, 8);
      bad = math::NonFinite64(bits);
    }
    if (bad) return i;
  }
  return kAllFinite;
}

}  // namespace adjsnap::kernels
