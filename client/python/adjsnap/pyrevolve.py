"""pyrevolve storage in adjsnapd: checkpoints of a `Revolver` or `MultiLevelRevolver` live in
the node's adjsnapd daemon instead of the solver's own memory.

    from pyrevolve import Revolver, MultiLevelRevolver
    from adjsnap.pyrevolve import AdjsnapStorage, tier_costs

    wrp = Revolver(checkpoint, fwd, rev, n_checkpoints, nt)
    wrp.resetStorageList()
    wrp.addStorage(AdjsnapStorage(checkpoint.size, n_checkpoints, checkpoint.dtype,
                                client=adjsnap.connect(), name="shot-17"))

    # Two levels, as H-Revolve sees them: adjsnapd's host memory and its disk.
    wd, rd = tier_costs(client, adjsnap.Tier.DISK, checkpoint.nbytes, step_seconds)
    levels = [AdjsnapStorage(size, 8, dtype, client=client, name="shot-17-ram", layers="Host"),
              AdjsnapStorage(size, 64, dtype, client=client, name="shot-17-disk", layers="Disk",
                           wd=wd, rd=rd)]
    wrp = MultiLevelRevolver(checkpoint, fwd, rev, nt, storage_list=levels)

A checkpoint is the list of arrays `Checkpoint.get_data` returns. When they are C-contiguous
and of equal size (Devito's DevitoCheckpoint gives one contiguous slot per time level) each is
pushed from, and fetched into, its own memory as one adjsnapd step; otherwise they are packed
into one staging buffer per checkpoint.
"""
from __future__ import annotations

import itertools
import os

import numpy as np
from pyrevolve.storage import Storage

from . import Client, Tier, connect

__all__ = ["AdjsnapStorage", "tier_costs"]

_names = itertools.count()


def tier_costs(client: Client, tier: Tier, nbytes: int, step_seconds: float,
               unmeasured: float = 1.0, spool_class: str = ""):
    """(wd, rd) for pyrevolve: the time adjsnapd measured to write and read `nbytes` on `tier`
    (its fit, latency + bytes / bandwidth, over the tier's recent transfers: TierInfo.write_fit,
    read_fit), in units of one forward step (`step_seconds`); the first entry of `tier` (for the
    disk tier, its local spools), or the one of `spool_class` ("local", "shared"). A direction whose fit does not cover `nbytes` (no transfer
    within 2x of that size among the recent ones) costs `unmeasured` steps: pyrevolve's
    H-Revolve cannot schedule levels whose costs are all zero, and a rate taken from other
    sizes would mislead it."""
    if step_seconds <= 0:
        raise ValueError("tier_costs: step_seconds must be > 0")
    for t in client.tiers():
        if t.tier == tier and (not spool_class or t.spool_class == spool_class):
            def cost(fit):
                return fit.seconds(nbytes) / step_seconds if fit.covers(nbytes) else unmeasured
            return cost(t.write_fit), cost(t.read_fit)
    raise ValueError(f"tier_costs: this adjsnapd has no {tier.name.lower()} tier"
                     + (f" of spool class {spool_class!r}" if spool_class else ""))


