#include "sessions/sessions.h"

#include <sys/random.h>
#include <unistd.h>

namespace snapd {

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

Session SessionTable::Open(const std::string& client_name, uint32_t uid, bool socket_link) {
  MutexLock lock(mu_);
  Session s{next_id_++, RandomToken(), uid, client_name, socket_link};
  sessions_[s.id] = s;
  return s;
}

Status SessionTable::Close(uint64_t id, uint64_t token) {
  MutexLock lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.token != token) {
    return Status::NotFound("session " + std::to_string(id) + " is not open");
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

}  // namespace snapd
