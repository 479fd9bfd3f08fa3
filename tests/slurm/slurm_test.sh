#!/usr/bin/env bash
# A real single-node Slurm (munge, slurmctld, slurmd from Debian) with adjsnapd's prolog, epilog
# and task prolog: a job submitted as an unprivileged user runs the example solver against a
# node adjsnapd, then its runs must be gone once the epilog ran.
#   bash tests/slurm/slurm_test.sh BUILD_DIR     (as root; CI runs it from tests/run.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build-tests}")
repo=$PWD
[[ $(id -u) -eq 0 ]] || { echo "slurm_test: needs root (starts munged, slurmd)"; exit 1; }
user=adjsnap-tenant-a
id "$user" > /dev/null 2>&1 ||
  useradd --system --no-create-home --shell /usr/sbin/nologin "$user"

root=$(mktemp -d /tmp/adjsnap-slurm.XXXXXX)
chmod 755 "$root"
pids=()
cleanup() {
  # slurmctld, slurmd and munged daemonize: wait for each to exit before removing their files.
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
  done
  wait 2> /dev/null || true
  rm -rf "$root" 2> /dev/null || true
}
trap cleanup EXIT
fail() {
  echo "slurm_test: FAIL: $*"
  for f in "$root"/*.log "$root"/munge/*.log "$root"/job.out; do [[ -f $f ]] && { echo "--- $f"; tail -n 30 "$f"; }; done
  exit 1
}

# munge: the key the Debian package made; our own daemon and socket.
mkdir -p "$root/munge"
chown munge:munge "$root/munge"
runuser -u munge -- /usr/sbin/munged --socket="$root/munge/munge.socket" \
  --pid-file="$root/munge/munged.pid" --log-file="$root/munge/munged.log" \
  --seed-file="$root/munge/seed"
pids+=("$(cat "$root/munge/munged.pid")")

# adjsnapd, as a node service would run it.
"$build/daemon/adjsnapd" --socket "$root/adjsnap.sock" --state-dir "$root/state" --host-mem 256M \
  2> "$root/adjsnapd.log" &
pids+=($!)
adjsnap() { "$build/client/tools/adjsnap" --socket "$root/adjsnap.sock" "$@"; }
for _ in $(seq 100); do adjsnap status > /dev/null 2>&1 && break; sleep 0.1; done
adjsnap status > /dev/null || fail "adjsnapd did not start"

# The deploy/slurm scripts, pointed at this adjsnapd through their config file.
cat > "$root/adjsnap-slurm.conf" << CONF
ADJSNAP_SOCKET=$root/adjsnap.sock
ADJSNAP=$build/client/tools/adjsnap
ADJSNAP_JOB_QUOTA=64M
CONF
for s in prolog epilog task_prolog; do
  printf '#!/bin/sh\nADJSNAP_SLURM_CONF=%s exec %s "$@"\n' "$root/adjsnap-slurm.conf" \
    "$repo/deploy/slurm/$s.sh" > "$root/$s"
  chmod 755 "$root/$s"
done

host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$root/state-ctld" "$root/spool-d"
cat > "$root/slurm.conf" << CONF
ClusterName=adjsnapdtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$root/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$root/state-ctld
SlurmdSpoolDir=$root/spool-d
SlurmctldPidFile=$root/slurmctld.pid
SlurmdPidFile=$root/slurmd.pid
SlurmctldLogFile=$root/slurmctld.log
SlurmdLogFile=$root/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
Prolog=$root/prolog
Epilog=$root/epilog
TaskProlog=$root/task_prolog
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$root/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
  [[ -f $root/slurmctld.pid && -f $root/slurmd.pid ]] && break
  sleep 0.5
done
[[ -f $root/slurmctld.pid && -f $root/slurmd.pid ]] || fail "slurmctld/slurmd did not start"
pids+=("$(cat "$root/slurmctld.pid")" "$(cat "$root/slurmd.pid")")
for _ in $(seq 60); do
  sinfo -h -o %t 2> /dev/null | grep -q idle && break
  sleep 0.5
done
sinfo -h -o %t | grep -q idle || fail "the node did not become idle: $(sinfo 2>&1)"

# The job: where adjsnapd is, the quota the prolog set, the example solver with its run kept.
cat > "$root/job.sh" << JOB
#!/bin/sh
echo "ADJSNAP_SOCKET=\$ADJSNAP_SOCKET"
$build/client/tools/adjsnap quota
$build/client/examples/acoustic2d --nx 96 --ny 96 --steps 40 --run slurm-job-run --keep
$build/client/tools/adjsnap runs
JOB
chmod 755 "$root/job.sh"
touch "$root/job.out"
chown "$user" "$root/job.out"
runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" sbatch --wait --quiet \
  --output="$root/job.out" "$root/job.sh" || fail "the job failed"

grep -q "ADJSNAP_SOCKET=$root/adjsnap.sock" "$root/job.out" || fail "the task prolog did not set ADJSNAP_SOCKET"
grep -q "quota 64.0 MiB" "$root/job.out" || fail "the prolog did not set the job's quota"
grep -q "40/40 checksums match" "$root/job.out" || fail "the example solver did not complete"
grep -q "slurm-job-run" "$root/job.out" || fail "the job's run was not in adjsnapd during the job"

# After the job: the epilog purges the job's runs.
for _ in $(seq 60); do
  adjsnap runs | grep -q slurm-job-run || break
  sleep 0.5
done
adjsnap runs | grep -q slurm-job-run && fail "the job's run is still in adjsnapd after the epilog"
grep -q "purged 1 run of uid $(id -u "$user"), job" "$root/adjsnapd.log" ||
  fail "adjsnapd did not log the epilog's purge"
echo "slurm_test: OK (job ran against adjsnapd; its run was purged by the epilog)"
