#!/usr/bin/env bash
# The figures of docs/benchmarks.md, "Every user on the mapped path": adjsnapd running as a user of
# its own (as the systemd unit and Slurm run it), and adjsnap-bench's default mode (each pass in a
# fresh process) as root and as a third, ordinary user, interleaved, with the same run's memcpy
# beside each figure. Prints a Markdown table of medians over --runs repetitions (the second,
# warm pass of each: the first pass of each user populates its arena once per daemon).
#   sudo client/tools/bench/tenants.sh BUILD_DIR [--runs N] [--steps N] [--bytes S]
# With --many N instead: four users at once (root and three ordinary ones), each running
# `adjsnap-bench --many N` (mixed step sizes, every other solver on the copied path, every byte
# checked) against one 1 GiB host tier with a disk tier and tenant_host_share 0.5; prints each
# user's solvers, refusals and wrong bytes.
#   sudo client/tools/bench/tenants.sh BUILD_DIR --many N [--steps S]
# Needs root: it creates the system users (adjsnap-bench, adjsnap-bench-solver[23]) if missing.
set -euo pipefail
build=${1:?usage: tenants.sh BUILD_DIR [--many N] [--runs N] [--steps N] [--bytes S]}
shift
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
runs=3 steps=32 bytes=64M many=0
args=()
while (($#)); do
  case $1 in
    --many) many=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
((many > 0)) && steps=16
parse_run_args tenants.sh ${args[@]+"${args[@]}"}
require_tools "$build"
((EUID == 0)) || { echo "tenants.sh: runs adjsnapd and a solver as users of their own: needs root" >&2; exit 2; }
build=$(realpath "$build")
for user in adjsnap-bench adjsnap-bench-solver adjsnap-bench-solver2 adjsnap-bench-solver3; do
  id -u "$user" > /dev/null 2>&1 ||
    useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
done
as() {  # as USER CMD...: runs CMD as USER, with that user's groups only (root: as it is)
  local user=$1
  shift
  if [[ $user == root ]]; then
    "$@"
  else
    setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --clear-groups "$@"
  fi
}
# adjsnapd as its own user, in the background: setpriv started directly (not through `as`, whose
# background job would be a subshell), so $! is adjsnapd itself once setpriv execs it.
adjsnap_user=(setpriv --reuid="$(id -u adjsnap-bench)" --regid="$(id -g adjsnap-bench)" --clear-groups)
make_work_dir
chmod 0711 "$work"
install -d -o adjsnap-bench -m 0700 "$work/state"
install -d -o adjsnap-bench -m 0711 "$work/run"
export UCX_NET_DEVICES=lo  # the benchmark's traffic stays on loopback

if ((many > 0)); then
  install -d -o adjsnap-bench -m 0700 "$work/spool"
  socket=$work/run/adjsnap.sock
  "${adjsnap_user[@]}" "$build/daemon/adjsnapd" --socket "$socket" --state-dir "$work/state" \
    --host-mem 1G --spool-dirs "$work/spool" --disk-mem 60G --tenant-host-share 0.5 \
    > "$work/adjsnapd.log" 2>&1 &
  daemon=$!
  wait_for_socket "$socket"
  pids=()
  for who in root adjsnap-bench-solver adjsnap-bench-solver2 adjsnap-bench-solver3; do
    as "$who" "$build/client/tools/adjsnap-bench" --socket "$socket" --many "$many" \
      --steps "$steps" --json > "$work/$who.json" 2> "$work/$who.err" &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  python3 - "$work" "$many" "$steps" <<'EOF'
import json, os, sys
work, many, steps = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"four users at once, each `adjsnap-bench --many {many} --steps {steps}`; one adjsnapd (as "
      "adjsnap-bench), 1 GiB host tier, a disk tier, tenant_host_share 0.5\n")
