#include "sessions/sessions.h"

#include <sys/random.h>
#include <unistd.h>

namespace adjsnap {

bool TrustedUid(uint32_t uid) { return uid == 0 || uid == geteuid(); }

namespace {

uint64_t RandomToken() {
  uint64_t token = 0;
  while (token == 0) {  // 0 is reserved for "no token"
    if (getrandom(&token, sizeof token, 0) != sizeof token) token = 0;
  }
  return token;
}

}  // namespace

void SessionTable::set_max_per_uid(size_t max) {
  MutexLock lock(mu_);
  max_per_uid_ = max;
}

Result<Session> SessionTable::Open(const std::string& client_name, uint32_t uid, bool socket_link) {
  MutexLock lock(mu_);
  size_t& held = per_uid_[uid];
  if (max_per_uid_ != 0 && held >= max_per_uid_) {
    return Status::ResourceExhausted(
        "uid " + std::to_string(uid) + " already holds " + std::to_string(held) +
        " open sessions, the most one uid may (max_sessions_per_uid = " +
        std::to_string(max_per_uid_) +
        "); each connected client holds one until it disconnects: end clients it no longer "
        "needs");
  }
  Session s{next_id_++, RandomToken(), uid, client_name, socket_link};
  sessions_[s.id] = s;
  ++held;
  return s;
}

Status SessionTable::Close(uint64_t id, uint64_t token) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.token != token) {
    return Status::NotFound("session " + std::to_string(id) + " is not open");
  }
  if (auto held = per_uid_.find(it->second.uid); held != per_uid_.end() && --held->second == 0) {
    per_uid_.erase(held);
  }
  sessions_.erase(it);
  return Status::Ok();
}

std::optional<Session> SessionTable::Find(uint64_t id, uint64_t token) const {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.token != token) return std::nullopt;
  return it->second;
}

size_t SessionTable::size() const {
  MutexLock lock(mu_);
  return sessions_.size();
}

}  // namespace adjsnap
