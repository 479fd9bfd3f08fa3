"""Tenancy with two real uids: clients run as two users created for the test, against an adjsnapd
run by root. A user cannot see, read, delete or map the other's runs (each maps a host-tier
arena of its own); a quota overrun fails
for that user only; the control socket's permissions are what docs/operations.md says."""
import json
import os
import pwd
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjsnap
from conftest import Daemon, tool

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="creates users and runs clients as them: needs root")

USERS = ("adjsnap-tenant-a", "adjsnap-tenant-b")
STEP = 300_000  # bytes; the quota below holds three steps, not four
QUOTA = "1M"


@pytest.fixture(scope="module")
def users():
    ids = {}
    for name in USERS:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", name], check=True)
            pw = pwd.getpwnam(name)
        ids[name] = (pw.pw_uid, pw.pw_gid)
    return ids


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(extra=("--tenant_quota", QUOTA), shared=True)
    yield d
    d.stop()


ATTEMPT = """
def attempt(f):
    try:
        f()
        return "ok"
    except adjsnap.Error as e:
        return e.code
"""


def as_user(users, name, daemon, code, check=True):
    """Runs `code` (Python, prints one JSON value last) as user `name`; returns that value."""
    uid, gid = users[name]
    prelude = "import json, numpy as np, adjsnap\nclient = adjsnap.connect()\n" + ATTEMPT
    proc = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", sys.executable, "-c",
         prelude + textwrap.dedent(code)],
        env={**os.environ, "ADJSNAP_SOCKET": daemon.socket}, capture_output=True, text=True,
        timeout=120, cwd="/")
    if check and proc.returncode != 0:
        raise AssertionError(f"as {name}: exit {proc.returncode}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None


def adjsnap_cli(users, name, daemon, *args):
    cmd = [tool("adjsnap"), "--socket", daemon.socket, *args]
    if name is not None:
        uid, gid = users[name]
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)





def test_a_user_cannot_see_read_delete_or_map_another_users_runs(users, daemon):
    a, b = USERS
    made = as_user(users, a, daemon, """
        run = client.open_run("a-private", steps=4, bytes_per_step=4096, keep=True)
        for t in range(3):
            run.push(t, np.full(4096, t + 1, np.uint8)).wait_stored()
        print(json.dumps({"id": run.info.run_id, "path": client.data_path}))
    """)
    seen = as_user(users, b, daemon, f"""
        out = np.zeros(4096, np.uint8)
        runs = [r.name for r in client.runs()]
        result = {{
            "runs": runs,
            "data_path": client.data_path,
            "reason": client._c.data_path_reason,
            "attach": attempt(lambda: client.run("a-private")),
            "locate": attempt(lambda: client._c.locate("a-private", 0)),
            "list": attempt(lambda: client._c.snapshots("a-private")),
            "delete": attempt(lambda: client._c.delete_run("a-private")),
            "delete_step": attempt(lambda: client._c.delete_snapshot("a-private", 0)),
            "prefetch": attempt(lambda: client._c.prefetch("a-private", [0])),
            "fetch": attempt(lambda: client._c.fetch_async({made["id"]}, 0, out).wait()),
            "push": attempt(lambda: client._c.push({made["id"]}, 3, out).wait_stored()),
            "same_name": attempt(lambda: client.open_run("a-private", bytes_per_step=4096)),
            "same_name_runs": [r.name for r in client.runs()],
            "delete_own": attempt(lambda: client._c.delete_run("a-private")),
            "untouched": int(out.sum()),
        }}
        print(json.dumps(result))
    """)
    assert "a-private" not in seen["runs"]
    for op in ("attach", "locate", "list", "delete", "delete_step", "prefetch", "fetch", "push"):
        assert seen[op] == "NOT_FOUND", (op, seen[op])
    # Names are per user: B's "a-private" is its own run (and deleting it leaves A's alone).
    assert seen["same_name"] == "ok" and seen["same_name_runs"] == ["a-private"]
    assert seen["delete_own"] == "ok"
    assert seen["untouched"] == 0
    # Each user maps an arena of its own (per-uid arenas, the default): the mapped path, with
    # none of the other's bytes in reach.
    assert made["path"] == "mapped" and seen["data_path"] == "mapped"
    # adjsnap as B: the same refusals; purge/quota of another uid and drain need an admin.
    assert "a-private" not in adjsnap_cli(users, b, daemon, "runs").stdout
    rm = adjsnap_cli(users, b, daemon, "rm", "a-private")
    assert rm.returncode != 0 and "does not exist" in rm.stderr
    dump = adjsnap_cli(users, b, daemon, "dump", "a-private", "--to", "/tmp/never-written")
    assert dump.returncode != 0 and not os.path.exists("/tmp/never-written")
    for args in (("purge", "--uid", str(users[a][0])), ("quota", "--uid", str(users[a][0])),
                 ("quota", "--set", "10G"), ("drain",)):
        r = adjsnap_cli(users, b, daemon, *args)
        assert r.returncode != 0 and "only" in r.stderr, (args, r.stderr)
    # A still has everything, byte for byte; root (an admin) sees the run and its owner.
    back = as_user(users, a, daemon, """
        run = client.run("a-private")
        print(json.dumps([int(run.fetch(t)[0]) for t in range(3)]))
    """)
    assert back == [1, 2, 3]
    admin = adjsnap.connect(daemon.socket)
    info = admin.run("a-private").info
    assert info.spec.name == "a-private"
    listing = adjsnap_cli(users, None, daemon, "runs").stdout
    assert "a-private" in listing and str(users[a][0]) in listing
    purge = adjsnap_cli(users, None, daemon, "purge", "--uid", str(users[a][0]))
    assert purge.returncode == 0 and "deleted 1 run," in purge.stdout
    with pytest.raises(adjsnap.NotFound):
        admin.run("a-private")


