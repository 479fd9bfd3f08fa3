"""Store-all adjoints for Devito through snapd: every forward wavefield is streamed to snapd
during the forward pass and read back in reverse during the adjoint, with no recomputation
(what DevitoPRO calls streaming, for open-source Devito).

    from snapd.devito import Streamer

    stream = Streamer(snapd.connect(), u, name="shot-17")       # u: a buffered TimeFunction
    stream.forward(fwd_op, time_m=1, time_M=nt - 2, src=src, vp=vp, dt=dt)
    stream.adjoint(grad_op, time_M=nt - 2, time_m=1, rec=residual, grad=grad, v=v, vp=vp, dt=dt)

`u` must be a buffered TimeFunction (save=None): its time_order + 1 slots are all the solver
keeps. Each time step runs as one call of the operator (`time_m = time_M = t`), so the result
is the same as one call over the whole range, bit for bit.

Forward: before step t runs, snapd holds the wavefields up to u[t]; step t writes u[t+1] into
a slot whose previous content (u[t+1-slots]) must have been released by its push. Adjoint:
before step t runs, the slots hold u[t-time_order+1 .. t+1] (everything a stencil of that
order can read); the next step needed is fetched into a staging array while step t computes,
then copied into the slot step t no longer needs.
"""
from __future__ import annotations

import numpy as np

from . import Client, Run

__all__ = ["Streamer"]


class Streamer:
    """Streams the wavefield `field` (a buffered devito.TimeFunction) through snapd.

    codec / codec_param / compress_at_ingest / layers are the run's (see Client.open_run):
    codec="zfp-reversible" stores losslessly, the other zfp codecs lose bits by design."""

    def __init__(self, client: Client, field, name: str, *, layers: str = "",
                 codec: str = "none", codec_param: float = 0.0,
                 compress_at_ingest: bool = False):
        if getattr(field, "save", None) is not None:
            raise ValueError(f"Streamer: {field.name} saves every time step itself "
                             f"(save={field.save}); stream a buffered TimeFunction (save=None)")
        self.client = client
        self.field = field
        self.name = name
        self.order = field.time_order
        self.slots = field.data_with_halo.shape[0]  # time_order + 1 for a buffered field
        self._run_options = dict(layers=layers, codec=codec, codec_param=codec_param,
                                 compress_at_ingest=compress_at_ingest)
        self.run: Run | None = None
        self._first = 0  # time index stored as snapd step 0
        self._last = -1

    def _slot(self, t: int) -> np.ndarray:
        return self.field.data_with_halo[t % self.slots]

    def _step(self, t: int) -> int:
        return t - self._first

    def forward(self, op, time_m: int, time_M: int, **kwargs) -> None:
        """Runs `op` for t = time_m .. time_M, one step per call, pushing u[t+1] after step t
        (and the initial u[time_m - time_order + 1 .. time_m] before the first)."""
        self._first = time_m - self.order + 1
        self._last = time_M + 1
        slot = self._slot(time_m)
        if not slot.flags.c_contiguous:
            raise ValueError(f"Streamer: the time slots of {self.field.name} are not contiguous "
                             f"(padding?); disable autopadding for streamed fields")
        self.run = self.client.open_run(self.name, steps=self._last - self._first + 1,
                                        like=slot, **self._run_options)
        pending = {}  # slot -> the push reading it
        pushes = []

        def push(t):
            pending[t % self.slots] = self.run.push(self._step(t), self._slot(t))
            pushes.append(pending[t % self.slots])

        for t in range(self._first, time_m + 1):
            push(t)
        for t in range(time_m, time_M + 1):
            held = pending.pop((t + 1) % self.slots, None)
            if held is not None:
                held.wait_released()  # step t overwrites this slot
            op.apply(time_m=t, time_M=t, **kwargs)
            push(t + 1)
        for p in pushes:
            p.wait_stored()  # raises the daemon's error for any step that was not stored

    def adjoint(self, op, time_M: int, time_m: int, **kwargs) -> None:
        """Runs `op` for t = time_M down to time_m, one step per call, with the field's slots
        holding the forward wavefields u[t - time_order + 1 .. t + 1] read back from snapd.
        Each snapshot is read once and released by snapd after its read."""
        if self.run is None:
            raise RuntimeError("Streamer.adjoint: run forward() first")
        lowest = time_m - self.order + 1
        if time_M + 1 > self._last or lowest < self._first:
            raise ValueError(f"Streamer.adjoint: steps {lowest}..{time_M + 1} needed, the "
                             f"forward pass stored {self._first}..{self._last}")
        for t in range(time_M + 1, time_M - self.order, -1):
            self.run.fetch(self._step(t), out=self._slot(t))
        staging = np.empty_like(self._slot(time_M))
        pending = None

        def fetch_next(t):  # the step that t - 1 needs and t does not
            need = t - self.order
            return self.run.fetch_async(self._step(need), staging) if need >= lowest else None

        pending = fetch_next(time_M)
        for t in range(time_M, time_m - 1, -1):
            op.apply(time_m=t, time_M=t, **kwargs)
            if pending is not None:
                pending.wait()
                np.copyto(self._slot(t - self.order), staging)
                pending = fetch_next(t - 1)

    def delete(self) -> None:
        """Removes the run and whatever it still holds."""
        if self.run is not None:
            self.run.delete()
            self.run = None
