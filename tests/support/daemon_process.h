// Starts the real adjsnapd binary for an integration test, in a private directory, and stops it;
// and the small helpers every suite and helper program shares. The gtest fixture built on it is
// adjsnap_fixture.h.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adjsnap/client.h"
#include "adjsnap/status.h"
#include "temp_dir.h"

namespace adjsnap::testing {

struct DaemonOptions {
  std::string dir;               // holds the socket and the state directory
  std::string host_mem = "512M";
  std::vector<std::string> extra_args;
  // Command the daemon runs under, e.g. {"/usr/bin/unshare", ..., "sh", "-c", "... exec \"$@\"",
  // "sh"}: adjsnapd's argv is appended. The wrapper must exec adjsnapd in the same process.
  std::vector<std::string> wrapper;
};

// One adjsnapd process. Not thread-safe; owned by one test.
//
// A hung test fails with stacks instead of being killed silently: Stop bounds its wait, and
// where ADJSNAP_TEST_WATCHDOG_S is set (tests/CMakeLists.txt sets it below each test's ctest
// TIMEOUT) a watchdog thread, started by the first Start or RunProgram, waits that many seconds
// from the test process's start, then prints the native stacks of every live adjsnapd and
// RunProgram child and of the test process itself to stderr, aborts those children and then
// the test.
class DaemonProcess {
 public:
  // How long Stop waits after SIGTERM: adjsnapd's own stop_timeout (45 s by default) bounds its
  // drain, and a margin covers the rest of its shutdown on a loaded sanitizer build.
  static constexpr std::chrono::seconds kStopBound{90};

  // Starts adjsnapd and waits until its control plane answers (or fails after 30 s). UCX in this
  // process and in adjsnapd is kept to loopback (UCX_NET_DEVICES=lo) unless the caller chose.
  static Result<std::unique_ptr<DaemonProcess>> Start(const DaemonOptions& options);
  ~DaemonProcess();  // SIGKILL if still running

  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  // False once adjsnapd has exited (it is then reaped; Stop returns its status).
  bool Running();
  // SIGTERM and wait up to `bound`; returns the exit status (0 = clean shutdown). An adjsnapd still
  // running then has its threads' stacks printed to stderr (DumpStacks) and is aborted:
  // SIGABRT, and SIGKILL if that does not end it within 10 s (status 134 or 137).
  int Stop(std::chrono::seconds bound = kStopBound);
  // SIGKILL and wait (crash simulation).
  void Kill();
  // stderr of the daemon so far.
  std::string Log() const;
  // Prints the native stack of every thread of adjsnapd to stderr (DumpNativeStacks).
  void DumpStacks() const;

 private:
  DaemonProcess() = default;
  pid_t pid_ = -1;
  int exit_status_ = -1;  // once reaped by Running()
  std::string socket_;
  std::string log_path_;
};

// Connects a client to `daemon`'s socket.
Result<std::unique_ptr<Client>> ConnectClient(const DaemonProcess& daemon,
                                              bool map_host_tier = true);

// Prints to stderr, under a heading naming `what`, the native stack of every thread of process
// `pid` (gdb, given 30 s), then each thread's kernel state and wait channel (/proc), which is all
// there is where gdb is missing or may not attach (ptrace_scope).
void DumpNativeStacks(pid_t pid, const std::string& what);

// Runs a program to completion; returns its exit status and fills stdout/stderr.
int RunProgram(const std::vector<std::string>& argv, std::string* out, std::string* err);

// Deterministic snapshot contents: every 8-byte word depends on run seed, step and position.
void FillPattern(void* data, size_t bytes, uint64_t seed, uint64_t step);

// Checks `done` until it holds or `timeout` passes; returns its last answer. For what the
// daemon does on its own time (expiry, a file rewritten): the caller asserts the result.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout);

}  // namespace adjsnap::testing