def test_a_quota_overrun_fails_for_that_user_only(users, daemon):
    a, b = USERS
    code = f"""
        run = client.open_run(NAME, steps=8, bytes_per_step={STEP}, keep=True)
        results = [attempt(lambda t=t: run.push(t, np.full({STEP}, t, np.uint8)).wait_stored())
                   for t in range(4)]
        print(json.dumps(results))
    """
    over = as_user(users, a, daemon, code.replace("NAME", '"a-quota"'))
    assert over == ["ok", "ok", "ok", "RESOURCE_EXHAUSTED"]
    message = as_user(users, a, daemon, f"""
        run = client.run("a-quota")
        try:
            run.push(3, np.zeros({STEP}, np.uint8)).wait_stored()
            print(json.dumps(""))
        except adjsnap.ResourceExhausted as e:
            print(json.dumps(str(e)))
    """)
    assert "quota" in message and str(users[a][0]) in message
    # B is unaffected by A being at its quota.
    assert as_user(users, b, daemon, code.replace("NAME", '"b-quota"'))[:3] == ["ok"] * 3
    # A's stored steps are intact; an admin raising A's quota lets its push through.
    assert adjsnap_cli(users, None, daemon, "quota", "--uid", str(users[a][0]), "--set",
                   "0").returncode == 0
    after = as_user(users, a, daemon, f"""
        run = client.run("a-quota")
        pushed = attempt(lambda: run.push(3, np.full({STEP}, 3, np.uint8)).wait_stored())
        print(json.dumps([pushed] + [int(run.fetch(t)[0]) for t in range(4)]))
    """)
    assert after == ["ok", 0, 1, 2, 3]
    mine = adjsnap_cli(users, a, daemon, "quota")
    assert mine.returncode == 0 and f"uid {users[a][0]}: quota none" in mine.stdout
    for name in USERS:
        as_user(users, name, daemon, "client._c.delete_run(%r); print(1)" %
                ("a-quota" if name == a else "b-quota"))


def test_the_control_socket_permissions_are_as_documented(users):
    default = Daemon(shared=True)
    try:
        assert stat.S_IMODE(os.stat(default.socket).st_mode) == 0o666
    finally:
        default.stop()
    private = Daemon(extra=("--socket_mode", "0600"), shared=True)
    try:
        assert stat.S_IMODE(os.stat(private.socket).st_mode) == 0o600
        a = USERS[0]
        r = subprocess.run(["setpriv", f"--reuid={users[a][0]}", f"--regid={users[a][1]}",
                            "--clear-groups", sys.executable, "-c",
                            "import adjsnap\ntry:\n adjsnap.connect()\nexcept adjsnap.Unavailable as e:"
                            "\n print(e)"],
                           env={**os.environ, "ADJSNAP_SOCKET": private.socket},
                           capture_output=True, text=True, timeout=60, cwd="/")
        assert "Permission denied" in r.stdout, r.stdout + r.stderr
    finally:
        private.stop()
