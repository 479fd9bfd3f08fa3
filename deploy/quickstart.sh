#!/usr/bin/env bash
# The newcomer's main job: install dependencies, build, start adjsnapd with its embedded defaults,
# run the example solver (2D acoustic RTM) through a forward and backward pass, show what adjsnapd
# holds, and stop the daemon again (unless one was already running). The daemon it starts keeps
# its catalog and spool in build/quickstart-state: the node service's state_dir
# (/var/lib/adjsnap, its own user's) is left alone, so the service starts after it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DADJSNAP_BUILD_TESTS=OFF > build.configure.log 2>&1 ||
  { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc)"

adjsnap=build/client/tools/adjsnap
started=""
if ! $adjsnap status > /dev/null 2>&1; then
  echo "== starting adjsnapd with its defaults"
  build/daemon/adjsnapd --state-dir "$PWD/build/quickstart-state" &
  started=$!
  trap '[[ -n "$started" ]] && kill -TERM "$started" && wait "$started"' EXIT
  for _ in $(seq 1 300); do
    $adjsnap status > /dev/null 2>&1 && break
    kill -0 "$started" 2> /dev/null || { echo "adjsnapd failed to start" >&2; exit 1; }
    sleep 0.1
  done
fi

echo "== example solver: forward pass pushes every wavefield, backward pass fetches in reverse"
build/client/examples/acoustic2d --nx 1024 --ny 1024 --steps 300 --keep
echo "== adjsnap ls acoustic2d (first steps)"
$adjsnap ls acoustic2d > build/acoustic2d.ls
head -6 build/acoustic2d.ls
echo "== adjsnap status"
$adjsnap status
$adjsnap rm acoustic2d
