// Control-plane sessions. A session hands out a random 64-bit token; a UCX endpoint must
// present it (wire::HelloRequest) before it may push or fetch, and a session socket presents
// it to the arena socket (wire::ArenaRequest).
// Thread-safe: one mutex guards the table.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "adjsnap/status.h"
#include "adjsnap/thread_annotations.h"

namespace adjsnap {

// Root and adjsnapd's own uid: trusted with every run and with the mapped host tier (members of
// the admin_group are admins on the control plane only).
bool TrustedUid(uint32_t uid);

struct Session {
  uint64_t id = 0;
  uint64_t token = 0;
  uint32_t uid = 0;
  std::string client_name;
  // Opened without a UCX address: its link is the session socket (its arena socket
  // connection, kept open), not a UCX endpoint (wire.h).
  bool socket_link = false;
};

class SessionTable {
 public:
  // The most sessions one uid may hold open at once (max_sessions_per_uid); 0 = no limit.
  // Every uid is held to it, root too: one process that leaks sessions, or one user who opens
  // them in a loop, must not take the fds and memory every other client's session needs.
  void set_max_per_uid(size_t max) ADJSNAP_EXCLUDES(mu_);
  // RESOURCE_EXHAUSTED, naming the limit, when `uid` already holds max_per_uid sessions.
  Result<Session> Open(const std::string& client_name, uint32_t uid, bool socket_link = false)
      ADJSNAP_EXCLUDES(mu_);
  // NOT_FOUND unless both id and token match an open session.
  Status Close(uint64_t id, uint64_t token) ADJSNAP_EXCLUDES(mu_);
  std::optional<Session> Find(uint64_t id, uint64_t token) const ADJSNAP_EXCLUDES(mu_);
  size_t size() const ADJSNAP_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  uint64_t next_id_ ADJSNAP_GUARDED_BY(mu_) = 1;
  size_t max_per_uid_ ADJSNAP_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Session> sessions_ ADJSNAP_GUARDED_BY(mu_);
  std::map<uint32_t, size_t> per_uid_ ADJSNAP_GUARDED_BY(mu_);  // open sessions of each uid
};

}  // namespace adjsnap
