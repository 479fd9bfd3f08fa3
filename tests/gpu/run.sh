#!/usr/bin/env bash
# The GPU check, from a pack made by tests/gpu/pack.sh: everything adjsnapd has that needs a GPU,
# in one run of at most 6 minutes on a borrowed GPU machine that has none of adjsnapd's
# dependencies.
#   bash tests/gpu/run.sh PACK OUTDIR       # on the GPU machine: writes OUTDIR/report.md, .json
#   bash tests/gpu/run.sh --dry-run [PACK]  # anywhere, no GPU needed: the pack is whole
#   bash tests/gpu/run.sh --check-libs PACK # only the library half of the dry run
# PACK is build-gpu/pack unless given (or this script's own folder, when it lies in a pack).
#
# The check runs these parts in turn, each under its own time limit, going on after a failure:
# the machine (uname, glibc, libcuda), nvidia-smi, the pack's libraries as that machine resolves
# them, every gpu-labelled gtest binary (--gtest_output=xml into OUTDIR), an adjsnapd from the pack
# (UCX_NET_DEVICES=lo, socket and state in a folder of its own under /tmp), adjsnap-bench --device
# against it (272 steps of 64 MiB, 17 GiB, on a 24 GiB host tier: every step in host memory),
# the CUDA example solver against it three ways (mapped host tier, UCX data path, device tier),
# the UCX GPU-direct round trip (reported "not built" until the pack has bin/ucx_gpu_direct_test),
# adjsnap status, and the daemon's stop. The parts share a budget of ADJSNAP_GPU_CHECK_BUDGET_S
# seconds (300): a part gets what is left of it where that is less than its own limit, and is
# not run where under 5 s is left; the daemon's stop may take 40 s past it, so the whole check
# ends within 6 minutes. ADJSNAP_GPU_CHECK_HOST_MEM sets the daemon's host tier (24G).
# OUTDIR gets at most 5 files (a device call brings 8 back): report.md, report.json, one gtest
# XML per test binary and logs.tar.gz (every part's whole output, adjsnapd's log, nvidia-smi -q).
# The report is rewritten after every part, so a run cut short leaves one of what ran.
#
# The dry run proves the pack whole without a GPU: every library of bin/*, lib/* and lib/ucx/*
# resolves into lib/ (ldd with LD_LIBRARY_PATH unset; only glibc, the loader and the NVIDIA
# driver's libcuda may come from the system), every program starts (--version, --help or
# --gtest_list_tests), and an adjsnapd started from the pack answers adjsnap with every shared
# object it mapped (/proc/PID/maps) from the pack, UCX's transport modules from lib/ucx among
# them. It exits non-zero naming what is missing.
#
# The gtest binaries start adjsnapd and the example solver by their paths in the build they were
# packed from (ADJSNAPD_BINARY and ACOUSTIC2D_CUDA_BINARY, compiled in). Where such a path does not
# exist on this machine the check links it to the pack's program for the run, and removes the
# link afterwards; it also exports NAME_BINARY=PACK/bin/NAME for every packed program.
set -uo pipefail

die() { echo "run.sh: $*" >&2; exit 2; }

# Libraries a pack may take from the machine: glibc, the loader and the NVIDIA driver (tests
# /gpu/pack.sh packs everything else).
system_lib() {
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | \
      libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnss_*.so.* | \
      libthread_db.so.* | libBrokenLocale.so.* | libc_malloc_debug.so.* | libcuda.so* | \
      libnvidia-*.so*) return 0 ;;
  esac
  return 1
}

