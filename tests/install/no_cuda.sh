#!/usr/bin/env bash
# A CUDA-enabled build, installed, on a node with no CUDA at all (issue 59): a CPU-only solver
# links libadjsnap and runs against the installed adjsnapd.
#
#   no_cuda.sh BUILD_DIR CUDA_DIR...
#
# CUDA_DIR: the build's CUDA toolkit folders (CMake's CUDAToolkit_BIN_DIR/.. and
# CUDAToolkit_LIBRARY_DIR), which tests/CMakeLists.txt passes from the build's configuration.
#  1. installs the build into a scratch prefix and checks every ELF file there: no NEEDED
#     libcudart or libcuda, no RUNPATH into a CUDA folder; and that neither the CMake package
#     nor adjsnap.pc names CUDA;
#  2. in a mount namespace of its own (this host stays as it was), hides each CUDA folder under
#     an empty tmpfs (not a system folder such as /usr: see below), and each libcudart and
#     libcuda the loader's cache lists (a runtime copied to /usr/local/lib, the NVIDIA driver's
#     library) under /dev/null;
#  3. there, with an empty environment but for UCX_NET_DEVICES=lo: starts the installed
#     adjsnapd, builds tests/install/consumer/main.c with cc against the prefix, runs it (a push
#     and a fetch of each step), and reads the `gpu` line of `adjsnap status`, which must say
#     "none (no NVIDIA driver)".
# Not root, or no mount namespace here: skipped (exit 77), saying why.
set -euo pipefail

