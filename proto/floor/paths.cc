#include "adjsnap/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace adjsnap {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string DefaultSocketPath() {
  if (auto s = Env("ADJSNAP_SOCKET"); !s.empty()) return s;
  if (geteuid() == 0) return kSystemSocket;
  if (auto x = Env("XDG_RUNTIME_DIR"); !x.empty()) return x + "/adjsnap/adjsnap.sock";
  return "/tmp/adjsnap-" + std::to_string(geteuid()) + "/adjsnap.sock";
}

std::string ClientSocketPath() {
  if (auto s = Env("ADJSNAP_SOCKET"); !s.empty()) return s;
  if (access(kSystemSocket, F_OK) == 0) return kSystemSocket;
  return DefaultSocketPath();
}

std::string DefaultStateDir() {
  if (geteuid() == 0) return "/var/lib/adjsnap";
  if (auto x = Env("XDG_STATE_HOME"); !x.empty()) return x + "/adjsnap";
  return Env("HOME") + "/.local/state/adjsnap";
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace adjsnap
