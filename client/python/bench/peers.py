#!/usr/bin/env python3
"""The adjoint workload through adjsnapd and its peers, each in a fresh Python process.

Forward: N steps of S bytes, each the solver's buffer with its step number stamped into its
first and last 8 bytes over a fixed pattern, written one after another. Backward: the steps
read back in reverse order into one buffer and checked. Contenders: adjsnapd (Python client,
mapped host tier; a fresh daemon per size), one `np.save` file per step, h5py (one chunked
dataset, one chunk per step), ADIOS2 BP5 with its defaults (one variable, one BP5 step per
step), memcpy into preallocated RAM (the reference) and, at the spill size, an `O_DIRECT`
write and reverse read of the same bytes (the disk's limit).

    python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd              # table
    python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --out docs/  # + docs
    python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --quick      # smoke, < 30 s
    python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --json       # for scripts
    python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --only memcpy adjsnapd odirect \
        --daemons 3 --repeat 3                  # every repetition on 3 fresh daemons
    python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --guard      # CI's guard

Each contender runs as `peers.py --worker JOB` in its own process and prints one JSON line.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import json
import mmap
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

MIB = 1 << 20
GIB = 1 << 30
SAMPLED_WORDS = 64  # words checked per step besides the two step stamps (without --full-check)

# name, steps, bytes per step, adjsnapd --host-mem, whether adjsnapd gets a spool (layers DiskHost).
SIZES = {
    "fit": dict(steps=256, bytes=16 * MIB, host_mem="5G", spill=False),
    "spill": dict(steps=1024, bytes=8 * MIB, host_mem="1G", spill=True),
}
QUICK_SIZES = {
    "fit": dict(steps=16, bytes=4 * MIB, host_mem="128M", spill=False),
    "spill": dict(steps=48, bytes=2 * MIB, host_mem="32M", spill=True),
}
# --guard (CI): 1 GiB each, the spill through an eighth of it, as "8 GiB through 1 GiB" does.
GUARD_SIZES = {
    "fit": dict(steps=64, bytes=16 * MIB, host_mem="2G", spill=False),
    "spill": dict(steps=128, bytes=8 * MIB, host_mem="128M", spill=True),
}
# A gross regression of the backward pass, never noise: adjsnapd's backward rate under these
# shares of the reference measured in the same run (memcpy when it fits, the O_DIRECT read when
# it spills), in GUARD_FAILING of GUARD_RUNS runs, each on a fresh daemon.
GUARD_FLOOR = {"fit": ("memcpy", 0.3), "spill": ("odirect", 0.5)}
GUARD_RUNS, GUARD_FAILING = 3, 2
CONTENDERS = ["memcpy", "adjsnapd", "adjsnapd-again", "npsave", "h5py", "adios2", "odirect"]
LABELS = {
    "memcpy": "memcpy into RAM (reference)",
    "adjsnapd": "adjsnapd, mapped host tier (fresh daemon)",
    "adjsnapd-again": "adjsnapd, a second process on the same daemon",
    "npsave": "one `np.save` file per step",
    "h5py": "h5py, one chunk per step",
    "adios2": "ADIOS2 BP5 (defaults)",
    "odirect": "`O_DIRECT` write + reverse read",
}
SHORT = {"memcpy": "memcpy", "adjsnapd": "adjsnapd", "adjsnapd-again": "adjsnapd 2nd", "npsave": "np.save",
         "h5py": "h5py", "adios2": "ADIOS2", "odirect": "O_DIRECT"}
FILE_CONTENDERS = ("npsave", "h5py", "adios2")
REFERENCES = ("memcpy", "odirect")  # the physical limits adjsnapd is compared with
MARK_BEGIN = "<!-- peers:begin -->"
MARK_END = "<!-- peers:end -->"


# ---------------------------------------------------------------------------------------------
# Measurements of the process, the daemon and the page cache.

def proc_pss(pid="self") -> int:
    """Proportional set size in bytes: pages shared between processes (adjsnapd's host tier,
    mapped by both the daemon and the client) are split between them, so the Pss of the two
    added together counts each page once."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def proc_rss(pid="self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def proc_minflt(pid) -> int:
    """Minor faults of another process so far (/proc/PID/stat, field 10)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[7])


def self_minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def meminfo() -> dict:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            out[key] = int(value.split()[0]) * 1024
    return out


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_bytes(paths) -> int:
    """Bytes of these files in the page cache, by mincore(2) over a mapping of each file (the
    mapping touches no page, so measuring does not change what is resident)."""
    page = mmap.PAGESIZE
    total = 0
    for path in paths:
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        if size == 0:
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # a spool file renamed or removed since it was listed
            continue
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap {path}")
            try:
                pages = (size + page - 1) // page
                vec = (ctypes.c_ubyte * pages)()
                if _libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore {path}")
                total += int(np.count_nonzero(np.frombuffer(vec, np.uint8) & 1)) * page
            finally:
                _libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


def file_size(path) -> int:
    """0 for a file gone since it was listed (adjsnapd renames and removes spool files while it
    demotes and frees steps in the background)."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def files_under(path) -> list:
    if os.path.isfile(path):
        return [path]
    out = []
    for root, _, names in os.walk(path):
        out.extend(os.path.join(root, n) for n in names)
    return sorted(out)


