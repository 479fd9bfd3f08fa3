// systemd's service notification protocol (sd_notify(3)), without libsystemd: datagrams of
// "KEY=VALUE" lines to the socket named by $NOTIFY_SOCKET. A service of Type=notify says
// READY=1 once it serves, STOPPING=1 when it begins to stop, and WATCHDOG=1 at least every
// half $WATCHDOG_USEC while it is healthy; systemd restarts it when the pings stop.
//
// Without $NOTIFY_SOCKET (not started by systemd) every call does nothing.
//
// Threading: Notify may be called from any thread. Watchdog runs one thread until destroyed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace adjsnap {

// Sends `state` (e.g. "READY=1\nSTATUS=serving") to $NOTIFY_SOCKET from `env`; false when
// there is no socket or the send failed.
bool Notify(const std::map<std::string, std::string>& env, const std::string& state);
// The same with `fd` attached (SCM_RIGHTS), e.g. "FDSTORE=1\nFDNAME=hosttier": systemd keeps a
// duplicate in the service's fd store and passes it to the next start (LISTEN_FDS).
bool NotifyWithFd(const std::map<std::string, std::string>& env, const std::string& state,
                  int fd);

// The fds systemd passed to this process (sd_listen_fds(3) with names): $LISTEN_PID must be
// this process; fds 3 .. 3 + $LISTEN_FDS - 1, named by the colon-separated $LISTEN_FDNAMES
// ("unknown" when unnamed). Each is marked close-on-exec. Empty when none were passed.
std::map<std::string, int> ListenFds(const std::map<std::string, std::string>& env);

// Pings WATCHDOG=1 every half $WATCHDOG_USEC while `healthy()` returns true within that time;
// a daemon whose healthy() hangs or fails is left for systemd to restart.
class Watchdog {
 public:
  // Null when the environment asks for no watchdog (no WATCHDOG_USEC, or WATCHDOG_PID names
  // another process).
  static std::unique_ptr<Watchdog> Start(const std::map<std::string, std::string>& env,
                                         std::function<bool()> healthy);
  ~Watchdog();
  std::chrono::microseconds interval() const { return interval_; }

 private:
  Watchdog(std::map<std::string, std::string> env, std::chrono::microseconds interval,
           std::function<bool()> healthy);
  void Run();

  const std::map<std::string, std::string> env_;
  const std::chrono::microseconds interval_;
  const std::function<bool()> healthy_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // declared last
};

}  // namespace adjsnap
