// For test_device_host_engine.py only: installs the host copy engine (tests/support) in the
// Python package's own libadjsnap, in a process no client has connected from yet, and hands out
// its "device" memory, so that objects exporting __cuda_array_interface__ take the device push
// and fetch paths on a machine without a GPU. Built by the test with the package's libadjsnap;
// never part of the package.
#include <cstdint>

#include "host_copy_engine.h"

namespace {

adjsnap::testing::HostCopyEngine* engine = nullptr;

}  // namespace

extern "C" {

// Installs an engine with `device_bytes` of "device" memory; 0 when one is installed already.
int adjsnap_test_install_host_engine(uint64_t device_bytes) {
  if (engine != nullptr) return 0;
  engine = new adjsnap::testing::HostCopyEngine(device_bytes);
  adjsnap::detail::SetCopyEngineForTesting(engine);
  return 1;
}

// `bytes` of the engine's device memory (null on failure).
void* adjsnap_test_device_allocate(uint64_t bytes) {
  void* device = nullptr;
  if (engine == nullptr || !engine->DeviceAllocate(bytes, &device).ok()) return nullptr;
  return device;
}

void adjsnap_test_device_release(void* device) { engine->DeviceRelease(device); }

// Device-to-host copies into pinned host memory (the mapped host tier's chunks), and
// host-to-device copies from it.
uint64_t adjsnap_test_copies_into_pinned() { return engine->copies_into_pinned(); }
uint64_t adjsnap_test_copies_from_pinned() { return engine->copies_from_pinned(); }

}  // extern "C"