def drop_file_cache(paths) -> str:
    """Writes the files back and drops their pages: fsync + posix_fadvise(DONTNEED) per file
    (no root needed), then the kernel's clean page cache as a whole when root."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    how = "fsync + posix_fadvise(DONTNEED) per file"
    if os.geteuid() == 0:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
            how += " + drop_caches=1"
        except OSError:
            pass
    return how


# ---------------------------------------------------------------------------------------------
# The workload: what a step holds and how it is checked.

def make_pattern(nbytes: int) -> np.ndarray:
    words = np.arange(nbytes // 8, dtype=np.uint64)
    words *= np.uint64(0x9E3779B97F4A7C15)  # wraps: a fixed, position-dependent pattern
    return words.view(np.uint8)


def stamp(buf: np.ndarray, step: int) -> None:
    w = buf.view(np.uint64)
    w[0] = step
    w[-1] = step


class Checker:
    """A step read back is the pattern with its step number in its first and last word. The
    default check compares those two words and SAMPLED_WORDS fixed words spread over the buffer
    (microseconds, so it does not weigh on the timing); `full` also compares every byte with
    np.array_equal (about a memory pass, so it slows the backward pass it sits in)."""

    def __init__(self, pattern: np.ndarray, full: bool):
        self.words = pattern.view(np.uint64)
        n = self.words.size
        self.index = np.linspace(1, n - 2, SAMPLED_WORDS).astype(np.int64)
        self.expect = self.words[self.index]
        self.full = full

    def __call__(self, got: np.ndarray, step: int) -> None:
        w = got.view(np.uint64)
        if w[0] != step or w[-1] != step:
            raise RuntimeError(f"step {step}: read back step stamps {int(w[0])}, {int(w[-1])}")
        if not np.array_equal(w[self.index], self.expect):
            raise RuntimeError(f"step {step}: sampled words differ from the pattern")
        if self.full and not np.array_equal(w[1:-1], self.words[1:-1]):
            raise RuntimeError(f"step {step}: the buffer differs from the pattern")


# ---------------------------------------------------------------------------------------------
# Contenders. Each: source() (the buffer the solver fills), write(t, src), end_forward(),
# files() (what sits in the page cache), begin_backward(), read(t, out) -> array, cleanup().

class Memcpy:
    """A preallocated list of arrays, touched before the forward pass (the reference is the
    copy, not the kernel's first touch), np.copyto in and out."""

    def __init__(self, job):
        self.store = [np.empty(job["bytes"], np.uint8) for _ in range(job["steps"])]
        for a in self.store:
            a.fill(0)

    def write(self, t, src):
        np.copyto(self.store[t], src)

    def read(self, t, out):
        np.copyto(out, self.store[t])
        return out


class Adjsnap:
    """The Python client with the mapped host tier (the default on one node): push, wait until
    released, every push waited for until stored at the end; fetch into the solver's buffer."""

    def __init__(self, job):
        import adjsnap
        self.job = job
        self.client = adjsnap.connect(job["socket"])
        self.run = self.client.open_run(
            job["run"], steps=job["steps"], bytes_per_step=job["bytes"], dtype=np.uint8,
            shape=(job["bytes"],), layers="DiskHost" if job["spill"] else "Host")
        self.pushes = []

    def write(self, t, src):
        p = self.run.push(t, src)
        p.wait_released()
        self.pushes.append(p)

    def end_forward(self):
        for p in self.pushes:
            p.wait_stored()
        self.pushes = []

    def files(self):
        return files_under(self.job["spool"]) if self.job.get("spool") else []

    def read(self, t, out):
        return self.run.fetch(t, out=out)

    def cleanup(self):
        self.run.delete()

    def tiers(self):
        return {str(t.tier).split(".")[-1]: t.used_bytes for t in self.client.tiers()}


class NpSave:
    """One .npy file per step; np.load returns a new array per step, as it is used."""

    def __init__(self, job):
        self.dir = os.path.join(job["dir"], "npsave")
        os.makedirs(self.dir)

    def path(self, t):
        return os.path.join(self.dir, f"step-{t:06d}.npy")

    def write(self, t, src):
        np.save(self.path(t), src)

    def files(self):
        return files_under(self.dir)

    def read(self, t, out):
        return np.load(self.path(t))

    def cleanup(self):
        shutil.rmtree(self.dir)


class H5py:
    """One chunked dataset of shape (steps, bytes), one chunk per step, no filter; written with
    dset[t] = src, read with read_direct into the solver's buffer. The file is closed at the end
    of the forward pass (timed) and opened read-only for the backward."""

    def __init__(self, job):
        import h5py
        self.h5py = h5py
        self.path = os.path.join(job["dir"], "run.h5")
        self.f = h5py.File(self.path, "w")
        self.d = self.f.create_dataset("u", (job["steps"], job["bytes"]), np.uint8,
                                       chunks=(1, job["bytes"]))

    def write(self, t, src):
        self.d[t] = src

    def end_forward(self):
        self.f.close()

    def files(self):
        return [self.path]

    def begin_backward(self):
        self.f = self.h5py.File(self.path, "r")
        self.d = self.f["u"]

    def read(self, t, out):
        self.d.read_direct(out, source_sel=np.s_[t])
        return out

    def end_backward(self):
        self.f.close()

    def cleanup(self):
        os.unlink(self.path)


class Adios2:
    """ADIOS2's BP5 engine with its defaults: one global variable, put (deferred, the default)
    once per BP5 step; the engine is closed at the end of the forward pass (timed); the
    backward opens it in ReadRandomAccess and gets step t by step selection into the solver's
    buffer."""

    def __init__(self, job):
        import adios2
        self.adios2 = adios2
        self.path = os.path.join(job["dir"], "run.bp")
        self.adios = adios2.Adios()
        io = self.adios.declare_io("forward")
        io.set_engine("BP5")
        n = job["bytes"]
        self.var = io.define_variable("u", np.zeros(1, np.uint8), [n], [0], [n])
        self.engine = io.open(self.path, adios2.bindings.Mode.Write)

    def write(self, t, src):
        self.engine.begin_step()
        self.engine.put(self.var, src)
        self.engine.end_step()

    def end_forward(self):
        self.engine.close()

    def files(self):
        return files_under(self.path)

    def begin_backward(self):
        io = self.adios.declare_io(f"backward-{time.monotonic_ns()}")
        io.set_engine("BP5")
        self.engine = io.open(self.path, self.adios2.bindings.Mode.ReadRandomAccess)
        self.var = io.inquire_variable("u")

    def read(self, t, out):
        self.var.set_step_selection([t, 1])
        self.engine.get(self.var, out)
        return out

    def end_backward(self):
        self.engine.close()

    def cleanup(self):
        shutil.rmtree(self.path)


class ODirect:
    """One file, os.pwrite with O_DIRECT from a page-aligned (mmap) buffer, one request at a
    time, fdatasync at the end of the forward pass (timed); os.preadv with O_DIRECT in reverse
    into a page-aligned buffer. The disk's single-stream limit; nothing in the page cache."""

    def __init__(self, job):
        self.path = os.path.join(job["dir"], "odirect.bin")
        self.bytes = job["bytes"]
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
        self.wbuf = mmap.mmap(-1, self.bytes)
        self.rbuf = mmap.mmap(-1, self.bytes)

    def source(self, pattern):
        src = np.frombuffer(self.wbuf, np.uint8)
        np.copyto(src, pattern)
        return src

    def out(self):
        out = np.frombuffer(self.rbuf, np.uint8)
        out.fill(0)
        return out

    def write(self, t, src):
        if os.pwrite(self.fd, self.wbuf, t * self.bytes) != self.bytes:
            raise RuntimeError(f"short O_DIRECT write at step {t}")

    def end_forward(self):
        os.fdatasync(self.fd)
        os.close(self.fd)

    def files(self):
        return [self.path]

    def begin_backward(self):
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)

    def read(self, t, out):
        if os.preadv(self.fd, [self.rbuf], t * self.bytes) != self.bytes:
            raise RuntimeError(f"short O_DIRECT read at step {t}")
        return out

    def end_backward(self):
        os.close(self.fd)

    def cleanup(self):
        os.unlink(self.path)


