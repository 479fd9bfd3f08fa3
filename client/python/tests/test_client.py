"""The binding against a real adjsnapd: round trips, zero-copy in-place fetch, errors."""
import re
import threading
import time

import numpy as np
import pytest

import adjsnap


def field(t, shape=(48, 64), dtype=np.float32):
    rng = np.random.default_rng(t)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("map_host_tier", [True, False], ids=["mapped", "ucx"])
def test_forward_then_reverse_round_trips_every_step_byte_exact(daemon, map_host_tier):
    client = daemon.client(map_host_tier=map_host_tier)
    assert client.data_path == ("mapped" if map_host_tier else "ucx")
    u = np.empty((48, 64), np.float32)
    run = client.open_run(f"roundtrip-{client.data_path}", steps=20, like=u)
    for t in range(20):
        u[:] = field(t)
        run.push(t, u).wait_released()
    out = np.empty_like(u)
    for t in reversed(range(20)):
        assert run.fetch(t, out=out) is out
        np.testing.assert_array_equal(out, field(t))
    run.delete()


def test_large_arrays_are_copied_in_stripes_by_the_copy_threads(daemon, monkeypatch):
    # 12 MiB steps are over the 4 MiB at which libadjsnap splits a copy among its threads; the
    # odd length leaves a short last stripe.
    client = daemon.client(copy_threads=3)
    assert client.data_path == "mapped"
    assert client.copy_threads == 3
    u = np.empty(3 * 2**20 + 5, np.float32)
    run = client.open_run("stripes", steps=4, like=u)
    for t in range(4):
        u[:] = np.arange(u.size, dtype=np.float32) * (t + 1)
        run.push(t, u).wait_released()
    out = np.empty_like(u)
    for t in reversed(range(4)):
        run.fetch(t, out=out)
        np.testing.assert_array_equal(out, np.arange(u.size, dtype=np.float32) * (t + 1))
    run.delete()
    assert daemon.client(map_host_tier=False, copy_threads=3).copy_threads == 1  # UCX copies
    monkeypatch.setenv("ADJSNAP_COPY_THREADS", "lots")
    with pytest.raises(adjsnap.InvalidArgument, match="ADJSNAP_COPY_THREADS.*lots"):
        daemon.client()
    monkeypatch.setenv("ADJSNAP_COPY_THREADS", "2")
    assert daemon.client(copy_threads=3).copy_threads == 2
    for bad in (-1, 65):
        with pytest.raises(adjsnap.InvalidArgument, match=f"copy_threads {bad} is not in 0"):
            adjsnap.connect(daemon.socket, copy_threads=bad)


def test_fetch_fills_the_callers_array_in_place(client):
    a = field(1, (16, 16), np.float64)
    run = client.open_run("in-place", steps=1, like=a, keep=True)
    run.push(0, a).wait_stored()
    big = np.zeros((2, 16, 16), np.float64)
    view = big[1]  # a contiguous view into a larger array
    run.fetch(0, out=view)
    np.testing.assert_array_equal(big[1], a)
    np.testing.assert_array_equal(big[0], 0)
    fresh = run.fetch(0)
    assert fresh.dtype == np.float64 and fresh.shape == (16, 16)
    np.testing.assert_array_equal(fresh, a)
    run.delete()


def test_location_listing_and_run_metadata(client):
    a = field(2, (8, 32))
    run = client.open_run("listing", steps=3, like=a, keep=True)
    for t in range(3):
        run.push(t, field(10 + t, (8, 32))).wait_stored()
    locs = run.snapshots()
    assert [l.step for l in locs] == [0, 1, 2]
    assert all(l.tier == adjsnap.Tier.HOST and l.raw_bytes == a.nbytes for l in locs)
    # The daemon records each checksum in the background after the bytes are stored.
    deadline = time.monotonic() + 30
    while any(l.checksum is None for l in locs) and time.monotonic() < deadline:
        time.sleep(0.01)
        locs = run.snapshots()
    assert all(l.checksum is not None for l in locs)
    assert len({l.checksum for l in locs}) == 3  # three different fields
    assert run.locate(1).step == 1
    info = [r for r in client.runs() if r.name == "listing"][0]
    assert info.snapshots == 3 and info.spec.keep and list(info.spec.shape) == [8, 32]
    assert client.run("listing").info.run_id == run.info.run_id
    run.fetch(2)
    assert run.locate(2).tier == adjsnap.Tier.HOST  # keep: a fetch does not release it
    run.delete()
    with pytest.raises(adjsnap.NotFound):
        client.run("listing")


