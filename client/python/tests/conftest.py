"""A real snapd for the Python tests: one daemon per test module, on a private socket.

The daemon binary is $SNAPD_BINARY, else build/daemon/snapd or build-tests/daemon/snapd of
this repository."""
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

import snapd

REPO = pathlib.Path(__file__).resolve().parents[3]


def snapd_binary() -> str:
    env = os.environ.get("SNAPD_BINARY")
    if env:
        return env
    for build in ("build", "build-tests"):
        path = REPO / build / "daemon" / "snapd"
        if path.exists():
            return str(path)
    pytest.fail("no snapd binary: build the repository (cmake --build build) or set SNAPD_BINARY")


def tool(name: str) -> str:
    """A tool built beside the daemon (snapctl, ...)."""
    return str(pathlib.Path(snapd_binary()).resolve().parents[1] / "client" / "tools" / name)


class Daemon:
    """A snapd process with its own socket, state directory and spool. `shared`: other users
    may reach the socket (the directory is made world-searchable)."""

    def __init__(self, host_mem="256M", extra=(), shared=False):
        self.dir = tempfile.mkdtemp(prefix="snapd-py-")
        if shared:
            os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "snapd.sock")
        self.log = open(os.path.join(self.dir, "snapd.log"), "wb")
        self.proc = subprocess.Popen(
            [snapd_binary(), "--socket", self.socket, "--state-dir", self.dir + "/state",
             "--host-mem", host_mem, "--log-level", "info", *extra],
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            try:
                snapd.connect(self.socket)
                return
            except snapd.Unavailable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("snapd did not start: " + self.log_text())
                time.sleep(0.05)

    def client(self, **kwargs) -> snapd.Client:
        return snapd.connect(self.socket, **kwargs)

    def log_text(self) -> str:
        with open(os.path.join(self.dir, "snapd.log"), errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def client(daemon):
    return daemon.client()
