"""Store-all adjoints for Devito through adjsnapd: every forward wavefield is streamed to adjsnapd
during the forward pass and read back in reverse during the adjoint, with no recomputation
(what DevitoPRO calls streaming, for open-source Devito).

    from devito import TimeFunction
    from devito.types import Buffer
    from adjsnap.devito import Streamer, block_buffer

    u = TimeFunction(name="u", grid=grid, time_order=2, space_order=4,
                     save=block_buffer(block=16, time_order=2))
    with Streamer(adjsnap.connect(), u, name="shot-17") as stream:
        stream.forward(fwd_op, time_m=1, time_M=nt - 2, src=src, vp=vp, dt=dt)
        stream.adjoint(grad_op, time_M=nt - 2, time_m=1, rec=residual, grad=grad, v=v, vp=vp,
                       dt=dt)
    # leaving the block deletes the run (keep=True keeps it for a second adjoint)

**Block streaming.** A field whose time buffer has 2 K + time_order slots (`block_buffer`, a
devito `Buffer`) is streamed K time steps at a time: each operator call runs K steps, and
Python and Devito pay their per-call overhead once per block. While block i computes, the K
snapshots of block i - 1 are pushed straight from their slots (forward) or the K snapshots the
next block needs are fetched straight into theirs (adjoint): the slots are double-buffered, so
no staging copy is made. A plain buffered field (time_order + 1 slots) is streamed one step per
call, through one staging array in the adjoint. Either way the result is the one of a single
call over the whole range, bit for bit (time steps are computed in the same order with the
same arithmetic; only the buffer's modulo changes).

**Several fields** (`Streamer(client, [u, v], ...)`: TTI's two wavefields, or velocity and
stress): one run per field, `NAME.FIELD`, pushed and fetched together. All fields must have
the same number of time slots.

Forward: before step t runs, adjsnapd holds (or is being sent) the wavefields up to u[t]; step t
writes u[t+1] into a slot whose previous content (u[t+1-slots]) must have been released by its
push. Adjoint: before step t runs, the slots hold u[t-time_order+1 .. t+1] (everything a stencil
of that order can read).
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from . import Client, Run

__all__ = ["Streamer", "AdjsnapWarning", "block_buffer"]


class AdjsnapWarning(UserWarning):
    """Something adjsnapd did differs from what was asked, without being an error."""


def block_buffer(block: int, time_order: int):
    """The `save=` of a TimeFunction that Streamer streams `block` time steps per operator
    call: a devito Buffer of 2 * block + time_order slots."""
    from devito.types import Buffer
    if block < 1:
        raise ValueError(f"block_buffer: block must be >= 1, got {block}")
    return Buffer(2 * block + time_order)


class Streamer:
    """Streams the wavefields `fields` (a devito.TimeFunction with a time buffer, or a sequence
    of them) through adjsnapd; see the module's documentation.

    codec / codec_param / compress_at_ingest / layers / check_finite are the runs' (see
    Client.open_run): codec="zfp-reversible" stores losslessly, the other zfp codecs lose bits by
    design. keep=True keeps every snapshot after it is read (a second adjoint may read them
    again) and keeps the runs when the streamer is closed; otherwise each snapshot is read once
    and released, and closing (or leaving the `with` block) deletes the runs."""

    def __init__(self, client: Client, fields, name: str, *, layers: str = "",
                 codec: str = "none", codec_param: float = 0.0,
                 compress_at_ingest: bool = False, check_finite: bool = False,
                 keep: bool = False):
        self.fields = list(fields) if isinstance(fields, Sequence) else [fields]
        if not self.fields:
            raise ValueError("Streamer: no field to stream")
        slots = {f.data_with_halo.shape[0] for f in self.fields}
        orders = {f.time_order for f in self.fields}
        if len(slots) != 1 or len(orders) != 1:
            raise ValueError("Streamer: the fields have different time buffers ("
                             + ", ".join(f"{f.name}: {f.data_with_halo.shape[0]} slot"
                                         f"{'' if f.data_with_halo.shape[0] == 1 else 's'}, "
                                         f"time_order {f.time_order}" for f in self.fields) + ")")
        for f in self.fields:
            save = getattr(f, "save", None)
            if save is not None and not _is_buffer(save):
                raise ValueError(f"Streamer: {f.name} saves every time step itself "
                                 f"(save={save}); stream a buffered TimeFunction (save=None, "
                                 f"or save=block_buffer(...))")
        self.client = client
        self.name = name
        self.order = orders.pop()
        self.slots = slots.pop()
        # K steps per call when the slots double-buffer K; else one step per call.
        self.block = (self.slots - self.order) // 2
        self.keep = keep
        self._run_options = dict(layers=layers, codec=codec, codec_param=codec_param,
                                 compress_at_ingest=compress_at_ingest,
                                 check_finite=check_finite, keep=keep)
        self.runs: list[Run] = []
        self._first = 0  # time index stored as adjsnapd step 0
        self._last = -1

    # The first field's run, for a streamer of one field.
    @property
    def run(self) -> Run | None:
        return self.runs[0] if self.runs else None

    def run_name(self, field) -> str:
        return self.name if len(self.fields) == 1 else f"{self.name}.{field.name}"

    def _slot(self, field, t: int) -> np.ndarray:
        return field.data_with_halo[t % self.slots]

    def _step(self, t: int) -> int:
        return t - self._first

    def __enter__(self) -> "Streamer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def forward(self, op, time_m: int, time_M: int, **kwargs) -> None:
        """Runs `op` for t = time_m .. time_M, pushing u[t+1] after step t (and the initial
        u[time_m - time_order + 1 .. time_m] before the first)."""
        self._first = time_m - self.order + 1
        self._last = time_M + 1
        for f in self.fields:
            if not self._slot(f, time_m).flags.c_contiguous:
                raise ValueError(f"Streamer: the time slots of {f.name} are not contiguous "
                                 f"(padding?); disable autopadding for streamed fields")
        self.runs = [self.client.open_run(self.run_name(f), steps=self._last - self._first + 1,
                                          like=self._slot(f, time_m), **self._run_options)
                     for f in self.fields]
        pending = {}  # slot -> the pushes reading it
        pushes = []

        def push(t):
            started = [run.push(self._step(t), self._slot(f, t))
                       for f, run in zip(self.fields, self.runs)]
            pending[t % self.slots] = started
            pushes.extend(started)

        def overwrite(t):  # the slot of u[t] is about to be written: its old push must be done
            for p in pending.pop(t % self.slots, ()):
                p.wait_released()

        for t in range(self._first, time_m + 1):
            push(t)
        k = max(self.block, 1)
        for lo in range(time_m, time_M + 1, k):
            hi = min(lo + k - 1, time_M)
            for t in range(lo + 1, hi + 2):
                overwrite(t)
            op.apply(time_m=lo, time_M=hi, **kwargs)
            for t in range(lo + 1, hi + 2):
                push(t)
        for p in pushes:
            p.wait_stored()  # raises the daemon's error for any step that was not stored
        self._warn_if_uncompressed()

    def _warn_if_uncompressed(self) -> None:
        # A codec applied on demotion does nothing to a run that fits in host memory: say so
        # instead of leaving the user to think the wavefields were compressed.
        if self._run_options["codec"] == "none" or self._run_options["compress_at_ingest"]:
            return
        names = {run.name for run in self.runs}
        for info in self.client.runs():
            if info.name in names and info.snapshots and info.compressed_snapshots == 0:
                warnings.warn(
                    f"Streamer: run {info.name!r} asked for codec "
                    f"{self._run_options['codec']!r} but none of its {info.snapshots} "
                    f"wavefields was compressed: they all fit in adjsnapd's host memory, and steps "
                    f"are compressed when they move to disk; pass compress_at_ingest=True to "
                    f"compress every wavefield", AdjsnapWarning, stacklevel=3)

    def adjoint(self, op, time_M: int, time_m: int, **kwargs) -> None:
        """Runs `op` for t = time_M down to time_m with the fields' slots holding the forward
        wavefields u[t - time_order + 1 .. t + 1] read back from adjsnapd."""
        if not self.runs:
            raise RuntimeError("Streamer.adjoint: run forward() first")
        lowest = time_m - self.order + 1
        if time_M + 1 > self._last or lowest < self._first:
            raise ValueError(f"Streamer.adjoint: steps {lowest}..{time_M + 1} needed, the "
                             f"forward pass stored {self._first}..{self._last}")
        if self.block == 0:
            self._adjoint_by_step(op, time_M, time_m, lowest, kwargs)
            return
        k = self.block

        def fetch(steps):  # straight into the slots: none of them is in use by the block
            return [run.fetch_async(self._step(t), self._slot(f, t))
                    for t in steps for f, run in zip(self.fields, self.runs)]

        def wait(fetches):
            for f in fetches:
                f.wait()

        hi = time_M
        lo = max(hi - k + 1, time_m)
        wait(fetch(range(hi + 1, lo - self.order, -1)))  # u[lo - order + 1 .. hi + 1]
        while True:
            next_lo = max(lo - k, time_m)
            # The steps the next block needs that this one does not: their slots hold u of
            # 2k + order steps later, beyond what this block reads.
            coming = fetch(range(lo - self.order, next_lo - self.order, -1)) if lo > time_m else []
            op.apply(time_m=lo, time_M=hi, **kwargs)
            wait(coming)
            if lo == time_m:
                break
            hi, lo = lo - 1, next_lo

    def _adjoint_by_step(self, op, time_M, time_m, lowest, kwargs) -> None:
        for t in range(time_M + 1, time_M - self.order, -1):
            for f, run in zip(self.fields, self.runs):
                run.fetch(self._step(t), out=self._slot(f, t))
        staging = [np.empty_like(self._slot(f, time_M)) for f in self.fields]

        def fetch_next(t):  # the step that t - 1 needs and t does not
            need = t - self.order
            if need < lowest:
                return None
            return [run.fetch_async(self._step(need), s) for run, s in zip(self.runs, staging)]

        pending = fetch_next(time_M)
        for t in range(time_M, time_m - 1, -1):
            op.apply(time_m=t, time_M=t, **kwargs)
            if pending is not None:
                for p in pending:
                    p.wait()
                for f, s in zip(self.fields, staging):
                    np.copyto(self._slot(f, t - self.order), s)
                pending = fetch_next(t - 1)

    def close(self) -> None:
        """Deletes the runs unless the streamer keeps them (keep=True)."""
        if not self.keep:
            self.delete()

    def delete(self) -> None:
        """Removes the runs and whatever they still hold."""
        for run in self.runs:
            run.delete()
        self.runs = []


def _is_buffer(save) -> bool:
    try:
        from devito.types import Buffer
    except ImportError:
        return False
    return isinstance(save, Buffer)
