// RAII ownership of UCX handles and the one-thread-per-worker progress loop that both adjsnapd
// peers (the daemon and libadjsnap) use.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"

namespace adjsnap::ucx {

// Maps a UCX status to an adjsnapd Status; `what` names the operation that failed.
Status FromUcs(ucs_status_t s, const std::string& what);

struct ContextDeleter {
  void operator()(ucp_context* c) const { ucp_cleanup(c); }
};
struct WorkerDeleter {
  void operator()(ucp_worker* w) const { ucp_worker_destroy(w); }
};
using ContextPtr = std::unique_ptr<ucp_context, ContextDeleter>;
using WorkerPtr = std::unique_ptr<ucp_worker, WorkerDeleter>;

// Move-only owner of one file descriptor.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Called once when a non-blocking UCX operation completes, with its final status and, for
// receives, the length received.
using DoneFn = std::function<void(ucs_status_t, size_t)>;

// Request parameters that route completion to `done` (heap-owned until it fires). Completion is
// reported exactly once: through the callback, or from Track() when the call completed in place.
ucp_request_param_t SendParam(DoneFn done);
ucp_request_param_t RecvDataParam(DoneFn done);

// Finishes the bookkeeping of an *_nbx call made with SendParam/RecvDataParam: an immediate
// error fires the callback now; a pending request fires it from progress.
void Track(ucs_status_ptr_t request, const ucp_request_param_t& param);

// Owns a UCX context and one worker, driven by a dedicated progress thread.
//
// Threading contract: after Start(), the worker (and every endpoint and request on it) is
// touched only from the loop thread. Other threads hand it work with Post(), which is
// thread-safe and wakes the loop. Before Start(), the creating thread may use worker() to set
// handlers. Stop() runs every task posted before it, then joins; the destructor calls Stop().
// Members are destroyed worker before context (reverse declaration order), as UCX requires.
//
// Transports: unless the environment chooses them (UCX_TLS), a worker uses every transport but
// tcp (`^tcp`: shared memory, loopback and, in a UCX built with them, CUDA's; network devices
// are loopback only, below), with shared-memory peer-failure detection on
// (UCX_MM_ERROR_HANDLING=y), and so opens no TCP port: UCX's tcp transport parses what any
// local user sends to its port before adjsnapd can vet it (docs/operations.md, "Ports").
// `transports()` says what was chosen and by whom. Messages over 8 KiB go by rendezvous unless
// the environment says otherwise (UCX_RNDV_THRESH=8K; ucx.cc says why).
class WorkerLoop {
 public:
  static constexpr int kDefaultIdlePollMs = 100;
  static Result<std::unique_ptr<WorkerLoop>> Create(const std::string& name);
  ~WorkerLoop();
  WorkerLoop(const WorkerLoop&) = delete;
  WorkerLoop& operator=(const WorkerLoop&) = delete;

  ucp_context_h context() const { return context_.get(); }
  ucp_worker_h worker() const { return worker_.get(); }
  // The worker's packed UCX address (taken at Create), which a peer passes to
  // ConnectToWorker. Safe from any thread.
  const std::string& address() const { return address_; }
  // "UCX_TLS=^tcp (adjsnapd's default)" or "UCX_TLS=... (from the environment)".
  const std::string& transports() const { return transports_; }

  void Start(const std::string& name);  // its thread is named `name` (thread_name.h)
  void Post(std::function<void()> task) ADJSNAP_EXCLUDES(mu_);
  void Stop() ADJSNAP_EXCLUDES(mu_);
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // True between Start() and Stop(); only a running loop executes posted tasks.
  bool running() const { return thread_.joinable(); }

  // Progresses the worker until `done()` returns true; loop thread only. For teardown paths
  // (closing endpoints) that must finish before the worker goes away.
  void ProgressUntil(const std::function<bool()>& done);

  // Calls `on_ready(events)` on the loop thread whenever `fd` is ready for any of `events`
  // (EPOLLIN, EPOLLOUT; EPOLLHUP and EPOLLERR always) until Unwatch(fd); the loop polls it
  // while it spins, not only when it sleeps. Loop thread only; `on_ready` may Watch or Unwatch
  // any fd, its own included. An fd is watched once: Watch again changes its events.
  Status Watch(int fd, uint32_t events, std::function<void(uint32_t)> on_ready);
  void Unwatch(int fd);

 private:
  WorkerLoop(ContextPtr context, WorkerPtr worker, std::string address, std::string transports,
             ScopedFd epoll_fd, ScopedFd wake_fd, int idle_poll_ms);
  void Run();
  bool RunTasks() ADJSNAP_EXCLUDES(mu_);
  // Runs the callbacks of the watched fds that `epoll_wait(timeout_ms)` reports ready; true
  // when any was. Loop thread.
  bool PollWatched(int timeout_ms);

  ContextPtr context_;
  WorkerPtr worker_;
  const std::string address_;
  const std::string transports_;
  // How long an idle loop sleeps before it looks again with nothing to wake it: a backstop
  // only, since every post and every event wakes it (Run()). ADJSNAP_LOOP_IDLE_POLL_MS sets it
  // (tests: an hour, so that a lost wake-up hangs the suite instead of costing 100 ms).
  const int idle_poll_ms_;
  ScopedFd epoll_fd_;
  ScopedFd wake_fd_;
  Mutex mu_;
  std::deque<std::function<void()>> tasks_ ADJSNAP_GUARDED_BY(mu_);
  bool stopping_ ADJSNAP_GUARDED_BY(mu_) = false;
  std::thread thread_;
  // Loop thread: the watched fds by key (epoll_event.data.u64; the worker's fd is key 0 and
  // the wake fd key 1), and each fd's key. Keys are never reused, so an event of an fd that
  // was unwatched (and its number reused) in the same batch finds nothing.
  struct Watched {
    int fd;
    std::function<void(uint32_t)> on_ready;
  };
  std::unordered_map<uint64_t, Watched> watched_;
  std::unordered_map<int, uint64_t> watch_key_;
  uint64_t next_watch_key_ = 2;
};

// Registers `cb(arg, ...)` as the handler of active-message id `id` on `worker`.
Status SetAmHandler(ucp_worker_h worker, uint16_t id, ucp_am_recv_callback_t cb, void* arg);

// Registers `cb(arg, ...)` as the handler of every AM id in [0, 65535] that has none yet, so
// that no id a peer sends indexes past UCX's handler table (UCX 1.13 does not check it).
Status SetDefaultAmHandler(ucp_worker_h worker, ucp_am_recv_callback_t cb, void* arg);

// Creates an endpoint from `worker` to the worker whose packed address is `address` (from
// WorkerLoop::address()), with peer-failure handling reported to `on_error(arg, ep, status)`.
// UCX unpacks `address` without bounds checks: pass only addresses from a trusted source, or
// ones that CheckUcxAddress (daemon) has vetted.
Result<ucp_ep_h> ConnectToWorker(ucp_worker_h worker, const std::string& address,
                                 ucp_err_handler_cb_t on_error, void* arg);

// Closes `ep` from the loop thread, waiting for the close to complete. `force` skips flushing.
void CloseEndpoint(WorkerLoop& loop, ucp_ep_h ep, bool force);

}  // namespace adjsnap::ucx
