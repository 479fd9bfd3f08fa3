// Pins the daemon's mapped host tier for the GPU chunk by chunk, so that a device push or
// fetch waits only for the chunks its own block lies in, never for the whole tier: pinning
// (cudaHostRegister) costs about 0.2-0.5 s per GiB, and pinning a 48 GiB tier in one call held
// the first device push for 15 s. PinAllInBackground can pin the rest of the tier in address
// order behind any chunk a push or fetch is waiting for; libadjsnap does not call it (pinning
// faults in every page, and a client's arena is as large as the whole tier: see
// docs/architecture.md, "GPU path").
//
// Each chunk is its own registration, so a copy must not cross a chunk boundary: Pieces() cuts
// a range where the chunks meet.
//
// Threading: thread-safe. `pin` runs on the pinning thread only, `unpin` in the destructor;
// `then` callbacks run on the caller's thread (range already pinned) or on the pinning thread.
// The destructor waits for the chunk being pinned, answers the requests still waiting with
// ABORTED, then unpins what was pinned.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"
#include "adjsnap/thread_name.h"

namespace adjsnap::detail {

class HostPinning {
 public:
  using PinFn = std::function<Status(char* base, size_t bytes)>;
  using UnpinFn = std::function<void(char* base)>;
  // 64 MiB: a 256 MiB step waits for at most five chunks, and a 48 GiB tier is 768
  // registrations, each a few tens of microseconds beyond its per-page cost.
  static constexpr uint64_t kDefaultChunk = 64ull << 20;

  HostPinning(char* base, uint64_t bytes, uint64_t chunk, PinFn pin, UnpinFn unpin)
      : base_(base),
        bytes_(bytes),
        chunk_(std::max<uint64_t>(chunk, 1)),
        pin_(std::move(pin)),
        unpin_(std::move(unpin)),
        state_((bytes + chunk_ - 1) / chunk_) {}

  HostPinning(const HostPinning&) = delete;
  HostPinning& operator=(const HostPinning&) = delete;

  ~HostPinning() {
    std::deque<Request> left;
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    if (thread_.joinable()) thread_.join();
    {
      MutexLock lock(mu_);
      left.swap(requests_);
    }
    for (Request& r : left) r.then(Status::Aborted("the client closed before the GPU could use adjsnapd's host tier"));
    for (size_t i = 0; i < state_.size(); ++i) {
      if (state_[i].load(std::memory_order_acquire) == kPinned) unpin_(base_ + i * chunk_);
    }
  }

  uint64_t chunk_bytes() const { return chunk_; }
  size_t chunks() const { return state_.size(); }
  size_t pinned_chunks() const {
    return static_cast<size_t>(std::count_if(state_.begin(), state_.end(), [](const auto& s) {
      return s.load(std::memory_order_acquire) == kPinned;
    }));
  }

  // Every chunk of [offset, offset + bytes) is pinned. Lock-free: a push's fast path.
  bool Pinned(uint64_t offset, uint64_t bytes) const {
    auto [first, last] = Span(offset, bytes);
    for (size_t i = first; i < last; ++i) {
      if (state_[i].load(std::memory_order_acquire) != kPinned) return false;
    }
    return true;
  }

  // Runs `then` once every chunk of the range is pinned (OK), or with the first failure: at
  // once on this thread when the range is pinned already, otherwise on the pinning thread,
  // which pins this range before anything the background sweep has left.
  void WhenPinned(uint64_t offset, uint64_t bytes, std::function<void(Status)> then) {
    if (Pinned(offset, bytes)) {
      then(Status::Ok());
      return;
    }
    if (Status bad = Failed(offset, bytes); !bad.ok()) {
      then(bad);
      return;
    }
    {
      MutexLock lock(mu_);
      requests_.push_back(Request{offset, bytes, std::move(then)});
      StartThreadLocked();
    }
    cv_.NotifyAll();
  }

  // Starts pinning every chunk of the tier, in address order, behind waiting requests.
  // Idempotent.
  void PinAllInBackground() {
    {
      MutexLock lock(mu_);
      if (sweep_) return;
      sweep_ = true;
      StartThreadLocked();
    }
    cv_.NotifyAll();
  }

