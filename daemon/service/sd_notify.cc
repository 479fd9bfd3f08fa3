#include "service/sd_notify.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "log.h"
#include "adjsnap/thread_name.h"
#include "adjsnap/unix_socket.h"

namespace adjsnap {

bool Notify(const std::map<std::string, std::string>& env, const std::string& state) {
  return NotifyWithFd(env, state, -1);
}

bool NotifyWithFd(const std::map<std::string, std::string>& env, const std::string& state,
                  int fd_to_send) {
  auto it = env.find("NOTIFY_SOCKET");
  if (it == env.end() || it->second.empty()) return false;
  const std::string& path = it->second;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path || (path[0] != '/' && path[0] != '@')) {
    ADJSNAP_LOG_WARN("NOTIFY_SOCKET '%s' is not a socket path; not notifying systemd", path.c_str());
    return false;
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ssize_t sent = SendWithFd(fd, state.data(), state.size(), fd_to_send, &addr, len);
  close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

std::map<std::string, int> ListenFds(const std::map<std::string, std::string>& env) {
  std::map<std::string, int> fds;
  auto pid = env.find("LISTEN_PID");
  auto count = env.find("LISTEN_FDS");
  if (pid == env.end() || count == env.end() ||
      std::strtol(pid->second.c_str(), nullptr, 10) != getpid()) {
    return fds;
  }
  long n = std::strtol(count->second.c_str(), nullptr, 10);
  std::vector<std::string> names;
  if (auto it = env.find("LISTEN_FDNAMES"); it != env.end()) {
    std::string all = it->second;
    for (size_t start = 0;;) {
      size_t colon = all.find(':', start);
      names.push_back(all.substr(start, colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  constexpr int kFirst = 3;  // SD_LISTEN_FDS_START
  for (long i = 0; i < n && i < 1024; ++i) {
    int fd = kFirst + static_cast<int>(i);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) continue;  // not open
    std::string name = static_cast<size_t>(i) < names.size() && !names[i].empty()
                           ? names[i]
                           : "unknown";
    if (fds.count(name)) {
      close(fd);  // one of each name is used
    } else {
      fds[name] = fd;
    }
  }
  return fds;
}

std::unique_ptr<Watchdog> Watchdog::Start(const std::map<std::string, std::string>& env,
                                          std::function<bool()> healthy) {
  auto usec = env.find("WATCHDOG_USEC");
  if (usec == env.end()) return nullptr;
  char* end = nullptr;
  unsigned long long us = std::strtoull(usec->second.c_str(), &end, 10);
  if (end == usec->second.c_str() || *end != '\0' || us == 0) return nullptr;
  if (auto pid = env.find("WATCHDOG_PID");
      pid != env.end() && std::strtol(pid->second.c_str(), nullptr, 10) != getpid()) {
    return nullptr;  // meant for another process
  }
  return std::unique_ptr<Watchdog>(
      new Watchdog(env, std::chrono::microseconds(us), std::move(healthy)));
}

Watchdog::Watchdog(std::map<std::string, std::string> env, std::chrono::microseconds interval,
                   std::function<bool()> healthy)
    : env_(std::move(env)), interval_(interval), healthy_(std::move(healthy)) {
  thread_ = NamedThread("adjsnap-wdog", [this] { Run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_ / 2, [this] { return stop_; })) {
    lock.unlock();
    bool ok = healthy_();
    if (ok) {
      Notify(env_, "WATCHDOG=1");
    } else {
      ADJSNAP_LOG_ERROR("health check failed: not pinging the systemd watchdog");
    }
    lock.lock();
  }
}

}  // namespace adjsnap
