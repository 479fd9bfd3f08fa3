// Test helper: a solver process as it starts for one shot. Connects to adjsnapd on the mapped
// host tier, pushes STEPS steps of BYTES (each page marked with its step), fetches them back in
// reverse and checks every byte, deletes the run, and prints the minor page faults this process
// took while pushing and while fetching, and how many 4 KiB pages the run spans:
//   "push_faults P fetch_faults F pages N"
// Exit status 0 only if the data path was the mapped host tier and every byte came back.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "adjsnap/client.h"

namespace {

long MinorFaults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

int Fail(const std::string& why) {
  std::fprintf(stderr, "fresh_process_pass: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: fresh_process_pass SOCKET RUN STEPS BYTES\n");
    return 2;
  }
  uint64_t steps = std::strtoull(argv[3], nullptr, 10);
  uint64_t bytes = std::strtoull(argv[4], nullptr, 10);
  adjsnap::ClientOptions o;
  o.socket_path = argv[1];
  auto client = adjsnap::Client::Connect(o);
  if (!client.ok()) return Fail(client.status().ToString());
  if ((*client)->data_path() != adjsnap::DataPath::kMappedHostTier) {
    return Fail("not on the mapped host tier: " + (*client)->data_path_reason());
  }
  adjsnap::RunSpec spec;
  spec.name = argv[2];
  spec.steps = steps;
  spec.bytes_per_step = bytes;
  auto run = (*client)->OpenRun(spec);
  if (!run.ok()) return Fail(run.status().ToString());
  // Buffers touched before the counting starts: only the tier's pages may fault.
  std::vector<char> src(bytes), dst(bytes);
  std::memset(dst.data(), 0, bytes);
  auto mark = [&](uint64_t t) {
    for (uint64_t i = 0; i < bytes; i += 4096) src[i] = static_cast<char>(t * 31 + i / 4096);
  };
  long f0 = MinorFaults();
  for (uint64_t t = 0; t < steps; ++t) {
    mark(t);
    auto h = (*client)->Push(run->run_id, t, src.data(), bytes);
    if (!h.ok()) return Fail(h.status().ToString());
    if (adjsnap::Status s = h->WaitStored(); !s.ok()) return Fail(s.ToString());
  }
  long f1 = MinorFaults();
  long fetch_faults = 0;
  for (uint64_t t = steps; t-- > 0;) {
    long before = MinorFaults();
    if (adjsnap::Status s = (*client)->Fetch(run->run_id, t, dst.data(), bytes); !s.ok()) {
      return Fail(s.ToString());
    }
    fetch_faults += MinorFaults() - before;
    mark(t);
    if (std::memcmp(src.data(), dst.data(), bytes) != 0) {
      return Fail("step " + std::to_string(t) + " came back different");
    }
  }
  if (adjsnap::Status s = (*client)->DeleteRun(spec.name); !s.ok()) return Fail(s.ToString());
  std::printf("push_faults %ld fetch_faults %ld pages %llu\n", f1 - f0, fetch_faults,
              static_cast<unsigned long long>(steps * ((bytes + 4095) / 4096)));
  return 0;
}
