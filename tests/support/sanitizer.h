// Whether this test binary is built with AddressSanitizer (SNAPD_SANITIZE=address): what a test
// measures of a process's memory (page faults, RSS growth) then includes the sanitizer's own.
#pragma once

namespace snapd::testing {

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

}  // namespace snapd::testing
