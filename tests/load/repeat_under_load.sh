#!/usr/bin/env bash
# The tests most likely to show a hang or a race, run again and again with every CPU busy
# (stress-ng --cpu $(nproc) beside them), stopping at the first failure: a hang that shows once
# in twenty runs on a loaded CI machine should show here first.
#   bash tests/load/repeat_under_load.sh [N] [BUILD_DIR]          N runs (20) of BUILD_DIR's tests
#   bash tests/load/repeat_under_load.sh --minutes M [BUILD_DIR]  runs started within M minutes
# BUILD_DIR is build-tests unless given. A run is the Python tests (BUILD_DIR/python, the venv
# tests/run.sh makes, against BUILD_DIR/daemon/adjsnapd; left out where there is no venv), then
# the C++ store, tiering, spill and many-solver suites (ctest -R). A run that has started ends,
# so --minutes M takes M minutes and one run at most (and always one run).
#   ADJSNAP_LOAD_PYTEST_K  only the Python tests this pytest -k expression selects (default: all)
#   ADJSNAP_LOAD_CTEST_R   the C++ tests, as a ctest -R regex (default: the suites named above)
#   ADJSNAP_LOAD_BESIDE    a command that is the load instead of stress-ng (tests/run.sh: the
#                        soak, tests/soak/run.sh); its output goes to BUILD_DIR/load/beside.log,
#                        and its failure fails this script
# Prints "run I: pass|fail, S s" per run and the failing run's output; exits 1 on a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=20
minutes=""
if [[ ${1:-} == --minutes ]]; then
  minutes=${2:-}
  [[ $minutes =~ ^[0-9]+$ && $minutes -gt 0 ]] || { echo "--minutes needs a whole number" >&2; exit 2; }
  shift 2
elif [[ ${1:-} =~ ^[0-9]+$ ]]; then
  runs=$1
  shift
fi
build=${1:-build-tests}
[[ $# -le 1 ]] || { echo "usage: $0 [N | --minutes M] [BUILD_DIR]" >&2; exit 2; }
[[ -f $build/CTestTestfile.cmake ]] || { echo "$build: no ctest tree; build it first" >&2; exit 2; }
build=$(cd "$build" && pwd)
command -v stress-ng > /dev/null || { echo "no stress-ng: bash deploy/install-deps.sh" >&2; exit 2; }

# store_test.cc, store_compression_test.cc and store_runs_test.cc (and the tiering they
# drive), the store's components alone (tiering_test.cc,
# ingest_test.cc, checksums_test.cc), placement_test.cc (the tiering policy),
# spool_failure_test.cc's store cases (tiering around a failed spool), spill_test.cc,
# many_solvers_test.cc.
ctest_regex=${ADJSNAP_LOAD_CTEST_R:-'^(StoreTest|CompressedStoreTest|PendingPackTest|TieringTest|IngestTest|ChecksumsTest|HostBoundary|PrefetchDepth|SpoolFailureTest|DataPaths/SpillTest|SmallFilesystem|ManySolvers)\.'}
ctests=$(ctest --test-dir "$build" -N -R "$ctest_regex" | sed -n 's/^Total Tests: //p')
((ctests > 0)) || { echo "no ctest test in $build matches $ctest_regex" >&2; exit 2; }
python=$build/python/bin/python
pytest_k=()
[[ -z ${ADJSNAP_LOAD_PYTEST_K:-} ]] || pytest_k=(-k "$ADJSNAP_LOAD_PYTEST_K")
if [[ -x $python ]]; then
  what="the Python tests${ADJSNAP_LOAD_PYTEST_K:+ matching -k '$ADJSNAP_LOAD_PYTEST_K'} and $ctests C++ tests"
else
  echo "no venv at $build/python (tests/run.sh makes it): the Python tests are left out"
  what="$ctests C++ tests"
fi

logs=$build/load
mkdir -p "$logs"
load="stress-ng --cpu $(nproc)"
if [[ -n ${ADJSNAP_LOAD_BESIDE:-} ]]; then
  load=$ADJSNAP_LOAD_BESIDE
  bash -c "$ADJSNAP_LOAD_BESIDE" > "$logs/beside.log" 2>&1 &
else
  stress-ng --cpu "$(nproc)" --quiet &
fi
stress=$!
# Should this script be killed outright (no trap runs), the load still ends with it.
script=$$
(while kill -0 "$script"; do sleep 5; done; kill "$stress") > /dev/null 2>&1 &
watcher=$!
trap 'kill "$watcher" "$stress" 2> /dev/null; wait "$stress" 2> /dev/null || true' EXIT
trap 'exit 130' INT TERM

run_once() {  # run_once: one run, its output on stdout
  if [[ -x $python ]]; then
    ADJSNAPD_BINARY=$build/daemon/adjsnapd "$python" -m pytest -q -p no:cacheprovider \
      "${pytest_k[@]}" client/python/tests || return 1
  fi
  ctest --test-dir "$build" -R "$ctest_regex" -j "$(nproc)" --output-on-failure
}

if [[ -n $minutes ]]; then
  echo "under load ($load): $what, run after run for $minutes min"
  stop_at=$((SECONDS + minutes * 60))
else
  echo "under load ($load): $what, $runs times"
fi
more_runs() {
  if [[ -n $minutes ]]; then ((i == 0 || SECONDS < stop_at)); else ((i < runs)); fi
}
i=0
longest=0
while more_runs; do
  i=$((i + 1))
  started=$SECONDS
  log=$logs/run-$i.log
  if run_once > "$log" 2>&1; then
    echo "run $i: pass, $((SECONDS - started)) s"
    longest=$((SECONDS - started > longest ? SECONDS - started : longest))
  else
    echo "run $i: fail, $((SECONDS - started)) s; its output ($log):"
    cat "$log"
    echo "under load: run $i of $what failed"
    exit 1
  fi
done
echo "under load: $i runs of $what passed (the longest $longest s)"
if [[ -n ${ADJSNAP_LOAD_BESIDE:-} ]]; then
  rc=0
  wait "$stress" || rc=$?
  tail -n 8 "$logs/beside.log"
  if ((rc != 0)); then
    echo "the load beside them ($load) failed (exit $rc); its output: $logs/beside.log"
    # Its failures, and what the soak gathered beside each (the run's lines in adjsnapd's
    # logs, its events before it): CI keeps no other trace of a rare failure.
    grep -n -E "FAIL|^-- |^   (life [0-9]+:|[0-9]{2}:[0-9]{2})|-- (what adjsnapd|the soak)" \
      "$logs/beside.log" | head -n 150
    exit 1
  fi
fi
