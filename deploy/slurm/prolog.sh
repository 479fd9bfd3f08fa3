#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/usr/local/libexec/adjsnap/prolog.sh), run as root on each
# node of a job before it starts: starts the node's adjsnapd when none answers and ADJSNAP_START
# says how, then gives the job's user its adjsnapd quota.
# A failing prolog drains the node, so problems are logged and the job goes on (its adjsnapd
# calls then report what is wrong).
. "${ADJSNAP_SLURM_CONF:-/etc/adjsnap/slurm.conf}"

answers() { "$ADJSNAP" --socket "$ADJSNAP_SOCKET" status > /dev/null 2>&1; }

if [ -n "${ADJSNAP_START:-}" ] && ! answers; then
  log=${ADJSNAP_START_LOG:-/var/log/adjsnap-start.log}
  wait_s=${ADJSNAP_START_WAIT:-10}
  case $wait_s in '' | *[!0-9]*) wait_s=10 ;; esac  # whole seconds; arithmetic on more would fail
  # `command`: a log that cannot be opened must not end the prolog (it would drain the node).
  if command exec 9>> "$log"; then
    # The log is also the lock: when two jobs' prologs run together on a node, one starts
    # adjsnapd and the other finds it answering.
    flock -w "$wait_s" 9 || true
    if ! answers; then
      logger -t adjsnap-prolog \
        "job $SLURM_JOB_ID: no adjsnapd answers on $ADJSNAP_SOCKET; starting: $ADJSNAP_START"
      # The daemon must outlive the prolog: it gets a session of its own (setsid; slurmd may
      # end the prolog's process group with it), the log for its output (slurmd reads the
      # prolog's until it closes), and not the lock (fd 9).
      setsid -f sh -c "exec $ADJSNAP_START" < /dev/null >> "$log" 2>&1 9>&-
      tenths=0
      until answers; do
        if [ "$tenths" -ge $((wait_s * 10)) ]; then
          logger -t adjsnap-prolog "job $SLURM_JOB_ID: the adjsnapd started by '$ADJSNAP_START'" \
            "does not answer on $ADJSNAP_SOCKET after $wait_s s (its output: $log)"
          break
        fi
        sleep 0.1
        tenths=$((tenths + 1))
      done
    fi
    exec 9>&-
  else
    logger -t adjsnap-prolog "job $SLURM_JOB_ID: not starting adjsnapd: cannot open $log"
  fi
fi

[ -n "${ADJSNAP_JOB_QUOTA:-}" ] || exit 0
if ! out=$("$ADJSNAP" --socket "$ADJSNAP_SOCKET" quota --uid "$SLURM_JOB_UID" \
             --set "$ADJSNAP_JOB_QUOTA" 2>&1); then
  logger -t adjsnap-prolog "job $SLURM_JOB_ID: setting the quota of uid $SLURM_JOB_UID failed: $out"
fi
exit 0
