#include "adjsnap/ucx.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "adjsnap/thread_name.h"

namespace adjsnap::ucx {

Status FromUcs(ucs_status_t s, const std::string& what) {
  if (s == UCS_OK) return Status::Ok();
  std::string m = what + ": " + ucs_status_string(s);
  switch (s) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return Status::ResourceExhausted(m);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return Status::InvalidArgument(m);
    case UCS_ERR_CANCELED:
      return Status::Aborted(m);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
      return Status::Unavailable(m);
    default:
      return Status::Internal(m);
  }
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// The request is released here, after completion, rather than right after posting.
void SendTrampoline(void* request, ucs_status_t status, void* user_data) {
  auto* fn = static_cast<DoneFn*>(user_data);
  (*fn)(status, 0);
  delete fn;
  ucp_request_free(request);
}

void RecvDataTrampoline(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* fn = static_cast<DoneFn*>(user_data);
  (*fn)(status, length);
  delete fn;
  ucp_request_free(request);
}

ucp_request_param_t ParamWith(DoneFn done) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = new DoneFn(std::move(done));
  return p;
}

}  // namespace

ucp_request_param_t SendParam(DoneFn done) {
  ucp_request_param_t p = ParamWith(std::move(done));
  p.cb.send = SendTrampoline;
  return p;
}

ucp_request_param_t RecvDataParam(DoneFn done) {
  ucp_request_param_t p = ParamWith(std::move(done));
  p.cb.recv_am = RecvDataTrampoline;
  return p;
}

void Track(ucs_status_ptr_t request, const ucp_request_param_t& param) {
  auto* fn = static_cast<DoneFn*>(param.user_data);
  if (UCS_PTR_IS_ERR(request)) {
    (*fn)(UCS_PTR_STATUS(request), 0);
    delete fn;
  } else if (request == nullptr) {  // completed in place; no callback will follow
    (*fn)(UCS_OK, 0);
    delete fn;
  }  // else: pending; the trampoline fires the callback and frees the request
}

