"""The acoustic FWI gradient of a small 2D model (Devito's examples/seismic setup) computed
three ways: all wavefields in memory, pyrevolve checkpoints in adjsnapd (AdjsnapStorage), and
store-all streaming through adjsnapd (adjsnap.devito.Streamer)."""
import time

import numpy as np
import pytest

devito = pytest.importorskip("devito")
pytest.importorskip("scipy")  # examples.seismic needs it

from devito import (CheckpointOperator, DevitoCheckpoint, Function, Inc,  # noqa: E402
                    Operator, TimeFunction, configuration)

configuration["safe-math"] = True  # no reassociation: the three ways are comparable bit for bit
configuration["log-level"] = "WARNING"

from examples.seismic import AcquisitionGeometry, Receiver, demo_model  # noqa: E402
from examples.seismic.acoustic import AcousticWaveSolver  # noqa: E402
from examples.seismic.acoustic.operators import iso_stencil  # noqa: E402
from pyrevolve import Revolver  # noqa: E402

import adjsnap  # noqa: E402
from adjsnap.devito import AdjsnapWarning, Streamer, block_buffer  # noqa: E402
from conftest import Daemon  # noqa: E402
from adjsnap.pyrevolve import AdjsnapStorage  # noqa: E402

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

    def operators(self, fields, v, grads, scales):
        """The forward and gradient operators of the acoustic solver (examples.seismic, OT2)
        over our own wavefields: `fields` are driven by the source times each scale, and
        grads[i] -= fields[i] / scales[i] * v.dt2. The examples' operators make their own u,
        which cannot carry a block buffer."""
        s, m = self.model.grid.stepping_dim.spacing, self.model.m
        src, rec = self.geometry.src, self.geometry.rec
        forward = []
        for u, k in zip(fields, scales):
            forward += iso_stencil(u, self.model, "OT2")
            forward += src.inject(field=u.forward, expr=k * src * s**2 / m)
        adjoint = iso_stencil(v, self.model, "OT2", forward=False)
        adjoint += rec.inject(field=v.backward, expr=rec * s**2 / m)
        adjoint += [Inc(g, -(u / k) * v.dt2) for u, g, k in zip(fields, grads, scales)]
        return (Operator(forward, subs=self.model.spacing_map, name="Forward"),
                Operator(adjoint, subs=self.model.spacing_map, name="Gradient"))

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
    storage = AdjsnapStorage(cp.size, n_checkpoints, cp.dtype, client=client, name=name,
                           layers=layers)
    wrp.addStorage(storage)
    wrp.apply_forward()
    storage.wait_stored()  # save returns once released; the catalog counts stored steps
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
def test_pyrevolve_with_adjsnap_storage_gives_the_in_memory_gradient_exactly(
        problem, exact, client, layers):
    grad, stored = revolve_gradient(problem, client, f"fwi-revolve-{layers}", 12, layers)
    assert stored > 0
    np.testing.assert_array_equal(grad, exact)


@pytest.mark.parametrize("layers", ["Host", "Disk"])
def test_streaming_through_adjsnap_gives_the_in_memory_gradient_exactly(
        problem, exact, client, layers):
    grad, snapshots, left = streamed_gradient(problem, client, f"fwi-stream-{layers}",
                                              layers=layers)
    # Every wavefield u[0 .. nt-1] went through adjsnapd, and each was read once and released.
    assert [s.step for s in snapshots] == list(range(problem.nt))
    assert left == []
    np.testing.assert_array_equal(grad, exact)


def test_streaming_losslessly_compressed_gives_the_in_memory_gradient_exactly(
        problem, exact, client):
    grad, snapshots, left = streamed_gradient(problem, client, "fwi-zfp-reversible",
                                              codec="zfp-reversible", compress_at_ingest=True)
    assert any(s.codec == adjsnap.Codec.ZFP_REVERSIBLE for s in snapshots)
    assert [s.step for s in snapshots] == list(range(problem.nt))
    assert left == []
    np.testing.assert_array_equal(grad, exact)


def test_a_codec_never_applied_is_said_not_silent(problem, exact, client):
    """Compressed on demotion, a run that fits in host memory is never compressed: the
    Streamer warns, and the run's status counts no compressed step."""
    with pytest.warns(AdjsnapWarning, match=r"none of its \d+ wavefields was compressed"):
        grad, snapshots, left = streamed_gradient(problem, client, "fwi-zfp-unapplied",
                                                  codec="zfp-reversible", layers="DiskHost")
    assert all(s.codec == adjsnap.Codec.NONE for s in snapshots)
    assert left == []
    np.testing.assert_array_equal(grad, exact)


