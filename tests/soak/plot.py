"""Plots a soak's record (tests/soak/soak.py --out DIR) as one SVG, with no plotting library:
adjsnapd's memory, its fds and threads, and the clients' throughput over time, with each restart
(grey line) and spool outage (red band) marked.
    python3 tests/soak/plot.py DIR OUT.svg
"""
import json
import os
import sys

W, H, LEFT, TOP, GAP = 900, 170, 70, 30, 40


def load(d):
    samples = [json.loads(l) for l in open(os.path.join(d, "samples.jsonl"))]
    summary = json.load(open(os.path.join(d, "summary.json")))
    events = [json.loads(l) for l in open(os.path.join(d, "events.jsonl"))]
    t0 = summary.get("started", events[0]["t"])  # the first event: adjsnapd's first start
    cycles = []
    for name in os.listdir(os.path.join(d, "clients")):
        if name.endswith(".jsonl"):
            for line in open(os.path.join(d, "clients", name)):
                r = json.loads(line)
                if "cycle" in r and "bytes" in r:
                    cycles.append((r["t"] - t0, r["bytes"]))
    return samples, summary, [(e["t"] - t0, e["event"]) for e in events], cycles


def panel(out, y0, title, series, tmax, marks, unit):
    """series: [(label, colour, [(t, v)])]"""
    vmax = max([v for _, _, pts in series for _, v in pts] + [1e-9]) * 1.1
    x = lambda t: LEFT + (W - LEFT - 20) * t / tmax
    y = lambda v: y0 + H - H * v / vmax
    out.append(f'<text x="{LEFT}" y="{y0 - 8}" font-size="13">{title}</text>')
    for t0, t1 in marks["outages"]:
        out.append(f'<rect x="{x(t0):.1f}" y="{y0}" width="{max(1, x(t1) - x(t0)):.1f}" '
                   f'height="{H}" fill="#f4c7c3"/>')
    for t in marks["restarts"]:
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{y0}" y2="{y0 + H}" '
                   f'stroke="#999" stroke-dasharray="3,3"/>')
    out.append(f'<rect x="{LEFT}" y="{y0}" width="{W - LEFT - 20}" height="{H}" fill="none" '
               f'stroke="#333"/>')
    for i in range(5):
        v = vmax * i / 4
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{v:.3g}</text>')
    for k, (label, colour, pts) in enumerate(series):
        if pts:
            d = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
        out.append(f'<text x="{LEFT + 10 + 170 * k}" y="{y0 + 14}" font-size="11" '
                   f'fill="{colour}">{label} ({unit})</text>')


def main():
    d, svg = sys.argv[1], sys.argv[2]
    samples, summary, events, cycles = load(d)
    tmax = max([s["t"] for s in samples] + [1])
    restarts = [t for t, e in events if e.startswith("adjsnapd stopped (restart)")]
    downs = [t for t, e in events if e == "spool remounted read-only"]
    ups = [t for t, e in events if e == "spool remounted read-write"]
    marks = {"restarts": restarts, "outages": list(zip(downs, ups))}
    mib = lambda k: [(s["t"], s[k] / 2**20) for s in samples]
    bin_s = max(10, tmax / 150)
    bins = {}
    for t, b in cycles:
        bins[int(t // bin_s)] = bins.get(int(t // bin_s), 0) + b
    rate = [((i + 0.5) * bin_s, bins.get(i, 0) / bin_s / 1e9) for i in range(int(tmax // bin_s) + 1)]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{TOP + 3 * (H + GAP) + 20}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    panel(out, TOP, "adjsnapd memory", [("RssAnon", "#1f77b4", mib("rss_anon")),
                                     ("RssShmem (host tier)", "#ff7f0e", mib("rss_shmem"))],
          tmax, marks, "MiB")
    panel(out, TOP + H + GAP, "adjsnapd open fds and threads",
          [("fds", "#2ca02c", [(s["t"], s["fds"]) for s in samples]),
           ("threads", "#9467bd", [(s["t"], s["threads"]) for s in samples])], tmax, marks, "count")
    panel(out, TOP + 2 * (H + GAP), f"clients' bytes pushed and fetched, per {bin_s:.0f} s",
          [("throughput", "#d62728", rate)], tmax, marks, "GB/s")
    y = TOP + 3 * (H + GAP) - 10
    out.append(f'<text x="{LEFT}" y="{y}" font-size="11">time (s) 0 .. {tmax:.0f}; grey: adjsnapd '
               f'restarts ({len(restarts)}); red: spool read-only ({len(downs)}); '
               f'{summary["cycles"]} cycles, wrong bytes {summary["wrong_bytes"]}</text>')
    out.append("</svg>")
    open(svg, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
