// Where snapd listens by default, shared by the daemon, libsnapd and snapctl.
#pragma once

#include <string>

namespace snapd {

// $SNAPD_SOCKET if set; else /run/snapd/snapd.sock for root; else
// $XDG_RUNTIME_DIR/snapd/snapd.sock, or /tmp/snapd-<uid>/snapd.sock without XDG_RUNTIME_DIR.
std::string DefaultSocketPath();

// /var/lib/snapd for root; else $XDG_STATE_HOME/snapd or ~/.local/state/snapd.
std::string DefaultStateDir();

}  // namespace snapd