class AdjsnapStorage(Storage):
    """A pyrevolve Storage whose `n_ckp` checkpoints of `size_ckp` elements of `dtype` are
    snapshots of one adjsnapd run (opened with keep, since Revolve reads a checkpoint more than
    once, and overwrite, so a slot Revolve reuses is replaced by its push in one request;
    deleted when the storage is closed or collected).

    layers: the run's tiers ("Host", "Disk", "DiskHost"; default: the daemon's). spool_class:
    with a Disk layer, "local" or "shared" keeps the checkpoints on that class of spools, so a
    level's costs (`tier_costs(..., spool_class=)`) are the ones it pays; "" lets adjsnapd
    place them. wd, rd: the write and read costs pyrevolve's H-Revolve uses (see
    `tier_costs`)."""

    def __init__(self, size_ckp, n_ckp, dtype, profiler=None, wd=0, rd=0, *,
                 client: Client | None = None, name: str | None = None, layers: str = "",
                 codec: str = "none", codec_param: float = 0.0, spool_class: str = ""):
        super().__init__(size_ckp, n_ckp, dtype, profiler, wd=wd, rd=rd, name="AdjsnapStorage")
        self.client = client or connect()
        self.run_name = name or f"pyrevolve-{os.getpid()}-{next(_names)}"
        self._options = dict(layers=layers, codec=codec, codec_param=codec_param,
                             spool_class=spool_class)
        self.run = None
        self._parts = 0         # arrays per checkpoint, fixed by the first save
        self._packed = False    # True: one staging buffer per checkpoint
        self._shapes = {}
        self._saved = set()
        self._unstored = {}     # step -> its latest push, not yet known to be in the catalog

    def _open(self, arrays):
        itemsize = np.dtype(self.dtype).itemsize
        sizes = {a.nbytes for a in arrays}
        contiguous = all(a.flags.c_contiguous for a in arrays)
        self._packed = not contiguous or len(sizes) != 1
        self._parts = len(arrays)
        total = sum(a.nbytes for a in arrays)
        if total > self.size_ckp * itemsize:
            raise ValueError(f"AdjsnapStorage: a checkpoint of {total} bytes does not fit "
                             f"size_ckp={self.size_ckp} elements of {np.dtype(self.dtype)}")
        if self._packed:
            self._staging = np.empty(total, np.uint8)
            self.run = self.client.open_run(self.run_name, steps=self.n_ckp,
                                            bytes_per_step=total, keep=True, overwrite=True,
                                            **self._options)
        else:
            self.run = self.client.open_run(self.run_name, steps=self.n_ckp * self._parts,
                                            like=arrays[0], keep=True, overwrite=True,
                                            **self._options)

    def save(self, key, data_pointers):
        arrays = [np.asarray(p) for p in data_pointers]
        if self.run is None:
            self._open(arrays)
        if len(arrays) != self._parts:
            raise ValueError(f"AdjsnapStorage: checkpoint {key} has {len(arrays)} "
                             f"array{'' if len(arrays) == 1 else 's'}, the first had "
                             f"{self._parts}")
        # A slot Revolve reuses is replaced by the push itself (the run has overwrite).
        if self._packed:
            flat = [a.reshape(-1).view(np.uint8) if a.flags.c_contiguous
                    else np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
            np.concatenate(flat, out=self._staging)
            pushes = {key: self.run.push(key, self._staging)}
        else:
            pushes = {key * self._parts + i: self.run.push(key * self._parts + i, a)
                      for i, a in enumerate(arrays)}
        for p in pushes.values():
            p.wait_released()  # Revolve may overwrite the arrays as soon as save returns
        self._unstored.update(pushes)
        self._shapes[key] = [a.shape for a in arrays]
        self._saved.add(key)

    def load(self, key, locations):
        if key not in self._saved:
            raise KeyError(f"AdjsnapStorage: checkpoint {key} was never saved")
        if self._packed:
            self.run.fetch(key, out=self._staging)
            offset = 0
            for loc in locations:
                n = loc.nbytes
                src = self._staging[offset:offset + n].view(loc.dtype).reshape(loc.shape)
                np.copyto(loc, src)
                offset += n
        else:
            fetches = [self.run.fetch_async(key * self._parts + i, loc)
                       for i, loc in enumerate(locations)]
            for f in fetches:
                f.wait()

    def wait_stored(self, timeout=None):
        """Waits until every checkpoint saved so far is stored: in adjsnapd's catalog, where
        `run.info` counts it and a daemon restart keeps it (save waits only for its arrays to
        be released)."""
        pending, self._unstored = self._unstored, {}
        for p in pending.values():
            p.wait_stored(timeout)

    def close(self):
        """Deletes the adjsnapd run and every checkpoint in it."""
        if self.run is not None:
            self.run.delete()
            self.run = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # the daemon may be gone at interpreter exit
            pass
