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
    default: return "errno " + std::to_string(err);
  }
}

}  // namespace snapd