KINDS = {"memcpy": Memcpy, "adjsnapd": Adjsnap, "adjsnapd-again": Adjsnap, "npsave": NpSave,
         "h5py": H5py, "adios2": Adios2, "odirect": ODirect}


def label(r) -> str:
    """The contender's name in a table: adjsnapd's repetitions on one daemon are numbered."""
    if r["kind"] == "adjsnapd" and r.get("reps", 1) > 1:
        return f"adjsnapd, repetition {r['rep']} of {r['reps']} on one fresh daemon"
    if r["kind"] in REFERENCES and r.get("reps", 1) > 1:
        return f"{LABELS[r['kind']]}, before repetition {r['rep']}"
    return LABELS[r["kind"]]


def reference_for(rows, r, spill):
    """The reference row adjsnapd's row is compared with: memcpy (fits) or O_DIRECT (spill), the
    one taken right before it when references were repeated."""
    kind = "odirect" if spill else "memcpy"
    refs = [x for x in rows if x["kind"] == kind]
    same = [x for x in refs if x.get("rep") == r.get("rep")]
    return (same or refs or [None])[0]


def call(obj, name, *args):
    fn = getattr(obj, name, None)
    return fn(*args) if fn else None


def single_push_probe(job) -> dict:
    """One 16 MiB push timed alone until stored, in a fresh process, against np.copyto of the
    same bytes in the same process into fresh anonymous memory (an mmap: first touch) and into
    a warm array. Each push goes to a new step of a run on a daemon whose host-tier pages an
    earlier process already used. Medians of 8, with this process's minor faults per push."""
    import adjsnap
    n, reps = 16 * MIB, 8
    src = make_pattern(n).copy()
    warm = np.zeros(n, np.uint8)
    warm.fill(1)
    client = adjsnap.connect(job["socket"])
    run = client.open_run(job["run"], steps=reps, bytes_per_step=n, layers="Host")
    times = {"push": [], "copyto_fresh": [], "copyto_warm": []}
    faults = {"push": [], "copyto_fresh": [], "copyto_warm": []}

    def timed(name, fn):
        f0 = self_minflt()
        t0 = time.perf_counter()
        fn()
        times[name].append(time.perf_counter() - t0)
        faults[name].append(self_minflt() - f0)

    try:
        for t in range(reps):
            timed("push", lambda: run.push(t, src).wait_stored())
            fresh = mmap.mmap(-1, n)
            timed("copyto_fresh", lambda: np.copyto(np.frombuffer(fresh, np.uint8), src))
            fresh.close()
            timed("copyto_warm", lambda: np.copyto(warm, src))
    finally:
        run.delete()

    def med(xs):
        return sorted(xs)[len(xs) // 2]

    out = {"bytes": n}
    for name in times:
        out[name + "_ms"] = med(times[name]) * 1e3
        out[name + "_faults"] = med(faults[name])
    return out


def worker(job: dict) -> dict:
    """Runs one contender in this process and returns its measurements."""
    if job["kind"] == "probe":
        return single_push_probe(job)
    steps, nbytes = job["steps"], job["bytes"]
    total = steps * nbytes
    pattern = make_pattern(nbytes)
    check = Checker(pattern, job["full_check"])
    daemon = job.get("daemon_pid")
    c = KINDS[job["kind"]](job)
    src = c.source(pattern) if hasattr(c, "source") else pattern.copy()
    out = c.out() if hasattr(c, "out") else np.zeros(nbytes, np.uint8)
    res = {"kind": job["kind"], "size": job["size"], "steps": steps, "bytes": nbytes}
    mi0 = meminfo()
    pss0 = proc_pss()

    def faults():
        return self_minflt(), (proc_minflt(daemon) if daemon else 0)

    f0 = faults()
    t0 = time.perf_counter()
    for t in range(steps):
        stamp(src, t)
        c.write(t, src)
    call(c, "end_forward")
    forward_s = time.perf_counter() - t0
    f1 = faults()

    # Memory held at the end of the forward pass.
    mi1 = meminfo()
    files = call(c, "files") or []
    held = {"process_pss": proc_pss(), "process_rss": proc_rss(),
            "process_pss_before": pss0,
            "daemon_pss": proc_pss(daemon) if daemon else 0,
            "daemon_rss": proc_rss(daemon) if daemon else 0,
            "page_cache": resident_bytes(files),
            "file_bytes": sum(file_size(p) for p in files),
            "meminfo_cached_delta": mi1["Cached"] - mi0["Cached"],
            "meminfo_shmem_delta": mi1["Shmem"] - mi0["Shmem"]}
    if isinstance(c, Adjsnap):
        held["tier_used"] = c.tiers()
    held["total"] = held["process_pss"] + held["daemon_pss"] + held["page_cache"]
    res["held"] = held

    def backward():
        call(c, "begin_backward")
        fa = faults()
        b0 = time.perf_counter()
        for t in reversed(range(steps)):
            check(c.read(t, out), t)
        call(c, "end_backward")
        return time.perf_counter() - b0, fa, faults()

    backward_s, fb0, fb1 = backward()
    res.update(forward_s=forward_s, backward_s=backward_s,
               forward_gbs=total / forward_s / 1e9, backward_gbs=total / backward_s / 1e9,
               total_s=forward_s + backward_s,
               faults_per_gib={"forward": (f1[0] - f0[0]) * GIB / total,
                               "backward": (fb1[0] - fb0[0]) * GIB / total},
               daemon_faults_per_gib={"forward": (f1[1] - f0[1]) * GIB / total,
                                      "backward": (fb1[1] - fb0[1]) * GIB / total})
    if job["cold"] and files:
        d0 = time.perf_counter()
        res["cold_drop"] = drop_file_cache(files)
        res["flush_s"] = time.perf_counter() - d0
        res["resident_after_drop"] = resident_bytes(files)
        cold_s, _, _ = backward()
        res.update(backward_cold_s=cold_s, backward_cold_gbs=total / cold_s / 1e9,
                   total_cold_s=forward_s + res["flush_s"] + cold_s)
    call(c, "cleanup")
    return res


# ---------------------------------------------------------------------------------------------
# The driver: a daemon per size, a process per contender, the table, the plot, the docs.

class Daemon:
    def __init__(self, binary, root, host_mem, spill):
        self.dir = root
        os.makedirs(root)
        self.socket = os.path.join(root, "adjsnap.sock")
        self.spool = os.path.join(root, "spool") if spill else None
        args = [binary, "--socket", self.socket, "--state-dir", os.path.join(root, "state"),
                "--host-mem", host_mem]
        if self.spool:
            os.makedirs(self.spool)
            args += ["--spool-dirs", self.spool]
        env = dict(os.environ)
        env.setdefault("UCX_NET_DEVICES", "lo")
        self.log_path = os.path.join(root, "adjsnapd.log")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, env=env)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("adjsnapd did not start:\n" + self.log())
            time.sleep(0.05)
        time.sleep(0.2)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


