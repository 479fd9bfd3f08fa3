"""A real adjsnapd for the Python tests: one daemon per test module, on a private socket.

The daemon binary is $ADJSNAPD_BINARY, else build/daemon/adjsnapd or build-tests/daemon/adjsnapd of
this repository.

A hung test fails, with stacks, rather than hanging the run ([tool.pytest.ini_options] of
client/python/pyproject.toml sets the times):
- at faulthandler_timeout, every thread's Python stack;
- at adjsnap_stack_dump_timeout, a watchdog process (this file run as a script, so that it acts
  even while the test's main thread holds the GIL in a C++ call) prints the native stacks
  (gdb) of every live Daemon, of the other processes the test started and of the test process,
  then aborts those daemons, which fails a call stuck on one;
- at timeout, pytest-timeout prints the Python stacks again and ends the run; where it cannot
  (its thread needs the GIL), the watchdog sends the test process SIGABRT 30 s later, and
  faulthandler prints the Python stacks as it dies.
The exit after the last test (finalizers that reach a daemon) has the same two bounds.
A Daemon that does not stop within STOP_TIMEOUT of SIGTERM has its stacks printed and is
aborted, and the test fails."""
import ctypes
import os
import pathlib
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

# `python -m pytest` run in client/python puts that folder first on sys.path, where adjsnap/ is
# the package's sources without the compiled extension (adjsnap._adjsnap): the tests import the
# installed package, wherever they are run from.
_SOURCES = pathlib.Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if pathlib.Path(p or os.curdir).resolve() != _SOURCES]

import adjsnap  # noqa: E402  (after the sys.path fix above)

REPO = pathlib.Path(__file__).resolve().parents[3]

# Seconds Daemon.stop waits after SIGTERM: adjsnapd's own stop_timeout (45 s by default) bounds
# its drain.
STOP_TIMEOUT = 60
# Seconds one gdb gets to attach and print every thread's stack.
GDB_TIMEOUT = 30
# Seconds past pytest-timeout's timeout after which the watchdog aborts the test process.
KILL_GRACE = 30


def adjsnapd_binary() -> str:
    env = os.environ.get("ADJSNAPD_BINARY")
    if env:
        return env
    for build in ("build", "build-tests"):
        path = REPO / build / "daemon" / "adjsnapd"
        if path.exists():
            return str(path)
    pytest.fail("no adjsnapd binary: build the repository (cmake --build build) or set ADJSNAPD_BINARY")


def tool(name: str) -> str:
    """A tool beside the daemon (adjsnap, ...): in its build tree (client/tools/) or in the
    prefix it was installed to (bin/)."""
    top = pathlib.Path(adjsnapd_binary()).resolve().parents[1]
    for path in (top / "client" / "tools" / name, top / "bin" / name):
        if path.exists():
            return str(path)
    pytest.fail(f"no {name} beside {adjsnapd_binary()}: neither {top}/client/tools nor {top}/bin")


def native_stacks(pid: int, what: str) -> str:
    """The native stack of every thread of process `pid` (gdb, within GDB_TIMEOUT), then each
    thread's kernel state and wait channel, which is all there is where gdb is missing or may
    not attach (Yama's ptrace_scope lets only an ancestor attach to a process that did not say
    otherwise)."""
    text = f"\n=== native stacks of {what} (pid {pid})\n"
    gdb = shutil.which("gdb")
    if gdb is None:
        text += "(no gdb: deploy/install-deps.sh installs it)\n"
    else:
        try:
            r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx",
                                "-ex", "set debuginfod enabled off", "-ex", "thread apply all bt"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=GDB_TIMEOUT)
            text += r.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            text += (e.output or b"").decode(errors="replace")
            text += f"(gdb gave no answer within {GDB_TIMEOUT} s)\n"
    text += f"--- threads of {what} (pid {pid}) as the kernel sees them\n"
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        tids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                wchan = f.read()
        except OSError:
            continue
        # "tid (comm) state ...", and comm may hold spaces and parentheses.
        comm, state = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2]
        wchan = "-" if wchan in ("", "0") else wchan
        text += f"  thread {tid} ({comm}) state {state}, waiting in {wchan}\n"
    return text + f"=== end of the stacks of {what} (pid {pid})\n"


