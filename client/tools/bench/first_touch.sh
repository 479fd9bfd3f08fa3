#!/usr/bin/env bash
# The figures of docs/benchmarks.md, "A fresh process per pass": adjsnap-bench's default mode
# (each pass in a fresh process, faults per GiB beside each rate) against a new adjsnapd for each
# way of backing the host tier: 4 KiB pages, shmem THP (a tmpfs mounted huge=always), hugetlb
# pages; each as it comes and prefaulted at start. Prints a Markdown table, one row per pass.
#   client/tools/bench/first_touch.sh BUILD_DIR [--runs N] [--steps N] [--bytes S]
# The hugetlb rows need a pool of huge pages: as root the script sizes vm.nr_hugepages for the
# tier for its own run and puts the old value back; otherwise they are left out, said so.
set -euo pipefail
build=${1:?usage: first_touch.sh BUILD_DIR [--runs N] [--steps N] [--bytes S]}
shift
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
runs=3 steps=32 bytes=64M host_mem=3G
parse_run_args first_touch.sh "$@"
require_tools "$build"
work=$(mktemp -d)
export UCX_NET_DEVICES=lo  # the benchmark's traffic stays on loopback
pool_file=/proc/sys/vm/nr_hugepages
old_pool=$(cat "$pool_file")
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  [[ -w $pool_file ]] && echo "$old_pool" > "$pool_file" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

configs=("off false" "off true" "thp false" "thp true")
if [[ -w $pool_file ]]; then
  echo $(( (3 << 30) / (2 << 20) + 16 )) > "$pool_file"
  configs+=("hugetlb false" "hugetlb true")
else
  echo "(hugetlb rows left out: sizing vm.nr_hugepages needs root)" >&2
fi

echo "| tier pages | prefault | run | pass | push / memcpy | fetch / memcpy | push faults/GiB | fetch faults/GiB | pages new to adjsnapd |"
echo "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for config in "${configs[@]}"; do
  read -r pages prefault <<< "$config"
  rm -rf "$work/state"
  "$build/daemon/adjsnapd" --socket "$work/adjsnap.sock" --state-dir "$work/state" \
    --host-mem "$host_mem" --spool-dirs none --host-huge-pages "$pages" \
    --host-prefault "$prefault" > "$work/adjsnapd.log" 2>&1 &
  daemon=$!
  wait_for_socket "$work/adjsnap.sock"
  [[ $prefault == true ]] && wait_prefaulted "$build" "$work/adjsnap.sock"
  for run in $(seq "$runs"); do
    "$build/client/tools/adjsnap-bench" --socket "$work/adjsnap.sock" --steps "$steps" \
      --bytes "$bytes" --json |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
for p in d["passes"]:
    print("| %s | %s | %s | %s | %.2f | %.2f | %.0f | %.0f | %.0f%% |" % (
        sys.argv[1], sys.argv[2], sys.argv[3], p["pass"], p["push_vs_memcpy"],
        p["fetch_vs_memcpy"], p["push_faults_per_gib"], p["fetch_faults_per_gib"],
        100 * p["new_daemon_pages"]))
open(sys.argv[4], "w").write(
    "memcpy of the same pattern in the last run: %.2f GB/s forward, %.2f GB/s backward, one "
    "thread; %.2f GB/s forward with the %d copy threads of libadjsnap\n" % (
        d["memcpy_gbs"], d["memcpy_back_gbs"], d["memcpy_threads_gbs"], d["copy_threads"]))
' "$pages" "$prefault" "$run" "$work/references"
  done
  kill "$daemon"; wait "$daemon" 2>/dev/null || true
  daemon=""
  rm -f "$work/adjsnap.sock"
done
echo
cat "$work/references"
echo "$(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
