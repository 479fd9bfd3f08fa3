#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <utility>

namespace adjsnap::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};

constexpr int kSurfaces = static_cast<int>(Surface::kControlPlane) + 1;
constexpr int kReasons = static_cast<int>(Reason::kResourceExhausted) + 1;

// By Surface: the label, and the name log lines begin with.
constexpr const char* kSurfaceLabels[] = {"data_plane", "arena_socket", "control_plane"};
constexpr const char* kSurfaceNames[] = {"data plane", "arena socket", "control plane"};
static_assert(std::size(kSurfaceLabels) == kSurfaces && std::size(kSurfaceNames) == kSurfaces);

// By Reason: the label, and what the log line says.
struct ReasonName {
  const char* label;
  const char* text;
};
constexpr ReasonName kReasonNames[] = {
    {"unknown_am_id", "AM id that is not part of the wire format"},
    {"no_reply_endpoint", "no reply endpoint"},
    {"unknown_endpoint", "from an endpoint that no session created"},
    {"malformed", "malformed message"},
    {"unsupported_wire_format", "unsupported wire format"},
    {"wrong_token", "wrong token"},
    {"before_hello", "before Hello"},
    {"untrusted_uid", "mapped-path message from an untrusted uid"},
    {"another_session", "Hello for another session"},
    {"unknown_session", "unknown session"},
    {"another_uid", "another uid's session"},
    {"undecodable_request", "request body that does not decode"},
    {"unknown_method", "unknown method"},
    {"invalid_argument", "invalid argument"},
    {"unauthenticated", "unauthenticated"},
    {"permission_denied", "permission denied"},
    {"resource_exhausted", "resource exhausted"},
};
static_assert(std::size(kReasonNames) == kReasons, "a label and a text for every Reason");

// The pairs RejectionCounts reports, in its order: each surface's reasons (docs/operations.md).
struct Pair {
  Surface surface;
  Reason reason;
};
constexpr Pair kCounted[] = {
    {Surface::kDataPlane, Reason::kUnknownAmId},
    {Surface::kDataPlane, Reason::kNoReplyEndpoint},
    {Surface::kDataPlane, Reason::kUnknownEndpoint},
    {Surface::kDataPlane, Reason::kMalformed},
    {Surface::kDataPlane, Reason::kWireVersion},
    {Surface::kDataPlane, Reason::kWrongToken},
    {Surface::kDataPlane, Reason::kBeforeHello},
    {Surface::kDataPlane, Reason::kUntrustedUid},
    {Surface::kDataPlane, Reason::kAnotherSession},
    {Surface::kArenaSocket, Reason::kMalformed},
    {Surface::kArenaSocket, Reason::kUnknownSession},
    {Surface::kArenaSocket, Reason::kAnotherUid},
    {Surface::kControlPlane, Reason::kUndecodable},
    {Surface::kControlPlane, Reason::kUnknownMethod},
    {Surface::kControlPlane, Reason::kInvalidArgument},
    {Surface::kControlPlane, Reason::kUnauthenticated},
    {Surface::kControlPlane, Reason::kPermissionDenied},
    {Surface::kControlPlane, Reason::kResourceExhausted},
};

// Every (surface, reason) has a counter, so a pair missing from kCounted is still counted
// (and shows once added there).
std::atomic<uint64_t> g_rejections[kSurfaces][kReasons];

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
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ adjsnapd %s: %s\n", t.tm_year + 1900,
               t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000,
               kNames[static_cast<int>(level)], msg);
}

std::vector<RejectionCount> RejectionCounts() {
  std::vector<RejectionCount> out;
  out.reserve(std::size(kCounted));
  for (const Pair& p : kCounted) {
    int s = static_cast<int>(p.surface), r = static_cast<int>(p.reason);
    out.push_back({kSurfaceLabels[s], kReasonNames[r].label,
                   g_rejections[s][r].load(std::memory_order_relaxed)});
  }
  return out;
}

RateLimitedLog::RateLimitedLog(std::string name, int lines, std::chrono::milliseconds interval)
    : name_(std::move(name)), lines_(lines), interval_(interval) {}

void RateLimitedLog::Write(Level level, const std::string& kind, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  Window& w = windows_[kind];
  auto now = std::chrono::steady_clock::now();
  if (now - w.start >= interval_) {
    if (w.suppressed > 0) {
      log::Write(level, "%s: %llu more %s not logged", name_.c_str(),
                 static_cast<unsigned long long>(w.suppressed), kind.c_str());
    }
    w.start = now;
    w.lines = 0;
    w.suppressed = 0;
  }
  if (w.lines++ < lines_) {
    log::Write(level, "%s: %s", name_.c_str(), line.c_str());
  } else {
    ++w.suppressed;
  }
}

uint64_t RateLimitedLog::suppressed(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(kind);
  return it == windows_.end() ? 0 : it->second.suppressed;
}

RejectionLog::RejectionLog(Surface surface, int lines_per_second)
    : counted_(surface),
      log_(kSurfaceNames[static_cast<int>(surface)], lines_per_second, std::chrono::seconds(1)) {}

RejectionLog::RejectionLog(std::string surface, int lines_per_second)
    : counted_(std::nullopt), log_(std::move(surface), lines_per_second, std::chrono::seconds(1)) {}

void RejectionLog::Reject(Reason reason, const std::string& detail) {
  if (counted_) {
    g_rejections[static_cast<int>(*counted_)][static_cast<int>(reason)].fetch_add(
        1, std::memory_order_relaxed);
  }
  Reject(kReasonNames[static_cast<int>(reason)].text, detail);
}

void RejectionLog::Reject(const char* kind, const std::string& detail) {
  log_.Write(Level::kWarn, std::string("rejected messages (") + kind + ")",
             std::string("rejected (") + kind + "): " + detail);
}

}  // namespace adjsnap::log
