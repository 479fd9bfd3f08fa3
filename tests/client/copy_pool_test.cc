// CopyPool: every byte of a large copy arrives whatever the stripes, the helpers take part,
// and the thread count is chosen as ClientOptions.copy_threads says.
#include "copy_pool.h"

#include "adjsnap/checksum.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace adjsnap::detail {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  return v;
}

// Copies `bytes` into the middle of a guarded buffer and checks the copy and both guards.
void CopyAndCheck(CopyPool& pool, size_t bytes, unsigned seed) {
  constexpr size_t kGuard = 4096;
  std::vector<unsigned char> src = Pattern(bytes, seed);
  std::vector<unsigned char> dst(bytes + 2 * kGuard, 0xAB);
  pool.Copy(dst.data() + kGuard, src.data(), bytes);
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(dst[i], 0xAB) << "wrote before the destination, " << bytes << " bytes";
    ASSERT_EQ(dst[kGuard + bytes + i], 0xAB) << "wrote past the destination, " << bytes;
  }
  if (bytes == 0) return;  // src.data() may be null; memcmp may not be given one
  ASSERT_EQ(0, std::memcmp(dst.data() + kGuard, src.data(), bytes))
      << bytes << " bytes with " << pool.threads() << " threads";
}

TEST(CopyPool, EveryByteArrivesWhateverTheStripes) {
  // Below the parallel threshold, on it, whole and odd stripes, and sizes whose last stripe
  // is short (9 MiB + 4097 over 2, 3, 4 and 7 threads).
  const std::vector<size_t> sizes = {0, 1, CopyPool::kMinParallelBytes - 1,
                                     CopyPool::kMinParallelBytes, 8 * kMiB + 100,
                                     9 * kMiB + 4097, 64 * kMiB + 3};
  for (int threads : {1, 2, 3, 4, 7}) {
    CopyPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    unsigned seed = 0;
    for (size_t bytes : sizes) CopyAndCheck(pool, bytes, ++seed);
  }
}

// The fused copy of a push: every byte arrives, and the checksum its stripes compute on their
// threads is the buffer's, whatever the stripes.
TEST(CopyPool, TheChecksummingCopyArrivesExactlyWithTheBuffersChecksum) {
  const std::vector<size_t> sizes = {0, 1, 65 * 1024 + 7, CopyPool::kMinParallelBytes,
                                     9 * kMiB + 4097, 33 * kMiB + 3};
  for (int threads : {1, 2, 3, 4}) {
    CopyPool pool(threads);
    unsigned seed = 100;
    for (size_t bytes : sizes) {
      std::vector<unsigned char> src = Pattern(bytes, ++seed);
      std::vector<unsigned char> dst(bytes + 1, 0xAB);
      uint64_t sum = pool.CopyWithChecksum(dst.data(), src.data(), bytes);
      EXPECT_EQ(sum, Checksum(src.data(), bytes)) << bytes << " bytes, " << threads;
      EXPECT_EQ(dst[bytes], 0xAB) << "wrote past the destination, " << bytes;
      dst.pop_back();
      EXPECT_TRUE(dst == src) << bytes << " bytes with " << threads << " threads";
    }
  }
}

TEST(CopyPool, StripesCoverTheRangeOnceEachAlignedButTheLast) {
  for (int threads : {1, 2, 4, 7}) {
    CopyPool pool(threads);
    for (size_t bytes : {size_t{0}, size_t{4096}, 5 * kMiB + 12345, 64 * kMiB}) {
      std::mutex mu;
      std::vector<std::pair<size_t, size_t>> stripes;
      pool.ForStripes(bytes, [&](size_t begin, size_t n) {
        std::lock_guard<std::mutex> lock(mu);
        stripes.emplace_back(begin, n);
      });
      std::sort(stripes.begin(), stripes.end());
      size_t covered = 0;
      for (auto [begin, n] : stripes) {
        EXPECT_EQ(begin, covered) << "a gap or an overlap, " << bytes << " bytes";
        EXPECT_GT(n, 0u);
        if (begin + n < bytes) {
          EXPECT_EQ(n % CopyPool::kStripeAlign, 0u);
        }
        covered = begin + n;
      }
      EXPECT_EQ(covered, bytes) << threads << " threads";
      EXPECT_LE(stripes.size(), static_cast<size_t>(threads));
    }
  }
}

