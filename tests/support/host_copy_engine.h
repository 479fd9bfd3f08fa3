// A copy engine (client/src/copy_engine.h) with no GPU, for tests: libadjsnap's device push and
// fetch paths run through it on any machine. Each stream is an ordered worker thread; copies are
// memcpy, in stream order; "device" memory is ordinary memory this engine allocates and tracks,
// so IsDevice is true only for its own allocations; pinning records the range and pins nothing.
//
// It checks what CUDA would refuse and what libadjsnap promises: a device-to-host copy reads
// from one of its allocations into memory that is not one (host-to-device the reverse), a stream
// is one it created (or null, its default stream, which CUDA's named streams 1 and 2 also stand
// for), a pinned range overlaps no other, and a copy that touches pinned memory lies inside one
// pinned range (each chunk of the host tier is its own registration: host_pinning.h). The counters
// let a test check that pins and unpins balance, that device memory is given back, and which copies
// reached pinned memory.
//
// Unlike CUDA's legacy default stream, the null stream does not wait for the others.
//
// Threading: thread-safe. `done` callbacks run on the stream's worker thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "adjsnap/thread_annotations.h"
#include "copy_engine.h"

namespace adjsnap::testing {

class HostCopyEngine final : public detail::CopyEngine {
 public:
  // `device_bytes`: the "device" memory there is, which DeviceFreeMemory reports less what is
  // allocated.
  explicit HostCopyEngine(uint64_t device_bytes = 1ull << 30);
  // Runs what the streams hold, then frees what is still allocated.
  ~HostCopyEngine() override;
  HostCopyEngine(const HostCopyEngine&) = delete;
  HostCopyEngine& operator=(const HostCopyEngine&) = delete;

  kernels::DeviceProbe Probe() override;
  Status CreateStream(void** stream) override;
  void DestroyStream(void* stream) override;
  Status CopyAsync(void* to, const void* from, size_t bytes, Kind kind, void* stream) override;
  Status ThenDone(void* stream, Done done) override;
  Status Synchronize(void* stream, const char* what) override;
  Status PinHost(char* base, size_t bytes) override;
  void UnpinHost(char* base) override;
  Status DeviceFreeMemory(uint64_t* free_bytes) override;
  Status DeviceAllocate(uint64_t bytes, void** device) override;
  void DeviceRelease(void* device) override;
  bool IsDevice(const void* p) override;
  Status FirstNonFinite(const void* device, uint64_t count, bool f64, void* stream,
                        uint64_t* index) override;

  // For the tests' checks.
  uint64_t pins() const;
  uint64_t unpins() const;
  size_t pinned_ranges() const;       // pinned now
  size_t device_allocations() const;  // allocated and not released
  // Device-to-host copies into pinned memory, and host-to-device copies from it.
  uint64_t copies_into_pinned() const;
  uint64_t copies_from_pinned() const;

 private:
  class Stream;
  Result<std::shared_ptr<Stream>> Find(void* stream);
  // Whether [p, p + bytes) lies inside one device allocation.
  bool InDevice(const void* p, size_t bytes) const ADJSNAP_REQUIRES(mu_);
  bool TouchesDevice(const void* p, size_t bytes) const ADJSNAP_REQUIRES(mu_);
  // The host side of a copy: OK when it touches no pinned range or lies inside one; `*pinned`
  // says which.
  Status CheckHost(const void* p, size_t bytes, bool* pinned) const ADJSNAP_REQUIRES(mu_);
  // Held while drained: a stream destroyed meanwhile lives until its drain ends.
  std::vector<std::shared_ptr<Stream>> AllStreams();

  const uint64_t device_bytes_;
  mutable Mutex mu_;
  std::map<uintptr_t, size_t> device_ ADJSNAP_GUARDED_BY(mu_);  // base -> bytes
  uint64_t allocated_ ADJSNAP_GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, size_t> pinned_ ADJSNAP_GUARDED_BY(mu_);  // base -> bytes
  uint64_t pins_ ADJSNAP_GUARDED_BY(mu_) = 0;
  uint64_t unpins_ ADJSNAP_GUARDED_BY(mu_) = 0;
  uint64_t into_pinned_ ADJSNAP_GUARDED_BY(mu_) = 0;
  uint64_t from_pinned_ ADJSNAP_GUARDED_BY(mu_) = 0;
  std::map<void*, std::shared_ptr<Stream>> streams_ ADJSNAP_GUARDED_BY(mu_);
  std::shared_ptr<Stream> default_stream_;  // the null stream
};

}  // namespace adjsnap::testing
