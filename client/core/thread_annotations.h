// Clang thread-safety annotations (-Wthread-safety); no-ops on other compilers.
#pragma once

#if defined(__clang__)
#define SNAPD_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define SNAPD_THREAD_ANNOTATION_(x)
#endif

#define SNAPD_GUARDED_BY(x) SNAPD_THREAD_ANNOTATION_(guarded_by(x))
#define SNAPD_REQUIRES(...) SNAPD_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define SNAPD_EXCLUDES(...) SNAPD_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