skip() {  # in the form tests/report_skips.py reads a reason from
  printf '%s:1: Skipped\n%s\n[  SKIPPED ] InstalledPackage\n' "$0" "$1"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
# Each argument's absolute path with symbolic links resolved, when it exists; one a line.
resolved() {
  local p
  for p in "$@"; do
    [[ -e $p ]] && realpath "$p"
  done
  return 0
}

if [[ ${1:-} != --inside ]]; then
  [[ $# -ge 2 ]] || { echo "usage: no_cuda.sh BUILD_DIR CUDA_DIR..." >&2; exit 2; }
  [[ $(id -u) == 0 ]] || skip "needs root: a mount namespace that hides the CUDA toolkit"
  unshare --mount true 2>/dev/null || skip "no mount namespace here (unshare --mount failed)"
  build=$(cd "$1" && pwd)
  shift
  # Each folder once, and none inside another (the library folder is often the toolkit's). A
  # toolkit installed into the system's own folders (Debian's: /usr, /usr/lib/<triplet>) is not
  # hidden whole, which would hide the system: only its libraries are, through the loader's
  # cache; a folder is the toolkit's own when its path says cuda.
  mapfile -t cuda_dirs < <(resolved "$@" | sort -u | awk '{
    for (i = 1; i <= n; ++i) if (index($0 "/", kept[i] "/") == 1) next
    kept[++n] = $0; print }' | grep -i cuda || true)
  [[ ${#cuda_dirs[@]} -gt 0 ]] ||
    echo "the toolkit lies in the system's folders ($*): only its libraries will be hidden"
  work=$(mktemp -d /tmp/no-cuda.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  prefix=$work/prefix
  cmake --install "$build" --prefix "$prefix" > "$work/install.log"

  echo "== no installed file needs CUDA's runtime or driver, nor looks for them in a CUDA folder"
  checked=()
  while IFS= read -r -d '' f; do
    [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == '177ELF' ]] || continue
    dyn=$(readelf -d "$f" 2>/dev/null || true)
    needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<< "$dyn")
    runpath=$(sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p' <<< "$dyn")
    if grep -Eq '^libcuda(rt)?\.so' <<< "$needed"; then
      fail "${f#"$prefix"/} NEEDs $(grep -E '^libcuda(rt)?\.so' <<< "$needed" | tr '\n' ' ')"
    fi
    IFS=: read -ra entries <<< "$runpath"
    for entry in "${entries[@]}"; do
      # shellcheck disable=SC2016 # $ORIGIN is the loader's, written as it is
      [[ -n $entry && $entry != *'$ORIGIN'* ]] || continue
      real=$(resolved "$entry")
      for dir in "${cuda_dirs[@]}"; do
        if [[ $entry/ == "$dir"/* || ${real:-$entry}/ == "$dir"/* ]]; then
          fail "${f#"$prefix"/} has the RUNPATH entry $entry, in the CUDA folder $dir"
        fi
      done
    done
    checked+=("${f#"$prefix"/}")
  done < <(find "$prefix" -type f -print0 | sort -z)
  [[ ${#checked[@]} -gt 0 ]] || fail "no ELF file installed"
  echo "${checked[*]}: none NEEDs libcudart or libcuda; no RUNPATH into ${cuda_dirs[*]:-a CUDA folder}"

  echo "== the CMake package and adjsnap.pc ask a consumer for nothing of CUDA"
  mapfile -t packages < <(find "$prefix" \( -path '*/cmake/adjsnap/*' -o -name adjsnap.pc \) -type f | sort)
  [[ ${#packages[@]} -gt 0 ]] || fail "no CMake package or adjsnap.pc installed"
  for f in "${packages[@]}"; do  # what they do, not what their comments say
    if grep -v '^[[:space:]]*#' "$f" | grep -i cuda; then fail "${f#"$prefix"/} names CUDA"; fi
  done
  echo "${packages[*]#"$prefix"/}: no CUDA"

  rc=0
  unshare --mount --propagation private bash "$0" --inside "$prefix" "$work" "${cuda_dirs[@]}" || rc=$?
  exit "$rc"
fi

# ---- inside the mount namespace
prefix=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
daemon_pid=""
trap '[[ -z $daemon_pid ]] || { kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; } || true' EXIT

echo "== CUDA hidden: the toolkit folders and every libcudart and libcuda the loader knows"
for dir in "$@"; do
  mount -t tmpfs -o ro,size=4k adjsnap-no-cuda "$dir"
  echo "hidden: $dir"
done
# The loader's cache still names them; what it names is /dev/null now, which no loader loads.
mapfile -t cached < <(ldconfig -p | sed -n 's/^[[:space:]]*\(libcuda\.so\|libcudart\.so\)[^ ]* .*=> //p' |
                        while read -r lib; do resolved "$lib"; done | sort -u)
for lib in "${cached[@]}"; do
  mount --bind /dev/null "$lib"
  echo "hidden: $lib"
done
for dir in "$@"; do
  [[ -z $(ls -A "$dir") ]] || fail "$dir is still visible"
done

bare() { env -i PATH=/usr/bin:/bin UCX_NET_DEVICES=lo "$@"; }
libdir=$(dirname "$(dirname "$(find "$prefix" -name adjsnap.pc)")")

echo "== the installed adjsnapd, and a CPU-only solver built and run against the prefix"
sock=$work/run/adjsnap.sock
env -i PATH=/usr/bin:/bin UCX_NET_DEVICES=lo "$prefix/sbin/adjsnapd" --socket "$sock" \
  --state-dir "$work/state" --host-mem 64M --spool-dirs none > "$work/adjsnapd.log" 2>&1 &
daemon_pid=$!
bare cc -std=c11 -Wall -Wextra -Werror "$here/consumer/main.c" -I"$prefix/include" \
  -L"$libdir" -Wl,-rpath,"$libdir" -ladjsnap -o "$work/cpu_solver" ||
  fail "building a C solver against the prefix"
for _ in $(seq 100); do
  bare "$prefix/bin/adjsnap" --socket "$sock" status > "$work/status.txt" 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/adjsnapd.log" >&2; fail "adjsnapd exited"; }
  sleep 0.1
done
bare "$work/cpu_solver" "$sock" || { cat "$work/adjsnapd.log" >&2; fail "the CPU-only solver"; }

echo "== adjsnap status says why no GPU is usable"
bare "$prefix/bin/adjsnap" --socket "$sock" status > "$work/status.txt" 2>&1 ||
  { cat "$work/status.txt" "$work/adjsnapd.log" >&2; fail "adjsnap status"; }
gpu=$(grep '^gpu ' "$work/status.txt") || { cat "$work/status.txt" >&2; fail "no gpu line"; }
echo "$gpu"
[[ $gpu =~ ^gpu\ +none\ \(no\ NVIDIA\ driver\)$ ]] || fail "the gpu line: '$gpu'"
echo "a CPU-only solver runs on a node with no CUDA: OK"
