"""Devito's acoustic FWI gradient four ways, timed in one run: every wavefield in memory
(`save=True`), pyrevolve checkpoints in numpy arrays, `adjsnap.devito.Streamer` (store-all
through adjsnapd, K steps per operator call), and pyrevolve with `AdjsnapStorage`; each gradient is
checked against the in-memory one (bit for bit for the lossless ways).

    python client/python/bench/devito_bench.py --socket /run/adjsnap/adjsnap.sock \\
        [--case 2d:1001:600] [--case 3d:111:300] [--block 16] [--checkpoints 40] \\
        [--repeat 1] [--json] [--beyond-ram 2d:1001:5600]

A case is DIM:N:NT: an N^DIM model (plus 40 absorbing points a side in 2D, 20 in 3D) and NT
time steps; choose NT so that NT wavefields fit in memory for `save=True`. Prints one
Markdown table: seconds (forward + adjoint, operators compiled beforehand) and the ratio to
the reference of each way (save=True for the Streamer, numpy storage for AdjsnapStorage), and
for the two pyrevolve ways the seconds spent inside the storage's save and load, the part
that the storage decides (the rest is Devito's operators, the same work in both).

--repeat N runs the four ways N times in turn (1 2 3 4 1 2 3 4 ...) and prints the median of
each: on a shared or virtual node the operators' own time moves by up to a quarter from one
run to the next, more than the storage's share. The first repetition is the one a new
daemon's first touch of its memory falls in (docs/python.md). --json prints, after the table,
one line of JSON per case with every run's seconds ("runs") and their medians ("medians"),
keyed mem (save=True), str (Streamer), np and sn (pyrevolve with numpy storage and with
AdjsnapStorage), np_in and sn_in (inside those storages' save and load).

--beyond-ram DIM:N:NT runs the Streamer alone on a case whose wavefields need more memory
than the node has (save=True would need NT wavefields in RAM: it is not run), and prints its
time, the bytes streamed, the node's RAM and where adjsnapd kept the wavefields.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from devito import (CheckpointOperator, DevitoCheckpoint, Function, Inc, Operator,
                    TimeFunction, configuration)
from examples.seismic import AcquisitionGeometry, Receiver, demo_model
from examples.seismic.acoustic.operators import iso_stencil
from pyrevolve import Revolver

import adjsnap
from adjsnap.devito import Streamer, block_buffer
from adjsnap.pyrevolve import AdjsnapStorage

configuration["log-level"] = "ERROR"
configuration["safe-math"] = True  # the ways are compared bit for bit


def case_spec(text: str) -> str:
    """The argparse type of --case and --beyond-ram: DIM:N:NT as '2d:1001:600' (the 'd' may be
    left out), returned in that form; anything else is refused, naming it."""
    parts = text.lower().split(":")
    try:
        dim, n, nt = int(parts[0].removesuffix("d")), int(parts[1]), int(parts[2])
        ok = len(parts) == 3 and dim in (2, 3) and n >= 2 and nt >= 3
    except (ValueError, IndexError):
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a case: DIM:N:NT with DIM 2d or 3d, N >= 2 grid points a side "
            f"and NT >= 3 time steps, as 2d:1001:600")
    return f"{dim}d:{n}:{nt}"


class Case:
    def __init__(self, spec: str):
        """spec: DIM:N:NT as case_spec returns it."""
        dim, n, nt = (int(x) for x in spec.replace("d", "").split(":"))
        nbl = 40 if dim == 2 else 20
        shape = (n,) * dim
        spacing = (10.0,) * dim
        self.model = demo_model("layers-isotropic", shape=shape, spacing=spacing, nbl=nbl,
                                nlayers=4, space_order=8)
        self.dt = self.model.critical_dt
        extent = [s * (n - 1) for s in spacing]
        src = np.array([[e / 2 for e in extent[:-1]] + [20.0]])
        nrec = 101
        rec = np.zeros((nrec, dim))
        rec[:, 0] = np.linspace(0, extent[0], nrec)
        rec[:, 1:-1] = extent[1] / 2 if dim == 3 else 0
        rec[:, -1] = 30.0
        tn = (nt - 1) * self.dt
        self.geometry = AcquisitionGeometry(self.model, rec, src, t0=0.0, tn=tn, f0=0.010,
                                            src_type="Ricker")
        self.nt = self.geometry.nt
        self.residual = Receiver(name="residual", grid=self.model.grid,
                                 time_range=self.geometry.time_axis,
                                 coordinates=self.geometry.rec_positions)
        rng = np.random.default_rng(0)
        self.residual.data[:] = rng.standard_normal(self.residual.data.shape) * 1e-3
        self.label = f"{dim}D {'x'.join(map(str, shape))}, {self.nt} steps"
        self.step_bytes = int(np.prod(self.model.grid.shape_local)) * 4

    def fields(self, save):
        kw = dict(grid=self.model.grid, time_order=2, space_order=8)
        return (TimeFunction(name="u", save=save, **kw), TimeFunction(name="v", **kw),
                Function(name="grad", grid=self.model.grid))

    def operators(self, u, v, grad):
        s, m = self.model.grid.stepping_dim.spacing, self.model.m
        src, rec = self.geometry.src, self.geometry.rec
        fwd = Operator(iso_stencil(u, self.model, "OT2")
                       + src.inject(field=u.forward, expr=src * s**2 / m),
                       subs=self.model.spacing_map, name="Forward")
        adj = Operator(iso_stencil(v, self.model, "OT2", forward=False)
                       + rec.inject(field=v.backward, expr=rec * s**2 / m)
                       + [Inc(grad, -u * v.dt2)], subs=self.model.spacing_map, name="Gradient")
        fwd.cfunction, adj.cfunction  # compile now, outside the timing
        return fwd, adj

    def args(self, u, v, grad):
        fwd = dict(src=self.geometry.src, u=u, vp=self.model.vp, dt=self.dt)
        adj = dict(rec=self.residual, u=u, v=v, grad=grad, vp=self.model.vp, dt=self.dt)
        return fwd, adj


def in_memory(c: Case):
    u, v, grad = c.fields(save=c.nt)
    fwd, adj = c.operators(u, v, grad)
    fa, aa = c.args(u, v, grad)
    t0 = time.perf_counter()
    fwd.apply(time_m=1, time_M=c.nt - 2, **fa)
    adj.apply(time_m=1, time_M=c.nt - 2, **aa)
    return time.perf_counter() - t0, grad.data.copy()


def streamed(c: Case, client, block: int):
    u, v, grad = c.fields(save=block_buffer(block, 2))
    fwd, adj = c.operators(u, v, grad)
    fa, aa = c.args(u, v, grad)
    t0 = time.perf_counter()
    with Streamer(client, u, f"bench-stream-{os.getpid()}") as stream:
        stream.forward(fwd, 1, c.nt - 2, **fa)
        stream.adjoint(adj, c.nt - 2, 1, **aa)
    return time.perf_counter() - t0, grad.data.copy()


def node_ram() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def beyond_ram(spec: str, client, block: int):
    c = Case(spec)
    need, ram = c.nt * c.step_bytes, node_ram()
    if need <= ram:
        raise SystemExit(f"--beyond-ram {spec}: {need / 2**30:.1f} GiB of wavefields fit in this "
                         f"node's {ram / 2**30:.1f} GiB of RAM; choose a larger NT")
    tiers = {t.tier: t for t in client.tiers()}
    seconds, grad = streamed(c, client, block)
    finite = bool(np.isfinite(grad).all())
    host, disk = tiers.get(adjsnap.Tier.HOST), tiers.get(adjsnap.Tier.DISK)
    print(f"\nBeyond RAM: {c.label} ({c.step_bytes / 1e6:.1f} MB/step): save=True would hold "
          f"{need / 2**30:.1f} GiB of wavefields, this node has {ram / 2**30:.1f} GiB of RAM "
          f"(not run). Streamer: {seconds:.1f} s, {need / 1e9:.1f} GB pushed and fetched "
          f"back ({2 * need / seconds / 1e9:.2f} GB/s both ways), through a host tier of "
          f"{host.budget_bytes / 2**30:.1f} GiB and a disk tier of "
          f"{disk.budget_bytes / 2**30 if disk else 0:.1f} GiB; gradient finite: {finite}, "
          f"norm {np.linalg.norm(grad):.6e}", flush=True)


def revolved(c: Case, checkpoints: int, client=None):
    u, v, grad = c.fields(save=None)
    fwd, adj = c.operators(u, v, grad)
    fa, aa = c.args(u, v, grad)
    cp = DevitoCheckpoint([u])
    wrp = Revolver(cp, CheckpointOperator(fwd, **fa), CheckpointOperator(adj, **aa),
                   checkpoints, c.nt - 2)
    storage = None
    if client is not None:
        wrp.resetStorageList()
        storage = AdjsnapStorage(cp.size, checkpoints, cp.dtype, client=client,
                               name=f"bench-revolve-{os.getpid()}")
        wrp.addStorage(storage)
    in_storage = 0.0  # seconds inside save and load

    def timed(method):
        def call(*args):
            nonlocal in_storage
            t = time.perf_counter()
            try:
                return method(*args)
            finally:
                in_storage += time.perf_counter() - t
        return call

    for st in wrp.storage_list:
        st.save, st.load = timed(st.save), timed(st.load)
    t0 = time.perf_counter()
    wrp.apply_forward()
    wrp.apply_reverse()
    seconds = time.perf_counter() - t0
    if storage is not None:
        storage.close()
    return seconds, in_storage, grad.data.copy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default="", help="adjsnapd's control socket (default: the usual)")
    ap.add_argument("--case", action="append", metavar="DIM:N:NT",
                    type=lambda text: text if text == "none" else case_spec(text),
                    help="DIM:N:NT (repeatable; 'none': no case, for --beyond-ram alone)")
    ap.add_argument("--block", type=int, default=16, help="Streamer: steps per operator call")
    ap.add_argument("--checkpoints", type=int, default=40, help="pyrevolve checkpoints")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the four ways this many times in turn; print the medians")
    ap.add_argument("--json", action="store_true",
                    help="after the table, one JSON line per case with every run's seconds")
    ap.add_argument("--beyond-ram", metavar="DIM:N:NT", type=case_spec,
                    help="also run the Streamer alone on a case larger than the node's RAM")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error(f"--repeat must be at least 1, not {a.repeat}")
    cases = ["2d:1001:600", "3d:111:300"] if a.case is None else [
        c for c in a.case if c != "none"]  # --case none: only --beyond-ram
    client = adjsnap.connect(a.socket)
    print(f"{os.cpu_count()} cores, Devito's DEVITO_LANGUAGE={configuration['language']}, "
          f"Streamer block {a.block}, {a.checkpoints} pyrevolve checkpoints, "
          f"{'median of %d runs' % a.repeat if a.repeat > 1 else 'one run'} of each way")
    print("| case | save=True s | Streamer s | Streamer / save=True | numpy revolve s | "
          "AdjsnapStorage s | AdjsnapStorage / numpy | in numpy storage s | in AdjsnapStorage s "
          "| exact |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    records = []
    for spec in cases:
        c = Case(spec)
        runs = {k: [] for k in ("mem", "str", "np", "sn", "np_in", "sn_in")}
        exact = True
        for _ in range(a.repeat):
            t_mem, g_mem = in_memory(c)
            t_str, g_str = streamed(c, client, a.block)
            t_np, in_np, g_np = revolved(c, a.checkpoints)
            t_sn, in_sn, g_sn = revolved(c, a.checkpoints, client)
            exact &= all(np.array_equal(g, g_mem) for g in (g_str, g_np, g_sn))
            for k, v in dict(mem=t_mem, str=t_str, np=t_np, sn=t_sn, np_in=in_np,
                             sn_in=in_sn).items():
                runs[k].append(v)
        m = {k: float(np.median(v)) for k, v in runs.items()}
        print(f"| {c.label} ({c.step_bytes / 1e6:.1f} MB/step) | {m['mem']:.2f} | "
              f"{m['str']:.2f} | {m['str'] / m['mem']:.2f} | {m['np']:.2f} | {m['sn']:.2f} | "
              f"{m['sn'] / m['np']:.2f} | {m['np_in']:.2f} | {m['sn_in']:.2f} | "
              f"{'yes' if exact else 'NO'} |", flush=True)
        if a.json:
            records.append(dict(case=spec, label=c.label, step_bytes=c.step_bytes,
                                exact=bool(exact), runs=runs, medians=m))
    for record in records:
        print(json.dumps(record), flush=True)
    if a.beyond_ram:
        beyond_ram(a.beyond_ram, client, a.block)


if __name__ == "__main__":
    main()
