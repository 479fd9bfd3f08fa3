// Where adjsnapd listens by default, shared by the daemon, libadjsnap and adjsnap, and how they read
// the small files they are pointed at.
#pragma once

#include <string>

#include "adjsnap/status.h"

namespace adjsnap {

// $ADJSNAP_SOCKET if set; else /run/adjsnap/adjsnap.sock for root; else
// $XDG_RUNTIME_DIR/adjsnap/adjsnap.sock, or /tmp/adjsnap-<uid>/adjsnap.sock without XDG_RUNTIME_DIR.
std::string DefaultSocketPath();

// Where a client looks: $ADJSNAP_SOCKET if set; else the node service's socket
// (/run/adjsnap/adjsnap.sock) when it exists, whoever the client is; else DefaultSocketPath().
std::string ClientSocketPath();
inline constexpr const char* kSystemSocket = "/run/adjsnap/adjsnap.sock";

// /var/lib/adjsnap for root; else $XDG_STATE_HOME/adjsnap or ~/.local/state/adjsnap.
std::string DefaultStateDir();

// The whole of a small text file (certificates, keys); NOT_FOUND "cannot read PATH".
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace adjsnap
