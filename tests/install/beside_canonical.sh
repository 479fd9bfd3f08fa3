#!/usr/bin/env bash
# Installs and runs adjsnap on a node that has Canonical's snapd, as a site administrator on
# Ubuntu would (issue 58), and checks that not one of that package's files changes.
#
#   beside_canonical.sh BUILD_DIR
#
# As root, in a mount namespace of its own with overlays on /etc, /usr, /var and /run (as
# tests/docs/run_shell_blocks.sh runs the docs), so this host stays as it was:
#  1. lays out the files of Canonical's snapd package (stand-ins written here, in a lower layer
#     of the overlays): both units snapd.service and snapd.socket in /lib/systemd/system (the
#     service enabled), /usr/bin/snapctl, /usr/lib/snapd/snapd, /usr/lib/tmpfiles.d/snapd.conf,
#     /var/lib/snapd with a state file, /run/snapd/ns (snap-confine's mount namespaces) and
#     /run/snapd.socket;
#  2. follows docs/operations.md ("Install") and docs/install.md ("The node service") as
#     written, line by line: cmake --install, sysusers, tmpfiles, the unit, the config, the
#     Slurm files; `systemctl enable --now UNIT` enables the unit and starts it as systemd would
#     (below), since systemd is not PID 1 here;
#  3. starts the daemon as the installed unit says: its RuntimeDirectory=, StateDirectory= and
#     ConfigurationDirectory= made and owned as systemd makes them (a state directory is chowned
#     to User= recursively), its TemporaryFileSystem= mounted where only it sees it, its
#     ExecStart= run as User= and Group= with the unit's limits and umask;
#  4. runs `systemd-analyze verify` on Canonical's two units and the installed one together;
#  5. runs the example solver (acoustic2d, forward and backward through the daemon);
#  6. stops the daemon as systemd would: SIGTERM, then the RuntimeDirectory= removed;
#  7. checks that each of Canonical's files and directories is there as it was (type, mode,
#     owner, content byte for byte, link target), /run/snapd/ns included, and that the install
#     and the run wrote nothing under those paths and no file of those names anywhere (a unit
#     in /etc/systemd/system or a command in /usr/local/bin would take the place of Canonical's).
# Not root, or no mount namespace or overlayfs here: skipped (exit 77), saying why.
set -euo pipefail

