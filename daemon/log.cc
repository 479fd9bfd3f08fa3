#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace snapd::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void SetLevel(Level level) { g_level = static_cast<int>(level); }

bool ParseLevel(const char* text, Level* out) {
  for (int i = 0; i < 4; ++i) {
    if (std::strcmp(text, kNames[i]) == 0) {
      *out = static_cast<Level>(i);
      return true;
    }
  }
  return false;
}

void Write(Level level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ snapd %s: %s\n", t.tm_year + 1900,
               t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000,
               kNames[static_cast<int>(level)], msg);
}

void RejectionLog::Reject(const char* kind, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  Window& w = windows_[kind];
  auto now = std::chrono::steady_clock::now();
  if (now - w.start >= std::chrono::seconds(1)) {
    if (w.suppressed > 0) {
      Write(Level::kWarn, "%s: %llu more rejected messages (%s) not logged", surface_.c_str(),
            static_cast<unsigned long long>(w.suppressed), kind);
    }
    w.start = now;
    w.lines = 0;
    w.suppressed = 0;
  }
  if (w.lines++ < lines_per_second_) {
    Write(Level::kWarn, "%s: rejected (%s): %s", surface_.c_str(), kind, detail.c_str());
  } else {
    ++w.suppressed;
  }
}

}  // namespace snapd::log