def test_run_and_tier_infos_say_what_they_hold_in_their_repr(client):
    a = field(3, (4, 8))
    run = client.open_run("repr-run", steps=2, like=a, keep=True)
    run.push(0, a).wait_stored()
    info = [r for r in client.runs() if r.name == "repr-run"][0]
    assert repr(info) == (f"<adjsnap.RunInfo 'repr-run' id {info.run_id} open, 1 snapshot of "
                          f"2 steps, {info.stored_bytes} B stored>")
    run.push(1, a).wait_stored()
    info = [r for r in client.runs() if r.name == "repr-run"][0]
    assert ", 2 snapshots of 2 steps, " in repr(info)
    host = [t for t in client.tiers() if t.tier == adjsnap.Tier.HOST][0]
    assert re.fullmatch(rf"<adjsnap.TierInfo host (1 snapshot|\d+ snapshots), {host.used_bytes} of "
                        rf"{host.budget_bytes} B used>", repr(host)), repr(host)
    # The host tier's fit covers the pushes' size, and no size far from every push.
    fit = host.write_fit
    assert fit.samples >= 2 and fit.covers(a.nbytes) and fit.seconds(a.nbytes) > 0, repr(fit)
    assert not fit.covers(1 << 40), repr(fit)
    run.delete()


def test_async_pushes_and_fetches_overlap_and_keep_their_arrays_alive(client):
    run = client.open_run("async", steps=8, bytes_per_step=4096 * 4, dtype=np.float32,
                          shape=(4096,))
    pushes = [run.push(t, field(t, (4096,))) for t in range(8)]  # arrays owned by handles only
    for p in pushes:
        p.wait_stored()
        assert p.released and p.stored
    outs = [np.empty(4096, np.float32) for _ in range(8)]
    fetches = [run.fetch_async(t, outs[t]) for t in reversed(range(8))]
    for f in fetches:
        f.wait()
        np.testing.assert_array_equal(outs[f.step], field(f.step, (4096,)))
    run.delete()


def test_errors_carry_the_daemons_message_and_the_daemon_keeps_serving(client):
    a = np.zeros(100, np.float32)
    run = client.open_run("errors", steps=2, like=a)
    with pytest.raises(adjsnap.InvalidArgument) as e:
        run.push(0, np.zeros(99, np.float32)).wait_stored()
    assert "400" in str(e.value) and "396" in str(e.value)
    assert e.value.code == "INVALID_ARGUMENT"
    assert isinstance(e.value, ValueError)  # also a builtin ValueError
    run.push(0, a).wait_stored()
    with pytest.raises(adjsnap.AlreadyExists):
        run.push(0, a).wait_stored()
    with pytest.raises(adjsnap.NotFound) as e:
        run.fetch(1)
    assert "step 1 of run 'errors' was never stored" in str(e.value)
    with pytest.raises(ValueError, match="C-contiguous"):
        run.push(1, np.zeros((100, 2), np.float32)[:, 0])
    with pytest.raises(ValueError, match="writable"):
        ro = np.zeros(100, np.float32)
        ro.flags.writeable = False
        run.fetch(0, out=ro)
    with pytest.raises(TypeError, match="buffer"):
        run.push(1, [0.0] * 100)

    with pytest.raises(ValueError, match="unknown codec"):
        client.open_run("bad-codec", like=a, codec="gzip")
    # The nvCOMP codecs open (adjsnapd stores their chunk frames as they come); a parameter that
    # does not fit the codec is refused, naming it.
    for codec, param in (("bitcomp", 0.0), ("bitcomp-lossy", 1e-4), ("ans", 0.0)):
        client.open_run("gpu-" + codec, like=a, codec=codec, codec_param=param).delete()
    with pytest.raises(adjsnap.InvalidArgument, match="error bound must be finite and > 0"):
        client.open_run("gpu-lossy-0", like=a, codec="bitcomp-lossy", codec_param=0.0)
    with pytest.raises(adjsnap.InvalidArgument, match="bitcomp is lossless and takes no parameter"):
        client.open_run("gpu-param", like=a, codec="bitcomp", codec_param=1.0)
    with pytest.raises(adjsnap.InvalidArgument, match="name"):
        client.open_run("bad name!", like=a)
    np.testing.assert_array_equal(run.fetch(0), a)  # nothing stored was lost
    run.delete()


def test_connecting_to_a_missing_socket_says_how_to_start_adjsnap(tmp_path):
    with pytest.raises(adjsnap.Unavailable) as e:
        adjsnap.connect(str(tmp_path / "nobody.sock"))
    assert "nobody.sock" in str(e.value)


def test_concurrent_runs_from_threads(client):
    errors = []

    def worker(i):
        try:
            run = client.open_run(f"thread-{i}", steps=10, like=np.empty(1024, np.float64))
            for t in range(10):
                run.push(t, np.full(1024, i * 100 + t, np.float64)).wait_released()
            for t in reversed(range(10)):
                assert run.fetch(t)[0] == i * 100 + t
            run.delete()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_an_overwrite_run_replaces_a_stored_step_with_one_push(client):
    a, b = field(0), field(1)
    run = client.open_run("slots", steps=2, like=a, keep=True, overwrite=True)
    assert run.info.spec.overwrite
    run.push(0, a).wait_stored()
    run.push(0, b).wait_stored()  # the slot reused: no delete_snapshot first
    np.testing.assert_array_equal(run.fetch(0), b)
    assert [loc.step for loc in run.snapshots()] == [0]
    run.push(0, a).wait_stored()
    np.testing.assert_array_equal(run.fetch(0), a)
    with pytest.raises(adjsnap.InvalidArgument, match="overwrite with layers HostDevice"):
        client.open_run("device-slots", steps=2, like=a, layers="HostDevice", overwrite=True)
    run.delete()


