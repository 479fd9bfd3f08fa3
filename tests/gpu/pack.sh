#!/usr/bin/env bash
# Packs what the GPU check runs into one folder that runs on a machine with none of adjsnapd's
# dependencies (the borrowed GPU machine has CUDA's driver and runtime, but no gRPC, protobuf,
# abseil, RocksDB, UCX or zfp): the binaries, every shared library they load, UCX's transport
# modules, and the scripts that run the check (tests/gpu/run.sh, report.py).
#   bash tests/gpu/pack.sh                      # Release build with CUDA into build-gpu, packed
#   bash tests/gpu/pack.sh --from build-tests   # pack a build that exists (CI's), build nothing
#   bash tests/gpu/pack.sh [--from DIR] [--out PACK_DIR] [--jobs N]
# PACK_DIR (default BUILD_DIR/pack) gets:
#   bin/      adjsnapd, adjsnap, adjsnap-bench, acoustic2d_cuda, every gtest binary labelled `gpu` in
#             CTest, and every program those tests start by its path in the build (compiled in
#             as ADJSNAPD_BINARY etc.); stripped, RUNPATH $ORIGIN/../lib
#   lib/      every library they need but glibc, the loader and the NVIDIA driver (libcuda),
#             found with ldd; stripped, RUNPATH $ORIGIN
#   lib/ucx/  UCX's transport modules (UCX dlopens them from the folder beside libucs), RUNPATH
#             $ORIGIN/..:$ORIGIN
#   manifest.tsv  what is packed and from where: run.sh reads it
#   run.sh, report.py
# Without --from the build is configured with ADJSNAP_CUDA_ARCHITECTURES="90-real;90-virtual"
# (sm_90 machine code for the H100 and H200, and PTX) and only the packed targets are built.
# PACK_DIR.tar.gz: the same, as one file, what a device call carries (tar -xzf it there).
# Needs patchelf (Debian's `patchelf`). Prints the sizes; fails where the tarball is over
# 60 MiB, what a device call carries with the working tree (64 MiB together).
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/../.."
repo=$PWD