skip() {  # in the form tests/report_skips.py reads a reason from
  printf '%s:1: Skipped\n%s\n[  SKIPPED ] InstalledService\n' "$0" "$1"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

if [[ ${1:-} != --inside ]]; then
  [[ $# == 1 ]] || { echo "usage: beside_canonical.sh BUILD_DIR" >&2; exit 2; }
  [[ $(id -u) == 0 ]] || skip "needs root: a system user, a unit's directories and overlays on /usr, /etc, /var and /run"
  unshare --mount true 2>/dev/null || skip "no mount namespace here (unshare --mount failed)"
  build=$(cd "$1" && pwd)
  work=$(mktemp -d /tmp/beside-canonical.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  rc=0
  unshare --mount --propagation private bash "$0" --inside "$build" "$work" || rc=$?
  exit "$rc"
fi

# ---- inside the mount namespace
build=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
daemon_pid=""
trap '[[ -z $daemon_pid ]] || kill -KILL "$daemon_pid" 2>/dev/null || true' EXIT

# What the package ships, as paths on the node. (/lib is usr/lib on a merged-/usr system.)
canonical=(
  /lib/systemd/system/snapd.service
  /lib/systemd/system/snapd.socket
  /etc/systemd/system/multi-user.target.wants/snapd.service
  /etc/systemd/system/sockets.target.wants/snapd.socket
  /usr/bin/snapctl
  /usr/lib/snapd
  /usr/lib/snapd/snapd
  /usr/lib/tmpfiles.d/snapd.conf
  /var/lib/snapd
  /var/lib/snapd/state.json
  /run/snapd
  /run/snapd/ns
  /run/snapd/ns/lxd.mnt
  /run/snapd.socket
)
# Names that are Canonical's wherever they appear: units, drop-ins, commands, tmpfiles.
canonical_names=(snapd snapd.service snapd.service.d snapd.socket snapd.conf snapctl)

# 1. Canonical's files, in a layer under each overlay.
layer=$work/canonical
put() {  # put PATH MODE: stdin into the layer at PATH (resolved through /lib)
  local path
  path=$(realpath -m "$1")
  mkdir -p "$layer$(dirname "$path")"
  cat > "$layer$path"
  chmod "$2" "$layer$path"
}
put /lib/systemd/system/snapd.service 644 << 'EOF'
# Stand-in for the unit of Canonical's snap daemon (tests/install/beside_canonical.sh).
[Unit]
Description=Stand-in for Canonical's snap daemon
Requires=snapd.socket
After=snapd.socket

[Service]
Type=notify
ExecStart=/usr/lib/snapd/snapd
EnvironmentFile=-/etc/environment
Restart=always

[Install]
WantedBy=multi-user.target
EOF
put /lib/systemd/system/snapd.socket 644 << 'EOF'
# Stand-in for the socket unit of Canonical's snap daemon (tests/install/beside_canonical.sh).
[Unit]
Description=Stand-in for Canonical's snap daemon socket

[Socket]
ListenStream=/run/snapd.socket
SocketMode=0666

[Install]
WantedBy=sockets.target
EOF
put /usr/lib/snapd/snapd 755 <<< $'#!/bin/sh\n# Stand-in for Canonical\'s snap daemon.\nexit 0'
put /usr/bin/snapctl 755 <<< $'#!/bin/sh\n# Stand-in for Canonical\'s snapctl, which snap hooks run by name.\necho "snapctl of the snap package"'
put /usr/lib/tmpfiles.d/snapd.conf 644 <<< $'# Stand-in for Canonical\'s tmpfiles.d entry.\nd /run/snapd 0755 root root -'
put /var/lib/snapd/state.json 600 <<< '{"data":{"snaps":{"core22":{"revision":"1380"}}},"stand-in":true}'
chmod 755 "$layer/var/lib/snapd" "$layer/usr/lib/snapd"
mkdir -p "$layer/run/snapd/ns"
put /run/snapd/ns/lxd.mnt 644 < /dev/null
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$layer/run/snapd.socket"
for unit in multi-user.target.wants/snapd.service sockets.target.wants/snapd.socket; do
  mkdir -p "$layer/etc/systemd/system/$(dirname "$unit")"
  ln -s "/lib/systemd/system/$(basename "$unit")" "$layer/etc/systemd/system/$unit"
done

# The overlays: Canonical's layer over the node's own directories, changes in an upper layer.
tops=(etc usr var run)
[[ -L /lib ]] || tops+=(lib)
for top in "${tops[@]}"; do
  mkdir -p "$work/upper/$top" "$work/wd/$top" "$layer/$top"
  mount -t overlay overlay \
    -o "lowerdir=$layer/$top:/$top,upperdir=$work/upper/$top,workdir=$work/wd/$top" "/$top" ||
    skip "no overlayfs over /$top here"
done

manifest() {  # each of Canonical's paths: type, mode, owner, link target, content's hash
  local p
  for p in "${canonical[@]}"; do
    if [[ ! -e $p && ! -L $p ]]; then
      echo "$p missing"
    elif [[ -f $p && ! -L $p ]]; then
      echo "$p $(stat -c '%F %a %U:%G' "$p") $(sha256sum < "$p" | cut -d' ' -f1)"
    else
      echo "$p $(stat -c '%F %a %U:%G' "$p") $(readlink "$p" || true)"
    fi
  done
}
manifest > "$work/before"
grep -q missing "$work/before" && { cat "$work/before"; fail "laying out Canonical's files"; }
echo "== Canonical's snapd, laid out:"
sed 's/^/  /' "$work/before"

# 2. The docs' lines, as written, from a checkout whose `build` is BUILD_DIR.
checkout=$work/checkout
mkdir -p "$checkout"
for entry in "$src"/* "$src"/.[!.]*; do
  [[ -e $entry && $(basename "$entry") != build ]] && ln -s "$entry" "$checkout/"
done
ln -s "$build" "$checkout/build"

section() {  # section DOC HEADING: the lines of the sh blocks under HEADING, continuations joined
  awk -v h="$2" '
    /^```/ { fence = !fence; blk = fence && in_sec && /^```(sh|bash)$/; next }
    !fence && /^#+ / { in_sec = ($0 == h); next }
    blk {
      if (sub(/\\$/, "")) { pending = pending $0; next }
      print pending $0; pending = ""
    }' "$1"
}

unit_file() {  # where systemd finds UNIT: the first of its unit directories that holds it
  local d
  for d in /etc/systemd/system /run/systemd/system /usr/local/lib/systemd/system \
    /usr/lib/systemd/system /lib/systemd/system; do
    [[ -e $d/$1 ]] && { echo "$d/$1"; return 0; }
  done
  return 1
}
unit_get() {  # unit_get FILE KEY [DEFAULT]: the key's last value in the unit
  local v
  v=$(sed -n "s/^$2=//p" "$1" | tail -n 1)
  echo "${v:-${3:-}}"
}

# A unit's LimitX= value for prlimit, lowered to this process's hard limit where that is lower
# (a container's root may not raise it, systemd as PID 1 could).
limit() {  # limit FILE KEY RESOURCE DEFAULT
  local want hard
  want=$(unit_get "$1" "$2" "$4" | sed 's/^infinity$/unlimited/')
  hard=$(prlimit --noheadings --output HARD "--$3" | tr -d ' ')
  if [[ $hard != unlimited && ($want == unlimited || $want -gt $hard) ]]; then
    echo "   $2=$want: this machine's hard limit is $hard" >&2
    want=$hard
  fi
  echo "$want"
}

# 3. A unit started as systemd starts it.
start_unit() {
  local name=$1 file user group umask_ tmpfs d
  [[ $name == *.* ]] || name=$name.service
  file=$(unit_file "$name") || fail "systemd would find no unit $name"
  if [[ -n $daemon_pid && $file == "$daemon_unit" ]]; then
    echo "   $name is running: systemctl leaves it so"
    return 0
  fi
  echo "   starting $file as systemd would"
  user=$(unit_get "$file" User root)
  group=$(unit_get "$file" Group "$user")
  for d in $(unit_get "$file" RuntimeDirectory); do
    install -d -o "$user" -g "$group" -m "$(unit_get "$file" RuntimeDirectoryMode 0755)" "/run/$d"
  done
  for d in $(unit_get "$file" StateDirectory); do
    mkdir -p "/var/lib/$d"
    chown -R "$user:$group" "/var/lib/$d"
    chmod "$(unit_get "$file" StateDirectoryMode 0755)" "/var/lib/$d"
  done
  for d in $(unit_get "$file" ConfigurationDirectory); do
    install -d -m "$(unit_get "$file" ConfigurationDirectoryMode 0755)" "/etc/$d"
  done
  umask_=$(unit_get "$file" UMask 0022)
  tmpfs=$(unit_get "$file" TemporaryFileSystem)
  exec_start=$(unit_get "$file" ExecStart)
  exec_start=${exec_start#[-@+!]}
  # The service's own mount namespace holds its TemporaryFileSystem=; its environment is
  # systemd's (no UCX_NET_DEVICES there: loopback, as every test here runs UCX).
  # shellcheck disable=SC2016,SC2086 # $1 and $2 are the inner shell's; ExecStart= is words
  unshare --mount --propagation private sh -c '
    if [ -n "$1" ]; then
      mkdir -p "${1%%:*}" && mount -t tmpfs -o "${1#*:}" tmpfs "${1%%:*}" || exit 1
    fi
    umask "$2"; cd /
    shift 2
    exec "$@"' sh "$tmpfs" "$umask_" \
    prlimit --nofile="$(limit "$file" LimitNOFILE nofile 1024)" \
    --memlock="$(limit "$file" LimitMEMLOCK memlock 8388608)" \
    setpriv --reuid="$user" --regid="$group" --init-groups \
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin UCX_NET_DEVICES=lo \
    $exec_start > "$work/$name.log" 2>&1 &
  daemon_pid=$!
  daemon_unit=$file
  for _ in $(seq 150); do
    adjsnap status > /dev/null 2>&1 && break
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/$name.log" >&2; fail "$name exited"; }
    sleep 0.2
  done
  adjsnap status > /dev/null || { cat "$work/$name.log" >&2; fail "$name does not answer"; }
  [[ $(awk '/^Uid:/ { print $2 }' "/proc/$daemon_pid/status") == "$(id -u "$user")" ]] ||
    fail "the daemon does not run as $user"
  echo "   pid $daemon_pid, $(cat "/proc/$daemon_pid/comm"), as user $user"
}

# 6. Stopped as systemd stops it.
stop_unit() {
  local d
  kill -TERM "$daemon_pid"
  for _ in $(seq "$(($(unit_get "$daemon_unit" TimeoutStopSec 90s | tr -d s) * 5))"); do
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -0 "$daemon_pid" 2>/dev/null && fail "the daemon did not stop within TimeoutStopSec"
  wait "$daemon_pid" || fail "the daemon exited $? on SIGTERM (log: $(tail -n 5 "$work"/*.service.log))"
  daemon_pid=""
  [[ $(unit_get "$daemon_unit" RuntimeDirectoryPreserve no) == no ]] &&
    for d in $(unit_get "$daemon_unit" RuntimeDirectory); do rm -rf "/run/$d"; done
  return 0
}

run_line() {  # a doc's line, as root types it
  local line=$1 part
  case $line in
    "bash deploy/install-deps.sh"*)
      echo "   not run: the dependencies are installed"; return 0 ;;
    "cmake -S . -B build "*)
      echo "   not run: BUILD_DIR is that build"; return 0 ;;
    *systemctl\ *)
      local parts
      IFS='&' read -ra parts <<< "${line//&&/&}"
      for part in "${parts[@]}"; do
        part=$(echo "$part" | sed -e 's/^ *//' -e 's/ *$//' -e 's/^sudo //')
        case $part in
          "") ;;
          "systemctl daemon-reload") ;;
          "systemctl enable --now "*)
            systemctl enable "${part##* }" 2>&1 | sed 's/^/   /'
            start_unit "${part##* }" ;;
          "systemctl start "*) start_unit "${part##* }" ;;
          *) fail "no stand-in for '$part'" ;;
        esac
      done
      return 0 ;;
  esac
  (cd "$checkout" && bash -c "set -euo pipefail; sudo() { \"\$@\"; }; $line") ||
    fail "'$line' ($doc)"
}

