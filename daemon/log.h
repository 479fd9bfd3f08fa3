// The daemon's one logging entry point: timestamped lines on stderr (journald adds its own
// metadata under systemd). Thread-safe: one fprintf per line.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace adjsnap::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLevel(Level level);
bool ParseLevel(const char* text, Level* out);
void Write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Where a rejection happened: the `surface` label of adjsnap_rejections_total.
enum class Surface { kDataPlane, kArenaSocket, kControlPlane };
// Why: the `reason` label. A fixed set (docs/operations.md lists it with each surface's reasons),
// never free text, so the metric has a few series whatever peers send.
enum class Reason {
  // The data plane (and the arena socket, for kMalformed, kUnknownSession, kAnotherUid).
  kUnknownAmId,      // unknown_am_id: an AM id outside the wire format
  kNoReplyEndpoint,  // no_reply_endpoint: UCX gave no endpoint to answer on
  kUnknownEndpoint,  // unknown_endpoint: from an endpoint no session created
  kMalformed,        // malformed: a header of the wrong size or op
  kWireVersion,      // unsupported_wire_format: another magic or wire version
  kWrongToken,       // wrong_token: not the token of the endpoint's session
  kBeforeHello,      // before_hello: a request before the endpoint said Hello
  kUntrustedUid,     // untrusted_uid: a mapped-path message from a uid that may not map
  kAnotherSession,   // another_session: Hello for a session the endpoint was not opened for
  kUnknownSession,   // unknown_session: no open session with this id and token
  kAnotherUid,       // another_uid: a session that belongs to another uid
  // The control plane: refused requests, by what was wrong with them.
  kUndecodable,        // undecodable_request: a body that is not the method's message
  kUnknownMethod,      // unknown_method: a method adjsnapd does not serve
  kInvalidArgument,    // invalid_argument: a request adjsnapd's checks refused (a bad run spec)
  kUnauthenticated,    // unauthenticated: a caller adjsnapd cannot identify
  kPermissionDenied,   // permission_denied: another user's session or run, or admin only
  kResourceExhausted,  // resource_exhausted: over a limit (a run larger than the node, a quota,
                       // too many sessions opening at once)
};

// One (surface, reason) pair and how many rejections it has counted since adjsnapd started.
struct RejectionCount {
  const char* surface;  // "data_plane", "arena_socket", "control_plane"
  const char* reason;   // "unknown_am_id", ...
  uint64_t count;
};
// Every pair adjsnapd counts, zeros included, in a fixed order. The counts are the process's
// (one daemon per process); thread-safe.
std::vector<RejectionCount> RejectionCounts();

// A line that may repeat without end (a failing disk, a hostile peer): of each kind, at most
// `lines` lines per `interval` are logged; the repeats held back are counted and said in one
// line ("N more ... not logged") when the kind is next logged after the interval. The one
// owner of rate-limited logging: RejectionLog and the disk tier's error lines use it.
// Thread-safe.
class RateLimitedLog {
 public:
  RateLimitedLog(std::string name, int lines, std::chrono::milliseconds interval);
  // Logs "<name>: <line>" unless `kind` ("failed demotions": a plural noun, said in the count
  // line) has had its lines this interval.
  void Write(Level level, const std::string& kind, const std::string& line);
  // Repeats of `kind` not logged so far in this interval.
  uint64_t suppressed(const std::string& kind);

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    int lines = 0;
    uint64_t suppressed = 0;
  };
  const std::string name_;
  const int lines_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::map<std::string, Window> windows_;
};

// Logs what a peer did wrong at most `lines_per_second` lines a second per kind, so a hostile
// or broken peer cannot flood the journal; the lines held back are counted in one line when the
// next second's first rejection of that kind is logged. Thread-safe.
class RejectionLog {
 public:
  // Counts each rejection under `surface` and its reason (RejectionCounts), and logs it.
  explicit RejectionLog(Surface surface, int lines_per_second = 3);
  // Logs only, under the name `surface`: for refusals whose owner counts them itself (the
  // store's refused pushes, Stats.refused_pushes).
  explicit RejectionLog(std::string surface, int lines_per_second = 3);
  // Counts (when made with a Surface) and logs "<surface>: rejected (<reason>): <detail>".
  void Reject(Reason reason, const std::string& detail);
  // Logs "<surface>: rejected (<kind>): <detail>"; counts nothing.
  void Reject(const char* kind, const std::string& detail);

 private:
  const std::optional<Surface> counted_;  // none: log only
  RateLimitedLog log_;
};

}  // namespace adjsnap::log

#define ADJSNAP_LOG_DEBUG(...) ::adjsnap::log::Write(::adjsnap::log::Level::kDebug, __VA_ARGS__)
#define ADJSNAP_LOG_INFO(...) ::adjsnap::log::Write(::adjsnap::log::Level::kInfo, __VA_ARGS__)
#define ADJSNAP_LOG_WARN(...) ::adjsnap::log::Write(::adjsnap::log::Level::kWarn, __VA_ARGS__)
#define ADJSNAP_LOG_ERROR(...) ::adjsnap::log::Write(::adjsnap::log::Level::kError, __VA_ARGS__)
