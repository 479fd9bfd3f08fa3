# shellcheck shell=bash
# GlusterFS on this one machine, for tests: glusterd, the brick processes and the FUSE client
# in a network namespace of their own (adjsnap-gl) and a mount namespace of their own, so that
#   - nothing listens on the machine's interfaces and no traffic leaves it: Gluster refuses
#     127.0.0.1 and localhost as a brick's host ("Please provide a valid hostname/ip other than
#     localhost"), so the namespace has a veth pair whose one end holds a private address
#     (10.231.8.1, a /24 that exists only in the namespace); no bridge, no peer outside;
#   - glusterd's state (/var/lib/glusterd), its logs (/var/log/glusterfs) and its sockets and
#     pid files (/run/gluster) are directories of the test's own, bind-mounted or a tmpfs in
#     that mount namespace: the machine's own stay as the package left them, and a second run
#     finds nothing of the first;
#   - the FUSE mount exists in that mount namespace only: whatever uses it (adjsnapd and its
#     clients) runs there, through gl_run.
# The mount namespace lives as long as one process holds it: a `sleep` started by gl_start,
# in the network namespace too, so that `ip netns pids` finds it with everything else.
#
# Sourced by tests/cluster/shared_tier.sh. Needs Debian's glusterfs-server and
# glusterfs-client (glusterd, gluster, glusterfsd, glusterfs, mount.glusterfs), /dev/fuse,
# iproute2 and util-linux (nsenter, unshare), and root. Uses say and fail from the caller,
# and gl_root, the caller's fresh temp dir under $gl_tmp_prefix.

# Fixed names, so that what a run killed half-way left behind is found by the next.
# shellcheck disable=SC2034  # the caller's too
gl_ns=adjsnap-gl
gl_addr=10.231.8.1
gl_vol=adjsnap-shared
gl_tmp_prefix=/tmp/adjsnap-gluster.  # + a mktemp suffix

# What is missing to run Gluster here, one word each; nothing when all is there.
gl_missing() {
  local c
  for c in glusterd gluster glusterfsd glusterfs mount.glusterfs; do
    command -v "$c" > /dev/null || [[ -x /usr/sbin/$c || -x /sbin/$c ]] || echo "$c"
  done
  [[ -c /dev/fuse ]] || echo /dev/fuse
  for c in ip ss nsenter unshare setsid dd python3; do command -v "$c" > /dev/null || echo "$c"; done
}

# The pid of the process that holds the mount namespace, or nothing.
# shellcheck disable=SC2154  # gl_root: the caller's
gl_holder() { cat "$gl_root/holder.pid" 2> /dev/null || true; }

# Runs a command where Gluster's mount is: in adjsnap-gl's network and mount namespaces.
gl_run() { nsenter -t "$(gl_holder)" --net --mount "$@"; }

gl_cli() { gl_run gluster --mode=script "$@"; }

# Takes Gluster down by its fixed names, whatever state a run left it in: unmounts, stops the
# volume (bricks first, cleanly), then ends every process left in the namespace (the FUSE
# client, glusterd, adjsnapd, the holder), TERM first, bounded, then KILL; deletes the namespace
# and with it the veth pair; the mount namespace goes with its last process. $1: the temp dir
# of the run being torn down (empty: none known, e.g. at start).
gl_remove() {
  local root=${1:-} holder pids p
  ip netns list | grep -qE "^$gl_ns( |$)" || return 0
  holder=$(for p in $(ip netns pids "$gl_ns" 2> /dev/null); do
    if [[ $(cat "/proc/$p/comm" 2> /dev/null) == sleep ]]; then echo "$p"; fi
  done | head -n1)
  if [[ -n $holder ]]; then
    # Every FUSE mount of the holder's namespace: lazily, as the FUSE client may already be gone.
    awk '$3 == "fuse.glusterfs" { print $2 }' "/proc/$holder/mounts" 2> /dev/null |
      while read -r m; do
        timeout 10 nsenter -t "$holder" --mount umount "$m" 2> /dev/null ||
          nsenter -t "$holder" --mount umount -l "$m" 2> /dev/null || true
      done
    if [[ -n $(pgrep -x glusterd --ns "$holder" --nslist net 2> /dev/null) ]]; then
      timeout 20 nsenter -t "$holder" --net --mount gluster --mode=script \
        volume stop "$gl_vol" force > /dev/null 2>&1 || true
    fi
  fi
  ip netns pids "$gl_ns" 2> /dev/null | xargs -r kill -TERM 2> /dev/null || true
  for _ in $(seq 100); do
    pids=$(ip netns pids "$gl_ns" 2> /dev/null || true)
    [[ -z $pids ]] && break
    sleep 0.1
  done
  for p in $(ip netns pids "$gl_ns" 2> /dev/null || true); do
    say "pid $p ($(cat "/proc/$p/comm" 2> /dev/null)) in $gl_ns did not stop in 10 s: KILL"
    kill -KILL "$p" 2> /dev/null || true
  done
  for _ in $(seq 50); do
    [[ -z $(ip netns pids "$gl_ns" 2> /dev/null || true) ]] && break
    sleep 0.1
  done
  ip netns del "$gl_ns" 2> /dev/null || true
  [[ -z $root ]] || rm -rf "$root"
}

