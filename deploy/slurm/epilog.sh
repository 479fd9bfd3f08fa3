#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/usr/local/libexec/adjsnap/epilog.sh), run as root on each
# node of a job after it ends: deletes the runs the job opened (libadjsnap labels each run with
# $SLURM_JOB_ID), whatever state the job ended in.
. "${ADJSNAP_SLURM_CONF:-/etc/adjsnap/slurm.conf}"
if ! out=$("$ADJSNAP" --socket "$ADJSNAP_SOCKET" purge --uid "$SLURM_JOB_UID" \
             --job "$SLURM_JOB_ID" 2>&1); then
  logger -t adjsnap-epilog "job $SLURM_JOB_ID: deleting its adjsnapd runs failed: $out"
fi
exit 0