def run_worker(job: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("UCX_NET_DEVICES", "lo")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)],
                       stdout=subprocess.PIPE, env=env, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{job['kind']} at size {job['size']} failed (exit {p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def machine(workdir: str) -> dict:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    disk = ""
    try:
        src = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE", "-T", workdir], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.split()
        disk = " ".join(src)
        dev = os.path.basename(src[0]) if src else ""
        rot = f"/sys/block/{dev}/queue/rotational"
        if dev and os.path.exists(rot):
            with open(rot) as f:
                disk += ", rotational" if f.read().strip() == "1" else ", non-rotational"
            if dev.startswith("vd"):
                disk += " (virtio)"
    except (OSError, IndexError):
        pass
    return {"cores": os.cpu_count(), "cpu": model, "ram_gib": meminfo()["MemTotal"] / GIB,
            "kernel": platform.release(), "disk": disk, "python": platform.python_version(),
            "numpy": np.__version__, "versions": _versions()}


def _versions() -> dict:
    out = {}
    for mod in ("h5py", "adios2", "adjsnap"):
        p = subprocess.run([sys.executable, "-c",
                            f"import {mod}; print(getattr({mod}, '__version__', '?'))"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out[mod] = p.stdout.strip() or "not installed"
    return out


def main_driver(a) -> dict:
    sizes = GUARD_SIZES if a.guard else QUICK_SIZES if a.quick else SIZES
    chosen = [k for k in CONTENDERS if k in a.only] if a.only else CONTENDERS
    # --repeat R: adjsnapd's contender runs R times, one fresh process after another, on one daemon,
    # and each reference (memcpy; O_DIRECT at the spill size) runs right before each repetition:
    # this machine's memory and disk rates drift between minutes (a VM's memcpy went from 17 to
    # 23 GB/s, its disk from 1.2 to 2.6 GB/s, within one run), so a ratio compares a repetition
    # with the reference taken beside it, not with one taken minutes before.
    if a.repeat > 1 and "adjsnapd" in chosen:
        paired = [k for k in chosen if k in REFERENCES]
        chosen = ([(k, rep) for rep in range(1, a.repeat + 1) for k in paired + ["adjsnapd"]]
                  + [(k, 1) for k in chosen if k not in paired and k != "adjsnapd"])
    else:
        chosen = [(k, 1) for k in chosen]
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="adjsnap-peers-", dir=a.workdir)
    results = {"command": " ".join(["python", "client/python/bench/peers.py"] + a.argv),
               "date": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": machine(root), "load_before": os.getloadavg(), "sizes": {}}
    try:
        for size in a.sizes:
            spec = sizes[size]
            rows = []
            daemon = probe = None
            if any(k.startswith("adjsnapd") for k, _ in chosen):
                daemon = Daemon(a.adjsnapd, os.path.join(root, f"adjsnap-{size}"), spec["host_mem"],
                                spec["spill"])
            last_adjsnap = [(k, rep) for k, rep in chosen if k.startswith("adjsnapd")][-1:] or [None]
            last_adjsnap = last_adjsnap[0]
            try:
                for kind, rep in chosen:
                    if kind == "odirect" and not spec["spill"]:
                        continue
                    os.sync()
                    time.sleep(0.5)
                    job = {"kind": kind, "size": size, "steps": spec["steps"],
                           "bytes": spec["bytes"], "spill": spec["spill"],
                           "full_check": a.full_check or a.quick,
                           "cold": spec["spill"] and kind in FILE_CONTENDERS,
                           "dir": tempfile.mkdtemp(prefix=f"{kind}-", dir=root)}
                    if kind.startswith("adjsnapd"):
                        job.update(socket=daemon.socket, daemon_pid=daemon.proc.pid,
                                   spool=daemon.spool, run=f"peers-{size}-{kind}-{rep}")
                    repeated = a.repeat > 1 and (kind == "adjsnapd" or kind in REFERENCES)
                    name = f"{kind} #{rep}" if repeated else kind
                    print(f"peers: {size}: {name} ...", file=sys.stderr, flush=True)
                    r = run_worker(job)
                    shutil.rmtree(job["dir"], ignore_errors=True)
                    if repeated:
                        r.update(rep=rep, reps=a.repeat)
                    rows.append(r)
                    print(f"peers: {size}: {name}: forward {r['forward_gbs']:.2f} GB/s, "
                          f"backward {r['backward_gbs']:.2f} GB/s", file=sys.stderr, flush=True)
                    if kind == "adjsnapd-again" and not spec["spill"]:
                        probe = run_worker({"kind": "probe", "size": size, "run": "peers-probe",
                                            "socket": daemon.socket})
                    if daemon and (kind, rep) == last_adjsnap:  # the host tier is not left to others
                        daemon.stop()
            finally:
                if daemon:
                    daemon.stop()
            results["sizes"][size] = {"steps": spec["steps"], "bytes": spec["bytes"],
                                      "host_mem": spec["host_mem"], "rows": rows}
            if probe:
                results["sizes"][size]["push_probe"] = probe
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    return results


def fmt_bytes(n: int) -> str:
    return f"{n / GIB:.0f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def fmt_s(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_k(x: float) -> str:
    return f"{x / 1000:.0f}k" if x >= 1000 else f"{x:.0f}"


def faults_cell(r, pass_):
    own = fmt_k(r["faults_per_gib"][pass_])
    d = r["daemon_faults_per_gib"][pass_]
    return f"{own} + {fmt_k(d)} daemon" if r["kind"].startswith("adjsnapd") else own


def held_cell(r):
    h = r["held"]
    parts = []
    if r["kind"].startswith("adjsnapd"):
        parts.append(f"client {h['process_pss'] / GIB:.2f} + daemon {h['daemon_pss'] / GIB:.2f}")
    else:
        parts.append(f"process {h['process_pss'] / GIB:.2f}")
    if h["file_bytes"]:
        parts.append(f"page cache {h['page_cache'] / GIB:.2f}")
    return f"**{h['total'] / GIB:.2f}** ({' + '.join(parts)})"


def table(size: str, block: dict) -> str:
    rows = block["rows"]
    spill = any("backward_cold_s" in r for r in rows) or size == "spill"
    head = (f"{fmt_bytes(block['steps'] * block['bytes'])} = {block['steps']} x "
            f"{block['bytes'] // MIB} MiB"
            + (f", adjsnapd host tier {block['host_mem']}" if spill else ""))
    cols = ["contender", "forward GB/s", "backward GB/s"]
    if spill:
        cols += ["backward GB/s, cold cache"]
    cols += ["total s"]
    if spill:
        cols += ["total s, cold cache (with flush)"]
    cols += ["memory held, GiB", "faults/GiB forward", "faults/GiB backward",
             "backward / " + ("O_DIRECT" if spill else "memcpy")]
    lines = [f"**{head}**", "", "| " + " | ".join(cols) + " |",
             "| --- | " + " | ".join("---:" for _ in cols[1:]) + " |"]
    for r in rows:
        cells = [label(r), f"{r['forward_gbs']:.2f}", f"{r['backward_gbs']:.2f}"]
        if spill:
            cells.append(f"{r['backward_cold_gbs']:.2f}" if "backward_cold_gbs" in r else "–")
        cells.append(fmt_s(r["total_s"]))
        if spill:
            cells.append(fmt_s(r["total_cold_s"]) if "total_cold_s" in r else "–")
        cells += [held_cell(r), faults_cell(r, "forward"), faults_cell(r, "backward")]
        ref = reference_for(rows, r, spill) if r["kind"].startswith("adjsnapd") else None
        cells.append(f"{r['backward_gbs'] / ref['backward_gbs']:.2f}x" if ref else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def probe_line(results) -> str:
    for block in results["sizes"].values():
        p = block.get("push_probe")
        if p:
            return (f"One {p['bytes'] // MIB} MiB push timed alone until stored, in a fresh "
                    f"process on the fits-in-RAM daemon after the runs above (median of 8, each "
                    f"a new step): {p['push_ms']:.2f} ms with {p['push_faults']} minor faults, "
                    f"against `np.copyto` of the same bytes in the same process into fresh "
                    f"anonymous memory {p['copyto_fresh_ms']:.2f} ms ({p['copyto_fresh_faults']} "
                    f"faults) and into a warm array {p['copyto_warm_ms']:.2f} ms "
                    f"({p['copyto_warm_faults']} faults): the push costs "
                    f"{p['push_ms'] / p['copyto_warm_ms']:.1f}x the warm copy.")
    return ""


def markdown(results, png_name=None) -> str:
    m = results["machine"]
    lb, la = results["load_before"], results["load_after"]
    cold = ""
    for block in results["sizes"].values():
        for r in block["rows"]:
            if "cold_drop" in r:
                cold = r["cold_drop"]
    out = [MARK_BEGIN, "## Peers: the adjoint workload through adjsnapd, files, h5py and ADIOS2", "",
           "`client/python/bench/peers.py` runs the adjoint workload (forward: push N steps of "
           "S bytes; backward: fetch them in reverse and check each) through adjsnapd and the ways "
           "a Python solver would otherwise keep its steps, **each contender in a fresh Python "
           "process**, as solvers run (one process per shot), at a size that fits in RAM and "
           "one that does not fit adjsnapd's host tier:", "",
           "- **adjsnapd**: the Python client on the mapped host tier, a fresh daemon per size "
           "(the script starts it, with its own state and spool directories, and stops it with "
           "SIGTERM); the run is declared (`steps=N`), layers `Host` (fits) or `DiskHost` "
           "(spill); each push waits until released, all until stored at the end of the "
           "forward pass; fetches go into the solver's buffer. A second process on the same "
           "daemon runs after the first (the daemon's host-tier pages are then resident).",
           "- **one `np.save` file per step**; `np.load` returns a new array per step.",
           "- **h5py**: one chunked dataset of shape (N, S), one chunk per step, no filter; "
           "`dset[t] = u`, `read_direct` into the solver's buffer; the file closed at the end "
           "of the forward pass (timed).",
           "- **ADIOS2 BP5** with its defaults: one global variable put (deferred) once per "
           "BP5 step; engine closed at the end of the forward pass (timed); backward in "
           "`ReadRandomAccess` with a step selection, into the solver's buffer.",
           "- **memcpy into RAM**, the reference: a preallocated list of arrays (touched before "
           "the pass), `np.copyto` in and out.",
           "- **`O_DIRECT`** (spill size): one file, `os.pwrite` of each step from a page-"
           "aligned buffer, `fdatasync` at the end (timed), `os.preadv` in reverse: the disk's "
           "single-stream limit.", "",
           "With `--repeat R`, adjsnapd runs R times on each daemon, and each reference (memcpy; "
           "`O_DIRECT` at the spill size) runs right before each repetition: the last column "
           "compares a repetition's backward pass with the reference taken beside it (this "
           "machine's memory and disk rates drift from minute to minute).", "",
           "Each step is the solver's buffer: a fixed pattern with the step number in its first "
           "and last 8 bytes. The backward pass checks both stamps and 64 fixed words spread "
           "over the step inside its timing (microseconds); `--full-check` compares every "
           "byte with `np.array_equal` instead, which costs a memory pass per step. "
           "**Memory held** is measured at the end of the forward pass: the contender "
           "process's Pss plus, for adjsnapd, the daemon's Pss (the host tier is shared memory "
           "mapped by both, and Pss splits shared pages between the processes that map them, "
           "so the sum counts it once), plus the page cache the contender's files hold, "
           "counted page by page with `mincore(2)` over each file (adjsnapd's spool files too; "
           "adjsnapd writes them with `O_DIRECT`). Both include the ~0.03-0.1 GiB of an idle "
           "Python with numpy and the contender's module imported. Faults are the process's "
           "minor page faults (`getrusage`) per GiB moved in that pass; for adjsnapd the daemon's "
           "(`/proc/PID/stat`) beside them.", "",
           "At the spill size the file contenders' backward pass runs twice: first as they "
           "run, right after the forward pass (warm: whatever the page cache kept), then with "
           f"cold caches ({cold or 'fsync + posix_fadvise(DONTNEED) per file'}); the cold "
           "total is forward + flush + cold backward. adjsnapd's spool and `O_DIRECT` bypass the "
           "page cache, so they have no warm variant.", "",
           "Reproduce (a few minutes; `--json` prints the results for scripts instead of the "
           "table; `--quick` runs the whole pipeline at a small size in under 30 s, without "
           "`--out`, as a smoke test; it is not part of CI):", "",
           "```sh",
           "python -m venv venv && venv/bin/pip install ./client/python h5py adios2 matplotlib",
           "venv/bin/python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --out docs/",
           "venv/bin/python client/python/bench/peers.py --adjsnapd build/daemon/adjsnapd --quick",
           "```", "",
           f"Figures from `{results['command']}` on {results['date'][:10]}: "
           f"{m['cores']} cores ({m['cpu']}), {m['ram_gib']:.1f} GiB RAM, Linux {m['kernel']}, "
           f"workdir on {m['disk']}; Python {m['python']}, numpy {m['numpy']}, "
           f"h5py {m['versions'].get('h5py')}, adios2 {m['versions'].get('adios2')}. "
           f"Load average {lb[0]:.2f} before the run, {la[0]:.2f} after "
           f"({m['cores']} cores: above {m['cores']}, other work shared them; compare figures "
           "within one run).", ""]
    runs = [results] + results.get("runs", [])
    for size in results["sizes"]:
        for i, run in enumerate(runs, 1):
            if len(runs) > 1:
                out += [f"Run {i} of {len(runs)} (fresh daemons):", ""]
            out += [table(size, run["sizes"][size]), ""]
    line = probe_line(results)
    if line:
        out += [line, ""]
    if png_name:
        out += [f"![Throughput and memory held per contender]({png_name})", ""]
    out.append(MARK_END)
    return "\n".join(out)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = list(results["sizes"].items())
    fig, axes = plt.subplots(len(sizes), 2, figsize=(12, 4.2 * len(sizes)), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]})
    for i, (size, block) in enumerate(sizes):
        rows = block["rows"]
        names = [SHORT[r["kind"]] + (f" #{r['rep']}" if r.get("reps", 1) > 1 else "")
                 for r in rows]
        x = np.arange(len(rows))
        title = (f"{fmt_bytes(block['steps'] * block['bytes'])} = {block['steps']} x "
                 f"{block['bytes'] // MIB} MiB")
        if size == "spill":
            title += f", adjsnapd host tier {block['host_mem']}"
        ax = axes[i][0]
        series = [("forward", [r["forward_gbs"] for r in rows]),
                  ("backward", [r["backward_gbs"] for r in rows])]
        if any("backward_cold_gbs" in r for r in rows):
            series.append(("backward, cold cache",
                           [r.get("backward_cold_gbs", np.nan) for r in rows]))
        w = 0.8 / len(series)
        for j, (label, vals) in enumerate(series):
            bars = ax.bar(x + (j - (len(series) - 1) / 2) * w, vals, w, label=label)
            ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.1f}" for v in vals],
                         fontsize=7)
        ax.set_xticks(x, names)
        ax.set_ylabel("GB/s")
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax = axes[i][1]
        proc = np.array([r["held"]["process_pss"] / GIB for r in rows])
        dmn = np.array([r["held"]["daemon_pss"] / GIB for r in rows])
        cache = np.array([r["held"]["page_cache"] / GIB for r in rows])
        ax.barh(x, proc, label="process (Pss)")
        ax.barh(x, dmn, left=proc, label="adjsnapd daemon (Pss)")
        ax.barh(x, cache, left=proc + dmn, label="page cache of its files")
        ax.set_yticks(x, names)
        ax.invert_yaxis()
        ax.set_xlabel("GiB held at the end of the forward pass")
        ax.set_title("memory held")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_docs(results, out_dir):
    png = "benchmarks-peers.png"
    plot(results, os.path.join(out_dir, png))
    doc = os.path.join(out_dir, "benchmarks.md")
    with open(doc) as f:
        text = f.read()
    section = markdown(results, png)
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        tail = rest.split(MARK_END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(doc, "w") as f:
        f.write(text)


def guard_verdict(runs) -> bool:
    """Prints each run's backward rates against the guard's floors; False when adjsnapd fell under
    a floor, at either size, in GUARD_FAILING or more of the runs."""
    ok = True
    for size, (ref_kind, floor) in GUARD_FLOOR.items():
        under = 0
        for i, results in enumerate(runs, 1):
            rows = results["sizes"][size]["rows"]
            ref = next(r for r in rows if r["kind"] == ref_kind)["backward_gbs"]
            got = next(r for r in rows if r["kind"] == "adjsnapd")
            ratio = got["backward_gbs"] / ref
            under += ratio < floor
            print(f"guard: {size} run {i}: adjsnapd forward {got['forward_gbs']:.2f} GB/s, backward "
                  f"{got['backward_gbs']:.2f} GB/s = {ratio:.2f}x the {ref_kind} read "
                  f"({ref:.2f} GB/s; floor {floor}x)", flush=True)
        if under >= GUARD_FAILING:
            print(f"guard: FAILED: {size}: adjsnapd's backward pass under {floor}x {ref_kind} in "
                  f"{under} of {len(runs)} runs", flush=True)
            ok = False
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--adjsnapd", help="the adjsnapd binary to start (one daemon per size)")
    p.add_argument("--out", help="docs directory: update its benchmarks.md and write "
                                 "benchmarks-peers.png there")
    p.add_argument("--workdir", default=None,
                   help="where the files, the daemon's state and spool go (default: $TMPDIR or "
                        "/tmp); a fresh directory is made in it and removed at the end")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test, < 30 s")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--full-check", action="store_true",
                   help="compare every byte of every step read back (inside the timing)")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument("--only", nargs="+", choices=CONTENDERS, help="run only these contenders")
    p.add_argument("--from-json", metavar="FILE",
                   help="no run: print (and with --out write) the table of a saved --json run")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="run adjsnapd's contender R times, each a fresh process, on one daemon")
    p.add_argument("--daemons", type=int, default=1, metavar="D",
                   help="the whole run D times, each with fresh daemons; a table per run")
    p.add_argument("--guard", action="store_true",
                   help=f"CI's guard: memcpy, adjsnapd and O_DIRECT at 1 GiB, fits and spills, "
                        f"{GUARD_RUNS} runs on fresh daemons; exit 1 when adjsnapd's backward pass "
                        f"falls under " + " or ".join(f"{f}x {k} ({s})" for s, (k, f)
                                                      in GUARD_FLOOR.items())
                        + f" in {GUARD_FAILING} of them")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.guard:
        a.only, a.sizes, a.repeat, a.daemons = ["memcpy", "adjsnapd", "odirect"], list(SIZES), 1, \
            GUARD_RUNS
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))), flush=True)
        return
    if a.from_json:
        with open(a.from_json) as f:
            results = json.load(f)
        print(markdown(results))
        if a.out:
            write_docs(results, a.out)
        return
    if not a.adjsnapd and (not a.only or any(k.startswith("adjsnapd") for k in a.only)):
        p.error("--adjsnapd PATH is needed to run the adjsnapd contenders")
    a.argv = []
    args = iter(sys.argv[1:])
    for x in args:  # the command as the docs show it: no machine-specific paths
        if x in ("--adjsnapd", "--workdir"):
            next(args, "")  # the path itself is not shown
            a.argv += [x, "BUILD/daemon/adjsnapd" if x == "--adjsnapd" else "DIR"]
        else:
            a.argv.append(x)
    runs = [main_driver(a) for _ in range(a.daemons)]
    if a.guard:
        sys.exit(0 if guard_verdict(runs) else 1)
    results = runs[0]
    if len(runs) > 1:  # one table per run, in order: every repetition is shown
        results["runs"] = runs[1:]
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        print(markdown(results))
    if a.out:
        write_docs(results, a.out)


if __name__ == "__main__":
    main()
