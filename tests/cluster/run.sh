#!/usr/bin/env bash
# A real Slurm cluster of three nodes on this one machine, with an MPI job that has ranks on
# every node and deploy/slurm's prolog, task prolog and epilog on each:
#   - each node is a network namespace with a UTS namespace of its own (hostname adjsnap-n1 ...)
#     and an address on a bridge in a fourth (adjsnap-ctl), where slurmctld and munged live.
#     Nothing of the cluster is in the root namespace: nothing listens outside these
#     namespaces, no traffic leaves them, and the host's firewall does not see the bridge.
#   - each node runs Debian's slurmd; no adjsnapd runs anywhere until the job's prolog starts the
#     node's own (ADJSNAP_START in the one adjsnap-slurm.conf, whose paths depend on the node's
#     hostname).
#   - the job, submitted as an unprivileged user, runs mpi_ranks with `srun --mpi=pmix`: every
#     rank pushes its subdomain's steps to its node's adjsnapd, reads them back in reverse and
#     compares every byte; then one task per node lists the job's runs on that node.
#   - after the job, every node's adjsnapd must have purged the job's runs (the epilog), and
#     logged it.
#   bash tests/cluster/run.sh BUILD_DIR     (as root; CI runs it from tests/run.sh)
# ADJSNAPD_BIN, ADJSNAP_BIN and MPI_RANKS_BIN override the binaries taken from BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath -m "${1:-build-tests}")
repo=$PWD
adjsnapd_bin=$(realpath -m "${ADJSNAPD_BIN:-$build/daemon/adjsnapd}")
adjsnap_bin=$(realpath -m "${ADJSNAP_BIN:-$build/client/tools/adjsnap}")
ranks_bin=$(realpath -m "${MPI_RANKS_BIN:-$build/tests/cluster/mpi_ranks}")
say() { echo "cluster: $*"; }
[[ $(id -u) -eq 0 ]] || { say "needs root (network namespaces, munged, slurmd)"; exit 1; }
for f in "$adjsnapd_bin" "$adjsnap_bin"; do
  [[ -x $f ]] || { say "$f is missing (build it first)"; exit 1; }
done
[[ -x $ranks_bin ]] ||
  { say "$ranks_bin is missing (CMake builds it where it finds MPI: libopenmpi-dev)"; exit 1; }
for c in ip nsenter unshare setsid flock runuser munged slurmctld slurmd sbatch srun; do
  command -v "$c" > /dev/null || [[ -x /usr/sbin/$c ]] || { say "needs $c"; exit 1; }
done

user=adjsnap-tenant-a
id "$user" > /dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
uid=$(id -u "$user")

# The names are fixed, so that a run killed half-way is cleaned up by the next one.
nodes=(adjsnap-n1 adjsnap-n2 adjsnap-n3)
ranks_per_node=2
steps=24
ctl=adjsnap-ctl
bridge=adjsnap-br0
net=10.231.7  # a /24 that exists only inside the namespaces, so it cannot clash with the host's
declare -A addr=([adjsnap-ctl]=$net.10 [adjsnap-n1]=$net.11 [adjsnap-n2]=$net.12 [adjsnap-n3]=$net.13)

# Ends every process in our namespaces (daemonized slurmd, slurmctld, munged, the adjsnapds the
# prologs started, any job step left), TERM first, then waits; then removes the namespaces,
# and with them the bridge and the veths.
remove_cluster() {
  local ns pids p
  for ns in "$ctl" "${nodes[@]}"; do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -TERM 2> /dev/null || true
  done
  for _ in $(seq 150); do
    pids=""
    for ns in "$ctl" "${nodes[@]}"; do pids+=$(ip netns pids "$ns" 2> /dev/null || true); done
    [[ -z $pids ]] && break
    sleep 0.1
  done
  for ns in "$ctl" "${nodes[@]}"; do
    for p in $(ip netns pids "$ns" 2> /dev/null || true); do
      say "pid $p ($(cat "/proc/$p/comm" 2> /dev/null)) in $ns did not stop in 15 s: KILL"
      kill -KILL "$p" 2> /dev/null || true
    done
    ip netns del "$ns" 2> /dev/null || true
  done
}

# A run killed before its clean-up left these behind.
if ip netns list | grep -qE "^($ctl|adjsnap-n[0-9]+)( |$)"; then
  say "removing what an earlier run left (its namespaces and their processes)"
  remove_cluster
fi
rm -rf /tmp/adjsnap-cluster.*

root=$(mktemp -d /tmp/adjsnap-cluster.XXXXXX)
chmod 755 "$root"
t0=$SECONDS
cleanup() {
  remove_cluster
  rm -rf "$root" 2> /dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  say "FAIL: $*"
  local f
  for f in "$root"/munge/munged.log "$root"/slurmctld.log "$root"/adjsnap-n*/slurmd.log \
    "$root"/adjsnap-n*/adjsnapd.log "$root"/job.out; do
    [[ -f $f ]] && { echo "--- $f"; tail -n 40 "$f"; }
  done
  exit 1
}

