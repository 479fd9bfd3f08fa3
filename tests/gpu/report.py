#!/usr/bin/env python3
"""Writes report.md and report.json of the GPU check (tests/gpu/run.sh) from its parts.

Each part is a folder PARTS/NN-ID holding `title`, and where it ran `command`, `output`, `rc`,
`wall_s`, `timeout_s`; `status` where the part did not run (not built, out of budget); `xml`,
the path of a gtest XML report. run.sh calls this after every part, so a run cut short still
leaves a report of what ran. Python's standard library only: the GPU machine has nothing else.
"""
import argparse
import json
import os
import re
import xml.etree.ElementTree as ET

TAIL_LINES_MD = 40
TAIL_CHARS_JSON = 8000


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return default


def manifest(pack):
    info = {"gpu_tests": [], "helpers": {}}
    for line in read(os.path.join(pack, "manifest.tsv")).splitlines():
        fields = line.split("\t")
        if fields[0] == "gpu_test":
            info["gpu_tests"].append(fields[1])
        elif fields[0] == "helper" and len(fields) == 3:
            info["helpers"][fields[1]] = fields[2]
        elif len(fields) == 2:
            info[fields[0]] = fields[1]
    return info


def gtest_summary(path):
    """Counts of a gtest XML report, and the failed and skipped tests by name."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        return {"error": f"no readable XML at {path}: {e}"}
    out = {"tests": 0, "failed": [], "skipped": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        out["tests"] += 1
        failure = case.find("failure")
        if failure is not None:
            out["failed"].append({"test": name, "message": (failure.get("message") or "")[:600]})
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped = case.find("skipped")
            reason = (skipped.get("message") if skipped is not None else "") or ""
            out["skipped"].append({"test": name, "reason": reason[:300]})
    return out


def parse_adjsnap_bench(output):
    start, end = output.find("{"), output.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return json.loads(output[start : end + 1])
    except json.JSONDecodeError:
        return None


def parse_acoustic(output):
    fig = {}
    m = re.search(r"forward:\s+(\d+) device snapshots of ([\d.]+) MiB pushed in ([\d.]+) s"
                  r" \((\w+) path\)", output)
    if m:
        fig.update(steps=int(m[1]), mib_per_step=float(m[2]), forward_s=float(m[3]),
                   data_path=m[4])
    m = re.search(r"backward:.* in ([\d.]+) s, (\d+)/(\d+) checksums match", output)
    if m:
        fig.update(backward_s=float(m[1]), checksums_match=int(m[2]), checksums=int(m[3]))
    return fig or None


def parse_smi(output):
    """The row under nvidia-smi --query-gpu's CSV header: name, driver, memory, ..."""
    lines = output.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("name, driver_version"):
            return lines[i + 1].strip()
    return None


def load_part(folder):
    p = {"id": re.sub(r"^\d+-", "", os.path.basename(folder)),
         "title": read(os.path.join(folder, "title")).strip()}
    status = read(os.path.join(folder, "status")).strip()
    rc_text = read(os.path.join(folder, "rc")).strip()
    p["timeout_s"] = int(read(os.path.join(folder, "timeout_s"), "0").strip() or 0)
    if not rc_text:
        p["status"] = status or "running"
        p["ok"] = None if status.startswith("not built") else False
        return p
    p["command"] = read(os.path.join(folder, "command")).strip()
    p["rc"] = int(rc_text)
    p["wall_s"] = float(read(os.path.join(folder, "wall_s"), "0").strip() or 0)
    output = read(os.path.join(folder, "output"))
    p["output_tail"] = output[-TAIL_CHARS_JSON:]
    if p["rc"] in (124, 137):
        p["status"], p["ok"] = f"timed out after {p['timeout_s']} s", False
    elif p["rc"] == 0:
        p["status"], p["ok"] = "passed", True
    else:
        p["status"], p["ok"] = f"failed (exit {p['rc']})", False
    xml = read(os.path.join(folder, "xml")).strip()
    if xml:
        g = p["gtest"] = gtest_summary(xml)
        if "error" in g:
            p["status"] += f"; {g['error']}"
            p["ok"] = False
        elif g["failed"]:
            p["status"] = f"failed: {len(g['failed'])} of {g['tests']} tests (exit {p['rc']})"
        elif g["skipped"]:  # on the GPU machine a skip means the GPU was not usable
            p["status"], p["ok"] = f"skipped: {len(g['skipped'])} of {g['tests']} tests", False
        elif p["ok"]:
            p["status"] = f"passed: {g['tests']} tests"
    if p["id"] == "adjsnap-bench":
        p["figures"] = parse_adjsnap_bench(output)
    elif p["id"].startswith("acoustic"):
        p["figures"] = parse_acoustic(output)
    return p


def met(ok):
    return "yes" if ok else "**no**"


def tail_lines(text, n):
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-n:])


