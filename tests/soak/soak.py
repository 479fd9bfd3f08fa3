"""The soak: hours of mixed, hostile load on one real adjsnapd, every byte checked.

Supervisor (the default mode) starts adjsnapd and keeps CLIENTS client processes busy (mixed step
sizes, half on the mapped path, half copied over UCX; one runs a Devito Streamer when Devito is
installed). Meanwhile it kills a random client with SIGKILL mid-push or mid-fetch, restarts
adjsnapd with SIGTERM (clients ride through), makes the spool fail and come back (root: a
loop-mounted ext4 remounted read-only), and runs adjsnap drain, scrub, rm and purge. It samples
adjsnapd's memory, fds, threads, sessions and tier use, and fails on any wrong byte, any error
outside the expected set, a restart that loses a stored step, or growth after warm-up beyond
the bounds below. tests/soak/run.sh is the entry point; see docs/operations.md ("Soak").
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# Growth allowed after warm-up: the largest sample of the run's last third against the largest
# of its first third after warm-up (a restart resets adjsnapd, so a leak must show within a life).
RSS_ANON_SLACK = 64 << 20
FD_SLACK = 16
THREAD_SLACK = 8
# Runs adjsnapd holds: each client's own, plus killed clients' runs within their orphan grace and
# those of a restart waiting for their clients. Runs that nothing removes pile up past this.
RUNS_SLACK = 16
SIZES = [(64 << 10, 96), (256 << 10, 64), (1 << 20, 48), (4 << 20, 24), (16 << 20, 12)]


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


# --------------------------------------------------------------------------------------------
# Client processes


class Expected(Exception):
    pass


def classify(e, adjsnap):
    """'expected' for what a restart, a failing spool or an orphan sweep may cause, with a clear
    message; else 'unexpected'."""
    text = str(e)
    if not text.strip():
        return "unexpected"
    if isinstance(e, adjsnap.Unavailable):
        return "expected"  # a restart (push it again) or no working spool (needs the disk tier)
    return "unexpected"


def connect(args, adjsnap, say, **kw):
    """A new process may start while adjsnapd restarts: the first connect is retried (a session's
    later calls ride through restarts by themselves, reconnect_timeout)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return adjsnap.connect(args.socket, name=f"soak-{args.id}", reconnect_timeout=180,
                                 wait_timeout=300, **kw)
        except adjsnap.Unavailable as e:
            if time.monotonic() > deadline:
                raise
            say(expected=f"connect: Unavailable: {str(e)[:300]}")
            time.sleep(0.2)


def client_main(args):
    import numpy as np
    import adjsnap

    rng = random.Random(args.seed)
    report = open(args.report, "a", buffering=1)

    def say(**kw):
        kw["t"] = time.time()
        report.write(json.dumps(kw) + "\n")

    mapped = args.mapped
    client = connect(args, adjsnap, say, map_host_tier=mapped)
    cycle = 0
    while not os.path.exists(args.stop_file):
        size, steps = rng.choice(SIZES)
        keep = rng.random() < 0.3
        codec = "zfp-reversible" if rng.random() < 0.15 else "none"
        name = f"soak-{args.id}-c{cycle}"
        n = size // 8
        base = np.random.default_rng(args.seed * 1000 + cycle).integers(
            -2**62, 2**62, n, dtype=np.int64)
        buf = np.empty_like(base)
        expected = {}
        started = time.time()

        def retry(what, fn):
            deadline = time.monotonic() + 240
            while True:
                try:
                    return fn()
                except adjsnap.Error as e:
                    if classify(e, adjsnap) != "expected" or time.monotonic() > deadline:
                        say(error=f"{what}: {type(e).__name__}: {e}", run=name)
                        raise
                    expected[type(e).__name__] = expected.get(type(e).__name__, 0) + 1
                    say(expected=f"{what}: {type(e).__name__}: {str(e)[:300]}", run=name)
                    time.sleep(0.5)

        run = retry("open_run", lambda: client.open_run(
            name, steps=steps, like=base, keep=keep, codec=codec))
        pushed = 0
        for t in range(steps):
            np.bitwise_xor(base, t, out=buf)

            tries = [0]

            def push():
                tries[0] += 1
                try:
                    run.push(t, buf).wait_stored()
                except adjsnap.AlreadyExists:
                    # An earlier try was stored but its reply was lost in a restart (it failed
                    # with UNAVAILABLE saying to push again): the backward pass checks its bytes.
                    if tries[0] == 1:
                        raise
            retry(f"push {t}", push)
            pushed += size
        fetched = 0
        for t in reversed(range(steps)):
            retry(f"fetch {t}", lambda: run.fetch(t, out=buf))
            np.bitwise_xor(buf, t, out=buf)
            if not np.array_equal(buf, base):
                bad = int(np.count_nonzero(buf != base))
                say(wrong=f"step {t} of run {name}: {bad} of {n} int64 values differ")
                sys.exit(3)
            fetched += size
        if keep and rng.random() < 0.5:  # a kept run is read again, as a schedule re-reads
            t = rng.randrange(steps)
            retry(f"refetch {t}", lambda: run.fetch(t, out=buf))
            np.bitwise_xor(buf, t, out=buf)
            if not np.array_equal(buf, base):
                say(wrong=f"step {t} of kept run {name} on its second read")
                sys.exit(3)
        retry("delete", run.delete)
        say(cycle=cycle, run=name, bytes=pushed + fetched, seconds=time.time() - started,
            mapped=mapped, size=size, steps=steps, codec=codec, expected=expected)
        cycle += 1


