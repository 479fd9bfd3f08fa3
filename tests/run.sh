#!/usr/bin/env bash
# Runs adjsnapd's whole test suite on a fresh machine: installs the Debian dependencies (and
# nvCOMP's and UCX 1.22's wheels from PyPI); checks .clang-tidy's naming rules (tests/lint/naming.sh, in the
# background); builds and runs every test; runs the shell lines of the docs as written on the
# installed tree (tests/docs/run_shell_blocks.sh; python.md's install the Python package in a
# venv from PyPI: pybind11, scikit-build-core, pytest, pytest-timeout, pyrevolve, Devito, and
# run its tests against the installed adjsnapd); runs the backward pass's guard (peers.py --guard:
# the adjoint workload on fresh daemons beside memcpy and O_DIRECT); repeats the tests most
# prone to hangs and races for 2 minutes beside 2 minutes of the soak (tests/load,
# tests/soak); runs a job through
# deploy/slurm on a real single-node Slurm, an MPI job across a 3-node Slurm in network
# namespaces (tests/cluster) and the shared spool class on a real GlusterFS volume; then
# rebuilds everything with clang, AddressSanitizer + UndefinedBehaviorSanitizer and
# -Werror=thread-safety (the locking contracts in the code hold), against UCX 1.22 from PyPI,
# runs the C++ tests again (not the one-thread schedule suites),
# and runs each libFuzzer target (tests/fuzz) for 6 s over its corpus; with ADJSNAP_TSAN_PASS=1,
# builds the daemon's, store's, data plane's and client's suites with ThreadSanitizer and runs
# them (10 CPU-minutes of build, and 6 minutes of tests on 2 busy cores: not in CI's default
# run, which has no room left for it). A hung test fails with the stacks of its threads and of its daemons' (per-test
# timeouts in tests/CMakeLists.txt and client/python/pyproject.toml).
#   bash tests/run.sh            # both passes
#   ADJSNAP_SANITIZE_PASS=0 bash tests/run.sh   # plain pass only (and the naming check)
#   ADJSNAP_TSAN_PASS=1 bash tests/run.sh       # and the ThreadSanitizer pass after them
# After each test pass it prints how many tests skipped and why (tests/report_skips.py).
# ADJSNAP_STRICT_SKIPS=1 (set by .ci/run) fails the run when a skip hides what this machine could
# test: a gpu test skipped where nvidia-smi lists a GPU, nvcc installed but no gpu test built,
# a test that needs root skipped as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
# nvCOMP (the bitcomp codecs' tests run its CPU coder), from PyPI into a venv of its own; both
# trees below find it through ADJSNAP_NVCOMP_ROOT (docs/install.md, "nvCOMP").
[[ -x build-deps/nvcomp/bin/pip ]] || python3 -m venv build-deps/nvcomp
build-deps/nvcomp/bin/pip install -q "nvidia-libnvcomp-cu13>=6,<7"
ADJSNAP_NVCOMP_ROOT=$(build-deps/nvcomp/bin/python -c \
  "import nvidia.libnvcomp as m; print(m.__path__[0])")
export ADJSNAP_NVCOMP_ROOT
# UCX 1.22 with its CUDA transports, from PyPI's libucx-cu13, also into a venv of its own
# (docs/install.md, "UCX"): the sanitizer tree below builds against it, so the C++ suites run
# against both UCX builds, Debian's in the first pass and this one there.
[[ -x build-deps/ucx/bin/pip ]] || python3 -m venv build-deps/ucx
build-deps/ucx/bin/pip install -q "libucx-cu13>=1.22,<1.23"
ucx_wheel=$(build-deps/ucx/bin/python -c "import libucx, os; print(os.path.dirname(libucx.__file__))")

