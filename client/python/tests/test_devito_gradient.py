"""The acoustic FWI gradient of a small 2D model (Devito's examples/seismic setup) computed
three ways: all wavefields in memory, pyrevolve checkpoints in snapd (SnapdStorage), and
store-all streaming through snapd (snapd.devito.Streamer)."""
import time

import numpy as np
import pytest

devito = pytest.importorskip("devito")
pytest.importorskip("scipy")  # examples.seismic needs it

from devito import (CheckpointOperator, DevitoCheckpoint, Function,  # noqa: E402
                    TimeFunction, configuration)

configuration["safe-math"] = True  # no reassociation: the three ways are comparable bit for bit
configuration["log-level"] = "WARNING"

from examples.seismic import AcquisitionGeometry, Receiver, demo_model  # noqa: E402
from examples.seismic.acoustic import AcousticWaveSolver  # noqa: E402
from pyrevolve import Revolver  # noqa: E402

import snapd  # noqa: E402
from snapd.devito import Streamer  # noqa: E402
from snapd.pyrevolve import SnapdStorage  # noqa: E402

# Lossy zfp (accuracy mode) keeps every wavefield value within this absolute error; the
# gradient it gives must be within GRADIENT_TOLERANCE (relative, L2) of the exact one.
ZFP_ACCURACY = 1e-4
GRADIENT_TOLERANCE = 1e-5


class Problem:
    """A circle anomaly in a 2D acoustic model, one shot, 31 receivers; the gradient of the
    L2 misfit of a homogeneous starting model against the true one."""

    def __init__(self):
        kw = dict(origin=(0.0, 0.0), shape=(61, 61), spacing=(10.0, 10.0), nbl=20)
        self.model = demo_model("circle-isotropic", vp_circle=3.0, vp_background=2.5, **kw)
        self.model0 = demo_model("circle-isotropic", vp_circle=2.5, vp_background=2.5,
                                 grid=self.model.grid, **kw)
        rec = np.empty((31, 2))
        rec[:, 0] = np.linspace(0.0, 600.0, 31)
        rec[:, 1] = 580.0
        self.geometry = AcquisitionGeometry(self.model, rec, np.array([[300.0, 20.0]]),
                                            t0=0.0, tn=400.0, f0=0.010, src_type="Ricker")
        self.solver = AcousticWaveSolver(self.model, self.geometry, space_order=4)
        self.nt = self.geometry.nt
        self.dt = self.solver.dt
        observed, _, _ = self.solver.forward(vp=self.model.vp)
        synthetic, self.u_saved, _ = self.solver.forward(vp=self.model0.vp, save=True)
        self.residual = Receiver(name="residual", grid=self.model.grid,
                                 time_range=self.geometry.time_axis,
                                 coordinates=self.geometry.rec_positions)
        self.residual.data[:] = synthetic.data - observed.data
        # The forward and gradient operators with save=True run t = 1 .. nt-2.
        self.time_m, self.time_M = 1, self.nt - 2

    def new(self, name, cls=Function):
        kw = {} if cls is Function else dict(time_order=2, space_order=4)
        return cls(name=name, grid=self.model.grid, **kw)

    def in_memory(self):
        grad = self.new("grad")
        self.solver.jacobian_adjoint(self.residual, self.u_saved, vp=self.model0.vp, grad=grad)
        return grad.data.copy()


@pytest.fixture(scope="module")
def problem():
    return Problem()


@pytest.fixture(scope="module")
def exact(problem):
    grad = problem.in_memory()
    assert np.linalg.norm(grad) > 0
    return grad


