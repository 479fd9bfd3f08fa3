"""Device arrays (CuPy-style objects exporting __cuda_array_interface__) through libadjsnap's device
push and fetch paths on a machine without a GPU: the host copy engine (tests/support), which the
C++ device tests install the same way, is built here into a small library against the package's
own libadjsnap (host_engine_shim.cc) and installed in a fresh Python process before its first
client connects. Its "device" memory is ordinary memory the engine hands out, so the test reads
what a fetch wrote and writes what a push sends. On a GPU the gpu-labelled C++ tests move real
device data; this one checks the Python layer over the same paths."""
import ctypes
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import adjsnap

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    """The shim library, built against the installed package's libadjsnap."""
    compiler = os.environ.get("CXX") or shutil.which("c++")
    assert compiler, "a C++ compiler is needed to build the host copy engine for this test"
    package = pathlib.Path(adjsnap.__file__).parent
    out = tmp_path_factory.mktemp("shim") / "libadjsnap_host_engine.so"
    cmd = [compiler, "-std=c++20", "-O1", "-shared", "-fPIC",
           "-I", ROOT / "tests/support", "-I", ROOT / "client/src", "-I", ROOT / "client/include",
           "-I", ROOT / "kernels/include", "-I", ROOT / "proto",
           pathlib.Path(__file__).with_name("host_engine_shim.cc"),
           ROOT / "tests/support/host_copy_engine.cc",
           "-L", package, "-l:libadjsnap.so", f"-Wl,-rpath,{package}", "-o", out]
    subprocess.run([str(c) for c in cmd], check=True, timeout=300)
    return out


SOLVER = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import adjsnap  # loads the package's libadjsnap, which the shim then shares

    shim = ctypes.CDLL(sys.argv[1])
    shim.adjsnap_test_install_host_engine.argtypes = [ctypes.c_uint64]
    shim.adjsnap_test_device_allocate.argtypes = [ctypes.c_uint64]
    shim.adjsnap_test_device_allocate.restype = ctypes.c_void_p
    shim.adjsnap_test_device_release.argtypes = [ctypes.c_void_p]
    shim.adjsnap_test_copies_into_pinned.restype = ctypes.c_uint64
    shim.adjsnap_test_copies_from_pinned.restype = ctypes.c_uint64
    assert shim.adjsnap_test_install_host_engine(1 << 30) == 1

    N, SHAPE = 12, (256, 1024)
    BYTES = 4 * SHAPE[0] * SHAPE[1]

    class DeviceArray:
        # What CuPy exports: a float32 array in the engine's device memory, on stream 1 (CUDA's
        # legacy default stream, the engine's null one).
        def __init__(self, ptr, readonly=False):
            self.ptr = ptr
            self.__cuda_array_interface__ = {"shape": SHAPE, "typestr": "<f4",
                                             "data": (ptr, readonly), "strides": None,
                                             "version": 3, "stream": 1}

        def view(self):  # the bytes, read from the host (the engine's memory is ordinary)
            return np.ctypeslib.as_array(ctypes.cast(self.ptr, ctypes.POINTER(ctypes.c_float)),
                                         shape=SHAPE)

    def device(fill=None):
        ptr = shim.adjsnap_test_device_allocate(BYTES)
        assert ptr, "the host engine gave no device memory"
        a = DeviceArray(ptr)
        if fill is not None:
            a.view()[...] = fill
        return a

    def state(t):
        return (np.arange(SHAPE[0] * SHAPE[1], dtype=np.float32).reshape(SHAPE) * 0.5 + t)

    client = adjsnap.connect(sys.argv[2])
    host = client.open_run("device-py-host", steps=N, like=state(0), layers="Host", keep=True)
    pooled = client.open_run("device-py-pool", steps=N, like=state(0), layers="HostDevice",
                            keep=True)
    assert pooled.info.device_boundary < N, "the device pool holds the newest steps"
    sources = [device(state(t)) for t in range(N)]
    for run in (host, pooled):
        pushes = [run.push(t, sources[t]) for t in range(N)]
        for p in pushes:
            p.wait_stored()
    into_pinned = shim.adjsnap_test_copies_into_pinned()
    assert into_pinned >= N, f"{into_pinned} device-to-host copies reached the mapped tier"

    out = device()
    for run in (host, pooled):
        for t in reversed(range(N)):
            run.fetch(t, out=out)
            np.testing.assert_array_equal(out.view(), state(t), err_msg=f"{run.name} step {t}")
            # Pushed from device memory, fetched into host memory: the same bytes.
            np.testing.assert_array_equal(run.fetch(t), state(t))
    assert shim.adjsnap_test_copies_from_pinned() > 0
    for run in (host, pooled):
        run.delete()
    del run, host, pooled, client  # the client frees its device pool while the engine is in
    for a in sources + [out]:
        shim.adjsnap_test_device_release(a.ptr)
    print("device arrays exact")
""")


def test_device_arrays_round_trip_through_the_host_engine(daemon, shim):
    env = dict(os.environ, UCX_NET_DEVICES=os.environ.get("UCX_NET_DEVICES", "lo"))
    done = subprocess.run([sys.executable, "-P", "-c", SOLVER, str(shim), daemon.socket],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "device arrays exact" in done.stdout