namespace {

// The environment's value of `name`, or null when unset or empty (UCX reads an empty
// UCX_NET_DEVICES as "no device at all", which nobody means).
const char* Chosen(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

Result<std::unique_ptr<WorkerLoop>> WorkerLoop::Create(const std::string& name) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return FromUcs(s, "reading UCX configuration");
  // Both peers are on one node (sessions are opened on a unix socket). Unless the operator
  // chose otherwise: every transport but tcp (shared memory, loopback, CUDA's), so no TCP port
  // opens (UCX's tcp transport aborts the process on 13 bytes from any local user, UCX 1.13
  // to master); shared memory with peer-failure detection, which adjsnapd's endpoints ask for
  // (without it UCX picks tcp for them), checked every second rather than UCX's 20 s, so that a
  // killed client's pushes in flight give back their room (and a client learns its daemon died)
  // within about two seconds; network transports, if chosen, on loopback; and rendezvous for
  // every message over 8 KiB, as UCX 1.13 chose by itself (8256 bytes over shared memory): a
  // copied push then lands straight in its tier block and is released once it did, and one
  // that waits for room stays in the client's buffer. UCX 1.22 sends active messages of up to
  // 566 KiB eagerly over shared memory (UCX_PROTO_INFO=y shows it): such a push would be
  // released at once and, while it waits, held in adjsnapd's heap, outside every budget.
  std::string transports;
  struct Default {
    const char* name;
    const char* value;
  };
  for (Default d :
       {Default{"TLS", "^tcp"}, Default{"MM_ERROR_HANDLING", "y"}, Default{"KEEPALIVE_INTERVAL", "1s"},
        Default{"NET_DEVICES", "lo"}, Default{"RNDV_THRESH", "8K"}}) {
    std::string env = std::string("UCX_") + d.name;
    const char* chosen = Chosen(env.c_str());
    if (chosen == nullptr) {
      s = ucp_config_modify(config, d.name, d.value);
      if (s != UCS_OK) {
        ucp_config_release(config);
        return FromUcs(s, "setting UCX's " + env + "=" + d.value);
      }
    }
    if (std::string(d.name) == "TLS") {
      transports = env + "=" +
                   (chosen ? std::string(chosen) + " (from the environment)"
                           : std::string(d.value) + " (adjsnapd's default)");
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name.c_str();
  ucp_context_h raw_context = nullptr;
  s = ucp_init(&params, config, &raw_context);
  ucp_config_release(config);
  if (s != UCS_OK) return FromUcs(s, "initialising UCX (ucp_init)");
  ContextPtr context(raw_context);

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;  // only the loop thread touches the worker
  ucp_worker_h raw_worker = nullptr;
  s = ucp_worker_create(context.get(), &wparams, &raw_worker);
  if (s != UCS_OK) return FromUcs(s, "creating UCX worker");
  WorkerPtr worker(raw_worker);

  ucp_address_t* packed = nullptr;
  size_t packed_bytes = 0;
  s = ucp_worker_get_address(worker.get(), &packed, &packed_bytes);
  if (s != UCS_OK) return FromUcs(s, "getting the UCX worker address");
  std::string address(reinterpret_cast<const char*>(packed), packed_bytes);
  ucp_worker_release_address(worker.get(), packed);

  int worker_fd = -1;
  s = ucp_worker_get_efd(worker.get(), &worker_fd);
  if (s != UCS_OK) return FromUcs(s, "getting UCX worker event fd");
  ScopedFd epoll_fd(epoll_create1(EPOLL_CLOEXEC));
  ScopedFd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (epoll_fd.get() < 0 || wake_fd.get() < 0) {
    return Status::Internal(std::string("creating progress loop fds: ") + std::strerror(errno));
  }
  uint64_t key = 0;  // 0: the worker's fd, 1: the wake fd (watched_ holds the rest)
  for (int fd : {worker_fd, wake_fd.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key++;
    if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return Status::Internal(std::string("epoll_ctl: ") + std::strerror(errno));
    }
  }
  int idle_poll_ms = kDefaultIdlePollMs;
  if (const char* v = Chosen("ADJSNAP_LOOP_IDLE_POLL_MS")) {
    char* end = nullptr;
    long ms = std::strtol(v, &end, 10);
    if (*end != '\0' || ms < 1 || ms > 3600000) {
      return Status::InvalidArgument(std::string("ADJSNAP_LOOP_IDLE_POLL_MS=") + v +
                                     ": want a whole number of milliseconds, 1 to 3600000");
    }
    idle_poll_ms = static_cast<int>(ms);
  }
  return std::unique_ptr<WorkerLoop>(new WorkerLoop(
      std::move(context), std::move(worker), std::move(address), std::move(transports),
      std::move(epoll_fd), std::move(wake_fd), idle_poll_ms));
}

WorkerLoop::WorkerLoop(ContextPtr context, WorkerPtr worker, std::string address,
                       std::string transports, ScopedFd epoll_fd, ScopedFd wake_fd,
                       int idle_poll_ms)
    : context_(std::move(context)),
      worker_(std::move(worker)),
      address_(std::move(address)),
      transports_(std::move(transports)),
      idle_poll_ms_(idle_poll_ms),
      epoll_fd_(std::move(epoll_fd)),
      wake_fd_(std::move(wake_fd)) {}

WorkerLoop::~WorkerLoop() { Stop(); }

void WorkerLoop::Start(const std::string& name) {
  thread_ = NamedThread(name, [this] { Run(); });
}

void WorkerLoop::Post(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    tasks_.push_back(std::move(task));
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
}

void WorkerLoop::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

bool WorkerLoop::RunTasks() {
  std::deque<std::function<void()>> batch;
  bool stopping;
  {
    MutexLock lock(mu_);
    batch.swap(tasks_);
    stopping = stopping_;
  }
  for (auto& t : batch) t();
  return stopping && batch.empty();
}

void WorkerLoop::ProgressUntil(const std::function<bool()>& done) {
  while (!done()) ucp_worker_progress(worker_.get());
}

Status WorkerLoop::Watch(int fd, uint32_t events, std::function<void(uint32_t)> on_ready) {
  epoll_event ev{};
  ev.events = events;
  auto known = watch_key_.find(fd);
  if (known != watch_key_.end()) {
    ev.data.u64 = known->second;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
      return Status::Internal(std::string("epoll_ctl(MOD): ") + std::strerror(errno));
    }
    watched_[known->second].on_ready = std::move(on_ready);
    return Status::Ok();
  }
  ev.data.u64 = next_watch_key_;
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return Status::Internal(std::string("epoll_ctl(ADD): ") + std::strerror(errno));
  }
  watched_[next_watch_key_] = Watched{fd, std::move(on_ready)};
  watch_key_[fd] = next_watch_key_++;
  return Status::Ok();
}

void WorkerLoop::Unwatch(int fd) {
  auto known = watch_key_.find(fd);
  if (known == watch_key_.end()) return;
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watched_.erase(known->second);
  watch_key_.erase(known);
}

bool WorkerLoop::PollWatched(int timeout_ms) {
  epoll_event events[16];
  int n = epoll_wait(epoll_fd_.get(), events, 16, timeout_ms);
  bool any = false;
  for (int i = 0; i < n; ++i) {
    uint64_t key = events[i].data.u64;
    if (key == 1) {
      // Draining the wake fd consumes the only signal that Post() queued a task: it counts as
      // progress, so the loop runs its tasks before it may sleep (Run()).
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &v, sizeof v);
      any = true;
    } else if (key > 1) {
      auto w = watched_.find(key);
      if (w == watched_.end()) continue;   // unwatched by an earlier callback of this batch
      auto on_ready = w->second.on_ready;  // the callback may unwatch its own fd
      on_ready(events[i].events);
      any = true;
    }
  }
  return any;
}