  // The pieces (offset, bytes) of [offset, offset + bytes) that each lie in one chunk.
  std::vector<std::pair<uint64_t, uint64_t>> Pieces(uint64_t offset, uint64_t bytes) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    while (bytes > 0) {
      uint64_t room = chunk_ - offset % chunk_;
      uint64_t n = std::min(room, bytes);
      out.emplace_back(offset, n);
      offset += n;
      bytes -= n;
    }
    return out;
  }

 private:
  enum : uint8_t { kUnpinned = 0, kPinned = 1, kFailed = 2 };
  struct Request {
    uint64_t offset;
    uint64_t bytes;
    std::function<void(Status)> then;
  };

  // Chunk indices [first, last) of a range, clamped to the tier.
  std::pair<size_t, size_t> Span(uint64_t offset, uint64_t bytes) const {
    if (bytes == 0 || offset >= bytes_) return {0, 0};
    uint64_t end = std::min(bytes_, offset + bytes);
    return {static_cast<size_t>(offset / chunk_), static_cast<size_t>((end + chunk_ - 1) / chunk_)};
  }

  Status Failed(uint64_t offset, uint64_t bytes) ADJSNAP_EXCLUDES(mu_) {
    auto [first, last] = Span(offset, bytes);
    for (size_t i = first; i < last; ++i) {
      if (state_[i].load(std::memory_order_acquire) == kFailed) {
        MutexLock lock(mu_);
        return failure_;
      }
    }
    return Status::Ok();
  }

  void StartThreadLocked() ADJSNAP_REQUIRES(mu_) {
    if (!thread_.joinable()) {
      thread_ = NamedThread("adjsnap-pin", [this] { Run(); });
    }
  }

  // Pins chunk i (pinning thread only).
  void PinChunk(size_t i) ADJSNAP_EXCLUDES(mu_) {
    if (state_[i].load(std::memory_order_acquire) != kUnpinned) return;
    uint64_t at = i * chunk_;
    Status s = pin_(base_ + at, std::min(chunk_, bytes_ - at));
    if (s.ok()) {
      state_[i].store(kPinned, std::memory_order_release);
      return;
    }
    MutexLock lock(mu_);
    if (failure_.ok()) {
      failure_ = Status(s.code(), "pinning bytes " + std::to_string(at) + ".." +
                                      std::to_string(at + std::min(chunk_, bytes_ - at)) +
                                      " of adjsnapd's host tier for the GPU: " + s.message());
    }
    state_[i].store(kFailed, std::memory_order_release);
  }

  void Run() ADJSNAP_EXCLUDES(mu_) {
    for (;;) {
      std::optional<Request> request;
      size_t sweep_chunk = 0;
      {
        MutexLock lock(mu_);
        cv_.Wait(mu_, [&]() ADJSNAP_REQUIRES(mu_) {
          return stop_ || !requests_.empty() || (sweep_ && cursor_ < state_.size());
        });
        if (stop_) return;
        if (!requests_.empty()) {
          request = std::move(requests_.front());
          requests_.pop_front();
        } else {
          sweep_chunk = cursor_++;
        }
      }
      if (!request) {
        PinChunk(sweep_chunk);
        continue;
      }
      auto [first, last] = Span(request->offset, request->bytes);
      for (size_t i = first; i < last; ++i) PinChunk(i);
      Status bad = Failed(request->offset, request->bytes);
      request->then(bad);
    }
  }

  char* const base_;
  const uint64_t bytes_;
  const uint64_t chunk_;
  const PinFn pin_;
  const UnpinFn unpin_;
  // Written by the pinning thread only; read by anyone.
  std::vector<std::atomic<uint8_t>> state_;

  Mutex mu_;
  CondVar cv_;
  std::deque<Request> requests_ ADJSNAP_GUARDED_BY(mu_);
  bool sweep_ ADJSNAP_GUARDED_BY(mu_) = false;
  size_t cursor_ ADJSNAP_GUARDED_BY(mu_) = 0;  // the sweep's next chunk
  bool stop_ ADJSNAP_GUARDED_BY(mu_) = false;
  Status failure_ ADJSNAP_GUARDED_BY(mu_);  // the first chunk that failed, named
  std::thread thread_;                     // started by the first request or the sweep
};

}  // namespace adjsnap::detail
