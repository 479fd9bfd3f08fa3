#include "service/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "log.h"

namespace snapd {

bool Notify(const std::map<std::string, std::string>& env, const std::string& state) {
  auto it = env.find("NOTIFY_SOCKET");
  if (it == env.end() || it->second.empty()) return false;
  const std::string& path = it->second;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path || (path[0] != '/' && path[0] != '@')) {
    SNAPD_LOG_WARN("NOTIFY_SOCKET '%s' is not a socket path; not notifying systemd", path.c_str());
    return false;
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ssize_t sent = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                        reinterpret_cast<sockaddr*>(&addr), len);
  close(fd);
  return sent == static_cast<ssize_t>(state.size());
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
  thread_ = std::thread([this] { Run(); });
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
      SNAPD_LOG_ERROR("health check failed: not pinging the systemd watchdog");
    }
    lock.lock();
  }
}

}  // namespace snapd