def streamer_main(args):
    """A Devito Streamer, forward and adjoint, cycle after cycle: each gradient must be
    bit-identical to the first (a wrong byte in any wavefield read back changes it)."""
    import numpy as np
    import adjsnap
    from devito import Function, TimeFunction, configuration
    from examples.seismic import AcquisitionGeometry, Receiver, demo_model
    from examples.seismic.acoustic import AcousticWaveSolver
    from adjsnap.devito import Streamer

    configuration["log-level"] = "WARNING"
    kw = dict(origin=(0.0, 0.0), shape=(61, 61), spacing=(10.0, 10.0), nbl=10)
    true = demo_model("circle-isotropic", vp_circle=3.0, vp_background=2.5, **kw)
    start = demo_model("circle-isotropic", vp_circle=2.5, vp_background=2.5, grid=true.grid, **kw)
    rec = np.stack([np.linspace(0, 600, 21), np.full(21, 580.0)], axis=1)
    geometry = AcquisitionGeometry(true, rec, np.array([[300.0, 20.0]]), t0=0.0, tn=400.0,
                                   f0=0.010, src_type="Ricker")
    solver = AcousticWaveSolver(true, geometry, space_order=4)
    observed, _, _ = solver.forward(vp=true.vp)
    synthetic, _, _ = solver.forward(vp=start.vp)
    residual = Receiver(name="residual", grid=true.grid, time_range=geometry.time_axis,
                        coordinates=geometry.rec_positions)
    residual.data[:] = synthetic.data - observed.data
    u = TimeFunction(name="u", grid=true.grid, time_order=2, space_order=4)
    v = TimeFunction(name="v", grid=true.grid, time_order=2, space_order=4)
    grad = Function(name="grad", grid=true.grid)
    op_fwd, op_grad = solver.op_fwd(save=False), solver.op_grad(save=False)
    report = open(args.report, "a", buffering=1)
    client = connect(args, adjsnap, lambda **kw: report.write(json.dumps(dict(kw, t=time.time()))
                                                            + "\n"))
    nt = geometry.nt
    first = None
    cycle = 0
    while not os.path.exists(args.stop_file):
        started = time.time()
        u.data[:] = 0
        v.data[:] = 0
        grad.data[:] = 0
        try:
            stream = Streamer(client, u, f"soak-{args.id}-c{cycle}")
            stream.forward(op_fwd, 1, nt - 2, src=geometry.src, u=u, vp=start.vp, dt=solver.dt)
            stream.adjoint(op_grad, nt - 2, 1, rec=residual, u=u, v=v, grad=grad, vp=start.vp,
                           dt=solver.dt)
            stream.delete()
        except adjsnap.Unavailable as e:
            # A spool outage or restart mid-stream: the Streamer does not retry; start over.
            report.write(json.dumps({"t": time.time(),
                                     "expected": f"streamer: Unavailable: {e}"[:300]}) + "\n")
            try:
                client.run(f"soak-{args.id}-c{cycle}").delete()
            except adjsnap.Error:
                pass
            cycle += 1
            continue
        g = grad.data.tobytes()
        if first is None:
            first = g
        elif g != first:
            report.write(json.dumps({"t": time.time(), "wrong":
                                     f"streamer cycle {cycle}: gradient differs from cycle 0"})
                         + "\n")
            sys.exit(3)
        report.write(json.dumps({"t": time.time(), "cycle": cycle, "streamer": True,
                                 "bytes": 2 * nt * u.data[0].nbytes,
                                 "seconds": time.time() - started}) + "\n")
        cycle += 1