from="" out="" jobs=$(nproc)
while (($#)); do
  case $1 in
    --from) from=${2:?--from needs a build directory}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pack.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
# Relative to where pack.sh was called from.
[[ -z $from || $from == /* ]] || from=$caller/$from
[[ -z $out || $out == /* ]] || out=$caller/$out
command -v patchelf > /dev/null ||
  { echo "pack.sh: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
start=$(date +%s.%N)

# What tests/CMakeLists.txt says of the tests: "gpu_test NAME" for each adjsnap_add_test(NAME ...
# LABELS ... gpu ...), "needs NAME TARGET" for each add_dependencies(NAME TARGET...), the
# programs a test starts.
cmake_facts() {
  python3 - "$repo/tests/CMakeLists.txt" << 'EOF'
import re, sys
text = re.sub(r"#[^\n]*", "", open(sys.argv[1]).read())
keywords = {"SOURCES", "LIBS", "LABELS", "TIMEOUT"}
for m in re.finditer(r"adjsnap_add_test\(\s*(\w+)([^)]*)\)", text):
    words = m.group(2).split()
    labels = []
    for w in words[words.index("LABELS") + 1:] if "LABELS" in words else []:
        if w in keywords:
            break
        labels.append(w)
    if "gpu" in labels:
        print("gpu_test", m.group(1))
for m in re.finditer(r"add_dependencies\(\s*(\w+)([^)]*)\)", text):
    for target in m.group(2).split():
        print("needs", m.group(1), target)
EOF
}

if [[ -z $from ]]; then
  build=$repo/build-gpu
  echo "== configure $build (Release, CUDA, sm_90 + PTX)"
  # The CUDA targets take their architectures from ADJSNAP_CUDA_ARCHITECTURES (kernels/,
  # client/examples/); CMAKE_CUDA_ARCHITECTURES does not reach them.
  mkdir -p "$build"  # the log inside it, which .gitignore covers
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DADJSNAP_WITH_CUDA=ON \
    -DADJSNAP_CUDA_ARCHITECTURES="90-real;90-virtual" > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
  mapfile -t gpu_targets < <(cmake_facts | sed -n 's/^gpu_test //p')
  ((${#gpu_targets[@]})) ||
    { echo "pack.sh: no gpu-labelled test in tests/CMakeLists.txt" >&2; exit 1; }
  targets=(adjsnapd adjsnap adjsnap-bench acoustic2d_cuda "${gpu_targets[@]}")
  echo "== build ${targets[*]} (-j $jobs)"
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  build=$(cd "$from" && pwd)
fi
[[ -f $build/CMakeCache.txt ]] || { echo "pack.sh: $build is no CMake build" >&2; exit 2; }
out=${out:-$build/pack}
if [[ -d $out && -n $(ls -A "$out") && ! -f $out/manifest.tsv ]]; then
  echo "pack.sh: $out holds files and no pack: give --out an empty or new folder" >&2
  exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "${out:?}/bin" "${out:?}/lib" "$out/manifest.tsv" "$out/run.sh" "$out/report.py"
mkdir -p "$out/bin" "$out/lib/ucx"

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }

# The gpu-labelled test binaries, as CTest runs them (gtest_discover_tests has listed them).
mapfile -t gpu_tests < <(ctest --test-dir "$build" -L gpu --show-only=json-v1 | python3 -c '
import json, sys
seen = []
for t in json.load(sys.stdin)["tests"]:
    exe = (t.get("command") or [""])[0]
    if exe and exe not in seen:
        seen.append(exe)
print("\n".join(seen))')
if ((${#gpu_tests[@]} == 0)); then
  echo "pack.sh: $build has no gpu-labelled test: build it with CUDA (ADJSNAP_WITH_CUDA=ON)" >&2
  exit 1
fi

# A target's executable in the build: the one file of that name outside CMakeFiles/.
find_exe() {
  local found
  mapfile -t found < <(find "$build" -path "$build/pack" -prune -o -path '*/CMakeFiles' -prune \
    -o -type f -name "$1" -perm -u+x -print)
  ((${#found[@]} == 1)) || { echo "pack.sh: ${#found[@]} files named $1 in $build" >&2; return 1; }
  echo "${found[0]}"
}

declare -A exes=()  # pack name -> path in the build
for name in adjsnapd adjsnap adjsnap-bench acoustic2d_cuda; do exes[$name]=$(find_exe "$name"); done
for t in "${gpu_tests[@]}"; do
  [[ -x $t ]] || { echo "pack.sh: $t is listed by ctest but not built" >&2; exit 1; }
  exes[$(basename "$t")]=$t
done
# Programs the tests start by their path in this build (ADJSNAPD_BINARY, ACOUSTIC2D_CUDA_BINARY,
# ...): the targets a test depends on (add_dependencies), and any other executable of the build
# whose absolute path is a string in a test binary (an optimised build may inline a path).
declare -A helpers=()  # path in the build -> pack name
add_helper() {
  helpers[$1]=$(basename "$1")
  [[ -n ${exes[$(basename "$1")]:-} ]] || exes[$(basename "$1")]=$1
}
for t in "${gpu_tests[@]}"; do
  while read -r target; do
    exe=$(find_exe "$target") ||
      { echo "pack.sh: $t needs $target, which is no program of $build" >&2; exit 1; }
    add_helper "$exe"
  done < <(cmake_facts | awk -v t="$(basename "$t")" '$1 == "needs" && $2 == t {print $3}')
  while read -r p; do
    [[ -f $p && -x $p && $p != */CMakeFiles/* ]] && add_helper "$p"
  done < <(grep -aoE "$build/[A-Za-z0-9_./+-]+" "$t" | sort -u)
done

# Libraries every program needs, except glibc, the loader and the driver: the machine brings
# those (a libc newer than this one's runs these binaries; libcuda must match its kernel module).
system_lib() {
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | \
      libdl.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnss_*.so.* | \
      libthread_db.so.* | libBrokenLocale.so.* | libc_malloc_debug.so.* | libcuda.so*) return 0 ;;
  esac
  return 1
}
declare -A libs=()  # soname -> resolved path
collect_libs() {  # collect_libs ELF: adds what ldd resolves for it to libs
  local line name path
  while read -r line; do
    if [[ $line =~ ^([^[:space:]]+)\ =\>\ not\ found ]]; then
      echo "pack.sh: $1 needs ${BASH_REMATCH[1]}, which this machine does not have" >&2
      exit 1
    fi
    [[ $line =~ ^([^[:space:]]+)\ =\>\ (/[^[:space:]]+) ]] || continue
    name=${BASH_REMATCH[1]} path=${BASH_REMATCH[2]}
    system_lib "$name" || libs[$name]=$path
  done < <(env -u LD_LIBRARY_PATH ldd "$1")
}
for name in "${!exes[@]}"; do collect_libs "${exes[$name]}"; done

# UCX's transport modules: UCX dlopens lib<framework>_<module>.so.<N> from the folder `ucx`
# beside libucs (and from $UCX_MODULE_DIR), so they travel as lib/ucx/ under their sonames.
ucx_modules=()
if [[ -n ${libs[libucs.so.0]:-} ]]; then
  ucx_dir=$(dirname "$(readlink -f "${libs[libucs.so.0]}")")/ucx
  for m in "$ucx_dir"/lib*.so.*; do
    [[ -f $m && ! -L $m ]] || continue
    soname=$(patchelf --print-soname "$m")
    cp -L "$m" "$out/lib/ucx/$soname"
    ucx_modules+=("$soname")
    collect_libs "$m"
  done
fi
for m in "${ucx_modules[@]}"; do unset "libs[$m]"; done  # a module needing another (rdmacm: ib)

# shellcheck disable=SC2016 # $ORIGIN is for the loader
for name in "${!exes[@]}"; do
  install -m 755 "${exes[$name]}" "$out/bin/$name"
  strip --strip-unneeded "$out/bin/$name"
  patchelf --set-rpath '$ORIGIN/../lib' "$out/bin/$name"
done
# shellcheck disable=SC2016
for soname in "${!libs[@]}"; do
  install -m 644 "$(readlink -f "${libs[$soname]}")" "$out/lib/$soname"
  strip --strip-unneeded "$out/lib/$soname"
  patchelf --set-rpath '$ORIGIN' "$out/lib/$soname"
done
# shellcheck disable=SC2016
for soname in "${ucx_modules[@]}"; do
  chmod 644 "$out/lib/ucx/$soname"
  strip --strip-unneeded "$out/lib/ucx/$soname"
  patchelf --set-rpath '$ORIGIN/..:$ORIGIN' "$out/lib/ucx/$soname"
done
install -m 755 tests/gpu/run.sh "$out/run.sh"
install -m 644 tests/gpu/report.py "$out/report.py"

# manifest.tsv: KEY<TAB>VALUE... lines, read by run.sh and report.py.
{
  dirty=""
  [[ -z $(git status --porcelain --untracked-files=no 2> /dev/null) ]] ||
    dirty=" (with uncommitted changes)"
  printf 'source\t%s%s\n' "$(git rev-parse --short=12 HEAD 2> /dev/null || echo unknown)" "$dirty"
  printf 'packed\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf 'build\t%s\n' "$build"
  printf 'build_type\t%s\n' "$(cache CMAKE_BUILD_TYPE)"
  printf 'cuda_architectures\t%s\n' "$(cache ADJSNAP_CUDA_ARCHITECTURES)"
  printf 'nvcc\t%s\n' "$("$(cache CMAKE_CUDA_COMPILER)" --version 2> /dev/null |
    sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  printf 'packed_on\t%s, glibc %s\n' "$(. /etc/os-release && echo "$PRETTY_NAME")" \
    "$(ldd --version | head -1 | sed 's/.* //')"
  for t in "${gpu_tests[@]}"; do printf 'gpu_test\tbin/%s\n' "$(basename "$t")"; done
  for p in "${!helpers[@]}"; do printf 'helper\t%s\tbin/%s\n' "$p" "${helpers[$p]}"; done
} > "$out/manifest.tsv"

bytes=$(du -sb "$out" | cut -f1)
awk -v out="$out" -v e=${#exes[@]} -v l=${#libs[@]} -v m=${#ucx_modules[@]} -v b="$bytes" \
  -v t0="$start" -v t1="$(date +%s.%N)" 'BEGIN {
    printf "pack.sh: %s: %d programs, %d libraries, %d UCX modules, %.1f MiB, %.0f s\n",
           out, e, l, m, b / 1048576, t1 - t0 }'
# What a device call carries: the pack as one gzip'd tar beside the folder (nvCOMP's library
# alone is 24 MiB; the folder is over the limit, the tarball well under it). The GPU machine
# has tar and gzip: `tar -xzf PACK.tar.gz -C DIR` gives the folder back, whole.
tarball="$out.tar.gz"
tar -C "$(dirname "$out")" -czf "$tarball" "$(basename "$out")"
packed=$(stat -c %s "$tarball")
awk -v t="$tarball" -v b="$packed" 'BEGIN { printf "pack.sh: %s: %.1f MiB\n", t, b / 1048576 }'
if ((packed > 60 * 1048576)); then
  echo "pack.sh: $tarball is over 60 MiB; the pack's largest files:" >&2
  find "$out" -type f -printf '%s\t%P\n' | sort -rn | head -8 |
    awk '{printf "  %6.1f MiB  %s\n", $1 / 1048576, $2}' >&2
  exit 1
fi
