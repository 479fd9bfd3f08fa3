#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/usr/local/libexec/snapd/epilog.sh), run as root on each
# node of a job after it ends: deletes the runs the job opened (libsnapd labels each run with
# $SLURM_JOB_ID), whatever state the job ended in.
. "${SNAPD_SLURM_CONF:-/etc/snapd/slurm.conf}"
if ! out=$("$SNAPCTL" --socket "$SNAPD_SOCKET" purge --uid "$SLURM_JOB_UID" \
             --job "$SLURM_JOB_ID" 2>&1); then
  logger -t snapd-epilog "job $SLURM_JOB_ID: deleting its snapd runs failed: $out"
fi
exit 0
