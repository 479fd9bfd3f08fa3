#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/usr/local/libexec/snapd/task_prolog.sh), run as the
# job's user before each task: tells libsnapd and snapctl where snapd listens.
. "${SNAPD_SLURM_CONF:-/etc/snapd/slurm.conf}"
echo "export SNAPD_SOCKET=$SNAPD_SOCKET"
