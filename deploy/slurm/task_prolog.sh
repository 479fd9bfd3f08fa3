#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/usr/local/libexec/adjsnap/task_prolog.sh), run as the
# job's user before each task: tells libadjsnap and adjsnap where adjsnapd listens.
. "${ADJSNAP_SLURM_CONF:-/etc/adjsnap/slurm.conf}"
echo "export ADJSNAP_SOCKET=$ADJSNAP_SOCKET"
