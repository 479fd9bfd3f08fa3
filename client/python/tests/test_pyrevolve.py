"""AdjsnapStorage under pyrevolve's Revolver and MultiLevelRevolver with a toy solver whose
adjoint is checked against a store-all reference."""
import time

import numpy as np
import pytest

pyrevolve = pytest.importorskip("pyrevolve")

import adjsnap  # noqa: E402
from adjsnap.pyrevolve import AdjsnapStorage, tier_costs  # noqa: E402

NT = 60


class Field(pyrevolve.Checkpoint):
    """The solver state: two time levels, like a second-order wave equation's."""

    def __init__(self, n=257, contiguous=True):
        self.levels = np.zeros((2, n)) if contiguous else np.zeros((n, 2)).T
        self.levels[0, :] = np.sin(np.linspace(0, 3, n))

    @property
    def dtype(self):
        return np.float64

    @property
    def size(self):
        return self.levels.size

    def get_data(self, timestep):
        return [self.levels[0], self.levels[1]]

    def get_data_location(self, timestep):
        return self.get_data(timestep)


def step(levels, t):
    cur, prev = levels[0].copy(), levels[1].copy()
    levels[0] = 2 * cur - prev + 0.1 * (np.roll(cur, 1) - 2 * cur + np.roll(cur, -1)) + 1e-3 * t
    levels[1] = cur


class Forward(pyrevolve.Operator):
    def __init__(self, field):
        self.field = field

    def apply(self, t_start, t_end):
        for t in range(t_start, t_end):
            step(self.field.levels, t)


class Reverse(pyrevolve.Operator):
    """Accumulates a functional of the forward state at every step, in reverse order."""

    def __init__(self, field):
        self.field = field
        self.seen = []

    def apply(self, t_start, t_end):
        for t in range(t_end - 1, t_start - 1, -1):
            self.seen.append((t, self.field.levels[0].copy()))


def reference():
    """states[t]: the state after forward step t, what pyrevolve's reverse(t) sees."""
    levels = Field().levels
    states = []
    for t in range(NT):
        step(levels, t)
        states.append(levels[0].copy())
    return states


def check(rev, states):
    steps = [t for t, _ in rev.seen]
    assert steps == list(range(NT - 1, -1, -1))
    for t, state in rev.seen:
        np.testing.assert_array_equal(state, states[t])  # bit-exact: restored, not recomputed


@pytest.mark.parametrize("contiguous", [True, False], ids=["zero-copy", "packed"])
def test_revolver_with_adjsnap_storage_matches_store_all(client, contiguous):
    field = Field(contiguous=contiguous)
    fwd, rev = Forward(field), Reverse(field)
    wrp = pyrevolve.Revolver(field, fwd, rev, 6, NT)
    wrp.resetStorageList()
    storage = AdjsnapStorage(field.size, 6, np.float64, client=client, name=f"revolve-{contiguous}")
    wrp.addStorage(storage)
    wrp.apply_forward()
    storage.wait_stored()  # save returns once released; the catalog counts stored steps
    info = client.run(storage.run_name).info
    assert info.spec.keep
    assert 0 < info.snapshots <= 6 * (1 if not contiguous else 2)
    wrp.apply_reverse()
    check(rev, reference())
    assert wrp.profiler.timings  # pyrevolve timed its storage calls
    storage.close()
    with pytest.raises(adjsnap.NotFound):
        client.run(storage.run_name)


def test_multilevel_revolver_on_adjsnap_host_and_disk(client):
    field = Field()
    fwd, rev = Forward(field), Reverse(field)
    # Seed the disk tier's measured bandwidths so the costs are real, then use them.
    seed = client.open_run("seed-disk", steps=1, like=field.levels, layers="Disk", keep=True)
    seed.push(0, field.levels).wait_stored()
    deadline = time.monotonic() + 30
    while seed.locate(0).tier != adjsnap.Tier.DISK and time.monotonic() < deadline:
        time.sleep(0.01)
    seed.fetch(0)
    seed.delete()
    wd, rd = tier_costs(client, adjsnap.Tier.DISK, field.levels.nbytes, step_seconds=1e-2,
                        unmeasured=0, spool_class="local")  # 0: fail unless it was measured
    with pytest.raises(ValueError, match="spool class 'shared'"):  # this daemon has none
        tier_costs(client, adjsnap.Tier.DISK, field.levels.nbytes, 1e-2, spool_class="shared")
    assert wd > 0 and rd > 0
    ram = AdjsnapStorage(field.size, 3, np.float64, client=client, name="ml-ram", layers="Host")
    disk = AdjsnapStorage(field.size, 20, np.float64, client=client, name="ml-disk", layers="Disk",
                        spool_class="local", wd=wd, rd=rd)
    wrp = pyrevolve.MultiLevelRevolver(field, fwd, rev, NT, storage_list=[ram, disk])
    wrp.apply_forward()
    wrp.apply_reverse()
    check(rev, reference())
    ram.wait_stored()
    disk.wait_stored()
    # A Disk level's last saves are released before they are written: give the tiering thread
    # the time a loaded node needs to put them on disk.
    deadline = time.monotonic() + 30
    while (not all(l.on_disk for l in client.run("ml-disk").snapshots())
           and time.monotonic() < deadline):
        time.sleep(0.01)
    used = {s.run_name: client.run(s.run_name).snapshots() for s in (ram, disk)}
    assert used["ml-ram"] and used["ml-disk"]  # H-Revolve used both levels
    assert all(l.tier == adjsnap.Tier.HOST and not l.on_disk for l in used["ml-ram"])
    assert all(l.on_disk for l in used["ml-disk"])  # a read-back copy may also be in host
    assert client.run("ml-disk").info.spec.spool_class == "local"
    ram.close()
    disk.close()


def test_a_checkpoint_larger_than_declared_is_refused(client):
    field = Field()
    storage = AdjsnapStorage(10, 2, np.float64, client=client, name="too-small")
    with pytest.raises(ValueError, match="does not fit"):
        storage.save(0, field.get_data(0))
    with pytest.raises(KeyError, match="never saved"):
        storage.load(1, field.get_data(0))