def test_streaming_lossy_zfp_stays_within_the_stated_tolerance(problem, exact, client):
    grad, snapshots, left = streamed_gradient(problem, client, "fwi-zfp-accuracy",
                                              codec="zfp-accuracy", codec_param=ZFP_ACCURACY,
                                              compress_at_ingest=True)
    assert left == []
    compressed = [s for s in snapshots if s.codec == adjsnap.Codec.ZFP_ACCURACY]
    assert compressed
    assert sum(s.stored_bytes for s in compressed) < sum(s.raw_bytes for s in compressed)
    error = np.linalg.norm(grad - exact) / np.linalg.norm(exact)
    assert not np.array_equal(grad, exact)  # the codec did lose bits
    print(f"zfp accuracy {ZFP_ACCURACY}: gradient relative L2 error {error:.2e}, "
          f"{sum(s.raw_bytes for s in compressed) / sum(s.stored_bytes for s in compressed):.1f}x")
    assert error < GRADIENT_TOLERANCE, error



def block_streamed_gradients(p, client, name, block, n_fields=1, **options):
    """Streams n_fields wavefields (the second driven by twice the source) `block` steps per
    operator call; returns the gradients, the snapshots each run
    held after the forward pass, and the streamer."""
    save = block_buffer(block, 2) if block else None
    fields = [TimeFunction(name=f"u{i}", grid=p.model.grid, time_order=2, space_order=4,
                           save=save) for i in range(n_fields)]
    v = p.new("v", TimeFunction)
    grads = [p.new(f"grad{i}") for i in range(n_fields)]
    scales = [2.0**i for i in range(n_fields)]
    fwd, adj = p.operators(fields, v, grads, scales)
    stream = Streamer(client, fields if n_fields > 1 else fields[0], name, **options)
    fields_kw = {f.name: f for f in fields}
    stream.forward(fwd, p.time_m, p.time_M, src=p.geometry.src, vp=p.model0.vp, dt=p.dt,
                   **fields_kw)
    held = [run.snapshots() for run in stream.runs]
    stream.adjoint(adj, p.time_M, p.time_m, rec=p.residual, v=v, vp=p.model0.vp, dt=p.dt,
                   **fields_kw, **{g.name: g for g in grads})
    return [g.data.copy() for g in grads], held, stream


