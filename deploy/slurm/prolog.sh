#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/usr/local/libexec/snapd/prolog.sh), run as root on each
# node of a job before it starts: gives the job's user its snapd quota.
# A failing prolog drains the node, so problems are logged and the job goes on (its snapd
# calls then report what is wrong).
. "${SNAPD_SLURM_CONF:-/etc/snapd/slurm.conf}"
[ -n "${SNAPD_JOB_QUOTA:-}" ] || exit 0
if ! out=$("$SNAPCTL" --socket "$SNAPD_SOCKET" quota --uid "$SLURM_JOB_UID" \
             --set "$SNAPD_JOB_QUOTA" 2>&1); then
  logger -t snapd-prolog "job $SLURM_JOB_ID: setting the quota of uid $SLURM_JOB_UID failed: $out"
fi
exit 0
