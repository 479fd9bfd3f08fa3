// --copy: the copy that computes a push's checksum (CopyWithChecksum, adjsnap/checksum.h)
// against memcpy and against the checksum alone, in the same run, on this thread: --steps
// buffers of --bytes each, copied from one warm source into a region touched beforehand (as
// the host tier's pages are), three passes of each, interleaved; the best pass of each.
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "common.h"
#include "adjsnap/checksum.h"
#include "adjsnap/units.h"

namespace adjsnap_bench {

int CopyBench(const Args& a) {
  const uint64_t bytes = a.bytes, steps = a.steps;
  void* mem = mmap(nullptr, bytes * steps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "adjsnap-bench: cannot map %llu bytes for --copy\n",
                 static_cast<unsigned long long>(bytes * steps));
    return 1;
  }
  char* region = static_cast<char*>(mem);
  std::memset(region, 1, bytes * steps);
  std::vector<char> src(bytes);
  for (uint64_t i = 0; i < bytes; ++i) src[i] = static_cast<char>(i * 7 + 3);
  double memcpy_s = 1e30, fused_s = 1e30, hash_s = 1e30;
  uint64_t sums = 0, check = adjsnap::Checksum(src.data(), bytes);
  bool exact = true;
  for (int pass = 0; pass < 3; ++pass) {
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < steps; ++i) std::memcpy(region + i * bytes, src.data(), bytes);
    auto t1 = Clock::now();
    for (uint64_t i = 0; i < steps; ++i) {
      exact &= adjsnap::CopyWithChecksum(region + i * bytes, src.data(), bytes) == check;
    }
    auto t2 = Clock::now();
    for (uint64_t i = 0; i < steps; ++i) sums += adjsnap::Checksum(region + i * bytes, bytes);
    auto t3 = Clock::now();
    memcpy_s = std::min(memcpy_s, Seconds(t0, t1));
    fused_s = std::min(fused_s, Seconds(t1, t2));
    hash_s = std::min(hash_s, Seconds(t2, t3));
  }
  exact &= sums == 3 * steps * check && std::memcmp(region, src.data(), bytes) == 0;
  munmap(mem, bytes * steps);
  if (!exact) {
    std::fprintf(stderr, "adjsnap-bench: the checksumming copy did not copy or sum exactly\n");
    return 1;
  }
  const double total = static_cast<double>(bytes * steps);
  const double m = total / memcpy_s / 1e9, f = total / fused_s / 1e9, h = total / hash_s / 1e9;
  if (a.json) {
    std::printf("{\"mode\": \"copy\", \"steps\": %llu, \"bytes\": %llu, \"memcpy_gbs\": %.3f, "
                "\"copy_with_checksum_gbs\": %.3f, \"checksum_gbs\": %.3f}\n",
                static_cast<unsigned long long>(steps), static_cast<unsigned long long>(bytes),
                m, f, h);
  } else {
    std::printf("adjsnap-bench --copy: %llu x %s, one thread, best of 3 passes each\n",
                static_cast<unsigned long long>(steps), adjsnap::FormatBytes(bytes).c_str());
    std::printf("memcpy                 %6.2f GB/s\n", m);
    std::printf("copy with checksum     %6.2f GB/s = %.2f x memcpy\n", f, f / m);
    std::printf("checksum alone         %6.2f GB/s\n", h);
  }
  return 0;
}

}  // namespace adjsnap_bench
