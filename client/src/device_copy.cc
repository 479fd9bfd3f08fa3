#include "device_copy.h"

#include "copy_engine.h"

namespace adjsnap::detail {

namespace {

// Each piece its own copy, in order on one stream, then `done`.
Status CopyPiecesAsync(char* host, char* device, const Pieces& pieces, CopyEngine::Kind kind,
                       void* stream, std::function<void(Status)> done) {
  if (pieces.empty()) return Status::InvalidArgument("a copy of no bytes");
  CopyEngine& engine = Engine();
  uint64_t first = pieces.front().first;
  for (const auto& [offset, bytes] : pieces) {
    char* h = host + offset;
    char* d = device + (offset - first);
    ADJSNAP_RETURN_IF_ERROR(kind == CopyEngine::Kind::kDeviceToHost
                                ? engine.CopyAsync(h, d, bytes, kind, stream)
                                : engine.CopyAsync(d, h, bytes, kind, stream));
  }
  return engine.ThenDone(stream, std::move(done));
}

}  // namespace

Status PinHost(char* base, size_t bytes) { return Engine().PinHost(base, bytes); }

void UnpinHost(char* base) { Engine().UnpinHost(base); }

Status CopyDeviceToHostAsync(char* host, const char* device, const Pieces& pieces, void* stream,
                             std::function<void(Status)> done) {
  return CopyPiecesAsync(host, const_cast<char*>(device), pieces, CopyEngine::Kind::kDeviceToHost,
                         stream, std::move(done));
}

Status CopyHostToDeviceAsync(char* device, const char* host, const Pieces& pieces, void* stream,
                             std::function<void(Status)> done) {
  return CopyPiecesAsync(const_cast<char*>(host), device, pieces, CopyEngine::Kind::kHostToDevice,
                         stream, std::move(done));
}

Status CopyAnyAsync(void* to, const void* from, size_t bytes, void* stream,
                    std::function<void(Status)> done) {
  CopyEngine& engine = Engine();
  ADJSNAP_RETURN_IF_ERROR(engine.CopyAsync(to, from, bytes, CopyEngine::Kind::kAny, stream));
  return engine.ThenDone(stream, std::move(done));
}

Status DeviceFreeMemory(uint64_t* free_bytes) { return Engine().DeviceFreeMemory(free_bytes); }

Status DeviceAllocate(uint64_t bytes, void** device) {
  return Engine().DeviceAllocate(bytes, device);
}

void DeviceRelease(void* device) { Engine().DeviceRelease(device); }

Status SynchronizeStream(void* stream, const char* what) {
  return Engine().Synchronize(stream, what);
}

Status CopyDeviceToHost(void* host, const void* device, size_t bytes, void* stream) {
  CopyEngine& engine = Engine();
  ADJSNAP_RETURN_IF_ERROR(
      engine.CopyAsync(host, device, bytes, CopyEngine::Kind::kDeviceToHost, stream));
  return engine.Synchronize(stream, "device-to-host copy");
}

Status CopyHostToDevice(void* device, const void* host, size_t bytes, void* stream) {
  CopyEngine& engine = Engine();
  ADJSNAP_RETURN_IF_ERROR(
      engine.CopyAsync(device, host, bytes, CopyEngine::Kind::kHostToDevice, stream));
  return engine.Synchronize(stream, "host-to-device copy");
}

Status FirstNonFiniteOnDevice(const void* device, uint64_t count, bool f64, void* stream,
                              uint64_t* index) {
  return Engine().FirstNonFinite(device, count, f64, stream, index);
}

}  // namespace adjsnap::detail
