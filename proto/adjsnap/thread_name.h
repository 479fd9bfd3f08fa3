// Names threads as `top -H`, `ps -L`, `perf` and gdb show them: adjsnapd's are "adjsnap-<role>"
// (docs/architecture.md, "Threads"). The kernel keeps 15 characters.
#pragma once

#include <pthread.h>

#include <string>
#include <thread>
#include <utility>

namespace adjsnap {

inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

// A thread named `name` that runs `body`.
template <typename Body>
std::thread NamedThread(std::string name, Body body) {
  return std::thread([name = std::move(name), body = std::move(body)]() mutable {
    NameThisThread(name);
    body();
  });
}

}  // namespace adjsnap
