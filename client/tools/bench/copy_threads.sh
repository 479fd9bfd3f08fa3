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
runs=2 steps=32 bytes=64M
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    *) echo "copy_threads.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
export UCX_NET_DEVICES=lo  # the benchmark's traffic stays on loopback
daemon=""
cleanup() {
  [[ -n $daemon ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$build/daemon/snapd" --socket "$work/snapd.sock" --state-dir "$work/state" --host-mem 3G \
  --spool-dirs none --host-huge-pages thp --host-prefault true > "$work/snapd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [[ -S $work/snapd.sock ]] && break; sleep 0.1; done
until "$build/client/tools/snapctl" --socket "$work/snapd.sock" status --json |
  python3 -c 'import json, sys
t = [t for t in json.load(sys.stdin)["tiers"] if t["tier"] == "host"][0]
sys.exit(t["prefaulted_bytes"] < t["budget_bytes"])'; do sleep 0.2; done

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
