// How a failed spool call is classified (transient, the spool failed, the disk is full), and
// errno names for messages.
#include <cerrno>
#include <string>
#include <utility>

#include "disk_tier/disk_tier.h"

namespace adjsnap {

SpoolError ClassifySpoolError(int err) {
  switch (err) {
    case EINTR:
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EBUSY:
      return SpoolError::kTransient;
    case ENOSPC:
    case EDQUOT:
      return SpoolError::kFull;
    case ENOTCONN:
    case ETIMEDOUT:
    case ESTALE:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENETDOWN:
    case ENETUNREACH:
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ENOLINK:
    case ESHUTDOWN:
      return SpoolError::kUnreachable;
    default:
      return SpoolError::kDeviceFailed;
  }
}

std::string ErrnoName(int err) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {EROFS, "EROFS"},
      {EIO, "EIO"},
      {ENODEV, "ENODEV"},
      {ENXIO, "ENXIO"},
      {ENOSPC, "ENOSPC"},
      {EDQUOT, "EDQUOT"},
      {EACCES, "EACCES"},
      {EPERM, "EPERM"},
      {ENOENT, "ENOENT"},
      {EINTR, "EINTR"},
      {EAGAIN, "EAGAIN"},
      {ENOMEM, "ENOMEM"},
      {EMFILE, "EMFILE"},
      {ENFILE, "ENFILE"},
      {EBUSY, "EBUSY"},
      {EUCLEAN, "EUCLEAN"},
      {ENOTCONN, "ENOTCONN"},
      {ESTALE, "ESTALE"},
      {ETIMEDOUT, "ETIMEDOUT"},
      {EHOSTDOWN, "EHOSTDOWN"},
      {EHOSTUNREACH, "EHOSTUNREACH"},
      {ENETDOWN, "ENETDOWN"},
      {ENETUNREACH, "ENETUNREACH"},
      {ECONNREFUSED, "ECONNREFUSED"},
      {ECONNRESET, "ECONNRESET"},
      {ECONNABORTED, "ECONNABORTED"},
      {ENOLINK, "ENOLINK"},
      {ESHUTDOWN, "ESHUTDOWN"},
  };
  for (const auto& [e, name] : kNames) {
    if (e == err) return name;
  }
  return "errno " + std::to_string(err);
}

}  // namespace adjsnap
