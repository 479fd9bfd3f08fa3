// A solver linking libadjsnap's C++ API: one push and fetch through the adjsnapd at SOCKET, or,
// with "absent", the error a solver gets when no adjsnapd runs there.
#include <adjsnap/client.h>
#include <adjsnap/schedule.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// The project sets no C++ standard: adjsnap::client's own cxx_std_20 makes this C++20, where the
// designated initializers below are standard rather than a GNU extension of C++17.
static_assert(__cplusplus >= 202002L, "adjsnap::client should ask for C++20");

namespace {

int RoundTrip(const std::string& socket) {
  adjsnap::ClientOptions options;
  options.socket_path = socket;
  auto client = adjsnap::Client::Connect(options).value();  // throws with the reason on error
  const uint64_t steps = 4, n = 1024;
  std::vector<float> u(n), back(n);
  auto run = client
                 ->OpenRun({.name = "consumer-cc",
                            .steps = steps,
                            .bytes_per_step = n * sizeof(float),
                            .dtype = adjsnap::Dtype::kFloat32,
                            .shape = {n}})
                 .value();
  for (uint64_t t = 0; t < steps; ++t) {
    for (uint64_t i = 0; i < n; ++i) u[i] = float(t * n + i);
    auto push = client->Push(run.run_id, t, u.data(), n * sizeof(float)).value();
    if (auto s = push.WaitStored(); !s.ok()) return std::printf("%s\n", s.ToString().c_str()), 1;
  }
  for (uint64_t t = steps; t-- > 0;) {
    if (auto s = client->Fetch(run.run_id, t, back.data(), n * sizeof(float)); !s.ok()) {
      return std::printf("%s\n", s.ToString().c_str()), 1;
    }
    for (uint64_t i = 0; i < n; ++i) {
      if (back[i] != float(t * n + i))
        return std::printf("step %llu differs\n", (unsigned long long)t), 1;
    }
  }
  if (auto s = client->DeleteRun("consumer-cc"); !s.ok()) {
    return std::printf("%s\n", s.ToString().c_str()), 1;
  }
  std::printf("c++: pushed and fetched %llu steps\n", (unsigned long long)steps);
  return 0;
}

// Connect().value() with no daemon throws the status, code and message.
int Absent(const std::string& socket) {
  adjsnap::ClientOptions options;
  options.socket_path = socket;
  try {
    auto client = adjsnap::Client::Connect(options).value();
  } catch (const adjsnap::BadResultAccess& e) {
    std::printf("c++: %s\n", e.what());
    auto p = adjsnap::schedule::RevolveForwardSteps(100, 10);
    return e.code() == adjsnap::Code::kUnavailable && p.ok() && *p == 222 ? 0 : 1;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (argc == 3 && std::strcmp(argv[2], "absent") == 0) return Absent(argv[1]);
  return RoundTrip(argv[1]);
}
