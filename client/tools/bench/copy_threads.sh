#!/usr/bin/env bash
# The copy-thread figures of docs/architecture.md, "Copy threads": a new adjsnapd with a
# prefaulted shmem-THP host tier, then adjsnap-bench (two fresh-process passes of --steps x
# --bytes) with ADJSNAP_COPY_THREADS 1, 2, 4 and 8, each --runs times, in turn. Prints a Markdown
# table: the single-thread memcpy of the pattern and the same copy split over N threads
# (adjsnap-bench's two references), then each pass's rates and their ratios to the single thread.
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

"$build/daemon/adjsnapd" --socket "$work/adjsnap.sock" --state-dir "$work/state" --host-mem 3G \
  --spool-dirs none --host-huge-pages thp --host-prefault true > "$work/adjsnapd.log" 2>&1 &
daemon=$!
wait_for_socket "$work/adjsnap.sock"
wait_prefaulted "$build" "$work/adjsnap.sock"

echo "| copy threads | run | memcpy GB/s | memcpy, N threads GB/s | pass | push GB/s | push / memcpy | fetch GB/s | fetch / memcpy |"
echo "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
for run in $(seq "$runs"); do
  for threads in 1 2 4 8; do
    ADJSNAP_COPY_THREADS=$threads "$build/client/tools/adjsnap-bench" --socket "$work/adjsnap.sock" \
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
