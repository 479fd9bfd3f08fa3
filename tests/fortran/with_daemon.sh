#!/usr/bin/env bash
# Starts ADJSNAPD on a socket of its own (host tier only, loopback UCX), runs PROGRAM SOCKET, stops
# adjsnapd; exits with the program's status.
#
#   with_daemon.sh ADJSNAPD ADJSNAP PROGRAM
set -euo pipefail
adjsnapd=$1 adjsnap=$2 program=$3
work=$(mktemp -d)
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
"$adjsnapd" --socket "$work/adjsnap.sock" --state-dir "$work/state" --host-mem 64M \
  --spool-dirs none > "$work/adjsnapd.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  "$adjsnap" --socket "$work/adjsnap.sock" status > /dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/adjsnapd.log" >&2; exit 1; }
  sleep 0.2
done
"$program" "$work/adjsnap.sock"
