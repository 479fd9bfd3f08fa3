#!/usr/bin/env bash
# The soak (tests/soak/soak.py): one real adjsnapd under 16 mixed clients for N minutes, with
# client kills, adjsnapd restarts, a failing spool and adjsnap drain/scrub/rm/purge in between;
# every byte checked, adjsnapd's memory, fds and threads bounded. As root the spool is a
# loop-mounted ext4 that is remounted read-only and back; otherwise that part is not run.
#   bash tests/soak/run.sh [--build build-tests] [--minutes 2] [--out DIR] [soak.py options]
# Python: BUILD/python (the venv run.sh makes), else python3; it needs the adjsnap package.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-tests
args=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
py=python3
[[ -x $build/python/bin/python ]] && py=$build/python/bin/python
exec "$py" tests/soak/soak.py --build "$build" "${args[@]}"