# check_libs PACK: every ELF file of the pack resolves its libraries into PACK/lib, or to the
# system for system_lib ones. Prints one line per fault; returns 1 if there was one.
check_libs() {
  local pack real line name path rel f faults=0 files=0
  pack=$(cd "$1" && pwd -P)
  for f in "$pack"/bin/* "$pack"/lib/*.so* "$pack"/lib/ucx/*.so*; do
    [[ -f $f ]] || continue
    files=$((files + 1))
    rel=${f#"$pack"/}
    local out
    if ! out=$(env -u LD_LIBRARY_PATH ldd "$f" 2>&1); then
      echo "FAULT: $rel: ldd: $out"
      faults=$((faults + 1))
      continue
    fi
    while read -r line; do
      if [[ $line =~ ^([^[:space:]]+)\ =\>\ not\ found ]]; then
        name=${BASH_REMATCH[1]}
        # No driver on a machine without a GPU; the GPU machine has it.
        [[ $name == libcuda.so* && ! -e /dev/nvidiactl ]] && continue
        echo "FAULT: $rel needs $name, which is not in the pack (lib/$name)"
        faults=$((faults + 1))
      elif [[ $line =~ ^([^[:space:]]+)\ =\>\ (/[^[:space:]]+) ]]; then
        name=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]}
        real=$(readlink -f "$path")
        [[ $real == "$pack"/lib/* ]] && continue
        system_lib "$name" && continue
        if [[ -e $pack/lib/$name ]]; then
          echo "FAULT: $rel: $name resolves to $path, outside the pack" \
            "(a library from outside it needs it)"
        else
          echo "FAULT: $rel: $name resolves to $path, outside the pack (lib/$name is missing)"
        fi
        faults=$((faults + 1))
      fi
    done <<< "$out"
  done
  ((files > 0)) || { echo "FAULT: $pack has no bin/ or lib/ files"; return 1; }
  echo "libraries: $files files checked, $faults faults"
  ((faults == 0))
}

# check_maps PID PACK: every shared object process PID has mapped comes from PACK/lib or is a
# system_lib; prints the UCX modules it mapped from PACK/lib/ucx. Returns 1 on a fault.
check_maps() {
  local pid=$1 pack path faults=0
  pack=$(cd "$2" && pwd -P)
  local -a modules=()
  while read -r path; do
    path=$(readlink -f "$path")
    if [[ $path == "$pack"/lib/ucx/* ]]; then
      modules+=("${path##*/}")
    elif [[ $path == "$pack"/* ]]; then
      :
    elif ! system_lib "${path##*/}"; then
      echo "FAULT: adjsnapd (pid $pid) mapped $path, outside the pack"
      faults=$((faults + 1))
    fi
  done < <(awk '$6 ~ /\.so(\.[0-9.]+)?$/ {print $6}' "/proc/$pid/maps" | sort -u)
  echo "adjsnapd mapped UCX modules from the pack: ${modules[*]:-none}"
  ((faults == 0))
}

# probe PACK NAME: the program starts and says what it is.
probe() {
  local bin=$1/bin/$2 out rc
  if grep -qx "gpu_test	bin/$2" "$1/manifest.tsv" || [[ $2 == *_test ]]; then
    out=$(timeout 20 "$bin" --gtest_list_tests 2>&1); rc=$?
    if ((rc == 0)) && [[ $out == *"."* ]]; then
      echo "$2: lists $(grep -c '^  ' <<< "$out") tests"
      return 0
    fi
  elif [[ $2 == acoustic2d_cuda ]]; then  # no --help: an unknown flag prints its usage, exit 2
    out=$(timeout 20 "$bin" --usage - 2>&1); rc=$?
    ((rc == 2)) && [[ $out == usage:* ]] && { echo "$2: $out"; return 0; }
  else
    out=$(timeout 20 "$bin" --version 2>&1); rc=$?
    ((rc == 0)) && { echo "$2: $out"; return 0; }
  fi
  echo "FAULT: bin/$2 did not start (exit $rc): $(tail -c 600 <<< "$out")"
  return 1
}

# start_adjsnap PACK DIR HOST_MEM [ARGS...]: starts adjsnapd from the pack with its socket and state
# in DIR, its log DIR/adjsnapd.log; sets adjsnapd_pid and socket.
start_adjsnap() {
  local pack=$1 dir=$2 mem=$3
  shift 3
  socket=$dir/adjsnap.sock
  mkdir -p "$dir"
  UCX_NET_DEVICES=lo "$pack/bin/adjsnapd" --socket "$socket" --state-dir "$dir/state" \
    --host-mem "$mem" --fdstore off --log-level info "$@" > "$dir/adjsnapd.log" 2>&1 &
  adjsnapd_pid=$!
}

