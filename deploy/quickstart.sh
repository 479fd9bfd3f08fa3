#!/usr/bin/env bash
# The newcomer's main job: install dependencies, build, start snapd with its embedded defaults,
# run the example solver (2D acoustic RTM) through a forward and backward pass, show what snapd
# holds, and stop the daemon again (unless one was already running).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSNAPD_BUILD_TESTS=OFF > build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc)"

snapctl=build/client/tools/snapctl
started=""
if ! $snapctl status > /dev/null 2>&1; then
  echo "== starting snapd with its defaults"
  build/daemon/snapd &
  started=$!
  trap '[[ -n "$started" ]] && kill -TERM "$started" && wait "$started"' EXIT
  for _ in $(seq 1 300); do
    $snapctl status > /dev/null 2>&1 && break
    kill -0 "$started" 2> /dev/null || { echo "snapd failed to start" >&2; exit 1; }
    sleep 0.1
  done
fi

echo "== example solver: forward pass pushes every wavefield, backward pass fetches in reverse"
build/client/examples/acoustic2d --nx 1024 --ny 1024 --steps 300 --keep
echo "== snapctl ls acoustic2d (first steps)"
$snapctl ls acoustic2d > build/acoustic2d.ls
head -6 build/acoustic2d.ls
echo "== snapctl status"
$snapctl status
$snapctl rm acoustic2d
