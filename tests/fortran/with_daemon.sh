#!/usr/bin/env bash
# Starts SNAPD on a socket of its own (host tier only, loopback UCX), runs PROGRAM SOCKET, stops
# snapd; exits with the program's status.
#
#   with_daemon.sh SNAPD SNAPCTL PROGRAM
set -euo pipefail
snapd=$1 snapctl=$2 program=$3
work=$(mktemp -d)
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
"$snapd" --socket "$work/snapd.sock" --state-dir "$work/state" --host-mem 64M \
  --spool-dirs none > "$work/snapd.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  "$snapctl" --socket "$work/snapd.sock" status > /dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/snapd.log" >&2; exit 1; }
  sleep 0.2
done
"$program" "$work/snapd.sock"
