#!/usr/bin/env bash
# Runs snapd's whole test suite on a fresh machine: installs the Debian dependencies, builds,
# runs every test, then rebuilds with AddressSanitizer + UndefinedBehaviorSanitizer and runs
# every test again. GPU-labelled tests skip cleanly where no GPU is present.
#   bash tests/run.sh            # both passes
#   SNAPD_SANITIZE_PASS=0 bash tests/run.sh   # plain pass only
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh

jobs=$(nproc)
run_pass() {  # run_pass BUILD_DIR [cmake args...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > "$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 600
}

echo "== snapd tests"
run_pass build-tests
if [[ "${SNAPD_SANITIZE_PASS:-1}" != 0 ]]; then
  echo "== snapd tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  # UCX's memory hooks patch malloc/mmap, which the sanitizer runtime owns.
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no
  export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_pass build-asan -DSNAPD_SANITIZE=address,undefined -DSNAPD_WITH_CUDA=OFF
fi
