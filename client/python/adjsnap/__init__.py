"""Python client of adjsnapd, the per-node snapshot daemon for adjoint solvers.

    import numpy as np, adjsnap

    client = adjsnap.connect()                       # $ADJSNAP_SOCKET or the default socket
    u = np.zeros((ny, nx), np.float32)
    run = client.open_run("shot-17", steps=nt, like=u)
    for t in range(nt):                            # forward
        step(u)
        run.push(t, u).wait_released()             # u may be overwritten now
    for t in reversed(range(nt)):                  # backward
        run.fetch(t, out=u)                        # fills u in place
        adjoint_step(u)
    run.delete()

A C-contiguous array is pushed from and fetched into its own memory; Python makes no copy.
Errors are `adjsnap.Error` subclasses carrying the daemon's message.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

from ._adjsnap import (  # noqa: F401  (re-exported)
    AlreadyExists,
    Codec,
    DataLoss,
    DeadlineExceeded,
    Dtype,
    Error,
    FailedPrecondition,
    Fetch,
    InvalidArgument,
    Location,
    NotFound,
    PermissionDenied,
    Push,
    ResourceExhausted,
    RunInfo,
    RunSpec,
    Tier,
    TierInfo,
    TransferCost,
    Unavailable,
)
from . import _adjsnap

__all__ = [
    "connect", "Client", "Run", "Error", "InvalidArgument", "NotFound", "AlreadyExists",
    "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Unavailable", "DataLoss",
    "DeadlineExceeded", "Tier", "Codec", "Dtype", "Location", "RunInfo", "TierInfo", "TransferCost",
    "Push", "Fetch",
    "run_adjoint_online",
]

_DTYPES = {
    np.dtype(np.float32): Dtype.FLOAT32,
    np.dtype(np.float64): Dtype.FLOAT64,
    np.dtype(np.int32): Dtype.INT32,
    np.dtype(np.int64): Dtype.INT64,
    np.dtype(np.uint8): Dtype.UINT8,
}
_NUMPY = {v: k for k, v in _DTYPES.items()}
_CODECS = {
    "none": Codec.NONE,
    "zfp-reversible": Codec.ZFP_REVERSIBLE,
    "zfp-rate": Codec.ZFP_RATE,
    "zfp-precision": Codec.ZFP_PRECISION,
    "zfp-accuracy": Codec.ZFP_ACCURACY,
    "bitcomp": Codec.BITCOMP,
    "bitcomp-lossy": Codec.BITCOMP_LOSSY,
    "ans": Codec.ANS,
}


def connect(socket: str = "", name: str = "python", map_host_tier: bool = True,
            copy_threads: int = 0, wait_timeout: Optional[float] = None,
            reconnect_timeout: Optional[float] = None) -> "Client":
    """Connects to adjsnapd; `socket` defaults to $ADJSNAP_SOCKET, then the daemon's default.
    copy_threads: threads that copy one large array into or out of the mapped host tier
    (0 = min(4, cores); $ADJSNAP_COPY_THREADS overrides it). wait_timeout: seconds a wait
    given no timeout of its own (wait_released, wait_stored, fetch) waits before it raises
    DeadlineExceeded saying what adjsnapd reports the step waits for (default 600 or
    $ADJSNAP_WAIT_TIMEOUT; 0 = for ever). reconnect_timeout: seconds the client keeps
    reconnecting when adjsnapd goes away (a restart), its calls waiting meanwhile (default 60 or
    $ADJSNAP_RECONNECT_TIMEOUT; 0 = fail at once)."""
    return Client(socket, name, map_host_tier, copy_threads, wait_timeout, reconnect_timeout)


def run_adjoint_online(client: Optional["Client"], name: str, state: np.ndarray, advance,
                       reverse, is_last, *, slots: int = 0, local: bool = False,
                       max_steps: int = 0) -> dict:
    """Reverses a run whose number of steps is known only when it ends (online checkpointing:
    dynamic checkpointing forward, the offline optimum per segment backwards; docs/schedules.md).

    `state` is the solver's state, a writable C-contiguous array that the callbacks work on:
    `advance(frm, to)` runs forward steps frm+1 .. to in place (x_frm -> x_to);
    `reverse(step)` runs the adjoint of `step` with `state` holding x_{step-1};
    `is_last(step)`, asked with x_{step-1} in `state` before step `step` would run, returns True
    when `step` is the last one, N: the forward pass stops there and the reverse pass starts
    with reverse(N) on x_{N-1}.

    Checkpoints go to adjsnapd (run `name`, created and deleted by the call) or, with
    local=True, to copies in this process (client may then be None). slots: states held at once,
    x_0's included; 0 takes as many as adjsnapd's host tier has room for. max_steps: stop with
    adjsnap.Error (code "OUT_OF_RANGE") after that many forward steps without is_last saying
    so (0: no limit).
    An exception a callback raises stops the run and is raised again.

    Returns {"steps": N, "forward_steps": every forward step run, the first sweep included,
    "writes": checkpoints stored, "reads": checkpoints restored}."""
    c = client._c if client is not None else None
    return _adjsnap.run_adjoint_online(c, name, state, advance, reverse, is_last, slots=slots,
                                       local=local, max_steps=max_steps)


class Client:
    """A session with adjsnapd. Methods may be called from any thread."""

    def __init__(self, socket: str = "", name: str = "python", map_host_tier: bool = True,
                 copy_threads: int = 0, wait_timeout: Optional[float] = None,
                 reconnect_timeout: Optional[float] = None):
        self._c = _adjsnap.Client(socket, name, map_host_tier, copy_threads=copy_threads,
                                wait_timeout=wait_timeout, reconnect_timeout=reconnect_timeout)

    def open_run(self, name: str, *, steps: int = 0, like: Optional[np.ndarray] = None,
                 bytes_per_step: int = 0, dtype=None, shape: Sequence[int] = (),
                 layers: str = "", keep: bool = False, block_when_full: bool = False,
                 codec: str = "none", codec_param: float = 0.0,
                 compress_at_ingest: bool = False, job: str = "",
                 check_finite: bool = False, overwrite: bool = False,
                 spool_class: str = "") -> "Run":
        """Opens (or attaches to) a run. `like=array` takes bytes, dtype and shape from an
        array; otherwise give `bytes_per_step` (and optionally `dtype`, `shape`).

        layers: "DiskHost", "Host", "Disk" or "NoLayers" (default: DiskHost when the daemon
        has a disk tier). keep: steps survive being fetched (checkpoint schedules re-read).
        codec: "none", "zfp-reversible" (lossless), "zfp-rate", "zfp-precision" or
        "zfp-accuracy", with `codec_param` as zfp takes it; "bitcomp", "bitcomp-lossy"
        (`codec_param`: the absolute error bound) and "ans" compress on the GPU, and adjsnapd
        refuses them for now (FailedPrecondition, naming the codec). job: the batch job the run
        belongs to (default $SLURM_JOB_ID); the Slurm epilog deletes a job's runs.
        check_finite: refuse pushes holding NaN or infinities (float32/float64 runs).
        overwrite: a push of a step already stored replaces it in the same request (for
        checkpoint slots a schedule reuses; not with a Device layer).
        spool_class: "local" (the node's spools) or "shared" (the shared spools) takes the
        run's steps on disk, a preference (the other class when it is full); "" (default):
        adjsnapd's reverse-order placement over both. Needs a Disk layer."""
        spec = RunSpec()
        spec.name = name
        spec.steps = steps
        if like is not None:
            like = np.asarray(like)
            bytes_per_step = bytes_per_step or like.nbytes
            dtype = like.dtype if dtype is None else dtype
            shape = shape or like.shape
        if bytes_per_step <= 0:
            raise ValueError(f"open_run {name!r}: give like=array or bytes_per_step > 0")
        spec.bytes_per_step = int(bytes_per_step)
        if dtype is not None:
            dt = np.dtype(dtype)
            if dt not in _DTYPES:
                raise ValueError(f"open_run {name!r}: dtype {dt} is not one adjsnapd records "
                                 f"(float32, float64, int32, int64, uint8)")
            spec.dtype = _DTYPES[dt]
        spec.shape = [int(n) for n in shape]
        spec.layers = layers
        spec.keep = keep
        spec.block_when_full = block_when_full
        if codec not in _CODECS:
            raise ValueError(f"open_run {name!r}: unknown codec {codec!r}; one of "
                             f"{', '.join(_CODECS)}")
        spec.codec = _CODECS[codec]
        spec.codec_param = float(codec_param)
        spec.compress_at_ingest = compress_at_ingest
        spec.job = job
        spec.check_finite = check_finite
        spec.overwrite = overwrite
        spec.spool_class = spool_class
        return Run(self, self._c.open_run(spec))

    def runs(self) -> list[RunInfo]:
        return self._c.runs()

    def run(self, name: str) -> "Run":
        """The existing run called `name`."""
        for info in self._c.runs():
            if info.name == name:
                return Run(self, info)
        raise NotFound(f"no run named '{name}'")

    def tiers(self) -> list[TierInfo]:
        """The daemon's tiers: budgets, use and measured bandwidths."""
        return self._c.tiers()

    @property
    def data_path(self) -> str:
        """"mapped" (one memcpy into daemon memory mapped here) or "ucx"."""
        return self._c.data_path

    @property
    def copy_threads(self) -> int:
        """Threads that copy one large array on the mapped path (see `connect`)."""
        return self._c.copy_threads

    @property
    def socket_path(self) -> str:
        return self._c.socket_path


class Run:
    """An open run: push and fetch its steps, locate and list them."""

    def __init__(self, client: Client, info: RunInfo):
        self.client = client
        self.info = info

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def bytes_per_step(self) -> int:
        return self.info.spec.bytes_per_step

    def push(self, step: int, array) -> Push:
        """Starts pushing `array` (C-contiguous, exactly bytes_per_step bytes) as `step`.
        Do not write to the array before `wait_released()` returns."""
        return self.client._c.push(self.info.run_id, step, array)

    def fetch_async(self, step: int, out) -> Fetch:
        """Starts filling `out` (writable, C-contiguous) with `step`; `wait()` returns it."""
        return self.client._c.fetch_async(self.info.run_id, step, out)

    def fetch(self, step: int, out=None):
        """Fills `out` with `step` in place and returns it. Without `out`, returns a new
        array of the run's dtype and shape."""
        if out is None:
            out = self.empty()
        return self.fetch_async(step, out).wait()

    def empty(self) -> np.ndarray:
        """An uninitialised array of the run's dtype and shape (bytes when unrecorded)."""
        spec = self.info.spec
        if spec.dtype in _NUMPY and spec.shape:
            return np.empty(tuple(spec.shape), _NUMPY[spec.dtype])
        return np.empty(spec.bytes_per_step, np.uint8)

    def prefetch(self, steps: Iterable[int]) -> int:
        """Asks the daemon to read these steps from disk into host memory ahead of use."""
        return self.client._c.prefetch(self.name, [int(s) for s in steps])

    def locate(self, step: int) -> Location:
        return self.client._c.locate(self.name, step)

    def snapshots(self) -> list[Location]:
        """Every stored step, in step order."""
        return self.client._c.snapshots(self.name)

    def delete_snapshot(self, step: int) -> None:
        self.client._c.delete_snapshot(self.name, step)

    def close(self) -> None:
        """No more pushes; the stored steps stay readable."""
        self.client._c.close_run(self.name)

    def delete(self) -> None:
        """Removes the run and every snapshot it holds."""
        self.client._c.delete_run(self.name)

    def __repr__(self) -> str:
        return f"<adjsnap.Run {self.name!r} id {self.info.run_id}>"
