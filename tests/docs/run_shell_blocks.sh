#!/usr/bin/env bash
# Runs the shell lines of docs as a newcomer types them: every ```sh block of each DOC, in
# order, in one bash per DOC (so an `export`, `cd` or venv `activate` carries to the next
# block), each line echoed, the first failing line failing the run with its doc and line.
#
#   run_shell_blocks.sh --build BUILD_DIR --home HOME_DIR DOC...
#
# Where the docs stand:
# - the working directory is a checkout of this repository in which `build` is BUILD_DIR, a
#   tree the test pass has already built (so `cmake --install build` installs it);
# - HOME is HOME_DIR, so `~/.venvs/adjsnap` and `$HOME/sw/adjsnap` land there;
# - PREFIX is $HOME/sw/adjsnap, the prefix install.md installs to, and its bin/ and sbin/ lead
#   PATH: `adjsnap` is the installed one;
# - once the prefix holds sbin/adjsnapd, an installed adjsnapd runs with its embedded defaults on a
#   private socket ($ADJSNAP_SOCKET, which adjsnap and libadjsnap read), as `systemctl enable --now
#   adjsnap` would start one; ADJSNAPD_BINARY names it for the Python tests;
# - solver.cc, solver.c and solver.f90 are the consumer solvers of tests/install and the
#   Fortran program of install.md.
# - as root, each DOC runs in a mount namespace of its own with overlays on /etc, /usr, /var
#   and /run: its `sudo` lines (the install to /usr/local, the adjsnap user, the unit, the
#   config, the Slurm scripts) run as written and leave this host as it was (where there is no
#   sudo, root's `sudo` runs the command).
# A line that cannot run here is printed with the reason and not run; the reasons are the
# rules in skip_reason below, nothing else is left out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build="" home=""
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --home) mkdir -p "$2"; home=$(cd "$2" && pwd); shift 2 ;;
    *) echo "run_shell_blocks.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n $build && -n $home && $# -gt 0 ]] ||
  { echo "usage: run_shell_blocks.sh --build BUILD_DIR --home HOME_DIR DOC..." >&2; exit 2; }
docs=()
for d in "$@"; do docs+=("$(cd "$(dirname "$d")" && pwd)/$(basename "$d")"); done

work=$(mktemp -d)
daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# The checkout: this repository's entries, and `build` as the built tree.
checkout=$work/adjsnap
mkdir -p "$checkout"
for entry in "$src"/* "$src"/.[!.]*; do
  [[ -e $entry && $(basename "$entry") != build ]] && ln -s "$entry" "$checkout/"
done
ln -s "$build" "$checkout/build"
cp "$src/tests/install/consumer/main.cc" "$checkout/solver.cc"
cp "$src/tests/install/consumer/main.c" "$checkout/solver.c"
awk '/^```fortran$/ { p = 1; next } /^```/ { p = 0 } p' "$src/docs/install.md" > "$checkout/solver.f90"

export HOME=$home
export PREFIX=$HOME/sw/adjsnap
export PATH=$PREFIX/bin:$PREFIX/sbin:$PATH
export ADJSNAP_SOCKET=$work/run/adjsnap.sock
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

# As root, a doc's changes to the system stay in a mount namespace of its own.
isolated=0
if [[ $(id -u) -eq 0 ]] && unshare --mount true 2>/dev/null; then
  isolated=1
fi

# Why a line is not run here, or nothing when it runs. (The systemctl rule falls through to
# the sudo rule: `;;&`.)
skip_reason() {
  local line=$1
  case $line in
    "cmake -S . -B build "*)
      echo "the test pass built this tree (its build directory is \`build\` here)" ;;
    *systemctl\ *)
      [[ -d /run/systemd/system ]] ||
        echo "systemd is not PID 1 here: ServiceTest (tests/integration) verifies the unit with systemd-analyze" ;;&
    sudo\ *)
      ((isolated)) || echo "needs root, to change /usr, /etc and /var in a namespace of its own" ;;
    *libucx-cu13*|*build-ucx*|*build-deps/ucx*|*ADJSNAP_UCX_ROOT*)
      echo "a build against PyPI's UCX: CI's sanitizer tree is one (tests/run.sh), and the C++ suites run against it there" ;;
    *--remote\ node*)
      echo "another node: RemoteAdminTest (tests/integration) runs adjsnap --remote over mutual TLS on loopback" ;;
    *bench/*)
      echo "a benchmark of minutes: docs/benchmarks.md" ;;
  esac
}

start_adjsnap() {  # the installed adjsnapd, embedded defaults, a private socket and state
  [[ -z $daemon_pid && -x $PREFIX/sbin/adjsnapd ]] || return 0
  mkdir -p "$work/run" "$work/state"
  "$PREFIX/sbin/adjsnapd" --socket "$ADJSNAP_SOCKET" --state-dir "$work/state" \
    > "$work/adjsnapd.log" 2>&1 &
  daemon_pid=$!
  export ADJSNAPD_BINARY=$PREFIX/sbin/adjsnapd
  for _ in $(seq 300); do
    [[ -S $ADJSNAP_SOCKET ]] && return 0
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/adjsnapd.log" >&2
  echo "FAILED: the installed adjsnapd did not start" >&2
  return 1
}

failed=0
ran=0
skipped=0
for doc in "${docs[@]}"; do
  start_adjsnap
  name=${doc#"$src"/}
  script=$work/$(basename "$doc" .md).sh
  {
    echo "set -euo pipefail"
    if ((isolated)); then
      for dir in etc usr var run; do
        mkdir -p "$work/overlay/$dir/upper" "$work/overlay/$dir/work"
        echo "mount -t overlay overlay -o lowerdir=/$dir,upperdir=$work/overlay/$dir/upper,workdir=$work/overlay/$dir/work /$dir"
      done
      command -v sudo > /dev/null || echo 'sudo() { "$@"; }'
    fi
    echo "cd '$checkout'"
  } > "$script"
  # Each block's lines, continuation lines joined, each as its own step: echoed, then run.
  lineno=0 in_block=0 pending="" pending_line=0
  while IFS= read -r text || [[ -n $text ]]; do
    lineno=$((lineno + 1))
    if ((!in_block)); then
      [[ $text =~ ^\`\`\`(sh|bash)$ ]] && in_block=1
      continue
    fi
    if [[ $text == '```' ]]; then
      in_block=0
      continue
    fi
    [[ -z $pending ]] && pending_line=$lineno
    if [[ $text == *\\ ]]; then
      pending+="${text%\\} "
      continue
    fi
    command=$pending$text
    pending=""
    [[ $command =~ ^[[:space:]]*(#.*)?$ ]] && continue
    where="$name:$pending_line"
    reason=$(skip_reason "$command")
    if [[ -n $reason ]]; then
      printf 'echo %q\n' "skip $where: $command  -- $reason" >> "$script"
      skipped=$((skipped + 1))
      continue
    fi
    ran=$((ran + 1))
    {
      printf 'echo %q\n' "run  $where: $command"
      printf '%s || { echo %q >&2; exit 1; }\n' "$command" "FAILED $where: $command"
    } >> "$script"
  done < "$doc"
  runner=(bash)
  ((isolated)) && runner=(unshare --mount --propagation private bash)
  if ! "${runner[@]}" "$script"; then
    failed=$((failed + 1))
  fi
done
echo "$ran lines run, $skipped not run (reasons above), $failed docs failed"
((ran > 0 && failed == 0))