class Daemon:
    """An adjsnapd process with its own socket, state directory and spool. `shared`: other users
    may reach the socket (the directory is made world-searchable)."""

    def __init__(self, host_mem="256M", extra=(), shared=False):
        self.dir = tempfile.mkdtemp(prefix="adjsnap-py-")
        if shared:
            os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "adjsnap.sock")
        self.log = open(os.path.join(self.dir, "adjsnapd.log"), "wb")
        self.proc = subprocess.Popen(
            [adjsnapd_binary(), "--socket", self.socket, "--state-dir", self.dir + "/state",
             "--host-mem", host_mem, "--log-level", "info", *extra],
            stdout=subprocess.DEVNULL, stderr=self.log)
        _tell_watchdog(f"daemon {self.proc.pid} {self.socket}")
        deadline = time.monotonic() + 30
        while True:
            try:
                adjsnap.connect(self.socket)
                return
            except adjsnap.Unavailable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("adjsnapd did not start: " + self.log_text())
                time.sleep(0.05)

    def client(self, **kwargs) -> adjsnap.Client:
        return adjsnap.connect(self.socket, **kwargs)

    def log_text(self) -> str:
        with open(os.path.join(self.dir, "adjsnapd.log"), errors="replace") as f:
            return f.read()

    def dump_stacks(self, file=None) -> str:
        """Prints to `file` (stderr by default) and returns the native stack of every thread
        of the daemon and the last lines of its log."""
        text = native_stacks(self.proc.pid, f"adjsnapd on {self.socket}")
        try:
            tail = self.log_text().splitlines()[-40:]
        except OSError:
            tail = []
        text += f"--- the last {len(tail)} lines of its log\n" + "".join(l + "\n" for l in tail)
        print(text, file=file or sys.stderr, flush=True)
        return text

    def abort(self):
        """SIGABRT (SIGCONT too, for a stopped daemon), then SIGKILL if it has not exited
        within 10 s."""
        _abort(self.proc.pid, self.proc.wait)

    def stop(self):
        hung = False
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                hung = True
                print(f"adjsnapd (pid {self.proc.pid}) did not stop within {STOP_TIMEOUT} s of "
                      "SIGTERM: its stacks, then SIGABRT", file=sys.stderr, flush=True)
                self.dump_stacks()
                self.abort()
        _tell_watchdog(f"gone {self.proc.pid}")
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        if hung:
            pytest.fail(f"adjsnapd (pid {self.proc.pid}) did not stop within {STOP_TIMEOUT} s of "
                        "SIGTERM; its stacks are in the captured stderr", pytrace=False)


def _abort(pid: int, wait):
    """SIGABRT, SIGCONT, and SIGKILL if `wait(timeout=10)` says it still runs."""
    try:
        os.kill(pid, signal.SIGABRT)
        os.kill(pid, signal.SIGCONT)
        try:
            wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# The watchdog process's stdin, where this process says which test runs and which daemons
# live; it ends when this process does. None where adjsnap_stack_dump_timeout is 0.
_watchdog_fd = None
_watchdog_lock = threading.Lock()


def _tell_watchdog(line: str):
    with _watchdog_lock:
        if _watchdog_fd is None:
            return
        try:
            os.write(_watchdog_fd, line.encode() + b"\n")
        except OSError:
            pass


def pytest_addoption(parser):
    parser.addini("adjsnap_stack_dump_timeout",
                  "seconds into a test (setup, call and teardown) after which the native stacks "
                  "of every live adjsnapd and of the test process are printed and those daemons "
                  "aborted; 0: never", default="0")


def pytest_configure(config):
    global _watchdog_fd
    dump_after = float(config.getini("adjsnap_stack_dump_timeout") or 0)
    if dump_after <= 0 or _watchdog_fd is not None:
        return
    timeout = float(config.getoption("timeout", None) or config.getini("timeout") or 0)
    kill_after = timeout + KILL_GRACE if timeout > 0 else 0
    # Where Yama's ptrace_scope is 1 only an ancestor may attach: let the watchdog's gdb, a
    # child of our child, attach to this process (prctl PR_SET_PTRACER, PR_SET_PTRACER_ANY).
    try:
        ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(2**64 - 1), ctypes.c_ulong(0),
                                ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):
        pass
    # Output capture is suspended while plugins are configured: fd 2 is the terminal (or the
    # CI log), where the watchdog writes whatever pytest does with the test's own output. Not
    # a Popen: nothing waits for the watchdog, which outlives every finalizer of this process.
    read_end, _watchdog_fd = os.pipe()  # both close on exec
    os.posix_spawn(sys.executable,
                   [sys.executable, __file__, "--watchdog", str(os.getpid()), str(dump_after),
                    str(kill_after)], os.environ,
                   file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0),
                                 (os.POSIX_SPAWN_DUP2, 2, 1)])
    os.close(read_end)


