// Client::Impl's device tier: the pool of the solver's GPU memory (device_pool.h) and the
// records that tell adjsnapd which steps it holds (see client_impl.h).
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client_impl.h"
#include "copy_engine.h"
#include "device_copy.h"
#include "device_pool.h"
#include "adjsnap/kernels.h"
#include "adjsnap/layers.h"
#include "task_thread.h"

namespace adjsnap {

Result<detail::DevicePool*> Client::Impl::EnsurePool(const std::string& run_name,
                                                     v1::Layers layers) {
  MutexLock lock(device_mu);
  if (device_pool) return device_pool.get();
  std::string what = "run '" + run_name + "': layers " + LayersName(layers) +
                     " keep the newest steps in this process's GPU memory";
  if (Status gpu = GpuUsable(what); !gpu.ok()) {
    return Status::FailedPrecondition(gpu.message() + "; use DiskHost or Host");
  }
  if (!device_options.ok()) return Status(device_options.code(), what + ": " +
                                          device_options.message());
  uint64_t free_bytes = 0;
  ADJSNAP_RETURN_IF_ERROR(detail::DeviceFreeMemory(&free_bytes));
  uint64_t budget = detail::DevicePoolBudget(device_fraction, device_bytes, free_bytes);
  void* base = nullptr;
  if (Status s = detail::DeviceAllocate(budget, &base); !s.ok()) {
    return Status::ResourceExhausted(what + ": allocating its pool of " +
                                     std::to_string(budget) + " bytes failed (" + s.message() +
                                     "); lower ADJSNAP_DEVICE_MEM");
  }
  device_base = static_cast<char*>(base);
  device_pool = std::make_unique<detail::DevicePool>(budget);
  // Steps leave the pool for the daemon's host tier, whose chunks are pinned as pushes and
  // fetches reach them (HostPinning), never all at once: pinning faults in every page of a
  // chunk, and this client's arena is as large as the whole tier, populated by adjsnapd block by
  // block (pages a client faults in would be charged to its own memory cgroup).
  recorder = std::make_unique<detail::TaskThread>("adjsnap-record");
  return device_pool.get();
}

void Client::Impl::FlushRecords() {
  detail::TaskThread* records = nullptr;
  if (!Pool(nullptr, &records) || !records) return;
  auto flushed = std::make_shared<detail::OpState>();
  records->Submit([flushed] { flushed->Complete(Status::Ok()); });
  (void)flushed->WaitCompleted();
}

Status Client::Impl::GpuUsable(const std::string& what) {
  std::call_once(gpu_once, [this] {
    kernels::DeviceProbe probe = detail::Engine().Probe();
    if (!probe.usable) gpu_status = Status::FailedPrecondition(probe.description);
  });
  if (gpu_status.ok()) return Status::Ok();
  return Status::FailedPrecondition(what + ", and no GPU is usable here (" +
                                    gpu_status.message() + ")");
}

detail::DevicePool* Client::Impl::Pool(char** base, detail::TaskThread** records) {
  MutexLock lock(device_mu);
  if (base) *base = device_base;
  if (records) *records = recorder.get();
  return device_pool.get();
}

Status Client::Impl::HoldOnDaemon(uint64_t run_id, uint64_t step, uint64_t bytes, bool held) {
  v1::HoldDeviceStepRequest req;
  req.set_run_id(run_id);
  req.set_step(step);
  req.set_bytes(bytes);
  req.set_held(held);
  v1::HoldDeviceStepResponse resp;
  return Control([&](grpc::ClientContext* ctx) {
    req.set_session_id(session_id);  // as it is when the call runs (a reconnect replaces it)
    req.set_token(token);
    return stub->HoldDeviceStep(ctx, req, &resp);
  });
}

std::optional<Result<PushHandle>> Client::Impl::PushToPool(uint64_t run_id, uint64_t step,
                                                           const void* data, size_t bytes,
                                                           void* stream) {
  char* base = nullptr;
  detail::TaskThread* records = nullptr;
  detail::DevicePool* pool = Pool(&base, &records);
  if (!pool || !pool->HasRun(run_id)) return std::nullopt;
  Result<detail::DevicePool::Placement> placed = pool->Place(run_id, step, bytes);
  if (!placed.ok()) return Result<PushHandle>(placed.status());
  if (!placed->on_device) return std::nullopt;
  uint64_t offset = placed->offset;
  if (placed->evict) {
    if (Status s = Evict(run_id, *placed->evict, base + offset); !s.ok()) {
      pool->Undo(run_id, offset);
      return Result<PushHandle>(s);
    }
  } else if (placed->busy) {
    (void)placed->busy->WaitCompleted();  // a fetch still copying the slot's last step out
  }
  // Released once the copy landed; stored once the daemon has recorded the step too.
  auto state = std::make_shared<detail::OpState>();
  auto join = std::make_shared<detail::JoinedCompletion>(state, 2);
  Status copy = detail::CopyAnyAsync(base + offset, data, bytes, stream, [state, join](Status s) {
    state->Release(s);
    join->Done(s);
  });
  if (!copy.ok()) {
    pool->Undo(run_id, offset);
    return Result<PushHandle>(copy);
  }
  pool->Commit(run_id, step, offset, bytes, state);
  records->Submit([this, pool, run_id, step, bytes, join] {
    // Refused (a duplicate, a closed or deleted run): the step leaves the pool, and its slot is
    // reused once the copy is out of the way.
    Status recorded = HoldOnDaemon(run_id, step, bytes, true);
    if (!recorded.ok()) pool->Drop(run_id, step, nullptr);
    join->Done(recorded);
  });
  return Result<PushHandle>(PushHandle(state));
}

Status Client::Impl::Evict(uint64_t run_id, const detail::DevicePool::Evict& evict,
                           const char* slot) {
  // Completes once the step's copy landed and its record was answered; a step the daemon
  // refused was never stored, and its slot is simply reused.
  if (!evict.filled->WaitCompleted().ok()) return Status::Ok();
  ADJSNAP_RETURN_IF_ERROR(HoldOnDaemon(run_id, evict.step, evict.bytes, false));
  Result<PushHandle> moved = PushDeviceToDaemon(run_id, evict.step, slot, evict.bytes, nullptr);
  Status s = moved.ok() ? moved->WaitReleased() : moved.status();
  if (!s.ok()) {
    return Status(s.code(), "step " + std::to_string(evict.step) +
                                " left the GPU pool to make room and did not reach adjsnapd, so "
                                "it is lost: " + s.message());
  }
  return Status::Ok();
}

std::optional<Result<FetchHandle>> Client::Impl::FetchFromPool(uint64_t run_id, uint64_t step,
                                                               void* data, size_t bytes,
                                                               void* stream) {
  char* base = nullptr;
  detail::TaskThread* records = nullptr;
  detail::DevicePool* pool = Pool(&base, &records);
  if (!pool) return std::nullopt;
  std::optional<detail::DevicePool::Held> held = pool->Find(run_id, step);
  if (!held) return std::nullopt;
  if (bytes != held->bytes) {
    return Result<FetchHandle>(Status::InvalidArgument(
        "fetch of step " + std::to_string(step) + " of run id " + std::to_string(run_id) +
        " into a buffer of " + std::to_string(bytes) + " bytes; its steps are " +
        std::to_string(held->bytes) + " bytes"));
  }
  // Pushed on another stream, or still being recorded: read only what was stored. A push the
  // daemon refused left the pool; the daemon answers for the step then.
  if (!held->filled->WaitCompleted().ok()) return std::nullopt;
  auto state = std::make_shared<detail::OpState>();
  Status copy = detail::CopyAnyAsync(data, base + held->offset, bytes, stream,
                                     [state](Status s) { state->Complete(s); });
  if (!copy.ok()) return Result<FetchHandle>(copy);
  if (!held->keep && pool->Drop(run_id, step, state)) {
    // Read-once: the slot is reused once this copy is out; the record goes in push order.
    records->Submit(
        [this, run_id, step, bytes] { (void)HoldOnDaemon(run_id, step, bytes, false); });
  }
  return Result<FetchHandle>(FetchHandle(state));
}

Result<PushHandle> Client::Impl::PushDeviceToDaemon(uint64_t run_id, uint64_t step,
                                                    const void* device_data, size_t bytes,
                                                    void* stream) {
  if (mapped) {
    return StartPush(run_id, step, device_data, bytes, /*device=*/true, stream);
  }
  if (detail::ChooseUcxBuffer(device_data, ucx_takes_cuda) == detail::UcxBuffer::kCuda) {
    // UCX reads the solver's buffer as CUDA memory: no copy here. It may read once the work
    // already on the stream is done; released before returning, as through host memory.
    ADJSNAP_RETURN_IF_ERROR(detail::SynchronizeStream(stream, "device push"));
    PushHandle h = StartPush(run_id, step, device_data, bytes, /*device=*/true, stream);
    ADJSNAP_RETURN_IF_ERROR(h.WaitReleased());
    return h;
  }
  // No mapped tier and a UCX without CUDA: through host memory, released before returning.
  std::vector<char> staging(bytes);
  ADJSNAP_RETURN_IF_ERROR(detail::CopyDeviceToHost(staging.data(), device_data, bytes, stream));
  PushHandle h = StartPush(run_id, step, staging.data(), bytes, false, nullptr);
  ADJSNAP_RETURN_IF_ERROR(h.WaitReleased());
  return h;
}

Result<FetchHandle> Client::Impl::FetchDeviceFromDaemon(uint64_t run_id, uint64_t step,
                                                       void* device_data, size_t bytes,
                                                       void* stream) {
  if (mapped) {
    return StartFetch(run_id, step, device_data, bytes, /*device=*/true, stream);
  }
  if (detail::ChooseUcxBuffer(device_data, ucx_takes_cuda) == detail::UcxBuffer::kCuda) {
    // UCX writes the solver's buffer as CUDA memory: no copy here. It may write once the work
    // already on the stream is done; filled before returning, as through host memory.
    ADJSNAP_RETURN_IF_ERROR(detail::SynchronizeStream(stream, "device fetch"));
    FetchHandle h = StartFetch(run_id, step, device_data, bytes, /*device=*/true, stream);
    ADJSNAP_RETURN_IF_ERROR(h.Wait());
    return h;
  }
  // No mapped tier and a UCX without CUDA: through host memory, filled before returning.
  std::vector<char> staging(bytes);
  ADJSNAP_RETURN_IF_ERROR(StartFetch(run_id, step, staging.data(), bytes, false, nullptr).Wait());
  ADJSNAP_RETURN_IF_ERROR(detail::CopyHostToDevice(device_data, staging.data(), bytes, stream));
  auto done = std::make_shared<detail::OpState>();
  done->Complete(Status::Ok());
  return FetchHandle(done);
}

}  // namespace adjsnap
