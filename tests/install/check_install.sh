#!/usr/bin/env bash
# Installs the build into a scratch prefix, checks that it installs one shared library whose
# dependents find it by RUNPATH, starts the installed adjsnapd, and builds and runs solver
# projects against the prefix, each with g++/gcc and with clang++/clang: CMake (find_package,
# C++ and C), pkg-config (C++), README's by-hand `c++ -std=c++20 ... -ladjsnap`, a plain
# `cc ... -ladjsnap` (C); and, when the build has the Fortran module, gfortran. Every installed
# program runs with an empty environment but for UCX_NET_DEVICES=lo: no LD_LIBRARY_PATH, no
# ldconfig.
#
#   check_install.sh BUILD_DIR
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
# An installed program as a site runs it: nothing in the environment says where libraries are.
bare() { env -i PATH=/usr/bin:/bin UCX_NET_DEVICES=lo "$@"; }

prefix=$work/prefix
cmake --install "$build_dir" --prefix "$prefix" > "$work/install.log"
pc_file=$(find "$prefix" -name adjsnap.pc)
[[ -n $pc_file ]] || fail "no adjsnap.pc installed"
libdir=$(dirname "$(dirname "$pc_file")")

echo "== one shared library, found by RUNPATH"
libs=$(cd "$libdir" && ls libadjsnap*.so*)
echo "$libs"
[[ $(echo "$libs" | grep -c '^libadjsnap\.so\.[0-9]*$') == 1 ]] || fail "no libadjsnap.so.N"
[[ -z $(echo "$libs" | grep -v '^libadjsnap\.so') ]] || fail "more libraries than libadjsnap"
soname=$(readelf -d "$libdir/libadjsnap.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "SONAME $soname"
[[ $soname =~ ^libadjsnap\.so\.[0-9]+$ ]] || fail "SONAME '$soname'"
for exe in "$prefix"/sbin/adjsnapd "$prefix"/bin/adjsnap "$prefix"/bin/adjsnap-bench; do
  runpath=$(readelf -d "$exe" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  echo "$(basename "$exe"): RUNPATH $runpath"
  [[ $runpath == *'$ORIGIN/'* ]] || fail "$exe has no \$ORIGIN-relative RUNPATH"
  bare "$exe" --version || fail "$exe --version"
done

echo "== an install to /usr: Debian's multiarch library directory, or a refusal saying how"
multiarch=$(cc -print-multiarch 2>/dev/null || true)
if [[ -n $multiarch && -e /etc/debian_version ]]; then
  destdir=$work/destdir
  if DESTDIR=$destdir cmake --install "$build_dir" --prefix /usr > "$work/usr-install.log" 2>&1; then
    [[ -e $destdir/usr/lib/$multiarch/libadjsnap.so ]] || fail "an install to /usr put libadjsnap elsewhere"
    echo "installed into /usr/lib/$multiarch (the build is configured for /usr)"
  else
    grep -q -- '-DCMAKE_INSTALL_PREFIX=/usr' "$work/usr-install.log" ||
      { cat "$work/usr-install.log" >&2; fail "an install to /usr failed without saying how"; }
    [[ -z $(find "$destdir" -type f 2>/dev/null) ]] || fail "a refused install to /usr wrote files"
    grep -o 'adjsnap: this build was configured for the prefix [^,]*' "$work/usr-install.log"
  fi
fi

echo "== the systemd unit: the config file decides"
unit=$here/../../deploy/systemd/adjsnap.service
grep -q '^ExecStart=.* --config /etc/adjsnap/adjsnap.toml$' "$unit" || fail "the unit reads no config file"
if grep -q '^Environment=.*ADJSNAP_' "$unit"; then fail "the unit's Environment= overrides the file"; fi
# A file's socket and state_dir are what adjsnapd uses, as the unit starts it (no ADJSNAP_*).
sed -e 's|^socket = .*|socket = "/run/adjsnap-site/adjsnap.sock"|' \
  -e 's|^state_dir = .*|state_dir = "/srv/adjsnap"|' "$here/../../deploy/adjsnap.toml" > "$work/adjsnap.toml"
bare "$prefix/sbin/adjsnapd" --config "$work/adjsnap.toml" --print-config > "$work/effective.toml"
grep -qx 'socket = "/run/adjsnap-site/adjsnap.sock"' "$work/effective.toml" || fail "socket"
grep -qx 'state_dir = "/srv/adjsnap"' "$work/effective.toml" || fail "state_dir"

echo "== the installed adjsnapd"
sock=$work/run/adjsnap.sock
# env execs adjsnapd: $! is adjsnapd itself, which the cleanup stops (not a subshell around it).
env -i PATH=/usr/bin:/bin UCX_NET_DEVICES=lo "$prefix/sbin/adjsnapd" --socket "$sock" \
  --state-dir "$work/state" --host-mem 64M --spool-dirs none > "$work/adjsnapd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  bare "$prefix/bin/adjsnap" --socket "$sock" status > "$work/status.txt" 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/adjsnapd.log" >&2; fail "adjsnapd exited"; }
  sleep 0.2
done
bare "$prefix/bin/adjsnap" --socket "$sock" status || { cat "$work/adjsnapd.log" >&2; fail "status"; }

# Each consumer is built by g++ and by clang++ (gcc and clang for C), from an empty environment
# as a newcomer's shell would be, and runs from one.
compilers=("gcc g++")
command -v clang++ > /dev/null && compilers+=("clang clang++")
for pair in "${compilers[@]}"; do
  read -r c_compiler cxx_compiler <<< "$pair"
  echo "== CMake with $cxx_compiler: find_package(adjsnap), adjsnap::client and adjsnap::c"
  out=$work/cmake-$cxx_compiler
  bare CC="$c_compiler" CXX="$cxx_compiler" cmake -S "$here/consumer" -B "$out" \
    -DCMAKE_PREFIX_PATH="$prefix" > "$out.log" ||
    { cat "$out.log" >&2; fail "configuring the CMake consumer with $cxx_compiler"; }
  bare cmake --build "$out" > "$out-build.log" ||
    { cat "$out-build.log" >&2; fail "building the CMake consumer with $cxx_compiler"; }
  bare "$out/consumer" "$sock"
  bare "$out/consumer_c" "$sock"

  echo "== pkg-config with $cxx_compiler: main.cc \$(pkg-config --cflags --libs adjsnap)"
  pc_flags=$(bare PKG_CONFIG_PATH="$(dirname "$pc_file")" pkg-config --cflags --libs adjsnap)
  echo "pkg-config: $pc_flags"
  # shellcheck disable=SC2086 # the flags are words
  bare "$cxx_compiler" -std=c++20 -Wall -Wextra -Werror "$here/consumer/main.cc" $pc_flags \
    -o "$work/pc_consumer"
  bare "$work/pc_consumer" "$sock"

  echo "== by hand with $cxx_compiler, as README.md says: -std=c++20 -I... -L... -ladjsnap"
  bare "$cxx_compiler" -std=c++20 -Wall -Wextra -Werror "$here/consumer/main.cc" \
    -I"$prefix/include" -L"$libdir" -Wl,-rpath,"$libdir" -ladjsnap -o "$work/hand_consumer"
  bare "$work/hand_consumer" "$sock"

  echo "== plain C with $c_compiler: main.c -I... -L... -Wl,-rpath,... -ladjsnap"
  bare "$c_compiler" -std=c11 -Wall -Wextra -Werror "$here/consumer/main.c" -I"$prefix/include" \
    -L"$libdir" -Wl,-rpath,"$libdir" -ladjsnap -o "$work/cc_consumer"
  bare "$work/cc_consumer" "$sock"
done

if [[ -e $prefix/include/adjsnap/fortran/adjsnap.mod ]]; then
  echo "== Fortran: gfortran ... -ladjsnap_fortran -ladjsnap"
  gfortran -Wall -Werror "$here/../fortran/acoustic_test.f90" -I"$prefix/include/adjsnap/fortran" \
    -L"$libdir" -Wl,-rpath,"$libdir" -ladjsnap_fortran -ladjsnap -o "$work/fortran_consumer"
  bare "$work/fortran_consumer" "$sock"
fi

echo "== no adjsnapd: the error says why"
bare "$work/cmake-g++/consumer" "$work/absent.sock" absent
bare "$work/cc_consumer" "$work/absent.sock" absent
echo "installed package OK"
