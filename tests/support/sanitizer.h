// Whether this test binary is built with AddressSanitizer (ADJSNAP_SANITIZE=address) or
// ThreadSanitizer (thread): what a test measures of a process's memory (page faults, RSS growth)
// then includes the sanitizer's own shadow memory.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define ADJSNAP_TESTING_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADJSNAP_TESTING_LSAN 1
#endif
#endif
#if ADJSNAP_TESTING_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace adjsnap::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Both keep shadow memory beside the program's (ASan an eighth of it, TSan several times it),
// which takes page faults of its own wherever the program first touches a page.
inline constexpr bool kShadowMemory = kAddressSanitizer || kThreadSanitizer;

// While one lives, LeakSanitizer ignores what is allocated: for a call into a library known to
// leak on an error path a test provokes on purpose (UCX 1.13's shared-memory endpoint that
// cannot attach its peer's segment), and nothing of the test's own.
class IgnoreLeaks {
 public:
  IgnoreLeaks() {
#if ADJSNAP_TESTING_LSAN
    __lsan_disable();
#endif
  }
  ~IgnoreLeaks() {
#if ADJSNAP_TESTING_LSAN
    __lsan_enable();
#endif
  }
  IgnoreLeaks(const IgnoreLeaks&) = delete;
  IgnoreLeaks& operator=(const IgnoreLeaks&) = delete;
};

}  // namespace adjsnap::testing