# Runs a command on node $1: in its network namespace, under its hostname (a UTS namespace of
# its own), and with its own /etc/hosts (a mount namespace of its own, as `ip netns exec` would
# give it, but without remounting /sys, whose cgroup file system slurmd needs). Slurm looks
# up some peers by name (slurmctld answers srun at its hostname).
in_node() {
  local ns=$1
  shift
  nsenter --net="/run/netns/$ns" unshare --uts --mount sh -c \
    'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"' "$ns" "$root/hosts" "$@"
}

# The network: a bridge in adjsnap-ctl, which is also the controller's interface; each node's
# eth0 is a veth whose other end is on the bridge.
ip netns add "$ctl"
ip -n "$ctl" link set lo up
ip -n "$ctl" link add "$bridge" type bridge
ip -n "$ctl" addr add "${addr[$ctl]}/24" dev "$bridge"
ip -n "$ctl" link set "$bridge" up
for ns in "${nodes[@]}"; do
  ip netns add "$ns"
  ip -n "$ctl" link add "v-$ns" type veth peer name eth0 netns "$ns"
  ip -n "$ctl" link set "v-$ns" master "$bridge" up
  ip -n "$ns" addr add "${addr[$ns]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

{
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n'
  for ns in "$ctl" "${nodes[@]}"; do echo "${addr[$ns]} $ns"; done
} > "$root/hosts"

# munge: the key the Debian package made; our own daemon and socket (a path: every namespace
# reaches it).
mkdir -p "$root/munge"
chown munge:munge "$root/munge"
in_node "$ctl" runuser -u munge -- /usr/sbin/munged --socket="$root/munge/munge.socket" \
  --pid-file="$root/munge/munged.pid" --log-file="$root/munge/munged.log" \
  --seed-file="$root/munge/seed" || fail "munged did not start"

# deploy/slurm as a site installs it: one config for every node. Its paths depend on the
# node's hostname (each node's socket, state and log), and ADJSNAP_START starts the node's adjsnapd
# when none answers. UCX_NET_DEVICES=lo: adjsnapd's clients are all on its node, and adjsnapd's
# default transports leave UCX's tcp out; should a UCX_TLS bring it back, it stays on loopback.
for n in "${nodes[@]}"; do
  mkdir -p "$root/$n/spool" "$root/$n/tmp"
  chmod 1777 "$root/$n/tmp"
done
cat > "$root/adjsnap-slurm.conf" << CONF
node=\$(hostname -s)
ADJSNAP_SOCKET=$root/\$node/adjsnap.sock
ADJSNAP=$adjsnap_bin
ADJSNAP_JOB_QUOTA=64M
ADJSNAP_START="env UCX_NET_DEVICES=lo $adjsnapd_bin --socket $root/\$node/adjsnap.sock \\
  --state-dir $root/\$node/state --host-mem 256M"
ADJSNAP_START_LOG=$root/\$node/adjsnapd.log
ADJSNAP_START_WAIT=10
CONF
for s in prolog epilog task_prolog; do
  printf '#!/bin/sh\nADJSNAP_SLURM_CONF=%s exec %s "$@"\n' "$root/adjsnap-slurm.conf" \
    "$repo/deploy/slurm/$s.sh" > "$root/$s"
  chmod 755 "$root/$s"
done

