#!/usr/bin/env bash
# The restart benchmark: how long adjsnapd takes to stop and start again with a full host tier,
# on the drain path (SIGTERM writes the host tier to the spool) and on the two fd-store paths
# (the memfd handed over with FDSTORE=1 and given back as LISTEN_FDS, as systemd does; here a
# small Python stand-in for systemd's notification socket keeps it), with and without the
# drain before it (fdstore auto, only), next to the spool's
# O_DIRECT sequential write rate measured in the same run. Every step is verified after each
# restart (adjsnap-bench --verify).
#
#   client/tools/restart_bench.sh BUILD_DIR [GIB] [SPOOL_PARENT]
#
# GIB: data in the host tier (default 1); the tier is GIB + 256 MiB. SPOOL_PARENT: where the
# state and spool go (default /var/tmp; use the NVMe to measure it).
set -euo pipefail
build=${1:?usage: restart_bench.sh BUILD_DIR [GIB] [SPOOL_PARENT]}
gib=${2:-1}
parent=${3:-/var/tmp}
adjsnapd=$build/daemon/adjsnapd
adjsnap_bench=$build/client/tools/adjsnap-bench
adjsnap=$build/client/tools/adjsnap
dir=$(mktemp -d "$parent/adjsnap-restart-bench.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
sock=$dir/adjsnap.sock
steps=$((gib * 16))  # 64 MiB steps
host_mem=$((gib * 1024 + 256))M
args=(--socket "$sock" --state-dir "$dir/state" --host-mem "$host_mem" --log-level info)
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
wait_ready() {
  for _ in $(seq 600); do
    [ -S "$sock" ] && python3 - "$sock" 2>/dev/null <<'PY' && return 0
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
PY
    sleep 0.05
  done
  echo "adjsnapd did not start" >&2; exit 1
}

# O_DIRECT reference on the spool's filesystem.
mkdir -p "$dir/state/spool"
t0=$(now)
dd if=/dev/zero of="$dir/state/spool/odirect" bs=64M count=$steps oflag=direct conv=fsync status=none
t1=$(now)
rm -f "$dir/state/spool/odirect"
odirect=$(python3 -c "print(f'{$gib * 1024**3 / ($t1 - $t0) / 1e9:.2f}')")

# Drain path.
"$adjsnapd" "${args[@]}" --fdstore off 2>>"$dir/drain.log" & pid=$!
wait_ready
"$adjsnap_bench" --socket "$sock" --fill --steps $steps --bytes 64M >/dev/null
t0=$(now); kill -TERM $pid; wait $pid; t1=$(now)
stop_drain=$(secs "$t0" "$t1")
t0=$(now)
"$adjsnapd" "${args[@]}" --fdstore off 2>>"$dir/drain.log" & pid=$!
wait_ready; t1=$(now)
start_drain=$(secs "$t0" "$t1")
"$adjsnap_bench" --socket "$sock" --verify --steps $steps --bytes 64M
"$adjsnap" --socket "$sock" rm adjsnap-bench-restart >/dev/null
kill -TERM $pid; wait $pid

# fd-store path: a stand-in for systemd keeps the memfd sent with FDSTORE=1 and passes it
# back to the next start as fd 3 with LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES. fdstore
# "auto" (the default) writes the host-only steps to disk before handing the memfd over;
# "only" hands it over without writing.
fdstore_path() {  # fdstore_path MODE: sets stop_s and start_s
  local mode=$1 keeper
  rm -f "$dir/notify.sock" "$dir/hosttier"
  python3 - "$dir" <<'PY' & keeper=$!
import os, socket, sys
d = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(d + "/notify.sock")
while True:
    msg, fds, _, _ = socket.recv_fds(s, 4096, 4)
    if b"FDSTORE=1" in msg and fds:
        os.set_inheritable(fds[0], True)
        # Keep the fd open in this process, as systemd does, until the next start has it.
        os.symlink(f"/proc/{os.getpid()}/fd/{fds[0]}", d + "/hosttier")
        break
    for fd in fds:
        os.close(fd)
import time
time.sleep(3600)
PY
  sleep 0.2
  env NOTIFY_SOCKET="$dir/notify.sock" FDSTORE=4 "$adjsnapd" "${args[@]}" --fdstore "$mode" \
    2>>"$dir/fdstore-$mode.log" & pid=$!
  wait_ready
  "$adjsnap_bench" --socket "$sock" --fill --steps $steps --bytes 64M >/dev/null
  t0=$(now); kill -TERM $pid; wait $pid; t1=$(now)
  stop_s=$(secs "$t0" "$t1")
  for _ in $(seq 100); do [ -e "$dir/hosttier" ] && break; sleep 0.05; done
  t0=$(now)
  sh -c 'export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=hosttier; exec "$@" 3<>"$0"' \
    "$dir/hosttier" "$adjsnapd" "${args[@]}" --fdstore "$mode" 2>>"$dir/fdstore-$mode.log" & pid=$!
  wait_ready; t1=$(now)
  start_s=$(secs "$t0" "$t1")
  kill $keeper 2>/dev/null || true
  "$adjsnap_bench" --socket "$sock" --verify --steps $steps --bytes 64M
  "$adjsnap" --socket "$sock" rm adjsnap-bench-restart >/dev/null
  kill -TERM $pid; wait $pid
}
fdstore_path auto
stop_auto=$stop_s start_auto=$start_s
fdstore_path only
stop_only=$stop_s start_only=$start_s
grep -h "took back\|wrote to disk\|kept in systemd" "$dir"/*.log || true

cat <<REPORT
restart with ${gib} GiB in the host tier ($steps steps of 64 MiB), spool on $(df --output=source "$dir" | tail -1)
  O_DIRECT sequential write of ${gib} GiB   $odirect GB/s
  drain (fdstore off):            stop $stop_drain s   start $start_drain s (the steps come back from disk)
  drain + fd store (fdstore auto): stop $stop_auto s   start $start_auto s (served from the kept memfd, checksums verified at start)
  fd store only (fdstore only):   stop $stop_only s   start $start_only s (nothing written; checksums verified at start)
REPORT