void WorkerLoop::Run() {
  // Spin a little before sleeping: a request's reply comes back within tens of microseconds,
  // and an epoll round trip costs more than a few hundred empty progress calls. Each empty spin
  // yields the core: the thread this loop is waiting for (the solver's, or on one node the
  // other side's loop) may be queued on it. Without the yield, a 4 KiB fetch between 10 ms
  // of solver compute took 2.3 ms on a 2-core node, the spins of the two loops keeping each
  // other off the second core; with it, 0.28 ms (docs/architecture.md, "Threads").
  // The spin is bounded in time, not in calls: on a node whose cores are busy (a network
  // filesystem's client and servers reading for the read-ahead) each yield gives the core away
  // for a time slice, and 2,000 yields kept the loop runnable for milliseconds after every
  // request, taking a core from the work it waited for.
  // Watched fds (session sockets) and the wake fd are polled on every spin too, without waiting.
  //
  // The wake-up protocol: Post() queues, then writes the wake fd; the loop reads (drains) the
  // wake fd only in PollWatched, which reports the drain as progress, and every progress goes
  // back to RunTasks before the loop may sleep. So a task is either seen by RunTasks or its
  // write is still pending on the fd the sleep waits on: no posted task waits for the sleep's
  // timeout. The timeout is only a backstop (tests set it to an hour, ADJSNAP_LOOP_IDLE_POLL_MS,
  // so that a lost wake-up hangs instead of costing 100 ms).
  constexpr auto kSpin = std::chrono::microseconds(300);
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    if (RunTasks()) break;
    bool progressed = ucp_worker_progress(worker_.get()) != 0;
    if (!watched_.empty() && PollWatched(0)) progressed = true;
    auto now = std::chrono::steady_clock::now();
    if (progressed) {
      idle_since = now;
      continue;
    }
    if (now - idle_since < kSpin) {
      sched_yield();
      continue;
    }
    if (ucp_worker_arm(worker_.get()) == UCS_ERR_BUSY) continue;
    PollWatched(idle_poll_ms_);
    idle_since = std::chrono::steady_clock::now();
  }
}

Status SetAmHandler(ucp_worker_h worker, uint16_t id, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = id;
  p.cb = cb;
  p.arg = arg;
  return FromUcs(ucp_worker_set_am_recv_handler(worker, &p),
                 "registering the handler of AM id " + std::to_string(id));
}

Status SetDefaultAmHandler(ucp_worker_h worker, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.cb = cb;
  p.arg = arg;
  // From the top down, so UCX grows its table once.
  for (uint32_t id = 65536; id-- > 0;) {
    p.id = static_cast<uint16_t>(id);
    ucs_status_t s = ucp_worker_set_am_recv_handler(worker, &p);
    if (s != UCS_OK) return FromUcs(s, "registering the default AM handler");
  }
  return Status::Ok();
}

Result<ucp_ep_h> ConnectToWorker(ucp_worker_h worker, const std::string& address,
                                 ucp_err_handler_cb_t on_error, void* arg) {
  if (address.empty()) return Status::InvalidArgument("empty UCX worker address");
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = on_error;
  p.err_handler.arg = arg;
  ucp_ep_h ep = nullptr;
  ADJSNAP_RETURN_IF_ERROR(FromUcs(ucp_ep_create(worker, &p, &ep),
                                "connecting to a UCX worker (" + std::to_string(address.size()) +
                                    "-byte address)"));
  return ep;
}

void CloseEndpoint(WorkerLoop& loop, ucp_ep_h ep, bool force) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
  loop.ProgressUntil([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; });
  ucp_request_free(req);
}

}  // namespace adjsnap::ucx