def pytest_unconfigure(config):
    # The watchdog stays to the end of this process (the end of its input): finalizers that
    # still reach a daemon at interpreter exit are bounded too.
    _tell_watchdog("exiting")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _tell_watchdog(f"test {item.nodeid}")
    yield
    _tell_watchdog("done")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _descendants(root: int) -> list:
    """The live processes below `root`, parents before children."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in sorted(children.get(todo.pop(0), [])):
            found.append(child)
            todo.append(child)
    return [pid for pid in found if _alive(pid)]


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def _watch(test_pid: int, dump_after: float, kill_after: float):
    """The watchdog process. Reads "test NODEID", "done", "daemon PID SOCKET", "gone PID" and
    "exiting" lines from stdin until it ends (the test process has ended, and then kills the
    daemons it left). A test still running `dump_after` seconds after its "test" line, or a
    test process still there that long after "exiting", gets the stacks of its processes
    printed and its daemons aborted; at `kill_after` (0: never) the test process gets
    SIGABRT."""
    daemons = {}  # pid: socket, the Daemons not stopped yet
    what, started, dumped = None, 0.0, False  # what runs: a test's node id, or the exit
    pending = b""
    while True:
        wait = None
        if what is not None and not (dumped and kill_after <= 0):
            wait = max(0.0, started + (kill_after if dumped else dump_after) - time.monotonic())
        if select.select([0], [], [], wait)[0]:
            chunk = os.read(0, 65536)
            if not chunk:  # the test process has ended: no daemon of it may outlive it
                for pid, socket in daemons.items():
                    if _alive(pid):
                        print(f"adjsnapd on {socket} (pid {pid}) outlived the test process: "
                              "SIGKILL", flush=True)
                        os.kill(pid, signal.SIGKILL)
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                word, _, rest = line.decode(errors="replace").partition(" ")
                if word == "test":
                    what, started, dumped = f"test {rest}", time.monotonic(), False
                elif word == "done":
                    what = None
                elif word == "exiting":
                    what, started, dumped = "the exit after the last test", time.monotonic(), False
                elif word == "daemon":
                    pid, _, socket = rest.partition(" ")
                    daemons[int(pid)] = socket
                elif word == "gone":
                    daemons.pop(int(rest), None)
            continue
        if not _alive(test_pid):
            return
        if not dumped:
            dumped = True
            _dump_and_abort(test_pid, what, dump_after, daemons)
        else:
            print(f"\n!!! adjsnap tests: {what}: not over {kill_after:g} s after it began, and "
                  "nothing ended it (pytest-timeout's thread needs the GIL, which a stuck C call "
                  "may hold): SIGABRT to the test process (during a test, faulthandler prints "
                  "its Python stacks)", flush=True)
            os.kill(test_pid, signal.SIGABRT)
            return


def _dump_and_abort(test_pid: int, what: str, after: float, daemons: dict):
    """Prints the native stacks of the live `daemons`, of the other processes below
    `test_pid` and of `test_pid` itself, then aborts those daemons."""
    live = [pid for pid in daemons if _alive(pid)]
    others = [pid for pid in _descendants(test_pid) if pid not in daemons and pid != os.getpid()]
    print(f"\n{'!' * 20} adjsnap tests: {what}: not over after {after:g} s "
          f"(adjsnap_stack_dump_timeout): the native stacks of {len(live)} live adjsnapd, "
          f"{len(others)} other processes of the test and the test process itself; then those "
          f"daemons are aborted", flush=True)
    for pid in live:
        print(native_stacks(pid, f"adjsnapd on {daemons[pid]}"), flush=True)
    for pid in others:
        if _alive(pid):
            print(native_stacks(pid, _command_line(pid)), flush=True)
    print(native_stacks(test_pid, "the test process"), flush=True)
    for pid in live:

        def reaped(timeout, pid=pid):
            deadline = time.monotonic() + timeout
            while _alive(pid):
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired("adjsnapd", timeout)
                time.sleep(0.05)

        _abort(pid, reaped)
        print(f"adjsnapd on {daemons[pid]} (pid {pid}) aborted", flush=True)
    print(f"{'!' * 20} end of the stacks ({what})", flush=True)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def client(daemon):
    return daemon.client()


if __name__ == "__main__" and sys.argv[1:2] == ["--watchdog"]:
    _watch(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
