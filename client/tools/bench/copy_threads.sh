#!/usr/bin/env bash
# The copy-thread figures of docs/architecture.md, "Copy threads": a new snapd with a
# prefaulted shmem-THP host tier, then snapbench (two fresh-process passes of --steps x
# --bytes) with SNAPD_COPY_THREADS 1, 2, 4 and 8, each --runs times, in turn. Prints a Markdown
# table: the single-thread memcpy of the pattern and the same copy split over N threads
# (snapbench's two references), then each pass's rates and their ratios to the single thread.
#   client/tools/bench/copy_threads.sh BUILD_DIR [--runs N] [--steps N] [--bytes S]
set -euo pipefail
build=${1:?usage: copy_threads.sh BUILD_DIR [--runs N] [--steps N] [--bytes S]}
shift
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
runs=2 steps=32 bytes=64M
parse_run_args copy_threads.sh "$@"
require_tools "$build"
make_work_dir
export UCX_NET_DEVICES=lo  # the benchmark's traffic stays on loopback

"$build/daemon/snapd" --socket "$work/snapd.sock" --state-dir "$work/state" --host-mem 3G \
  --spool-dirs none --host-huge-pages thp --host-prefault true > "$work/snapd.log" 2>&1 &
daemon=$!
wait_for_socket "$work/snapd.sock"
wait_prefaulted "$build" "$work/snapd.sock"

echo "| copy threads | run | memcpy GB/s | memcpy, N threads GB/s | pass | push GB/s | push / memcpy | fetch GB/s | fetch / memcpy |"
echo "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
for run in $(seq "$runs"); do
  for threads in 1 2 4 8; do
    SNAPD_COPY_THREADS=$threads "$build/client/tools/snapbench" --socket "$work/snapd.sock" \
      --steps "$steps" --bytes "$bytes" --json |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
for p in d["passes"]:
    print("| %d | %s | %.2f | %.2f | %s | %.2f | %.2f | %.2f | %.2f |" % (
        d["copy_threads"], sys.argv[1], d["memcpy_gbs"], d["memcpy_threads_gbs"], p["pass"],
        p["push_gbs"], p["push_vs_memcpy"], p["fetch_gbs"], p["fetch_vs_memcpy"]))
' "$run"
  done
done
echo
echo "$(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
