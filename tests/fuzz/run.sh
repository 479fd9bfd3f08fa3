#!/usr/bin/env bash
# Runs every fuzz target for a fixed time over a scratch copy of its checked-in corpus
# (tests/fuzz/corpus/<target>/ and the inputs of past findings, tests/fuzz/regressions/<target>/;
# never modified). Fails on the first target that crashes, leaks,
# times out or wedges, printing the target and its reproducer's path.
#
#   tests/fuzz/run.sh BUILD_DIR [--seconds N] [--only TARGET]
#
# BUILD_DIR: a tree configured with -DADJSNAP_FUZZ=ON (clang) where `--target adjsnap_fuzzers`
# was built. Reproduce a finding with: BUILD_DIR/tests/fuzz/TARGET REPRODUCER
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR [--seconds N] [--only TARGET]}
build=$(cd "$build" && pwd)  # each target runs in its scratch directory
shift
seconds=20
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# target:max_len (bytes): each sized to what its input format reads.
targets="data_plane_fuzzer:4096 arena_socket_fuzzer:128 control_fuzzer:4096
catalog_fuzzer:8192 spool_fuzzer:16384 plan_fuzzer:2048 config_fuzzer:4096"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/adjsnap-fuzz-run.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# The targets make their own temporary directories; on tmpfs when there is one.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}  # UCX's tcp transport stays on loopback
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$here/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=0
for entry in $targets; do
  name=${entry%%:*}
  max_len=${entry##*:}
  [ -n "$only" ] && [ "$only" != "$name" ] && continue
  binary="$build/tests/fuzz/$name"
  if [ ! -x "$binary" ]; then
    echo "run.sh: $binary is not built (cmake --build $build --target adjsnap_fuzzers)" >&2
    exit 2
  fi
  work="$scratch/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  if [ -d "$here/corpus/$name" ]; then cp -R "$here/corpus/$name/." "$work/corpus/"; fi
  if [ -d "$here/regressions/$name" ]; then cp -R "$here/regressions/$name/." "$work/corpus/"; fi
  echo "== $name: $seconds s"
  set +e
  (cd "$work" && "$binary" -max_total_time="$seconds" -max_len="$max_len" -timeout=30 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
      corpus > "$work/log" 2>&1)
  rc=$?
  set -e
  # libFuzzer's summary: executions, coverage (cov: edges, ft: features), exec/s, peak RSS.
  grep -E '^(#[0-9]+[[:space:]]+DONE|stat::|Done [0-9]+ runs)' "$work/log" || true
  if [ $rc -ne 0 ]; then
    keep="${build}/fuzz-findings/$name"
    mkdir -p "$keep"
    cp "$work"/artifacts/* "$keep/" 2>/dev/null || true
    cp "$work/log" "$keep/log"
    tail -40 "$work/log" >&2
    for f in "$keep"/crash-* "$keep"/leak-* "$keep"/timeout-* "$keep"/oom-*; do
      [ -e "$f" ] && echo "FAILED: $name, reproducer: $f (run: $binary $f)" >&2
    done
    echo "FAILED: $name exited $rc; log: $keep/log" >&2
    failed=1
  fi
done
exit $failed