# Slurm: the controller in adjsnap-ctl, a slurmd per node; each in its own namespace, so the
# default ports do not clash. %n: each slurmd's own spool, pid file and log.
mkdir -p "$root/ctld"
cat > "$root/slurm.conf" << CONF
ClusterName=adjsnapdcluster
MailProg=/bin/true
SlurmctldHost=$ctl(${addr[$ctl]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$root/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$root/ctld
SlurmdSpoolDir=$root/%n/spool
SlurmctldPidFile=$root/ctld/slurmctld.pid
SlurmdPidFile=$root/%n/slurmd.pid
SlurmctldLogFile=$root/slurmctld.log
SlurmdLogFile=$root/%n/slurmd.log
TmpFS=$root/%n/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
PrologFlags=Alloc
Prolog=$root/prolog
Epilog=$root/epilog
TaskProlog=$root/task_prolog
NodeName=adjsnap-n[1-${#nodes[@]}] NodeAddr=$net.[11-$((10 + ${#nodes[@]}))] \
  CPUs=$ranks_per_node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=5 State=UP
CONF
export SLURM_CONF=$root/slurm.conf
in_node "$ctl" /usr/sbin/slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
for n in "${nodes[@]}"; do
  in_node "$n" /usr/sbin/slurmd -f "$SLURM_CONF" -N "$n" || fail "slurmd on $n did not start"
done
for f in ctld/slurmctld.pid "${nodes[@]/%//slurmd.pid}"; do
  for _ in $(seq 100); do [[ -s $root/$f ]] && break; sleep 0.1; done
  [[ -s $root/$f ]] || fail "no $root/$f 10 s after starting Slurm"
done
# Slurm's commands run next to the controller, in its namespaces.
ctl_run() { nsenter -t "$(cat "$root/ctld/slurmctld.pid")" --net --uts --mount "$@"; }
idle=0
for _ in $(seq 120); do
  idle=$(ctl_run sinfo -h -N -o "%N %t" 2> /dev/null | grep -c " idle$" || true)
  ((idle == ${#nodes[@]})) && break
  sleep 0.25
done
((idle == ${#nodes[@]})) || fail "after 30 s, $idle of ${#nodes[@]} nodes are idle" \
  "(does the bridge pass traffic?): $(ctl_run sinfo -N 2>&1)"
say "${#nodes[@]} nodes idle after $((SECONDS - t0)) s:" \
  "$(ctl_run sinfo -h -N -o '%N(%o)' | tr '\n' ' ')"
for n in "${nodes[@]}"; do
  "$adjsnap_bin" --socket "$root/$n/adjsnap.sock" status > /dev/null 2>&1 &&
    fail "an adjsnapd answers on $n before any job"
done

# The job. OpenMPI: ob1 over TCP on the bridge only (its UCX and verbs components would probe
# every interface); ranks on one node talk through shared memory. `srun --mpi=pmix` launches
# the ranks directly: Slurm's PMIx plugin wires them up, no mpirun, no ssh between nodes.
cat > "$root/job.sh" << JOB
#!/bin/sh
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_osc=^ucx
export OMPI_MCA_btl_tcp_if_include=$net.0/24 OMPI_MCA_oob_tcp_if_include=$net.0/24
export UCX_NET_DEVICES=lo  # libadjsnap's UCX, as adjsnapd's
srun --mpi=pmix $ranks_bin --steps $steps || exit 1
# Each node's runs of this job, before the epilog removes them.
srun --ntasks=${#nodes[@]} --ntasks-per-node=1 sh -c \
  'echo "node \$(hostname -s): \$($adjsnap_bin runs | grep -c "^cluster-\$SLURM_JOB_ID-") runs"'
JOB
chmod 755 "$root/job.sh"
touch "$root/job.out"
chown "$user" "$root/job.out"
nranks=$((${#nodes[@]} * ranks_per_node))
t_job=$SECONDS
job=$(ctl_run runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" timeout 120 \
  sbatch --wait --parsable --time=2 -N "${#nodes[@]}" --ntasks-per-node="$ranks_per_node" \
  --output="$root/job.out" "$root/job.sh") || fail "the job failed or timed out (120 s)"
say "job $job ran in $((SECONDS - t_job)) s"
cat "$root/job.out"

# Ranks on every node, each on its own node's adjsnapd, every step byte-exact.
hosts=$(IFS=,; echo "${nodes[*]}")
summary="cluster: $nranks ranks on ${#nodes[@]} nodes ($hosts),"
summary+=" $((nranks * steps)) snapshots byte-exact"
grep -qxF "$summary" "$root/job.out" || fail "no line '$summary' in the job's output"
for n in "${nodes[@]}"; do
  c=$(grep -c "^rank [0-9]* on $n: .* $steps/$steps steps byte-exact (.*, $root/$n/adjsnap.sock)$" \
    "$root/job.out" || true)
  ((c == ranks_per_node)) || fail "$c ranks (not $ranks_per_node) used $n's own adjsnapd"
  grep -qx "node $n: $ranks_per_node runs" "$root/job.out" ||
    fail "$n did not hold the job's $ranks_per_node runs during the job"
  # ADJSNAP_START_LOG holds what the prolog started, and nothing answered there before the job.
  grep -q "adjsnapd info: adjsnapd .* serving on unix:$root/$n/adjsnap.sock" "$root/$n/adjsnapd.log" ||
    fail "the prolog did not start $n's adjsnapd"
  grep -q "set the quota of uid $uid to 67108864 bytes" "$root/$n/adjsnapd.log" ||
    fail "the prolog did not set the job's quota on $n"
done

# After the job: every node's epilog purged the job's runs, and its adjsnapd logged it.
for n in "${nodes[@]}"; do
  left=""
  for _ in $(seq 60); do
    runs=$("$adjsnap_bin" --socket "$root/$n/adjsnap.sock" runs 2>&1) ||
      fail "$n's adjsnapd does not answer after the job: $runs"
    left=$(grep "^cluster-$job-" <<< "$runs" || true)
    [[ -z $left ]] && break
    sleep 0.25
  done
  [[ -z $left ]] || fail "15 s after the job, $n's adjsnapd still holds: $left"
  grep -q "purged $ranks_per_node runs of uid $uid, job $job$" "$root/$n/adjsnapd.log" ||
    fail "$n's adjsnapd did not log the epilog's purge of job $job"
done
say "OK: job $job, $nranks ranks on ${#nodes[@]} nodes, every snapshot byte-exact," \
  "every node's runs purged by its epilog ($((SECONDS - t0)) s)"
