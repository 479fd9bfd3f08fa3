// The daemon's one logging entry point: timestamped lines on stderr (journald adds its own
// metadata under systemd). Thread-safe: one fprintf per line.
#pragma once

namespace snapd::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLevel(Level level);
bool ParseLevel(const char* text, Level* out);
void Write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace snapd::log

#define SNAPD_LOG_DEBUG(...) ::snapd::log::Write(::snapd::log::Level::kDebug, __VA_ARGS__)
#define SNAPD_LOG_INFO(...) ::snapd::log::Write(::snapd::log::Level::kInfo, __VA_ARGS__)
#define SNAPD_LOG_WARN(...) ::snapd::log::Write(::snapd::log::Level::kWarn, __VA_ARGS__)
#define SNAPD_LOG_ERROR(...) ::snapd::log::Write(::snapd::log::Level::kError, __VA_ARGS__)