def adjsnap_bench_md(f):
    """The figures of adjsnap-bench --device --json against the targets of docs/benchmarks.md."""
    push, fetch = f.get("push_vs_d2h", 0), f.get("fetch_vs_h2d", 0)
    first = f.get("first_vs_steady", 0)
    over_all = "0.9x (stated over 16 steps; this is over all)"
    lines = ["", "## adjsnap-bench --device", "",
             f"{f.get('steps')} steps x {f.get('bytes', 0) / 2**20:.0f} MiB, data path "
             f"{f.get('data_path')}, host tier {f.get('host_tier_bytes', 0) / 2**30:.1f} GiB, "
             f"{f.get('gpu')}", "",
             "| measure | value | target (docs/benchmarks.md) | met |",
             "| --- | ---: | --- | --- |",
             f"| pinned cudaMemcpy D2H | {f.get('d2h_gbs', 0):.2f} GB/s | | |",
             f"| adjsnapd device push (until stored) | {f.get('push_gbs', 0):.2f} GB/s = "
             f"{push:.2f}x D2H | {over_all} | {met(push >= 0.9)} |",
             f"| pinned cudaMemcpy H2D | {f.get('h2d_gbs', 0):.2f} GB/s | | |",
             f"| adjsnapd device fetch | {f.get('fetch_gbs', 0):.2f} GB/s = {fetch:.2f}x H2D | "
             f"{over_all} | {met(fetch >= 0.9)} |",
             f"| first push / a steady push | {f.get('first_push_ms', 0):.2f} / "
             f"{f.get('steady_push_ms', 0):.2f} ms = {first:.2f}x | at most 2x | "
             f"{met(first <= 2)} |"]
    for n, stall in (f.get("backward_stall_by_steps") or {}).items():
        which = f"all {n} steps" if int(n) == f.get("steps") else f"newest {n} steps"
        lines.append(f"| backward stall, {which}, {f.get('compute_ms', 0):.2f} ms compute per step "
                     f"| {100 * stall:.2f} % | at most 2 % (over 16 and 256 steps) | "
                     f"{met(stall <= 0.02)} |")
    return lines


def write_md(path, r):
    m, parts = r["pack"], r["parts"]
    lines = ["# adjsnapd GPU check", "",
             f"- started {r['started']}; the parts took {r['wall_s']:.0f} s of a {r['budget_s']} s "
             "budget" + ("" if r["final"] else " (the run had not finished when this was written)")]
    if r.get("gpu"):
        lines.append(f"- GPU: {r['gpu']}")
    lines.append(f"- pack: made in checkout {m.get('source', '?')} from a "
                 f"{m.get('build_type', '?')} build, CUDA architectures "
                 f"{m.get('cuda_architectures', '?')}, nvcc {m.get('nvcc', '?')}, packed "
                 f"{m.get('packed', '?')} on {m.get('packed_on', '?')}")
    ran = [p for p in parts if p.get("ok") is not None]
    lines.append(f"- verdict: **{'PASS' if r['ok'] else 'FAIL'}**: "
                 f"{sum(1 for p in ran if p['ok'])} of {len(ran)} parts passed"
                 + "".join(f"; {p['title']}: {p['status']}" for p in parts if p.get("ok") is None))
    lines += ["", "| # | part | status | exit | wall s | limit s |",
              "| ---: | --- | --- | ---: | ---: | ---: |"]
    for i, p in enumerate(parts, 1):
        lines.append(f"| {i} | {p['title']} | {p['status']} | {p.get('rc', '')} | "
                     f"{p.get('wall_s', '')} | {p.get('timeout_s') or ''} |")
    for p in parts:
        f = p.get("figures")
        if p["id"] == "adjsnap-bench" and f:
            lines += adjsnap_bench_md(f)
        elif p["id"].startswith("acoustic") and f:
            if "## acoustic2d_cuda" not in lines:  # one table for the solver's runs
                lines += ["", "## acoustic2d_cuda", "",
                          "| run | path | steps x MiB | forward s | backward s | checksums |",
                          "| --- | --- | --- | ---: | ---: | --- |"]
            lines.append(f"| {p['title']} | {f.get('data_path', '?')} | {f.get('steps', '?')} x "
                         f"{f.get('mib_per_step', '?')} | {f.get('forward_s', '?')} | "
                         f"{f.get('backward_s', '?')} | "
                         f"{f.get('checksums_match', '?')}/{f.get('checksums', '?')} |")
        elif p.get("gtest") and (p["gtest"].get("failed") or p["gtest"].get("skipped")):
            lines += ["", f"## {p['title']}: failed and skipped tests", ""]
            lines += [f"- FAILED {x['test']}: {x['message']}" for x in p["gtest"]["failed"]]
            lines += [f"- skipped {x['test']}: {x['reason']}" for x in p["gtest"]["skipped"]]
    lines += ["", "## Each part's command and the end of its output", ""]
    for i, p in enumerate(parts, 1):
        lines += [f"### {i}. {p['title']}: {p['status']}", ""]
        if "command" in p:
            lines += [f"`{p['command']}`", "", "```",
                      tail_lines(p.get("output_tail", ""), TAIL_LINES_MD), "```", ""]
    lines.append("Every part's whole output, adjsnapd's log and `nvidia-smi -q` are in logs.tar.gz "
                 "beside this file.")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", required=True)
    ap.add_argument("--pack", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=int, required=True)
    ap.add_argument("--started", required=True)
    ap.add_argument("--final", action="store_true",
                    help="the run is over: exit 1 unless every part passed")
    a = ap.parse_args()
    parts = [load_part(os.path.join(a.parts, d)) for d in sorted(os.listdir(a.parts))]
    r = {"started": a.started, "budget_s": a.budget, "final": a.final, "pack": manifest(a.pack),
         "wall_s": sum(p.get("wall_s", 0) for p in parts), "parts": parts}
    smi = next((p for p in parts if p["id"] == "nvidia-smi" and p.get("rc") == 0), None)
    if smi:
        r["gpu"] = parse_smi(smi.get("output_tail", ""))
    r["ok"] = (a.final and all(p.get("ok") is not False for p in parts)
               and any(p.get("ok") for p in parts))
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(r, f, indent=1)
    write_md(os.path.join(a.out, "report.md"), r)
    return 0 if r["ok"] or not a.final else 1


if __name__ == "__main__":
    raise SystemExit(main())
