#include "host_copy_engine.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <utility>

#include "task_thread.h"

namespace adjsnap::testing {

namespace {

std::string Range(const void* p, size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "[%p, +%zu)", p, bytes);
  return text;
}

// A range [lo, lo + n) inside an entry of `ranges` (base -> bytes).
bool Inside(const std::map<uintptr_t, size_t>& ranges, uintptr_t lo, size_t n) {
  auto it = ranges.upper_bound(lo);
  if (it == ranges.begin()) return false;
  --it;
  return lo >= it->first && lo + n <= it->first + it->second;
}

bool Overlaps(const std::map<uintptr_t, size_t>& ranges, uintptr_t lo, size_t n) {
  if (n == 0) return false;
  auto it = ranges.lower_bound(lo + n);  // the first range starting at or past the end
  if (it == ranges.begin()) return false;
  --it;
  return it->first + it->second > lo;
}

}  // namespace

// One ordered worker: the stream's work runs on it in the order enqueued.
class HostCopyEngine::Stream {
 public:
  Stream() : worker_("host-stream") {}
  void Enqueue(std::function<void()> task) { worker_.Submit(std::move(task)); }
  void Drain() {
    std::promise<void> drained;
    worker_.Submit([&drained] { drained.set_value(); });
    drained.get_future().wait();
  }

 private:
  detail::TaskThread worker_;
};

HostCopyEngine::HostCopyEngine(uint64_t device_bytes)
    : device_bytes_(device_bytes), default_stream_(std::make_shared<Stream>()) {}

HostCopyEngine::~HostCopyEngine() {
  std::map<void*, std::shared_ptr<Stream>> streams;
  {
    MutexLock lock(mu_);
    streams.swap(streams_);
  }
  streams.clear();  // each worker runs what it holds, then joins
  default_stream_.reset();
  MutexLock lock(mu_);
  for (const auto& [base, bytes] : device_) std::free(reinterpret_cast<void*>(base));
}

kernels::DeviceProbe HostCopyEngine::Probe() {
  return {true, "host copy engine (a test's: no GPU, device memory is host memory)"};
}

Status HostCopyEngine::CreateStream(void** stream) {
  auto s = std::make_shared<Stream>();
  *stream = s.get();
  MutexLock lock(mu_);
  streams_.emplace(*stream, std::move(s));
  return Status::Ok();
}

void HostCopyEngine::DestroyStream(void* stream) {
  std::shared_ptr<Stream> gone;
  {
    MutexLock lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    gone = std::move(it->second);
    streams_.erase(it);
  }
  // Runs what the stream holds first, as cudaStreamDestroy lets it finish.
}

Result<std::shared_ptr<HostCopyEngine::Stream>> HostCopyEngine::Find(void* stream) {
  // CUDA's named streams, which a caller may pass for a stream of its own: cudaStreamLegacy (1)
  // and cudaStreamPerThread (2), as __cuda_array_interface__ numbers them too.
  const auto named = reinterpret_cast<uintptr_t>(stream);
  if (named == 0 || named == 1 || named == 2) return default_stream_;
  MutexLock lock(mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", stream);
    return Status::InvalidArgument(std::string("host copy engine: stream ") + text +
                                   " is not one it created");
  }
  return it->second;
}

std::vector<std::shared_ptr<HostCopyEngine::Stream>> HostCopyEngine::AllStreams() {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<Stream>> all{default_stream_};
  for (const auto& [handle, s] : streams_) all.push_back(s);
  return all;
}

bool HostCopyEngine::InDevice(const void* p, size_t bytes) const {
  return Inside(device_, reinterpret_cast<uintptr_t>(p), bytes);
}

bool HostCopyEngine::TouchesDevice(const void* p, size_t bytes) const {
  return Overlaps(device_, reinterpret_cast<uintptr_t>(p), bytes);
}

Status HostCopyEngine::CheckHost(const void* p, size_t bytes, bool* pinned) const {
  auto lo = reinterpret_cast<uintptr_t>(p);
  *pinned = Inside(pinned_, lo, bytes);
  if (*pinned || !Overlaps(pinned_, lo, bytes)) return Status::Ok();
  return Status::InvalidArgument("host copy engine: host range " + Range(p, bytes) +
                                 " crosses the edge of a pinned range");
}