# wait_ready PACK SOCKET PID SECONDS: adjsnap status answers; adjsnapd's mapped libraries checked.
wait_ready() {
  local pack=$1 socket=$2 pid=$3 t
  for ((t = 0; t < $4 * 10; t++)); do
    [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) != Z ]] ||
      { echo "FAULT: adjsnapd exited during start-up"; return 1; }
    if [[ -S $socket ]] && "$pack/bin/adjsnap" --socket "$socket" status > /dev/null 2>&1; then
      echo "adjsnapd answers after $(awk -v t=$t 'BEGIN {print t / 10}') s"
      "$pack/bin/adjsnap" --socket "$socket" status
      check_maps "$pid" "$pack"
      return
    fi
    sleep 0.1
  done
  echo "FAULT: adjsnapd did not answer adjsnap within $4 s"
  return 1
}

# stop_adjsnap PID SECONDS: SIGTERM, wait, SIGKILL past the bound; prints and returns adjsnapd's exit
# status (the caller's child, so the caller reaps it).
stop_adjsnap() {
  local pid=$1 t rc
  kill -TERM "$pid" 2> /dev/null
  for ((t = 0; t < $2 * 10; t++)); do
    [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) != Z ]] || break
    sleep 0.1
  done
  if [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) != Z ]]; then
    echo "adjsnapd did not stop within $2 s of SIGTERM: SIGKILL"
    kill -KILL "$pid"
  fi
  wait "$pid"; rc=$?
  echo "adjsnapd exited with status $rc after $(awk -v t=$t 'BEGIN {print t / 10}') s"
  return "$rc"
}

default_pack() {
  local here
  here=$(cd "$(dirname "$0")" && pwd)
  if [[ -f $here/manifest.tsv ]]; then echo "$here"; else echo "$here/../../build-gpu/pack"; fi
}

dry_run() {
  local pack=$1 faults=0 name t0 dir
  t0=$(date +%s.%N)
  [[ -f $pack/manifest.tsv && -d $pack/bin ]] || die "$pack is no pack: run tests/gpu/pack.sh"
  pack=$(cd "$pack" && pwd -P)
  echo "== libraries resolve into $pack/lib"
  check_libs "$pack" || faults=$((faults + 1))
  echo "== every program starts"
  for name in "$pack"/bin/*; do probe "$pack" "${name##*/}" || faults=$((faults + 1)); done
  echo "== an adjsnapd from the pack answers adjsnap, every shared object it maps from the pack"
  dir=$(mktemp -d /tmp/adjsnap-dry-run.XXXXXX)
  export UCX_MODULE_DIR=$pack/lib/ucx
  start_adjsnap "$pack" "$dir" 64M
  local ready
  ready=$(wait_ready "$pack" "$socket" "$adjsnapd_pid" 30 2>&1) || faults=$((faults + 1))
  grep -E '^(adjsnapd |FAULT)' <<< "$ready"  # the check's lines, not adjsnap's table
  [[ $ready == *"UCX modules from the pack: none"* ]] &&
    { echo "FAULT: adjsnapd loaded no UCX transport module from lib/ucx"; faults=$((faults + 1)); }
  if ! stop_adjsnap "$adjsnapd_pid" 30 > /dev/null; then
    echo "FAULT: adjsnapd's stop failed: $(tail -5 "$dir/adjsnapd.log")"
    faults=$((faults + 1))
  fi
  rm -rf "$dir"
  local took
  took=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN {printf "%.1f s", t1 - t0}')
  if ((faults)); then
    echo "dry run: FAILED: the pack is not whole (FAULT lines above); $took"
    return 1
  fi
  echo "dry run: the pack at $pack is whole ($(du -sh "$pack" | cut -f1), $took)"
}

# ---------------------------------------------------------------- the check on the GPU machine

