// The device entry points of a build without CUDA: each says so.
#include "snapd/kernels.h"

namespace snapd::kernels {
namespace {

Status NoCuda(const char* what) {
  return Status::FailedPrecondition(std::string(what) +
                                    ": this snapd was built without CUDA (SNAPD_WITH_CUDA=OFF or "
                                    "no nvcc); rebuild with the CUDA Toolkit installed");
}

}  // namespace

Status ChecksumDevice(const void*, uint64_t, uint64_t*, void*) { return NoCuda("checksum"); }
Status FirstNonFiniteDevice(const void*, uint64_t, Real, uint64_t*, void*) {
  return NoCuda("NaN/Inf scan");
}
Status PackBoxDevice(const void*, void*, const Box&, void*) { return NoCuda("pack"); }
Status UnpackBoxDevice(const void*, void*, const Box&, void*) { return NoCuda("unpack"); }
DeviceProbe ProbeDevice() { return {false, "none (built without CUDA)"}; }

}  // namespace snapd::kernels