Status HostCopyEngine::CopyAsync(void* to, const void* from, size_t bytes, Kind kind,
                                 void* stream) {
  ADJSNAP_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, Find(stream));
  if (bytes == 0) return Status::Ok();
  {
    MutexLock lock(mu_);
    if (kind != Kind::kAny) {
      const bool d2h = kind == Kind::kDeviceToHost;
      const void* device = d2h ? from : to;
      const void* host = d2h ? to : from;
      if (!InDevice(device, bytes)) {
        return Status::InvalidArgument(std::string("host copy engine: the device side of a ") +
                                       (d2h ? "device-to-host" : "host-to-device") + " copy, " +
                                       Range(device, bytes) +
                                       ", is not inside one device allocation");
      }
      if (TouchesDevice(host, bytes)) {
        return Status::InvalidArgument("host copy engine: the host side of a copy, " +
                                       Range(host, bytes) + ", is device memory");
      }
      bool pinned = false;
      ADJSNAP_RETURN_IF_ERROR(CheckHost(host, bytes, &pinned));
      if (pinned) ++(d2h ? into_pinned_ : from_pinned_);
    }
  }
  s->Enqueue([to, from, bytes] { std::memcpy(to, from, bytes); });
  return Status::Ok();
}

Status HostCopyEngine::ThenDone(void* stream, Done done) {
  ADJSNAP_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, Find(stream));
  s->Enqueue([done = std::move(done)] { done(Status::Ok()); });
  return Status::Ok();
}

Status HostCopyEngine::Synchronize(void* stream, const char*) {
  ADJSNAP_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, Find(stream));
  s->Drain();
  return Status::Ok();
}

Status HostCopyEngine::PinHost(char* base, size_t bytes) {
  MutexLock lock(mu_);
  if (Overlaps(pinned_, reinterpret_cast<uintptr_t>(base), bytes)) {
    return Status::InvalidArgument("host copy engine: pinning " + Range(base, bytes) +
                                   ", which overlaps a range pinned already");
  }
  pinned_.emplace(reinterpret_cast<uintptr_t>(base), bytes);
  ++pins_;
  return Status::Ok();
}

void HostCopyEngine::UnpinHost(char* base) {
  MutexLock lock(mu_);
  if (pinned_.erase(reinterpret_cast<uintptr_t>(base)) > 0) ++unpins_;
}

Status HostCopyEngine::DeviceFreeMemory(uint64_t* free_bytes) {
  MutexLock lock(mu_);
  *free_bytes = device_bytes_ - allocated_;
  return Status::Ok();
}

Status HostCopyEngine::DeviceAllocate(uint64_t bytes, void** device) {
  constexpr uint64_t kAlign = 256;  // cudaMalloc's
  uint64_t rounded = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  MutexLock lock(mu_);
  if (rounded > device_bytes_ - allocated_) {
    return Status::ResourceExhausted("host copy engine: out of device memory (" +
                                     std::to_string(bytes) + " bytes asked, " +
                                     std::to_string(device_bytes_ - allocated_) + " free)");
  }
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) return Status::ResourceExhausted("host copy engine: aligned_alloc failed");
  std::memset(p, 0xA5, rounded);  // not zeros: a read of bytes nobody wrote shows
  device_.emplace(reinterpret_cast<uintptr_t>(p), rounded);
  allocated_ += rounded;
  *device = p;
  return Status::Ok();
}

void HostCopyEngine::DeviceRelease(void* device) {
  for (const auto& s : AllStreams()) s->Drain();  // as cudaFree waits for the device's work
  MutexLock lock(mu_);
  auto it = device_.find(reinterpret_cast<uintptr_t>(device));
  if (it == device_.end()) return;
  allocated_ -= it->second;
  std::free(device);
  device_.erase(it);
}

bool HostCopyEngine::IsDevice(const void* p) {
  MutexLock lock(mu_);
  return InDevice(p, 1);
}

Status HostCopyEngine::FirstNonFinite(const void* device, uint64_t count, bool f64, void* stream,
                                      uint64_t* index) {
  {
    MutexLock lock(mu_);
    if (count > 0 && !InDevice(device, count * (f64 ? 8 : 4))) {
      return Status::InvalidArgument("host copy engine: the NaN scan's " +
                                     Range(device, count * (f64 ? 8 : 4)) +
                                     " is not inside one device allocation");
    }
  }
  ADJSNAP_RETURN_IF_ERROR(Synchronize(stream, "NaN scan"));  // the scan follows the stream
  *index = kernels::FirstNonFiniteCpu(device, count,
                                      f64 ? kernels::Real::kFloat64 : kernels::Real::kFloat32);
  return Status::Ok();
}

uint64_t HostCopyEngine::pins() const {
  MutexLock lock(mu_);
  return pins_;
}
uint64_t HostCopyEngine::unpins() const {
  MutexLock lock(mu_);
  return unpins_;
}
size_t HostCopyEngine::pinned_ranges() const {
  MutexLock lock(mu_);
  return pinned_.size();
}
size_t HostCopyEngine::device_allocations() const {
  MutexLock lock(mu_);
  return device_.size();
}
uint64_t HostCopyEngine::copies_into_pinned() const {
  MutexLock lock(mu_);
  return into_pinned_;
}
uint64_t HostCopyEngine::copies_from_pinned() const {
  MutexLock lock(mu_);
  return from_pinned_;
}

}  // namespace adjsnap::testing