# part_begin ID TITLE LIMIT_S: opens part N's folder; returns 1 (and records it) where the budget
# has too little left. Sets part_dir and part_limit.
part_begin() {
  local left
  part_n=$((part_n + 1))
  part_dir=$parts/$(printf '%02d' "$part_n")-$1
  mkdir -p "$part_dir"
  echo "$2" > "$part_dir/title"
  left=$((deadline - $(date +%s)))
  part_limit=$3
  ((part_limit <= left)) || part_limit=$left
  if ((left < 5)); then
    echo "not run: the check's budget of ${budget} s was spent" > "$part_dir/status"
    echo "== $2: not run, the budget is spent"
    return 1
  fi
  echo "$part_limit" > "$part_dir/timeout_s"
  part_t0=$(date +%s.%N)
}

part_skip() {  # part_skip ID TITLE WHY: a part that does not run, and why
  part_n=$((part_n + 1))
  part_dir=$parts/$(printf '%02d' "$part_n")-$1
  mkdir -p "$part_dir"
  echo "$2" > "$part_dir/title"
  echo "$3" > "$part_dir/status"
  echo "== $2: $3"
}

part_end() {  # part_end RC
  echo "$1" > "$part_dir/rc"
  awk -v t0="$part_t0" -v t1="$(date +%s.%N)" 'BEGIN {printf "%.1f\n", t1 - t0}' \
    > "$part_dir/wall_s"
  echo "== $(cat "$part_dir/title"): exit $1, $(cat "$part_dir/wall_s") s"
  report
}

# [show=TEXT] part ID TITLE LIMIT_S COMMAND...: runs COMMAND under the part's limit, its output in
# the part; the report shows TEXT as its command where given.
part() {
  local id=$1 title=$2 limit=$3
  shift 3
  part_begin "$id" "$title" "$limit" || { report; return 0; }
  if [[ -n ${show:-} ]]; then echo "$show"; else printf '%q ' "$@"; fi > "$part_dir/command"
  timeout -k 5 "$part_limit" "$@" > "$part_dir/output" 2>&1
  part_end $?
}

# gtest_part NAME TITLE LIMIT_S: runs the pack's gtest binary NAME, its XML report in OUTDIR.
gtest_part() {
  part_begin "$1" "$2" "$3" || { report; return 0; }
  echo "$pack/bin/$1 --gtest_output=xml:$outdir/$1.xml" > "$part_dir/command"
  echo "$outdir/$1.xml" > "$part_dir/xml"
  # The test's watchdog prints the stacks of a hung test and its daemons before the limit.
  ADJSNAP_TEST_WATCHDOG_S=$((part_limit > 30 ? part_limit - 15 : part_limit)) \
    timeout -k 5 "$part_limit" "$pack/bin/$1" --gtest_output="xml:$outdir/$1.xml" \
    > "$part_dir/output" 2>&1
  part_end $?
}

report() {
  python3 "$here/report.py" --parts "$parts" --pack "$pack" --out "$outdir" --budget "$budget" \
    --started "$started" || echo "run.sh: report.py failed" >&2
  tar -czf "$outdir/logs.tar.gz" -C "$work" parts logs 2> /dev/null
}

environment() {
  echo "host: $(uname -srm), $(. /etc/os-release && echo "$PRETTY_NAME"), $(nproc) CPUs"
  echo "glibc: $(ldd --version | head -1)"
  free -g | head -2
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "libcuda: $(ldconfig -p | grep -m1 'libcuda\.so\.1 ' || echo 'not in the ldconfig cache')"
  command -v nvcc > /dev/null && nvcc --version | tail -2
  if command -v cuobjdump > /dev/null; then
    echo "GPU code in bin/acoustic2d_cuda:"
    cuobjdump --list-elf --list-ptx "$pack/bin/acoustic2d_cuda" 2>&1 | sed 's/^/  /'
  fi
  echo "test programs at their build paths:"
  cat "$work/helpers" 2> /dev/null
}

smi() {
  nvidia-smi || return
  local fields=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max
  nvidia-smi --format=csv \
    --query-gpu=$fields,clocks.max.sm,persistence_mode,compute_mode,ecc.mode.current
  nvidia-smi -q > "$work/logs/nvidia-smi-q.txt" 2>&1
  grep -E '^ *(Product Name|Product Architecture|CUDA Version|Driver Version|Bus Id|MIG Mode)' \
    "$work/logs/nvidia-smi-q.txt"
}

