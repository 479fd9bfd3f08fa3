// The daemon's one logging entry point: timestamped lines on stderr (journald adds its own
// metadata under systemd). Thread-safe: one fprintf per line.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace snapd::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLevel(Level level);
bool ParseLevel(const char* text, Level* out);
void Write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Logs what a peer did wrong at most `lines_per_second` lines a second per kind, so a hostile
// or broken peer cannot flood the journal; the lines held back are counted in one line when the
// next second's first rejection of that kind is logged. Thread-safe.
class RejectionLog {
 public:
  // `surface` names where the rejection happened ("data plane", "arena socket").
  explicit RejectionLog(std::string surface, int lines_per_second = 3)
      : surface_(std::move(surface)), lines_per_second_(lines_per_second) {}
  void Reject(const char* kind, const std::string& detail);

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    int lines = 0;
    uint64_t suppressed = 0;
  };
  const std::string surface_;
  const int lines_per_second_;
  std::mutex mu_;
  std::map<std::string, Window> windows_;
};

}  // namespace snapd::log

#define SNAPD_LOG_DEBUG(...) ::snapd::log::Write(::snapd::log::Level::kDebug, __VA_ARGS__)
#define SNAPD_LOG_INFO(...) ::snapd::log::Write(::snapd::log::Level::kInfo, __VA_ARGS__)
#define SNAPD_LOG_WARN(...) ::snapd::log::Write(::snapd::log::Level::kWarn, __VA_ARGS__)
#define SNAPD_LOG_ERROR(...) ::snapd::log::Write(::snapd::log::Level::kError, __VA_ARGS__)
