// Names the calling thread as `top -H`, `ps -L`, `perf` and gdb show it: snapd's threads are
// "snapd-<role>" (docs/architecture.md, "Threads"). The kernel keeps 15 characters.
#pragma once

#include <pthread.h>

#include <string>

namespace snapd {

inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace snapd
