#include "daemon_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "adjsnap/client.h"

extern char** environ;

namespace adjsnap::testing {

namespace {

pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

// The exit status as a shell reports it: the code, or 128 + the signal.
int ExitStatus(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// When this test process started, as near as a static initializer of the test support can
// tell: the watchdog's clock.
const auto kProcessStart = std::chrono::steady_clock::now();

// The children the watchdog dumps and aborts: each adjsnapd and each RunProgram program, from its
// spawn until it is reaped. Thread-safe. Never destroyed: the watchdog thread may read it while
// static destructors run.
class Children {
 public:
  static Children& Get() {
    static auto* children = new Children();
    return *children;
  }
  void Add(pid_t pid, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    live_[pid] = std::move(what);
  }
  void Remove(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(pid);
  }
  std::map<pid_t, std::string> List() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }

 private:
  mutable std::mutex mu_;
  std::map<pid_t, std::string> live_;  // guarded by mu_
};

// Waits up to `bound` for child `pid` to exit and reaps it; false if it is still running.
bool Reap(pid_t pid, std::chrono::milliseconds bound, int* status) {
  return WaitUntil(
      [&] {
        const pid_t r = waitpid(pid, status, WNOHANG);
        return r == pid || (r < 0 && errno == ECHILD);  // ECHILD: reaped by another thread
      },
      bound);
}

// SIGABRT (SIGCONT too, for a stopped child), then SIGKILL if it is still running 10 s later;
// reaps it and returns its wait status.
int AbortChild(pid_t pid) {
  kill(pid, SIGABRT);
  kill(pid, SIGCONT);
  int status = 0;
  if (!Reap(pid, std::chrono::seconds(10), &status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  Children::Get().Remove(pid);
  return status;
}

// Each thread of `pid` as the kernel sees it: state and wait channel, one line per thread.
void PrintKernelWaits(pid_t pid) {
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(task, ec)) {
    const std::string stat = ReadFile(entry.path().string() + "/stat");
    const std::string wchan = ReadFile(entry.path().string() + "/wchan");
    // stat is "tid (comm) state ...", and comm may hold spaces and parentheses.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size()) {
      continue;
    }
    std::fprintf(stderr, "  thread %s (%s) state %c, waiting in %s\n",
                 entry.path().filename().c_str(), stat.substr(open + 1, close - open - 1).c_str(),
                 stat[close + 2], wchan.empty() || wchan == "0" ? "-" : wchan.c_str());
  }
}

[[noreturn]] void Bark(std::chrono::seconds after) {
  std::fprintf(stderr,
               "\n*** watchdog: this test is still running %lld s after it started "
               "(ADJSNAP_TEST_WATCHDOG_S, set below its ctest TIMEOUT): the native stacks of every "
               "adjsnapd and program it started that still runs, and its own; then all of them "
               "are aborted\n",
               static_cast<long long>(after.count()));
  const std::map<pid_t, std::string> children = Children::Get().List();
  for (const auto& [pid, what] : children) DumpNativeStacks(pid, what);
  DumpNativeStacks(getpid(), "the test process");
  for (const auto& [pid, what] : children) {
    const int status = AbortChild(pid);
    std::fprintf(stderr, "*** watchdog: %s (pid %d) ended: %s\n", what.c_str(), pid,
                 WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exited");
  }
  std::fprintf(stderr, "*** watchdog: aborting the test\n");
  std::fflush(stderr);
  std::abort();
}

// Starts the watchdog thread, once per process, where ADJSNAP_TEST_WATCHDOG_S is a positive
// number of seconds.
void StartWatchdog() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("ADJSNAP_TEST_WATCHDOG_S");
    const long seconds = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
    if (seconds <= 0) return;
    std::thread([after = std::chrono::seconds(seconds)] {
      std::this_thread::sleep_until(kProcessStart + after);
      Bark(after);
    }).detach();
  });
}

}  // namespace

void DumpNativeStacks(pid_t pid, const std::string& what) {
  std::fprintf(stderr, "\n=== native stacks of %s (pid %d)\n", what.c_str(), pid);
  std::fflush(stderr);
  // Where Yama's ptrace_scope is 1, only an ancestor may attach: let gdb, our child, attach to
  // us. (It may not attach to a sibling, an adjsnapd we started: the kernel waits below remain.)
  if (pid == getpid()) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  std::vector<std::string> argv = {"gdb", "-p", std::to_string(pid), "-batch", "-nx"};
  for (const char* command : {"set debuginfod enabled off", "thread apply all bt"}) {
    argv.insert(argv.end(), {"-ex", command});
  }
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  pid_t gdb = -1;
  const int rc = posix_spawnp(&gdb, "gdb", &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::fprintf(stderr, "(no gdb: %s; deploy/install-deps.sh installs it)\n", std::strerror(rc));
  } else {
    int status = 0;
    if (!Reap(gdb, std::chrono::seconds(30), &status)) {
      kill(gdb, SIGKILL);
      waitpid(gdb, &status, 0);
      std::fprintf(stderr, "(gdb gave no answer within 30 s)\n");
    }
  }
  std::fprintf(stderr, "--- threads of %s (pid %d) as the kernel sees them\n", what.c_str(), pid);
  PrintKernelWaits(pid);
  std::fprintf(stderr, "=== end of the stacks of %s (pid %d)\n", what.c_str(), pid);
  std::fflush(stderr);
}