for spec in "docs/operations.md|## Install" "docs/install.md|## The node service"; do
  doc=${spec%%|*}
  echo "== $doc, \"${spec#*|}\""
  lines=$(section "$src/$doc" "${spec#*|}")
  [[ -n $lines ]] || fail "$doc has no shell lines under '${spec#*|}'"
  while IFS= read -r line; do
    [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
    echo "run  $line"
    run_line "$line" < /dev/null
  done <<< "$lines"
done
[[ -n $daemon_pid ]] || fail "the docs started no daemon"

# 4. Both units together.
echo "== systemd-analyze verify, Canonical's units beside the installed one"
verify=$(systemd-analyze verify --man=no /lib/systemd/system/snapd.service \
  /lib/systemd/system/snapd.socket "$daemon_unit" 2>&1) || fail "systemd-analyze verify: $verify"
if grep -E "snapd\.(service|socket)|$(basename "$daemon_unit")" <<< "$verify"; then
  fail "systemd-analyze verify has findings about these units"
fi

# 5. The example solver, forward and backward through the installed daemon.
echo "== the example solver"
"$build/client/examples/acoustic2d" --nx 128 --ny 128 --steps 40 > "$work/solver.out" 2>&1 ||
  { cat "$work/solver.out" >&2; fail "acoustic2d"; }
sed 's/^/   /' "$work/solver.out"
grep -q "40/40 checksums match" "$work/solver.out" || fail "acoustic2d's steps did not come back exact"

echo "== stop"
stop_unit

# 7. Canonical's files, as they were.
echo "== Canonical's files"
manifest > "$work/after"
diff "$work/before" "$work/after" || fail "Canonical's files changed (above: before, after)"
[[ -d /run/snapd/ns ]] || fail "/run/snapd/ns did not survive the stop"
for top in "${tops[@]}"; do
  (cd "$work/upper" && find "$top" -mindepth 1) | sed 's|^|/|'
done > "$work/written"
while IFS= read -r w; do
  for p in "${canonical[@]}"; do
    p=$(realpath -m "$p")
    [[ $w == "$p" || $w == "$p"/* ]] && fail "the install or the run wrote $w"
  done
  for n in "${canonical_names[@]}"; do
    [[ $(basename "$w") == "$n" ]] && fail "the install or the run wrote $w, which has a name of Canonical's"
  done
done < "$work/written"
echo "   unchanged; the install and the run wrote $(wc -l < "$work/written") paths, none of them Canonical's"
echo "adjsnap installed, ran and stopped beside Canonical's snapd, which kept every file"
