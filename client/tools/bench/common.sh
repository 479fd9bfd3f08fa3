# Sourced by first_touch.sh, copy_threads.sh and tenants.sh: their shared arguments and waits.

# parse_run_args NAME ARGS...: sets runs, steps and bytes (their defaults set by the caller)
# from --runs N, --steps N and --bytes S; anything else ends the script, naming it.
parse_run_args() {
  local name=$1
  shift
  while (($#)); do
    case $1 in
      --runs) runs=$2; shift 2 ;;
      --steps) steps=$2; shift 2 ;;
      --bytes) bytes=$2; shift 2 ;;
      *) echo "$name: unknown argument $1" >&2; exit 2 ;;
    esac
  done
}

# require_tools BUILD_DIR: ends the script, naming what is missing, unless the build holds
# adjsnapd, adjsnap-bench and adjsnap.
require_tools() {
  local tool
  for tool in daemon/adjsnapd client/tools/adjsnap-bench client/tools/adjsnap; do
    [[ -x $1/$tool ]] || { echo "$1/$tool: not built (cmake --build $1)" >&2; exit 2; }
  done
}

# make_work_dir: sets work to a new temporary directory and daemon to "" (the caller sets it to
# the pid of the adjsnapd it starts); on exit that adjsnapd is stopped and the directory removed.
make_work_dir() {
  work=$(mktemp -d)
  daemon=""
  trap 'if [[ -n $daemon ]]; then kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null; fi
        rm -rf "$work"' EXIT
}

# wait_for_socket SOCKET: until adjsnapd listens there; ends the script after 10 s without it.
wait_for_socket() {
  for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done
  echo "adjsnapd did not listen on $1 within 10 s" >&2
  exit 1
}

# wait_prefaulted BUILD_DIR SOCKET: until adjsnapd's host tier is wholly prefaulted, as a node's
# solvers would find it.
wait_prefaulted() {
  until "$1/client/tools/adjsnap" --socket "$2" status --json |
    python3 -c 'import json, sys
t = [t for t in json.load(sys.stdin)["tiers"] if t["tier"] == "host"][0]
sys.exit(t["prefaulted_bytes"] < t["budget_bytes"])'; do sleep 0.2; done
}