# Starts Gluster under $gl_root (a fresh temp dir): the namespaces, glusterd, a volume of
# two bricks (plain distribute) in $gl_root/brick1 and brick2, started and FUSE-mounted on
# $gl_root/mnt. Every wait is bounded and names what it waited for.
gl_start() {
  mkdir -p "$gl_root"/{lib,log,mnt,brick1,brick2}
  # glusterd's option groups (`volume set VOL group ...`); its hook scripts are left out on
  # purpose: they start Samba and CTDB shares on the machine.
  cp -a /var/lib/glusterd/groups "$gl_root/lib/" 2> /dev/null || true

  ip netns add "$gl_ns"
  ip -n "$gl_ns" link set lo up
  ip -n "$gl_ns" link add gl0 type veth peer name gl1
  ip -n "$gl_ns" addr add "$gl_addr/24" dev gl0
  ip -n "$gl_ns" link set gl0 up
  ip -n "$gl_ns" link set gl1 up

  # The holder: enters the network namespace, makes a mount namespace (private: nothing
  # mounted there propagates back), mounts the private state, log and run directories, and
  # sleeps. setsid: the test's Ctrl-C does not reach it; gl_remove ends it.
  setsid nsenter --net="/run/netns/$gl_ns" unshare --mount --propagation private sh -c '
    mount --bind "$1/lib" /var/lib/glusterd &&
    mount --bind "$1/log" /var/log/glusterfs &&
    mount -t tmpfs -o mode=755,size=64m adjsnap-gl-run /run &&
    echo $$ > "$1/holder.pid.tmp" && mv "$1/holder.pid.tmp" "$1/holder.pid" &&
    exec sleep infinity' sh "$gl_root" < /dev/null > "$gl_root/holder.log" 2>&1 &
  for _ in $(seq 50); do [[ -s $gl_root/holder.pid ]] && break; sleep 0.1; done
  [[ -s $gl_root/holder.pid ]] ||
    fail "the namespace holder did not start in 5 s: $(cat "$gl_root/holder.log")"

  gl_run glusterd -p /run/glusterd.pid || fail "glusterd did not start"
  local up=""
  for _ in $(seq 100); do
    gl_cli volume list > /dev/null 2>&1 && { up=1; break; }
    sleep 0.1
  done
  [[ -n $up ]] || fail "glusterd did not answer \`gluster volume list\` in 10 s"
  # force: the bricks are directories on the root filesystem, which Gluster refuses otherwise.
  gl_cli volume create "$gl_vol" "$gl_addr:$gl_root/brick1" "$gl_addr:$gl_root/brick2" force \
    > /dev/null || fail "gluster volume create failed"
  gl_cli volume start "$gl_vol" > /dev/null || fail "gluster volume start failed"
  local online=0
  for _ in $(seq 100); do
    online=$(gl_brick_pids | wc -l)
    ((online == 2)) && break
    sleep 0.1
  done
  ((online == 2)) || fail "$online of 2 bricks online 10 s after volume start:" \
    "$(gl_cli volume status "$gl_vol" 2>&1)"
  gl_mount
}

# FUSE-mounts the volume on $gl_root/mnt (in the namespaces) and waits until it works.
gl_mount() {
  gl_run timeout 30 mount -t glusterfs "$gl_addr:/$gl_vol" "$gl_root/mnt" ||
    fail "the FUSE mount of $gl_vol failed (or took over 30 s)"
  local mounted=""
  for _ in $(seq 100); do
    gl_run awk -v m="$gl_root/mnt" '$2 == m && $3 == "fuse.glusterfs" { f = 1 } END { exit !f }' \
      /proc/self/mounts && gl_run stat -f "$gl_root/mnt" > /dev/null 2>&1 && { mounted=1; break; }
    sleep 0.1
  done
  [[ -n $mounted ]] || fail "$gl_root/mnt is not a working fuse.glusterfs mount 10 s after mount"
}

# One line per online brick: "PID PATH", from `gluster volume status --xml`.
gl_brick_pids() {
  gl_cli volume status "$gl_vol" --xml 2> /dev/null | python3 -c '
import sys, xml.etree.ElementTree as ET
try:
    root = ET.fromstring(sys.stdin.read())
except ET.ParseError:
    sys.exit(0)
for n in root.iter("node"):
    path, pid, status = n.findtext("path"), n.findtext("pid"), n.findtext("status")
    if path and path.startswith("/") and status == "1" and pid and int(pid) > 0:
        print(pid, path)
'
}

# Restarts the bricks that are down (`volume start force`) and waits until both are online.
# A killed brick's pid file stays, and glusterd takes a brick whose pid still exists as
# running ("discovered already-running brick"): a killed process lingers as a zombie until
# whoever reaps orphans here gets to it, so pid files of dead or zombie pids go first.
gl_restart_bricks() {
  gl_run sh -c 'for f in /run/gluster/vols/*/*.pid; do
    [ -f "$f" ] || continue
    s=$(cut -d" " -f3 "/proc/$(cat "$f")/stat" 2> /dev/null)
    [ -n "$s" ] && [ "$s" != Z ] || rm -f "$f"
  done'
  gl_cli volume start "$gl_vol" force > /dev/null || fail "gluster volume start force failed"
  local online=0
  for _ in $(seq 100); do
    online=$(gl_brick_pids | wc -l)
    ((online == 2)) && return 0
    sleep 0.1
  done
  fail "$online of 2 bricks online 10 s after volume start force:" \
    "$(gl_cli volume status "$gl_vol" 2>&1)"
}