std::mutex copiers_mu;
std::condition_variable copiers_cv;
std::set<std::thread::id> copiers;
bool await_second_copier = false;

// Records the thread copying a stripe. With await_second_copier, a stripe is copied only once
// a second thread has taken one too (or after 30 s, which fails the test): a pool whose
// helpers take part passes at once, one whose caller copies every stripe never does.
void* RecordingCopy(void* dst, const void* src, size_t n) {
  std::unique_lock<std::mutex> lock(copiers_mu);
  copiers.insert(std::this_thread::get_id());
  copiers_cv.notify_all();
  if (await_second_copier) {
    copiers_cv.wait_for(lock, std::chrono::seconds(30), [] { return copiers.size() >= 2; });
  }
  lock.unlock();
  return std::memcpy(dst, src, n);
}

TEST(CopyPool, HelpersCopyStripesBesideTheCaller) {
  {
    std::lock_guard<std::mutex> lock(copiers_mu);
    copiers.clear();
    await_second_copier = true;
  }
  CopyPool pool(4, &RecordingCopy);
  CopyAndCheck(pool, 32 * kMiB, 7);
  {
    std::lock_guard<std::mutex> lock(copiers_mu);
    EXPECT_GE(copiers.size(), 2u) << "one thread copied all four stripes";
    EXPECT_LE(copiers.size(), 4u);
    copiers.clear();
    await_second_copier = false;
  }
  CopyPool single(1, &RecordingCopy);
  std::vector<unsigned char> src = Pattern(32 * kMiB, 8), dst(32 * kMiB);
  single.Copy(dst.data(), src.data(), src.size());
  std::lock_guard<std::mutex> lock(copiers_mu);
  EXPECT_EQ(copiers, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(CopyPool, CopiesFromSeveralThreadsTakeTurns) {
  CopyPool pool(3);
  std::vector<std::thread> callers;
  for (unsigned t = 0; t < 4; ++t) {
    callers.emplace_back([&pool, t] {
      for (unsigned i = 0; i < 5; ++i) CopyAndCheck(pool, 6 * kMiB + 13 * i, 10 * t + i);
    });
  }
  for (auto& c : callers) c.join();
}

TEST(CopyPool, ChooseHonoursTheEnvironmentThenTheOptionThenTheCores) {
  std::string error;
  unsetenv("ADJSNAP_COPY_THREADS");
  for (int bad : {-1, CopyPool::kMaxThreads + 1}) {  // named before the environment is read
    setenv("ADJSNAP_COPY_THREADS", "2", 1);
    error.clear();
    EXPECT_EQ(CopyPool::Choose(bad, &error), 0) << bad;
    EXPECT_NE(error.find("ClientOptions.copy_threads " + std::to_string(bad)), std::string::npos)
        << error;
  }
  unsetenv("ADJSNAP_COPY_THREADS");
  EXPECT_EQ(CopyPool::Choose(3, &error), 3);
  int chosen = CopyPool::Choose(0, &error);
  EXPECT_GE(chosen, 1);
  EXPECT_LE(chosen, 4);
  EXPECT_LE(chosen, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

  setenv("ADJSNAP_COPY_THREADS", "2", 1);
  EXPECT_EQ(CopyPool::Choose(5, &error), 2);
  for (const char* bad : {"0", "-1", "four", "3x", "65"}) {
    setenv("ADJSNAP_COPY_THREADS", bad, 1);
    error.clear();
    EXPECT_EQ(CopyPool::Choose(0, &error), 0) << bad;
    EXPECT_NE(error.find("ADJSNAP_COPY_THREADS"), std::string::npos) << error;
    EXPECT_NE(error.find(bad), std::string::npos) << error;
  }
  unsetenv("ADJSNAP_COPY_THREADS");
}

}  // namespace
}  // namespace adjsnap::detail