def wait_released(run, deadline_s=30):
    """The steps a read-once run still holds once the releases of its last fetches arrived."""
    deadline = time.monotonic() + deadline_s
    while (left := run.snapshots()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


@pytest.mark.parametrize("block", [1, 7, 32])
def test_block_streaming_gives_the_in_memory_gradient_exactly(problem, exact, client, block):
    grads, held, stream = block_streamed_gradients(problem, client, f"fwi-block-{block}", block)
    assert stream.block == block and stream.slots == 2 * block + 2
    assert [s.step for s in held[0]] == list(range(problem.nt))
    assert wait_released(stream.run) == []
    np.testing.assert_array_equal(grads[0], exact)
    stream.close()
    assert "fwi-block-%d" % block not in [r.name for r in client.runs()]


def in_memory_gradients(p, n_fields):
    """The gradients of block_streamed_gradients' operators with every wavefield saved in
    memory (save=nt), in one call each way: what streaming must give, bit for bit."""
    fields = [TimeFunction(name=f"u{i}", grid=p.model.grid, time_order=2, space_order=4,
                           save=p.nt) for i in range(n_fields)]
    v = p.new("v", TimeFunction)
    grads = [p.new(f"grad{i}") for i in range(n_fields)]
    fwd, adj = p.operators(fields, v, grads, [2.0**i for i in range(n_fields)])
    fields_kw = {f.name: f for f in fields}
    fwd.apply(time_m=p.time_m, time_M=p.time_M, src=p.geometry.src, vp=p.model0.vp, dt=p.dt,
              **fields_kw)
    adj.apply(time_m=p.time_m, time_M=p.time_M, rec=p.residual, v=v, vp=p.model0.vp, dt=p.dt,
              **fields_kw, **{g.name: g for g in grads})
    return [g.data.copy() for g in grads]


def test_several_fields_stream_together_each_to_its_own_run(problem, client):
    expected = in_memory_gradients(problem, 2)
    assert np.linalg.norm(expected[1]) > 0
    grads, held, stream = block_streamed_gradients(problem, client, "fwi-two", 8, n_fields=2)
    assert [r.name for r in stream.runs] == ["fwi-two.u0", "fwi-two.u1"]
    for snaps in held:
        assert [s.step for s in snaps] == list(range(problem.nt))
    assert all(wait_released(r) == [] for r in stream.runs)
    np.testing.assert_array_equal(grads[0], expected[0])
    np.testing.assert_array_equal(grads[1], expected[1])
    stream.close()
    assert not [r for r in client.runs() if r.name.startswith("fwi-two")]


def test_a_kept_stream_serves_a_second_adjoint_and_outlives_its_with_block(problem, exact,
                                                                          client):
    save = block_buffer(4, 2)
    u = TimeFunction(name="u0", grid=problem.model.grid, time_order=2, space_order=4, save=save)
    v = problem.new("v", TimeFunction)
    fwd, adj = problem.operators([u], v, [problem.new("grad0")], [1.0])
    with Streamer(client, u, "fwi-kept", keep=True) as stream:
        stream.forward(fwd, problem.time_m, problem.time_M, src=problem.geometry.src,
                       vp=problem.model0.vp, dt=problem.dt, u0=u)
        for _ in range(2):  # the second adjoint reads every step again
            grad = problem.new("grad0")
            v.data_with_halo[:] = 0
            stream.adjoint(adj, problem.time_M, problem.time_m, rec=problem.residual, v=v,
                           vp=problem.model0.vp, dt=problem.dt, u0=u, grad0=grad)
            np.testing.assert_array_equal(grad.data, exact)
            assert len(stream.run.snapshots()) == problem.nt
    assert "fwi-kept" in [r.name for r in client.runs()]  # kept past the with block
    stream.delete()
    assert "fwi-kept" not in [r.name for r in client.runs()]

    with Streamer(client, u, "fwi-once") as stream:  # without keep, the with block deletes it
        stream.forward(fwd, problem.time_m, problem.time_M, src=problem.geometry.src,
                       vp=problem.model0.vp, dt=problem.dt, u0=u)
        assert "fwi-once" in [r.name for r in client.runs()]
    assert "fwi-once" not in [r.name for r in client.runs()]


def test_check_finite_reaches_the_run_through_the_streamer(problem, client):
    u = TimeFunction(name="u0", grid=problem.model.grid, time_order=2, space_order=4,
                     save=block_buffer(4, 2))
    v = problem.new("v", TimeFunction)
    fwd, _ = problem.operators([u], v, [problem.new("grad0")], [1.0])
    u.data_with_halo[:] = 0
    u.data_with_halo[0, 30, 30] = np.nan  # u[0], the first step pushed
    with Streamer(client, u, "fwi-nan", check_finite=True) as stream:
        with pytest.raises(adjsnap.InvalidArgument, match="step 0"):
            stream.forward(fwd, problem.time_m, problem.time_M, src=problem.geometry.src,
                           vp=problem.model0.vp, dt=problem.dt, u0=u)
    assert "fwi-nan" not in [r.name for r in client.runs()]


def test_compressed_at_ingest_a_stream_larger_than_the_host_tier_spills_and_comes_back(
        problem, exact):
    """The run is 8 MB raw, zfp-reversible about half of that, the host tier 2 MiB: most
    steps must go to the spool, compressed, and come back exact."""
    d = Daemon(host_mem="2M")
    try:
        client = d.client()
        grads, held, stream = block_streamed_gradients(
            problem, client, "fwi-ingest-spill", 8, codec="zfp-reversible",
            compress_at_ingest=True, keep=True)
        snaps = held[0]
        assert [s.step for s in snaps] == list(range(problem.nt))
        on_disk = [s for s in snaps if s.tier == adjsnap.Tier.DISK]
        assert len(on_disk) > problem.nt // 2
        assert all(s.codec == adjsnap.Codec.ZFP_REVERSIBLE for s in on_disk)
        np.testing.assert_array_equal(grads[0], exact)
        stream.delete()
        assert client.runs() == []
    finally:
        d.stop()