def revolve_gradient(p, client, name, n_checkpoints, layers=""):
    u, v, grad = p.new("u", TimeFunction), p.new("v", TimeFunction), p.new("grad")
    cp = DevitoCheckpoint([u])
    fwd = CheckpointOperator(p.solver.op_fwd(save=False), src=p.geometry.src, u=u,
                             vp=p.model0.vp, dt=p.dt)
    rev = CheckpointOperator(p.solver.op_grad(save=False), u=u, v=v, rec=p.residual,
                             grad=grad, vp=p.model0.vp, dt=p.dt)
    wrp = Revolver(cp, fwd, rev, n_checkpoints, p.nt - 2)
    wrp.resetStorageList()
    storage = SnapdStorage(cp.size, n_checkpoints, cp.dtype, client=client, name=name,
                           layers=layers)
    wrp.addStorage(storage)
    wrp.apply_forward()
    stored = client.run(name).info.snapshots
    wrp.apply_reverse()
    storage.close()
    return grad.data.copy(), stored


def streamed_gradient(p, client, name, **run_options):
    u, v, grad = p.new("u", TimeFunction), p.new("v", TimeFunction), p.new("grad")
    stream = Streamer(client, u, name, **run_options)
    stream.forward(p.solver.op_fwd(save=False), p.time_m, p.time_M,
                   src=p.geometry.src, u=u, vp=p.model0.vp, dt=p.dt)
    snapshots = stream.run.snapshots()
    stream.adjoint(p.solver.op_grad(save=False), p.time_M, p.time_m,
                   rec=p.residual, u=u, v=v, grad=grad, vp=p.model0.vp, dt=p.dt)
    # The daemon releases a read-once step when the client reports it has the bytes, which
    # arrives just after the fetch returns: wait (bounded, generously) for the last ones to go.
    deadline = time.monotonic() + 30
    while (left := stream.run.snapshots()) and time.monotonic() < deadline:
        time.sleep(0.01)
    stream.delete()
    return grad.data.copy(), snapshots, left


@pytest.mark.parametrize("layers", ["Host", "Disk"])
def test_pyrevolve_with_snapd_storage_gives_the_in_memory_gradient_exactly(
        problem, exact, client, layers):
    grad, stored = revolve_gradient(problem, client, f"fwi-revolve-{layers}", 12, layers)
    assert stored > 0
    np.testing.assert_array_equal(grad, exact)


@pytest.mark.parametrize("layers", ["Host", "Disk"])
def test_streaming_through_snapd_gives_the_in_memory_gradient_exactly(
        problem, exact, client, layers):
    grad, snapshots, left = streamed_gradient(problem, client, f"fwi-stream-{layers}",
                                              layers=layers)
    # Every wavefield u[0 .. nt-1] went through snapd, and each was read once and released.
    assert [s.step for s in snapshots] == list(range(problem.nt))
    assert left == []
    np.testing.assert_array_equal(grad, exact)


def test_streaming_losslessly_compressed_gives_the_in_memory_gradient_exactly(
        problem, exact, client):
    grad, snapshots, left = streamed_gradient(problem, client, "fwi-zfp-reversible",
                                              codec="zfp-reversible", compress_at_ingest=True)
    assert any(s.codec == snapd.Codec.ZFP_REVERSIBLE for s in snapshots)
    assert [s.step for s in snapshots] == list(range(problem.nt))
    assert left == []
    np.testing.assert_array_equal(grad, exact)


def test_streaming_lossy_zfp_stays_within_the_stated_tolerance(problem, exact, client):
    grad, snapshots, left = streamed_gradient(problem, client, "fwi-zfp-accuracy",
                                              codec="zfp-accuracy", codec_param=ZFP_ACCURACY,
                                              compress_at_ingest=True)
    assert left == []
    compressed = [s for s in snapshots if s.codec == snapd.Codec.ZFP_ACCURACY]
    assert compressed
    assert sum(s.stored_bytes for s in compressed) < sum(s.raw_bytes for s in compressed)
    error = np.linalg.norm(grad - exact) / np.linalg.norm(exact)
    assert not np.array_equal(grad, exact)  # the codec did lose bits
    print(f"zfp accuracy {ZFP_ACCURACY}: gradient relative L2 error {error:.2e}, "
          f"{sum(s.raw_bytes for s in compressed) / sum(s.stored_bytes for s in compressed):.1f}x")
    assert error < GRADIENT_TOLERANCE, error

