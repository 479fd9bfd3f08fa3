// The device entry points of a build without CUDA: each says so.
#include "adjsnap/kernels.h"

namespace adjsnap::kernels {
namespace {

Status NoCuda(const char* what) {
  return Status::FailedPrecondition(std::string(what) +
                                    ": this adjsnapd was built without CUDA (ADJSNAP_WITH_CUDA=OFF or "
                                    "no nvcc); rebuild with the CUDA Toolkit installed");
}

}  // namespace

Status ChecksumDevice(const void*, uint64_t, uint64_t*, void*) { return NoCuda("checksum"); }
Status FirstNonFiniteDevice(const void*, uint64_t, Real, uint64_t*, void*) {
  return NoCuda("NaN/Inf scan");
}
Status PackBoxDevice(const void*, void*, const Box&, void*) { return NoCuda("pack"); }
Status UnpackBoxDevice(const void*, void*, const Box&, void*) { return NoCuda("unpack"); }
DeviceProbe ProbeDevice() { return DescribeDevice(DeviceFacts{}); }

}  // namespace adjsnap::kernels