def test_a_checked_run_refuses_nan_naming_the_step(client):
    u = np.ones(64, np.float32)
    run = client.open_run("checked", steps=2, like=u, check_finite=True)
    u[40] = np.inf
    with pytest.raises(adjsnap.InvalidArgument, match="step 1 .*element 40"):
        run.push(1, u)
    u[40] = 0
    run.push(1, u).wait_stored()
    np.testing.assert_array_equal(run.fetch(1), u)
    run.delete()


def device_array(shape=(100,), typestr="<f4", readonly=False, strides=None):
    """An object exporting __cuda_array_interface__ as CuPy, Numba and PyTorch arrays do."""

    class DeviceArray:
        __cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (1 << 40, readonly),
                                    "strides": strides, "version": 3, "stream": 1}

    return DeviceArray()


def test_device_arrays_take_the_gpu_path(client):
    a = field(1, (100,))
    try:
        client.open_run("gpu-probe", like=a, layers="HostDevice").delete()
        pytest.skip("a GPU is usable here: the gpu-labelled C++ tests move device data")
    except adjsnap.FailedPrecondition as e:
        assert "no GPU is usable" in str(e)
    run = client.open_run("device-arrays", like=a)
    # Parsed and refused before any copy: layout first, then the missing GPU.
    with pytest.raises(ValueError, match="C-contiguous"):
        run.push(0, device_array(shape=(100, 2), strides=(16, 4)))
    with pytest.raises(ValueError, match="read-only"):
        run.fetch(0, out=device_array(readonly=True))
    with pytest.raises(adjsnap.FailedPrecondition, match="no GPU is usable"):
        run.push(0, device_array())
    with pytest.raises(adjsnap.FailedPrecondition, match="device fetch of step 0"):
        run.fetch(0, out=device_array())

    class DlpackOnly:
        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        run.push(0, DlpackOnly())
    run.push(0, a).wait_stored()  # nothing was reserved by the refused pushes
    np.testing.assert_array_equal(run.fetch(0), a)
    run.delete()


def test_a_wait_with_a_timeout_says_what_the_push_waits_for():
    """A push that cannot get room (a Host-only run that blocks when full, on a daemon with no
    disk tier) raises DeadlineExceeded past its timeout, naming the step and what adjsnapd
    reports it waits for; the push goes on and is stored once room comes."""
    from conftest import Daemon
    d = Daemon(host_mem="1M", extra=("--spool-dirs", "none"))
    try:
        client = d.client()
        u = np.ones(128 * 1024, np.float32)  # 512 KiB: two fill the host tier
        run = client.open_run("full", like=u, layers="Host", keep=True, block_when_full=True)
        for t in range(2):
            run.push(t, u).wait_stored()
        stuck = run.push(2, u)
        with pytest.raises(adjsnap.DeadlineExceeded) as e:
            stuck.wait_released(timeout=0.2)
        assert isinstance(e.value, TimeoutError)
        message = str(e.value)
        assert "push of step 2 of run id" in message
        assert "adjsnapd reports it has waited" in message and "host room for" in message
        with pytest.raises(ValueError, match="seconds >= 0"):
            stuck.wait_stored(timeout=-1)
        run.delete_snapshot(0)
        stuck.wait_stored(timeout=30)
    finally:
        d.stop()


def test_reconnect_timeout_zero_fails_at_once_when_adjsnap_is_gone():
    from conftest import Daemon
    d = Daemon()
    try:
        c = adjsnap.connect(d.socket, reconnect_timeout=0)
        assert c.runs() == []
    finally:
        d.stop()
    started = time.monotonic()
    with pytest.raises(adjsnap.Unavailable) as e:
        c.runs()
    # With the default (60 s) the call would wait for adjsnapd to come back.
    assert time.monotonic() - started < 10
    assert d.socket in str(e.value)


def test_a_run_on_the_local_spools_lands_there_and_a_bad_class_is_refused(client):
    a = field(0)
    run = client.open_run("on-local", steps=2, like=a, layers="Disk", spool_class="local")
    assert run.info.spec.spool_class == "local"
    run.push(0, a).wait_stored()
    deadline = time.monotonic() + 30
    while not run.locate(0).on_disk and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.locate(0).on_disk
    np.testing.assert_array_equal(run.fetch(0), a)
    run.delete()
    with pytest.raises(adjsnap.InvalidArgument, match="spool_class"):
        client.open_run("bad-class", steps=2, like=a, layers="Disk", spool_class="nvme")
    with pytest.raises(adjsnap.FailedPrecondition, match="no shared spools"):
        client.open_run("no-shared", steps=2, like=a, layers="Disk", spool_class="shared")