Result<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(const DaemonOptions& o) {
  // Test traffic stays on loopback. Set before any thread of the test reads the environment
  // (and only while unset, so it is written once).
  if (std::getenv("UCX_NET_DEVICES") == nullptr) setenv("UCX_NET_DEVICES", "lo", 0);
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  d->socket_ = o.dir + "/adjsnap.sock";
  d->log_path_ = o.dir + "/adjsnapd.log";
  std::vector<std::string> argv = {ADJSNAPD_BINARY,   "--socket",    d->socket_,
                                   "--state-dir",  o.dir + "/state", "--host-mem",
                                   o.host_mem,     "--log-level", "info"};
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  argv.insert(argv.begin(), o.wrapper.begin(), o.wrapper.end());
  StartWatchdog();
  d->pid_ = Spawn(argv, "/dev/null", d->log_path_);
  if (d->pid_ < 0) return Status::Internal("cannot spawn " + std::string(ADJSNAPD_BINARY));
  Children::Get().Add(d->pid_, "adjsnapd on " + d->socket_);
  // Readiness: the control plane answers a session. Polled, bounded by a deadline.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    int status = 0;
    if (waitpid(d->pid_, &status, WNOHANG) == d->pid_) {
      Children::Get().Remove(d->pid_);
      d->pid_ = -1;
      return Status::Unavailable("adjsnapd exited during start-up: " + d->Log());
    }
    if (std::filesystem::exists(d->socket_)) {
      ClientOptions co;
      co.socket_path = d->socket_;
      co.map_host_tier = false;
      if (Client::Connect(co).ok()) return d;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(Code::kDeadlineExceeded, "adjsnapd did not answer within 30 s: " + d->Log());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Kill();
}

bool DaemonProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
  Children::Get().Remove(pid_);
  exit_status_ = ExitStatus(status);
  pid_ = -1;
  return false;
}

int DaemonProcess::Stop(std::chrono::seconds bound) {
  if (pid_ <= 0) return exit_status_;
  kill(pid_, SIGTERM);
  int status = 0;
  if (Reap(pid_, bound, &status)) {
    Children::Get().Remove(pid_);
  } else {
    std::fprintf(stderr,
                 "adjsnapd (pid %d, %s) did not stop within %lld s of SIGTERM: its stacks, "
                 "then SIGABRT\n",
                 pid_, socket_.c_str(), static_cast<long long>(bound.count()));
    DumpStacks();
    status = AbortChild(pid_);
  }
  pid_ = -1;
  exit_status_ = ExitStatus(status);
  return exit_status_;
}

void DaemonProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  Children::Get().Remove(pid_);
  pid_ = -1;
}

std::string DaemonProcess::Log() const { return ReadFile(log_path_); }

void DaemonProcess::DumpStacks() const {
  if (pid_ > 0) DumpNativeStacks(pid_, "adjsnapd on " + socket_);
}

Result<std::unique_ptr<Client>> ConnectClient(const DaemonProcess& daemon, bool map_host_tier) {
  ClientOptions o;
  o.socket_path = daemon.socket();
  o.map_host_tier = map_host_tier;
  return Client::Connect(o);
}

int RunProgram(const std::vector<std::string>& argv, std::string* out, std::string* err) {
  StartWatchdog();
  TempDir dir;
  pid_t pid = Spawn(argv, dir.path() + "/out", dir.path() + "/err");
  if (pid < 0) return -1;
  Children::Get().Add(pid, argv[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  Children::Get().Remove(pid);
  if (out) *out = ReadFile(dir.path() + "/out");
  if (err) *err = ReadFile(dir.path() + "/err");
  return ExitStatus(status);
}

void FillPattern(void* data, size_t bytes, uint64_t seed, uint64_t step) {
  auto* p = static_cast<unsigned char*>(data);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + step * 0xBF58476D1CE4E5B9ULL + 1;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < bytes; ++i) p[i] = static_cast<unsigned char>(step + i);
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace adjsnap::testing