jobs=$(nproc)
# client_test's schedule suites: plans computed on one thread, left out of the sanitizer passes.
schedules='Revolve|RevolveSplit|HRevolve|DiskRevolve|MultiLevel|OnlineSchedule|StoreAll'
schedules+='|RecomputationFactor|Replay'
# Minutes and seconds since the start, on every stage's header: where CI's time goes.
elapsed() { printf '%d:%02d' $((SECONDS / 60)) $((SECONDS % 60)); }
run_pass() {  # run_pass BUILD_DIR [cmake args...]: configures (when given arguments), builds, tests
  local dir=$1
  shift
  if (($# > 0)) || [[ ! -f $dir/CMakeCache.txt ]]; then
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > "$dir.configure.log" 2>&1 ||
      { cat "$dir.configure.log"; return 1; }
  fi
  # $build_targets: the targets this pass builds (all when empty).
  cmake --build "$dir" -j "$jobs" ${build_targets:+--target $build_targets}
  local rc=0
  # Each test's TIMEOUT is set near its real time (tests/CMakeLists.txt); a hung one prints
  # its stacks before ctest ends it. $ctest_exclude: a regex of tests this pass leaves out.
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure ${ctest_exclude:+-E "$ctest_exclude"} \
    --output-junit "$PWD/$dir/ctest-junit.xml" || rc=$?
  python3 tests/report_skips.py --junit "$dir/ctest-junit.xml" --name "ctest in $dir" \
    --ctest-build "$dir" || ((rc != 0)) || rc=1
  return "$rc"
}

# The clang tree of the last stage, configured now: the naming rules of .clang-tidy read its
# compile_commands.json and its generated protobuf headers (about 3.5 CPU-minutes), in the
# background at the lowest priority, on the cores the stages below leave idle; the verdict is
# awaited at the end.
CC=clang CXX=clang++ cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DADJSNAP_SANITIZE=address,undefined -DADJSNAP_FUZZ=ON -DADJSNAP_WITH_CUDA=OFF \
  -DADJSNAP_UCX_ROOT="$ucx_wheel" \
  -DCMAKE_CXX_FLAGS=-Werror=thread-safety \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  > build-clang.configure.log 2>&1 || { cat build-clang.configure.log; exit 1; }
cmake --build build-clang -j "$jobs" --target adjsnap_proto_objects > build-clang/proto.log 2>&1 ||
  { cat build-clang/proto.log; exit 1; }
nice -n 19 bash tests/lint/naming.sh build-clang > build-clang/naming.out 2>&1 &
naming=$!

echo "== [$(elapsed)] adjsnap tests"
# Line tables only (-g1): about a fifth less compile time than -g, and a hung test's stacks
# still name file and line.
run_pass build-tests "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"

gpu_tests=$(ctest --test-dir build-tests -N -L gpu | sed -n 's/^Total Tests: //p')
if ((${gpu_tests:-0} > 0)); then
  echo "== [$(elapsed)] the GPU check's pack, from build-tests: whole without adjsnap's dependencies (dry run)"
  bash tests/gpu/pack.sh --from build-tests --out build-tests/gpu-pack
  # The tarball is what travels: the dry run checks the pack it unpacks to.
  rm -rf build-tests/gpu-unpacked && mkdir build-tests/gpu-unpacked
  tar -xzf build-tests/gpu-pack.tar.gz -C build-tests/gpu-unpacked
  bash tests/gpu/run.sh --dry-run build-tests/gpu-unpacked/gpu-pack
fi

echo "== [$(elapsed)] the docs' shell lines as written (install.md, operations.md, schedules.md, python.md),"
echo "   on the tree build-tests installs: the Python package in python.md's venv, its tests"
echo "   against the installed adjsnapd"
doc_home=$PWD/build-tests/doc-home
rm -rf "$doc_home"
rc=0
PYTEST_ADDOPTS="-rs --junitxml=$PWD/build-tests/pytest-junit.xml" CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
  bash tests/docs/run_shell_blocks.sh --build build-tests --home "$doc_home" \
  docs/install.md docs/operations.md docs/schedules.md docs/python.md || rc=$?
python3 tests/report_skips.py --junit build-tests/pytest-junit.xml --name "pytest" ||
  ((rc != 0)) || rc=1
((rc == 0)) || exit "$rc"
# The load stage and the benchmarks use that venv.
rm -rf build-tests/python
ln -s doc-home/.venvs/adjsnap build-tests/python

echo "== [$(elapsed)] the backward pass's guard: the adjoint workload at 1 GiB, fits and spills, three times on"
echo "   fresh daemons, beside memcpy and O_DIRECT in the same run (client/python/bench/peers.py"
echo "   --guard); fails only on a gross regression (docs/benchmarks.md, \"The guard\")"
build-tests/python/bin/python client/python/bench/peers.py --adjsnapd build-tests/daemon/adjsnapd \
  --guard --workdir "$PWD/build-tests"

echo "== [$(elapsed)] under load: the spill and compress-at-ingest Devito tests and the C++ store, tiering,"
echo "   spill and many-solver tests, run after run for 2 minutes beside 2 minutes of the soak"
echo "   (tests/soak: 16 clients, kills, restarts, a failing spool; every byte checked)"
ADJSNAP_LOAD_PYTEST_K="test_devito_gradient and (compress or lossy_zfp or Disk)" \
  ADJSNAP_LOAD_BESIDE="bash tests/soak/run.sh --build build-tests --minutes 2 --out build-tests/soak" \
  bash tests/load/repeat_under_load.sh --minutes 2 build-tests

echo "== [$(elapsed)] Slurm: a job through deploy/slurm's prolog and epilog on a real single-node Slurm"
if [[ $(id -u) -eq 0 ]]; then
  bash tests/slurm/slurm_test.sh build-tests
else
  echo "skipped: starting munged and slurmd needs root"
fi

echo "== [$(elapsed)] Several nodes: an MPI job across a 3-node Slurm on this machine (tests/cluster), each"
echo "   node's adjsnapd started by the prolog, every rank's steps byte-exact from its own node"
if [[ $(id -u) -eq 0 ]]; then
  bash tests/cluster/run.sh build-tests
else
  echo "skipped: network namespaces, munged and slurmd need root"
fi

echo "== [$(elapsed)] The shared spool class on a real GlusterFS volume (tests/cluster/shared_tier.sh):"
echo "   three-level placement, spill rate against the mount's own, a brick killed mid-run"
if [[ $(id -u) -eq 0 && -e /dev/fuse ]]; then
  bash tests/cluster/shared_tier.sh build-tests
else
  echo "skipped: network and mount namespaces, glusterd and FUSE need root and /dev/fuse"
fi
if [[ "${ADJSNAP_SANITIZE_PASS:-1}" != 0 ]]; then
  echo "== [$(elapsed)] adjsnap tests built by clang with -Werror=thread-safety, under AddressSanitizer +"
  echo "   UndefinedBehaviorSanitizer, against UCX 1.22 from PyPI (libucx-cu13); then each libFuzzer"
  echo "   target (tests/fuzz) for 6 s"
  # UCX's memory hooks patch malloc/mmap, which the sanitizer runtime owns.
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no
  export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # -O1 with line tables only (-g1): compiles in about 60% of the time of -O2 -g, and the
  # sanitizers' stack traces still name file and line. The fuzz targets share the tree: only
  # their own sources carry the fuzzer's coverage (CMakeLists.txt, ADJSNAP_FUZZ).
  # The tests of the installed package, the service and the docs' snippets build and run
  # what the first pass checked, outside adjsnap's own code: not again under the sanitizers.
  # Left out as well: client_test's schedule suites, which compute plans on one thread in
  # code the first pass ran (pure arithmetic, no memory shared with another thread).
  ctest_exclude="^(InstalledPackage|InstalledService|Docs|$schedules)\\." run_pass build-clang
  # What those tests ran against: the wheel's UCX, found through the binaries' RUNPATH.
  for bin in build-clang/daemon/adjsnapd build-clang/client/libadjsnap.so.0; do
    ldd "$bin" | grep -q "$ucx_wheel/lib/libucp.so" ||
      { echo "$bin does not load the wheel's UCX:"; ldd "$bin" | grep -i ucx; exit 1; }
  done
  unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
  bash tests/fuzz/run.sh build-clang --seconds 6
fi

if [[ "${ADJSNAP_TSAN_PASS:-0}" != 0 ]]; then
  echo "== [$(elapsed)] the daemon's, store's, data plane's and client's tests (parts_test, daemon_test,"
  echo "   integration_test, client_test) built by clang under ThreadSanitizer"
  # Only those suites and the programs they start; -O1 -g1 as the ASan pass. The suppressions
  # name only dependencies built without TSan (tests/tsan.supp).
  CC=clang CXX=clang++ cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DADJSNAP_SANITIZE=thread -DADJSNAP_WITH_CUDA=OFF -DCMAKE_CXX_FLAGS=-Werror=thread-safety \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    > build-tsan.configure.log 2>&1 || { cat build-tsan.configure.log; exit 1; }
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
  # Left out: the suites this tree does not build (ctest lists them as *_NOT_BUILT), the tests
  # that run scripts (Fortran's needs its own binary), and the schedule suites (a third of the
  # pass's time under TSan, no thread to check).
  build_targets="parts_test daemon_test integration_test client_test adjsnapd adjsnap adjsnap-bench
    acoustic2d push_until_killed fresh_process_pass" \
    ctest_exclude="^(InstalledPackage|InstalledService|Docs|Lint|Fortran|$schedules)\\.|_NOT_BUILT\$" \
    run_pass build-tsan
  unset TSAN_OPTIONS
fi

echo "== [$(elapsed)] naming: .clang-tidy's rules (run in the background since the start)"
rc=0
wait "$naming" || rc=$?
cat build-clang/naming.out
exit "$rc"