# link_helpers: the build paths the gtest binaries start programs by, linked to the pack.
link_helpers() {
  local key path bin
  : > "$work/helpers"
  while IFS=$'\t' read -r key path bin; do
    [[ $key == helper ]] || continue
    if [[ ! -e $path && ! -L $path ]]; then
      local top=$path
      while [[ ! -e $(dirname "$top") ]]; do top=$(dirname "$top"); done
      mkdir -p "$(dirname "$path")" && ln -s "$pack/$bin" "$path" && echo "$top" >> "$work/created"
      echo "  $path -> $bin (linked for this run)" >> "$work/helpers"
    elif [[ $(readlink -f "$path") == "$(readlink -f "$pack/$bin")" ]]; then
      echo "  $path -> $bin" >> "$work/helpers"
    else
      echo "  $path exists and is not the pack's $bin: the tests start that one" \
        >> "$work/helpers"
    fi
  done < "$pack/manifest.tsv"
}

cleanup() {
  [[ -n ${adjsnapd_pid:-} && -d /proc/$adjsnapd_pid ]] && kill -KILL "$adjsnapd_pid" 2> /dev/null
  [[ -f $work/created ]] && while read -r p; do rm -rf -- "$p"; done < "$work/created"
  rm -f "$work/created"
}

gpu_check() {
  budget=${ADJSNAP_GPU_CHECK_BUDGET_S:-300}
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  deadline=$(($(date +%s) + budget))
  mkdir -p "$outdir"
  outdir=$(cd "$outdir" && pwd)
  work=$(mktemp -d /tmp/adjsnap-gpu-check.XXXXXX)
  parts=$work/parts
  mkdir -p "$parts" "$work/logs"
  part_n=0 socket="" adjsnapd_pid=""
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  export UCX_NET_DEVICES=lo UCX_MODULE_DIR=$pack/lib/ucx
  local name
  for name in "$pack"/bin/*; do name=${name##*/}; export "${name^^}_BINARY=$pack/bin/$name"; done
  link_helpers
  export -f environment smi check_libs system_lib
  export pack work

  show="uname, os-release, ldd --version, free, ldconfig -p, nvcc --version, cuobjdump" \
    part environment "the machine" 15 bash -c environment
  show="nvidia-smi; nvidia-smi --query-gpu=...; nvidia-smi -q (whole in logs.tar.gz)" \
    part nvidia-smi "nvidia-smi" 20 bash -c smi
  # shellcheck disable=SC2016 # $pack is expanded by that bash
  show="run.sh --check-libs $pack" part libraries "the pack's libraries on this machine" 30 \
    bash -c 'check_libs "$pack"'

  local key test
  while IFS=$'\t' read -r key test _; do
    [[ $key == gpu_test && $test != bin/ucx_gpu_direct_test ]] || continue  # that one below
    name=${test#bin/}
    if [[ $name == device_test ]]; then
      gtest_part "$name" "$name (gpu-labelled tests)" 150
    else
      gtest_part "$name" "$name (gpu-labelled tests)" 60
    fi
  done < "$pack/manifest.tsv"

  local dir=$work/adjsnap
  local mem=${ADJSNAP_GPU_CHECK_HOST_MEM:-24G}
  if part_begin adjsnap-start "start adjsnapd from the pack ($mem host tier)" 40; then
    start_adjsnap "$pack" "$dir" "$mem" --spool-dirs "$dir/spool" --disk-mem 8G
    echo "$pack/bin/adjsnapd --socket $socket --state-dir $dir/state --host-mem $mem" \
      "--fdstore off --log-level info --spool-dirs $dir/spool --disk-mem 8G" > "$part_dir/command"
    wait_ready "$pack" "$socket" "$adjsnapd_pid" "$part_limit" > "$part_dir/output" 2>&1
    part_end $?
  else
    report
  fi
  local -a runs=(
    adjsnap-bench "adjsnap-bench --device, 272 x 64 MiB" 120
    "$pack/bin/adjsnap-bench" --device --steps 272 --bytes 64M --socket "$socket" --json --
    acoustic-mapped "acoustic2d_cuda, mapped host tier, 2048 x 2048 x 200 steps" 60
    "$pack/bin/acoustic2d_cuda" --nx 2048 --ny 2048 --steps 200 --socket "$socket" --
    acoustic-ucx "acoustic2d_cuda, UCX data path, 1024 x 1024 x 100 steps" 45
    env ADJSNAP_DATA_PATH=ucx "$pack/bin/acoustic2d_cuda" --nx 1024 --ny 1024 --steps 100
    --socket "$socket" --run acoustic2d-cuda-ucx --
    acoustic-device-tier "acoustic2d_cuda, 1 GiB device tier, 2048 x 2048 x 200 steps" 60
    env ADJSNAP_DEVICE_MEM=1G "$pack/bin/acoustic2d_cuda" --nx 2048 --ny 2048 --steps 200
    --socket "$socket" --run acoustic2d-cuda-pool --layers HostDevice --
  )
  local i=0
  while ((i < ${#runs[@]})); do  # ID TITLE LIMIT COMMAND... --
    local id=${runs[i]} title=${runs[i + 1]} limit=${runs[i + 2]}
    local -a command=()
    for ((i += 3; i < ${#runs[@]}; i++)); do
      [[ ${runs[i]} == -- ]] && break
      command+=("${runs[i]}")
    done
    i=$((i + 1))
    if [[ -n ${adjsnapd_pid:-} && -S $socket ]] && kill -0 "$adjsnapd_pid" 2> /dev/null; then
      part "$id" "$title" "$limit" "${command[@]}"
    else
      part_skip "$id" "$title" "not run: no adjsnapd from the pack is running"
    fi
  done
  if [[ -x $pack/bin/ucx_gpu_direct_test ]]; then
    gtest_part ucx_gpu_direct_test "UCX GPU-direct round trip" 60
  else
    part_skip ucx-gpu-direct "UCX GPU-direct round trip" \
      "not built: the pack has no bin/ucx_gpu_direct_test"
  fi
  if [[ -n ${adjsnapd_pid:-} ]]; then
    [[ -S $socket ]] && part adjsnap-status "adjsnap status after the runs" 15 \
      "$pack/bin/adjsnap" --socket "$socket" status
    # The stop is given 40 s past the budget, so the daemon is always stopped.
    ((deadline - $(date +%s) >= 40)) || deadline=$(($(date +%s) + 40))
    part_begin adjsnap-stop "stop adjsnapd (SIGTERM)" 40
    echo "kill -TERM $adjsnapd_pid" > "$part_dir/command"
    stop_adjsnap "$adjsnapd_pid" 35 > "$part_dir/output" 2>&1
    local rc=$?
    adjsnapd_pid=""
    { echo "--- the end of adjsnapd's log:"; tail -40 "$dir/adjsnapd.log"; } >> "$part_dir/output"
    cp "$dir/adjsnapd.log" "$work/logs/adjsnapd.log" 2> /dev/null
    part_end "$rc"
  fi
  cleanup
  python3 "$here/report.py" --parts "$parts" --pack "$pack" --out "$outdir" --budget "$budget" \
    --started "$started" --final
  local ok=$?
  tar -czf "$outdir/logs.tar.gz" -C "$work" parts logs 2> /dev/null
  rm -rf "$work"
  sed -n '/^- verdict/p; /^| /p' "$outdir/report.md"
  echo "report: $outdir/report.md"
  return "$ok"
}

here=$(cd "$(dirname "$0")" && pwd)
case ${1:-} in
  --dry-run)
    (($# <= 2)) || die "usage: run.sh --dry-run [PACK]"
    dry_run "${2:-$(default_pack)}"
    ;;
  --check-libs)
    (($# == 2)) || die "usage: run.sh --check-libs PACK"
    check_libs "$2"
    ;;
  -h | --help | "")
    sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'
    [[ -n ${1:-} ]]
    ;;
  *)
    (($# == 2)) || die "usage: run.sh PACK OUTDIR (or --dry-run [PACK]; --help)"
    [[ -f $1/manifest.tsv ]] || die "$1 is no pack: run tests/gpu/pack.sh"
    pack=$(cd "$1" && pwd -P)
    outdir=$2
    gpu_check
    ;;
esac
