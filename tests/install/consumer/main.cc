// A solver project's view of snapd: find_package(snapd), link snapd::client, call the API.
#include <snapd/client.h>
#include <snapd/schedule.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  snapd::ClientOptions options;
  options.socket_path = argv[1];  // nothing listens there
  auto client = snapd::Client::Connect(options);
  auto p = snapd::schedule::RevolveForwardSteps(100, 10);
  std::printf("%s\n", client.status().ToString().c_str());
  bool ok = !client.ok() && client.status().code() == snapd::Code::kUnavailable && p.ok() &&
            *p == 222;
  return ok ? 0 : 1;
}