print("| user | solvers | steps | exact | wrong | refused | failed | aggregate GB/s |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for who in ("root", "adjsnap-bench-solver", "adjsnap-bench-solver2", "adjsnap-bench-solver3"):
    try:
        d = json.load(open(os.path.join(work, who + ".json")))
    except ValueError:
        print(f"| {who} | failed: {open(os.path.join(work, who + '.err')).read().strip()} |")
        continue
    print(f"| {who} | {d['solvers']} | {d['steps']} | {d['exact']} | {d['wrong']} |"
          f" {d['refused']} | {d['failed']} | {d['aggregate_gbs']:.2f} |")
EOF
  "$build/client/tools/adjsnap" --socket "$socket" status
  exit $rc
fi

# Room for both users' arenas at once: each keeps its pages warm between its passes.
step_bytes=$(numfmt --from=iec "${bytes%B}" 2> /dev/null || numfmt --from=iec "${bytes%iB}")
host_mem=$(( 2 * steps * step_bytes + (256 << 20) ))
socket=$work/run/adjsnap.sock
"${adjsnap_user[@]}" "$build/daemon/adjsnapd" --socket "$socket" --state-dir "$work/state" \
  --host-mem "$host_mem" --spool-dirs none > "$work/adjsnapd.log" 2>&1 &
daemon=$!
wait_for_socket "$socket"

# The plain-file alternative, as the same ordinary user: one np.save per step forward, one
# np.load per step backward, into a directory on the same disk as adjsnapd's state.
python=$build/python/bin/python
[[ -x $python ]] || python=python3
install -d -o adjsnap-bench-solver -m 0700 "$work/npy"
npy_bench() {
  as adjsnap-bench-solver "$python" - "$work/npy" "$steps" "$step_bytes" <<'PY'
import json, os, sys, time
import numpy as np
d, steps, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = np.full(size // 8, 1.5)
t0 = time.perf_counter()
for t in range(steps):
    a[0] = t
    np.save(os.path.join(d, f"{t}.npy"), a)
t1 = time.perf_counter()
for t in reversed(range(steps)):
    b = np.load(os.path.join(d, f"{t}.npy"))
    assert b[0] == t
t2 = time.perf_counter()
for t in range(steps):
    os.unlink(os.path.join(d, f"{t}.npy"))
print(json.dumps({"who": "np.save/np.load", "push_gbs": steps * size / (t1 - t0) / 1e9,
                  "fetch_gbs": steps * size / (t2 - t1) / 1e9}))
PY
}

results=$work/results.jsonl
for ((r = 0; r < runs; ++r)); do
  npy_bench >> "$results"
  for who in root adjsnap-bench-solver; do
    as "$who" "$build/client/tools/adjsnap-bench" --socket "$socket" --steps "$steps" \
      --bytes "$bytes" --json | python3 -c 'import json, sys; d = json.load(sys.stdin); d["who"] = sys.argv[1]; print(json.dumps(d))' "$who" >> "$results"
  done
done

python3 - "$results" "$steps" "$bytes" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"adjsnapd as user adjsnap-bench; adjsnap-bench {sys.argv[2]} steps x {sys.argv[3]}, a fresh process "
      f"per pass; medians of {len(rows) // 3} interleaved runs (the warm pass)\n")
print("| solver runs as | data path | push GB/s | fetch GB/s | push / memcpy | fetch / memcpy |"
      " first pass push GB/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
figures = {}
for who in ("root", "adjsnap-bench-solver"):
    mine = [r for r in rows if r["who"] == who]
    if not mine:
        continue
    med = lambda key: statistics.median(r[key] for r in mine)
    first = statistics.median(r["passes"][0]["push_gbs"] for r in mine)
    figures[who] = (med("push_gbs"), med("fetch_gbs"))
    print(f"| {who} | {mine[0]['data_path']} | {med('push_gbs'):.2f} | {med('fetch_gbs'):.2f} |"
          f" {med('push_vs_memcpy'):.2f} | {med('fetch_vs_memcpy'):.2f} | {first:.2f} |")
npy = [r for r in rows if r["who"] == "np.save/np.load"]
np_push = statistics.median(r["push_gbs"] for r in npy)
np_fetch = statistics.median(r["fetch_gbs"] for r in npy)
print(f"| adjsnap-bench-solver | np.save / np.load, a file per step | {np_push:.2f} | {np_fetch:.2f} |"
      " | | |")
(rp, rf), (up, uf) = figures["root"], figures["adjsnap-bench-solver"]
print(f"\nan ordinary user against root: push {up / rp:.2f}x, fetch {uf / rf:.2f}x; against "
      f"np.save/np.load: push {up / np_push:.2f}x, fetch {uf / np_fetch:.2f}x")
EOF
