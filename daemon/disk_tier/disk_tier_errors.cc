// How a failed spool call is classified (transient, the spool failed, the disk is full), and
// errno names for messages.
#include <cerrno>
#include <string>

#include "disk_tier/disk_tier.h"

namespace snapd {

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
  switch (err) {
    case EROFS: return "EROFS";
    case EIO: return "EIO";
    case ENODEV: return "ENODEV";
    case ENXIO: return "ENXIO";
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINTR: return "EINTR";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EBUSY: return "EBUSY";
    case EUCLEAN: return "EUCLEAN";
    case ENOTCONN: return "ENOTCONN";
    case ESTALE: return "ESTALE";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case EHOSTDOWN:
      return "EHOSTDOWN";
    case EHOSTUNREACH:
      return "EHOSTUNREACH";
    case ENETDOWN:
      return "ENETDOWN";
    case ENETUNREACH:
      return "ENETUNREACH";
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ECONNRESET:
      return "ECONNRESET";
    case ECONNABORTED:
      return "ECONNABORTED";
    case ENOLINK:
      return "ENOLINK";
    case ESHUTDOWN:
      return "ESHUTDOWN";
    default: return "errno " + std::to_string(err);
  }
}

}  // namespace snapd
