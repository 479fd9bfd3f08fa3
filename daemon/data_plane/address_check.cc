#include "data_plane/address_check.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "adjsnap/ucx.h"

extern char** environ;

namespace adjsnap {

namespace {

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void IgnoreError(void*, ucp_ep_h, ucs_status_t) {}

// The checker's environment: adjsnapd's, with UCX_MEM_EVENTS=no unless that sets it. The checker
// registers no memory, so it needs none of UCX's memory hooks, which UCX 1.22 installs as libucs
// loads, patching mmap, munmap and six more functions and waiting 50 ms after each for other
// threads to leave the old code (UCX_MEM_BISTRO_GRACE_DURATION): 0.45 s of every check, against
// 10 ms without (UCX 1.13: about 0.1 s). The pointers are environ's.
std::vector<char*> CheckerEnvironment() {
  static char no_mem_events[] = "UCX_MEM_EVENTS=no";
  std::vector<char*> env;
  bool chosen = false;
  for (char** e = environ; *e != nullptr; ++e) {
    chosen = chosen || (std::strncmp(*e, "UCX_MEM_EVENTS=", 15) == 0 && (*e)[15] != '\0');
    env.push_back(*e);
  }
  if (!chosen) env.push_back(no_mem_events);
  env.push_back(nullptr);
  return env;
}

}  // namespace

Status CheckUcxAddress(const std::string& address, std::chrono::milliseconds timeout) {
  if (address.empty()) {
    return Status::InvalidArgument("ucx_address is empty: send the client's UCX worker address");
  }
  if (address.size() > kMaxUcxAddressBytes) {
    return Status::InvalidArgument("ucx_address of " + std::to_string(address.size()) +
                                   " bytes is over the limit of " +
                                   std::to_string(kMaxUcxAddressBytes));
  }
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    return Status::Unavailable(std::string("vetting the UCX address: pipe: ") +
                               std::strerror(errno));
  }
  ucx::ScopedFd read_end(in[0]), write_end(in[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, read_end.get(), STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  char arg0[] = "adjsnapd";
  std::string flag = kCheckUcxAddressFlag;
  char* argv[] = {arg0, flag.data(), nullptr};
  pid_t pid = -1;
  std::vector<char*> env = CheckerEnvironment();
  int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Status::Unavailable(std::string("vetting the UCX address: cannot start a checker: ") +
                               std::strerror(rc));
  }
  read_end = ucx::ScopedFd();
  // A child that died early closes the pipe; the write then fails and waitpid says why.
  (void)WriteAll(write_end.get(), address.data(), address.size());
  write_end = ucx::ScopedFd();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      return Status::Internal(std::string("vetting the UCX address: waitpid: ") +
                              std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status::InvalidArgument("ucx_address: unpacking it did not finish within " +
                                     std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  if (WIFSIGNALED(status)) {
    return Status::InvalidArgument("ucx_address is not a valid UCX worker address: unpacking it "
                                   "crashed a checker process (signal " +
                                   std::to_string(WTERMSIG(status)) + ")");
  }
  return Status::InvalidArgument(
      "ucx_address is not a UCX worker address this adjsnapd can reach (UCX refused it)");
}

void RunUcxAddressCheck() {
  std::string address;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    address.append(buf, static_cast<size_t>(n));
    if (address.size() > kMaxUcxAddressBytes) _exit(1);
  }
  auto loop = ucx::WorkerLoop::Create("adjsnap-addrchk");
  if (!loop.ok()) _exit(2);
  auto ep = ucx::ConnectToWorker((*loop)->worker(), address, &IgnoreError, nullptr);
  if (!ep.ok()) _exit(1);
  // Wire-up continues in progress; run it a little so a bad address fails here, not in adjsnapd.
  for (int i = 0; i < 64; ++i) ucp_worker_progress((*loop)->worker());
  ucx::CloseEndpoint(**loop, *ep, /*force=*/true);
  // _exit: no destructors or leak checks in a process whose only output is its exit code.
  _exit(0);
}

}  // namespace adjsnap
