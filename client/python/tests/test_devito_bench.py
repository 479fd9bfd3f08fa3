"""client/python/bench/devito_bench.py runs end to end against a real adjsnapd: a small case, two
repetitions, every way's gradient equal to the in-memory one. It keeps the script that gives
docs/python.md its figures from rotting; the figures themselves come from the large cases."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("devito")
pytest.importorskip("pyrevolve")


def run_bench(daemon, *args):
    env = dict(os.environ, UCX_NET_DEVICES="lo")
    return subprocess.run([sys.executable, str(REPO / "client/python/bench/devito_bench.py"),
                           "--socket", daemon.socket, *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_the_benchmark_prints_one_exact_row_of_medians_per_case(daemon):
    r = run_bench(daemon, "--case", "2d:61:30", "--repeat", "2", "--checkpoints", "6",
                  "--block", "4", "--json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "median of 2 runs" in lines[0]
    header = [line for line in lines if line.startswith("| case")]
    rows = [line for line in lines if line.startswith("| 2D 61x61")]
    assert len(header) == len(rows) == 1, r.stdout
    assert len(rows[0].strip("|").split("|")) == len(header[0].strip("|").split("|")) == 10
    assert rows[0].rstrip().endswith("| yes |"), "a way's gradient differs from in-memory"
    record = json.loads(lines[-1])
    assert record["case"] == "2d:61:30" and record["exact"] is True
    runs, medians = record["runs"], record["medians"]
    assert sorted(runs) == sorted(medians) == ["mem", "np", "np_in", "sn", "sn_in", "str"]
    for way, seconds in runs.items():
        assert len(seconds) == 2 and all(s > 0 for s in seconds), way
        assert medians[way] == pytest.approx(sum(seconds) / 2)  # the median of two
    for total, inside in (("np", "np_in"), ("sn", "sn_in")):  # storage time is a part
        assert all(i < t for t, i in zip(runs[total], runs[inside]))
    assert not [run for run in daemon.client().runs() if run.name.startswith("bench-")]


def test_a_repeat_below_one_is_refused_naming_it(daemon):
    r = run_bench(daemon, "--repeat", "0")
    assert r.returncode != 0
    assert "--repeat must be at least 1, not 0" in r.stderr


@pytest.mark.parametrize("args, named", [
    (("--case", "4d:10:10"), "argument --case: '4d:10:10' is not a case"),
    (("--case", "2d:1001"), "argument --case: '2d:1001' is not a case"),
    (("--beyond-ram", "none"), "argument --beyond-ram: 'none' is not a case"),
])
def test_a_malformed_case_is_refused_naming_it(daemon, args, named):
    r = run_bench(daemon, *args)
    assert r.returncode == 2
    assert named in r.stderr and "DIM:N:NT" in r.stderr
    assert "Traceback" not in r.stderr
