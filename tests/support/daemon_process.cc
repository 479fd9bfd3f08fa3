#include "daemon_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "snapd/client.h"

extern char** environ;

namespace snapd::testing {

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

}  // namespace

Result<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(const DaemonOptions& o) {
  // Test traffic stays on loopback. Set before any thread of the test reads the environment
  // (and only while unset, so it is written once).
  if (std::getenv("UCX_NET_DEVICES") == nullptr) setenv("UCX_NET_DEVICES", "lo", 0);
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  d->socket_ = o.dir + "/snapd.sock";
  d->log_path_ = o.dir + "/snapd.log";
  std::vector<std::string> argv = {SNAPD_BINARY,   "--socket",    d->socket_,
                                   "--state-dir",  o.dir + "/state", "--host-mem",
                                   o.host_mem,     "--log-level", "info"};
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  argv.insert(argv.begin(), o.wrapper.begin(), o.wrapper.end());
  d->pid_ = Spawn(argv, "/dev/null", d->log_path_);
  if (d->pid_ < 0) return Status::Internal("cannot spawn " + std::string(SNAPD_BINARY));
  // Readiness: the control plane answers a session. Polled, bounded by a deadline.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    int status = 0;
    if (waitpid(d->pid_, &status, WNOHANG) == d->pid_) {
      d->pid_ = -1;
      return Status::Unavailable("snapd exited during start-up: " + d->Log());
    }
    if (std::filesystem::exists(d->socket_)) {
      ClientOptions co;
      co.socket_path = d->socket_;
      co.map_host_tier = false;
      if (Client::Connect(co).ok()) return d;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(Code::kDeadlineExceeded, "snapd did not answer within 30 s: " + d->Log());
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
  exit_status_ = ExitStatus(status);
  pid_ = -1;
  return false;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return exit_status_;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  exit_status_ = ExitStatus(status);
  return exit_status_;
}

void DaemonProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string DaemonProcess::Log() const { return ReadFile(log_path_); }

Result<std::unique_ptr<Client>> ConnectClient(const DaemonProcess& daemon, bool map_host_tier) {
  ClientOptions o;
  o.socket_path = daemon.socket();
  o.map_host_tier = map_host_tier;
  return Client::Connect(o);
}

int RunProgram(const std::vector<std::string>& argv, std::string* out, std::string* err) {
  TempDir dir;
  pid_t pid = Spawn(argv, dir.path() + "/out", dir.path() + "/err");
  if (pid < 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
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

}  // namespace snapd::testing
