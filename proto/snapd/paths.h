// Where snapd listens by default, shared by the daemon, libsnapd and snapctl, and how they read
// the small files they are pointed at.
#pragma once

#include <string>

#include "snapd/status.h"

namespace snapd {

// $SNAPD_SOCKET if set; else /run/snapd/snapd.sock for root; else
// $XDG_RUNTIME_DIR/snapd/snapd.sock, or /tmp/snapd-<uid>/snapd.sock without XDG_RUNTIME_DIR.
std::string DefaultSocketPath();

// Where a client looks: $SNAPD_SOCKET if set; else the node service's socket
// (/run/snapd/snapd.sock) when it exists, whoever the client is; else DefaultSocketPath().
std::string ClientSocketPath();
inline constexpr const char* kSystemSocket = "/run/snapd/snapd.sock";

// /var/lib/snapd for root; else $XDG_STATE_HOME/snapd or ~/.local/state/snapd.
std::string DefaultStateDir();

// The whole of a small text file (certificates, keys); NOT_FOUND "cannot read PATH".
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace snapd