# --------------------------------------------------------------------------------------------
# Supervisor


class Soak:
    def __init__(self, a):
        self.a = a
        self.out = os.path.abspath(a.out)
        os.makedirs(self.out, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="adjsnap-soak-")
        self.socket = os.path.join(self.work, "adjsnap.sock")
        self.stop_file = os.path.join(self.work, "stop")
        self.reports = os.path.join(self.out, "clients")
        os.makedirs(self.reports, exist_ok=True)
        self.adjsnap_bin = os.path.join(a.build, "client/tools/adjsnap")
        self.adjsnapd_bin = os.path.join(a.build, "daemon/adjsnapd")
        self.env = dict(os.environ, UCX_NET_DEVICES="lo", ADJSNAP_SOCKET=self.socket)
        self.failures = []
        self.events = []
        self.samples = []
        self.lives = 0
        self.outages = 0
        self.daemon = None
        self.clients = {}  # slot -> (Popen, report path, job)
        self.spawned = 0
        self.loop = None
        self.started = time.time()
        self.mnt = None  # the loop-mounted spool filesystem (root), once mounted
        self.lock = threading.Lock()
        self.rng = random.Random(a.seed)

    # -- adjsnapd ---------------------------------------------------------------------------
    def spool_setup(self):
        if os.geteuid() == 0 and shutil.which("mkfs.ext4") and shutil.which("losetup"):
            img = os.path.join(self.work, "spool.img")
            self.mnt = os.path.join(self.work, "mnt")
            os.makedirs(self.mnt)
            subprocess.run(["truncate", "-s", self.a.disk, img], check=True)
            subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True)
            subprocess.run(["mount", "-o", "loop", img, self.mnt], check=True)
            self.loop = img
            self.spool = os.path.join(self.mnt, "spool")
        else:
            self.mnt = None
            self.spool = os.path.join(self.work, "spool")
            log("spool failures: not run (loop-mounting a filesystem needs root)")
        os.makedirs(self.spool, exist_ok=True)

    def start_daemon(self):
        self.lives += 1
        logf = open(os.path.join(self.out, f"adjsnapd.{self.lives}.log"), "wb")
        self.daemon = subprocess.Popen(
            [self.adjsnapd_bin, "--socket", self.socket, "--state-dir", self.work + "/state",
             "--host-mem", self.a.host_mem, "--spool-dirs", self.spool, "--disk-mem",
             self.a.disk_mem, "--spool-failure-timeout", "3", "--orphan-grace", "20",
             "--fdstore", "off", "--log-level", "info"],
            stdout=subprocess.DEVNULL, stderr=logf, env=self.env)
        deadline = time.monotonic() + 60
        while subprocess.run([self.adjsnap_bin, "status"], env=self.env, capture_output=True
                             ).returncode != 0:
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                self.fail(f"adjsnapd (life {self.lives}) did not start; see adjsnapd.{self.lives}.log")
                raise SystemExit(1)
            time.sleep(0.1)
        st = json.loads(self.adjsnap("--json", "status").stdout or "{}")
        self.event(f"adjsnapd started (life {self.lives}, pid {self.daemon.pid}), "
                   f"{st.get('runs', 0)} runs, {st.get('lost_snapshots', 0)} lost snapshots")
        if st.get("lost_snapshots", 0):
            self.fail(f"adjsnapd life {self.lives} started with {st['lost_snapshots']} lost "
                      f"snapshots: the restart lost steps (see adjsnapd.{self.lives}.log)")

    def stop_daemon(self, why):
        t0 = time.monotonic()
        self.daemon.send_signal(signal.SIGTERM)
        try:
            rc = self.daemon.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.fail(f"adjsnapd did not stop within 90 s of SIGTERM ({why})")
            self.daemon.kill()
            rc = self.daemon.wait()
        if rc != 0:
            self.fail(f"adjsnapd exited {rc} on SIGTERM ({why}); see adjsnapd.{self.lives}.log")
        self.event(f"adjsnapd stopped ({why}) in {time.monotonic() - t0:.2f} s, exit {rc}")

    def adjsnap(self, *argv, ok=True):
        p = subprocess.run([self.adjsnap_bin, *argv], env=self.env, capture_output=True,
                           text=True, timeout=120)
        if ok and p.returncode != 0:
            self.fail(f"adjsnap {' '.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
        return p

    # -- clients -------------------------------------------------------------------------
    def spawn(self, slot):
        self.spawned += 1
        job = f"soak-job-{self.spawned}"
        report = os.path.join(self.reports, f"client-{self.spawned}.jsonl")
        mode = "--streamer" if slot == 0 and self.a.streamer else "--client"
        argv = [sys.executable, os.path.abspath(__file__), mode, "--id", str(self.spawned),
                "--seed", str(self.rng.randrange(1 << 30)), "--socket", self.socket,
                "--report", report, "--stop-file", self.stop_file]
        if slot % 2 == 1:
            argv.append("--mapped")
        p = subprocess.Popen(argv, env=dict(self.env, SLURM_JOB_ID=job),
                             stdout=open(report + ".out", "wb"), stderr=subprocess.STDOUT)
        self.clients[slot] = (p, report, job)

    def check_clients(self):
        for slot, (p, report, job) in list(self.clients.items()):
            rc = p.poll()
            if rc is None:
                continue
            if rc != 0 and not os.path.exists(self.stop_file):
                tail = open(report + ".out", errors="replace").read()[-2000:]
                self.fail(f"client {os.path.basename(report)} exited {rc}:\n{tail}")
            if not os.path.exists(self.stop_file):
                self.spawn(slot)

    def kill_one(self):
        slot = self.rng.choice([s for s in self.clients if s != 0 or not self.a.streamer])
        p, report, job = self.clients[slot]
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.event(f"SIGKILL client {os.path.basename(report)} ({job})")
        # Its run is orphaned; alternately removed by name (rm), by job (purge), or left for
        # the orphan sweep (orphan_grace 20 s). The sweep removes only runs that are not kept
        # (a kept run outlives its clients by design): a kept one is removed by name then too.
        how = self.spawned % 3
        if how == 0:
            self.adjsnap("purge", "--job", job)
        else:
            runs = json.loads(self.adjsnap("--json", "runs").stdout or "{}").get("runs", [])
            for r in runs:
                if r["spec"].get("job") == job and (how == 1 or r["spec"].get("keep")):
                    name = r["spec"]["name"]
                    p2 = self.adjsnap("rm", name, ok=False)
                    if p2.returncode != 0 and "does not exist" not in p2.stderr:
                        self.fail(f"adjsnap rm {name}: {p2.stderr.strip()}")
        self.spawn(slot)

    # -- faults and admin ----------------------------------------------------------------
    def remount(self, how):
        """mount -o remount,HOW; a read-only remount fails (EBUSY) while a file is open for
        writing, so it is tried every 20 ms for up to 15 s. False if it never took."""
        deadline = time.monotonic() + 15
        while True:
            p = subprocess.run(["mount", "-o", "remount," + how, self.mnt], capture_output=True,
                               text=True)
            if p.returncode == 0:
                return True
            if time.monotonic() > deadline:
                self.event(f"spool: mount -o remount,{how} did not take in 15 s: "
                           f"{p.stderr.strip()}")
                return False
            time.sleep(0.02)

    def spool_fails(self):
        if not self.remount("ro"):
            return False
        self.outages += 1
        self.event("spool remounted read-only")
        return True

    def spool_returns(self):
        if not self.remount("rw"):
            self.fail("the spool could not be remounted read-write")
        self.event("spool remounted read-write")

    def admin(self):
        what = self.rng.choice(["drain", "scrub", "status"])
        if what == "drain":
            p = self.adjsnap("drain", ok=False)
            if p.returncode != 0 and "spool" not in p.stderr and "stopping" not in p.stderr:
                self.fail(f"adjsnap drain: {p.stderr.strip()}")
        elif what == "scrub":
            runs = json.loads(self.adjsnap("--json", "runs").stdout or "{}").get("runs", [])
            if runs:
                name = self.rng.choice(runs)["spec"]["name"]
                p = self.adjsnap("scrub", name, ok=False)
                gone = ("does not exist", "not found")  # deleted since it was listed
                if p.returncode != 0 and not any(g in p.stderr for g in gone):
                    self.fail(f"adjsnap scrub {name}: {p.stderr.strip()}")
        self.event(f"adjsnap {what}")

    # -- sampling ------------------------------------------------------------------------
    def sample(self, started):
        pid = self.daemon.pid
        try:
            status = open(f"/proc/{pid}/status").read()
            fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
            kb = lambda k: int(fields.get(k, "0 kB").split()[0]) * 1024
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, ValueError):
            return
        st = self.adjsnap("--json", "status", ok=False)
        sessions = host_used = disk_used = runs = -1
        if st.returncode == 0:
            s = json.loads(st.stdout)
            sessions = s.get("sessions", 0)
            runs = s.get("runs", 0)
            for t in s.get("tiers", []):
                if t["tier"] == "host":
                    host_used = t["used_bytes"]
                if t["tier"] == "disk":
                    disk_used = t["used_bytes"]
        self.samples.append(dict(t=time.time() - started, life=self.lives,
                                 rss=kb("VmRSS"), rss_anon=kb("RssAnon"),
                                 rss_shmem=kb("RssShmem"), fds=fds,
                                 threads=int(fields["Threads"]), sessions=sessions, runs=runs,
                                 host_used=host_used, disk_used=disk_used))

    def event(self, what):
        log(what)
        self.events.append((time.time(), what))

    def fail(self, what):
        log("FAIL:", what)
        self.failures.append(what)

    # -- the run ---------------------------------------------------------------------------
    def run(self):
        a = self.a
        self.spool_setup()
        self.start_daemon()
        started = self.started = time.time()
        end = started + a.minutes * 60
        for slot in range(a.clients):
            self.spawn(slot)
        next_kill = started + a.kill_every
        next_restart = started + a.restart_every
        next_outage = started + a.outage_every
        next_admin = started + 7
        next_sample = started
        outage_until = 0
        while time.time() < end and not self.failures:
            now = time.time()
            self.check_clients()
            if now >= next_sample:
                self.sample(started)
                next_sample = now + a.sample_every
            if now >= next_kill:
                self.kill_one()
                next_kill = now + self.rng.uniform(0.5, 1.5) * a.kill_every
            if now >= next_admin:
                self.admin()
                next_admin = now + self.rng.uniform(5, 15)
            # A stop while no spool works loses the host-only steps (it cannot write them): a
            # restart never falls in an outage or in the 20 s after it (the spool's re-probe).
            if self.mnt and not outage_until and now >= next_outage and end - now > a.outage + 30:
                if self.spool_fails():
                    outage_until = time.time() + a.outage
                    next_restart = max(next_restart, outage_until + 20)
                next_outage = time.time() + a.outage + a.outage_every
            if outage_until and now >= outage_until:
                self.spool_returns()
                outage_until = 0
            if not outage_until and now >= next_restart and end - now > 30:
                self.stop_daemon("restart")
                self.start_daemon()
                next_restart = time.time() + a.restart_every
            time.sleep(0.2)
        self.finish(started)

    def finish(self, started):
        open(self.stop_file, "w").close()
        deadline = time.monotonic() + 300
        for slot, (p, report, job) in self.clients.items():
            try:
                rc = p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail(f"client {os.path.basename(report)} did not finish its cycle in 300 s")
                p.kill()
                rc = p.wait()
            if rc != 0:
                tail = open(report + ".out", errors="replace").read()[-2000:]
                self.fail(f"client {os.path.basename(report)} exited {rc}:\n{tail}")
        self.sample(started)
        # Every client deleted its runs; the killed ones' were purged, removed or swept. What
        # remains is a killed client's run inside its orphan grace: purge them all now.
        self.adjsnap("purge")
        runs = json.loads(self.adjsnap("--json", "runs").stdout or "{}").get("runs", [])
        if runs:
            self.fail(f"runs left after purge: {[r['spec']['name'] for r in runs]}")
        self.stop_daemon("end")
        self.analyse(time.time() - started)
        if self.mnt:
            subprocess.run(["umount", self.mnt])
        shutil.rmtree(self.work, ignore_errors=True)

    def explain(self, report):
        """What adjsnapd and the soak said about the run of an unexpected error: the lines of
        every life's log that name the run (by name, or by the id the error gives), and the
        soak's events of the 30 s before it. A rare failure in CI is then read from its log,
        with no second run."""
        needles = []
        if report.get("run"):
            needles.append(re.escape(f"'{report['run']}'"))
        m = re.search(r"run id (\d+)", report["error"])
        if m:
            needles.append(rf"\brun(?: id |-| ){m.group(1)}\b")
        if not needles:
            return
        found = re.compile("|".join(needles))
        log(f"-- what adjsnapd logged of the run ({found.pattern}):")
        for life in range(1, self.lives + 1):
            path = os.path.join(self.out, f"adjsnapd.{life}.log")
            if not os.path.exists(path):
                continue
            lines = [l.rstrip() for l in open(path, errors="replace") if found.search(l)]
            for l in lines[-40:]:
                print(f"   life {life}: {l[:400]}", flush=True)
        log("-- the soak's events in the 30 s before it:")
        for t, what in self.events:
            if report["t"] - 30 <= t <= report["t"]:
                print("   " + time.strftime("%H:%M:%S", time.localtime(t)) + " " + what, flush=True)

    def analyse(self, seconds):
        cycles = wrong = unexpected = 0
        expected = {}
        through = []  # (t, bytes) per finished cycle
        for name in os.listdir(self.reports):
            if not name.endswith(".jsonl"):
                continue
            for line in open(os.path.join(self.reports, name)):
                r = json.loads(line)
                if "wrong" in r:
                    wrong += 1
                    self.fail("WRONG BYTES: " + r["wrong"])
                if "error" in r:
                    unexpected += 1
                    self.fail("unexpected error: " + r["error"])
                    self.explain(r)
                if "expected" in r and isinstance(r["expected"], str):
                    k = r["expected"].split(":", 2)[1].strip() if ":" in r["expected"] else "?"
                    expected[k] = expected.get(k, 0) + 1
                if "cycle" in r and "bytes" in r:
                    cycles += 1
                    through.append((r["t"], r["bytes"]))
        s = self.samples
        warm = [x for x in s if x["t"] >= self.a.warmup]
        verdict = {}
        if len(warm) >= 6:
            third = len(warm) // 3
            early, late = warm[:third], warm[-third:]
            for key, slack in (("rss_anon", RSS_ANON_SLACK), ("fds", FD_SLACK),
                               ("threads", THREAD_SLACK), ("runs", RUNS_SLACK)):
                e = max((x[key] for x in early), default=-1)
                l = max((x[key] for x in late), default=-1)
                verdict[key] = (e, l, slack)
                if l > e + slack:
                    self.fail(f"{key} grew after warm-up: {e} -> {l} (bound +{slack})")
        else:
            self.fail(f"too few samples after warm-up ({len(warm)}) to judge growth")
        summary = dict(started=self.started, seconds=round(seconds), cycles=cycles, wrong_bytes=wrong,
                       unexpected_errors=unexpected, expected_errors=expected,
                       lives=self.lives, spool_outages=self.outages,
                       clients_spawned=self.spawned,
                       bytes=sum(b for _, b in through),
                       growth={k: {"early_max": e, "late_max": l, "bound": sl}
                               for k, (e, l, sl) in verdict.items()},
                       failures=self.failures)
        with open(os.path.join(self.out, "samples.jsonl"), "w") as f:
            for x in s:
                f.write(json.dumps(x) + "\n")
        with open(os.path.join(self.out, "events.jsonl"), "w") as f:
            for t, what in self.events:
                f.write(json.dumps({"t": t, "event": what}) + "\n")
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        log(f"{cycles} client cycles ({summary['bytes'] / 1e9:.1f} GB pushed and fetched) in "
            f"{seconds:.0f} s over {self.lives} adjsnapd lives and {self.outages} spool outages, "
            f"{self.spawned} client processes; "
            f"wrong bytes {wrong}, unexpected errors {unexpected}, expected errors {expected}")
        for k, (e, l, sl) in verdict.items():
            log(f"{k}: max {e} in the first third after warm-up, {l} in the last (bound +{sl})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--streamer", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--id", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--report", help=argparse.SUPPRESS)
    p.add_argument("--stop-file", help=argparse.SUPPRESS)
    p.add_argument("--mapped", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--socket", help=argparse.SUPPRESS)
    p.add_argument("--build", default="build-tests", help="the build tree with adjsnapd and adjsnap")
    p.add_argument("--out", default="soak-out", help="logs, samples and the summary go here")
    p.add_argument("--minutes", type=float, default=2)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host-mem", default="512M")
    # 16 clients can all be in the forward pass of a 192 MiB run at once (a spool outage lines
    # them up), beside killed clients' runs in their orphan grace: host + disk must hold that,
    # or adjsnapd rightly refuses pushes (2G did, after 13 minutes).
    p.add_argument("--disk-mem", default="4G")
    p.add_argument("--disk", default="6G", help="the loop-mounted spool filesystem's size")
    p.add_argument("--kill-every", type=float, default=15, help="seconds between client kills")
    p.add_argument("--restart-every", type=float,
                   help="seconds between adjsnapd restarts (180; a short soak: half of it)")
    p.add_argument("--outage-every", type=float,
                   help="seconds between spool outages (150; a short soak: a quarter of it)")
    p.add_argument("--outage", type=float, default=8, help="seconds the spool stays read-only")
    p.add_argument("--sample-every", type=float, default=2)
    p.add_argument("--warmup", type=float, default=30, help="seconds before growth is judged")
    a = p.parse_args()
    if a.restart_every is None:
        a.restart_every = min(180, a.minutes * 30)
    if a.outage_every is None:
        a.outage_every = min(150, a.minutes * 15)
    if a.client:
        client_main(a)
        return
    if a.streamer:
        streamer_main(a)
        return
    try:
        import devito  # noqa: F401
        a.streamer = True
    except ImportError:
        a.streamer = False
        log("Streamer: not run (Devito is not installed in this Python)")
    soak = Soak(a)
    # SIGTERM (tests/load stops its load so) ends the soak through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        soak.run()
    finally:
        for p_, _, _ in soak.clients.values():
            if p_.poll() is None:
                p_.kill()
                p_.wait()
        if soak.daemon and soak.daemon.poll() is None:
            soak.daemon.kill()
            soak.daemon.wait()  # its spool files closed: the unmount can go through
        if soak.mnt and os.path.ismount(soak.mnt):
            subprocess.run(["umount", soak.mnt], capture_output=True)
        shutil.rmtree(soak.work, ignore_errors=True)
    if soak.failures:
        log(f"soak FAILED: {len(soak.failures)} failure(s)")
        sys.exit(1)
    log("soak passed")


if __name__ == "__main__":
    main()
