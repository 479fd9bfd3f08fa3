#!/usr/bin/env python3
"""The arrows at link level: every symbol a part of the build leaves undefined, and that another
part of the tree defines, must come from a part it may use (arrows.py's BELOW; docs/architecture.md,
"Layout"). arrows.py checks the includes; this checks what the objects actually call, so a call
from the daemon into the client library (which every process links, since libadjsnap holds the
floor) fails here even though it would link.

    tools -> client / daemon -> kernels -> floor (proto/)

The parts are read from a build tree: the daemon's static libraries (one per folder; store/,
ingest/ and tiering/ are one, adjsnap_store), adjsnapd's own objects (main.cc, daemon.cc), the
client library's objects (client/src), the tools' objects, kernels/'s libraries and the floor's
objects (proto/). A symbol counts as defined by a part when one of its objects defines it
strongly (nm types T, D, B, R, C); weak definitions (inline functions, templates) are emitted
wherever a header is used, and arrows.py covers those headers.

    link_arrows.py BUILD_DIR      exit 0: no call against the arrows; 1: each one printed
    link_arrows.py --self-test    compiles a planted daemon -> client call and checks it is caught
"""
import collections
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from arrows import BELOW  # noqa: E402  (what each part may use)

DAEMON_LIBS = {"daemon_base": "daemon/base", "config": "daemon/config",
               "host_tier": "daemon/host_tier", "disk_tier": "daemon/disk_tier",
               "catalog": "daemon/catalog", "sessions": "daemon/sessions",
               "metrics": "daemon/metrics", "service": "daemon/service",
               "store": "daemon/store", "data_plane": "daemon/data_plane",
               "control": "daemon/control"}
STRONG = set("TDBRC")


def parts_of(build: pathlib.Path) -> dict:
    """part -> the archives and objects of the build that hold it."""
    parts = collections.defaultdict(list)
    for lib, part in DAEMON_LIBS.items():
        parts[part] += [build / "daemon" / f"libadjsnap_{lib}.a"]
    parts["daemon/main"] += sorted((build / "daemon/CMakeFiles/adjsnapd.dir").glob("*.o"))
    parts["client"] += sorted((build / "client/CMakeFiles/adjsnap_client.dir/src").glob("*.o"))
    parts["tools"] += sorted((build / "client/tools/CMakeFiles").glob("*/**/*.o"))
    parts["kernels"] += sorted((build / "kernels").glob("libadjsnap_*.a"))
    parts["floor"] += sorted((build / "proto/CMakeFiles").glob("adjsnap_*_objects.dir/**/*.o"))
    return {p: [f for f in files if f.is_file()] for p, files in parts.items()}


def symbols(files) -> tuple:
    """(strongly defined, any defined, undefined -> the file that needs it) over `files`."""
    strong, defined, undefined = set(), set(), {}
    if not files:
        return strong, defined, undefined
    out = subprocess.run(["nm", "-P", "-g", "-A", *map(str, files)], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        where, _, rest = line.rpartition(": ")
        fields = rest.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind == "U":
            undefined.setdefault(name, where)
        else:
            defined.add(name)
            if kind in STRONG:
                strong.add(name)
    return strong, defined, undefined


def demangle(name: str) -> str:
    r = subprocess.run(["c++filt", name], capture_output=True, text=True)
    return r.stdout.strip() or name


def check(build: pathlib.Path) -> list:
    parts = parts_of(build)
    missing = [p for p in DAEMON_LIBS.values() if not parts.get(p)]
    if missing or not parts.get("client") or not parts.get("floor"):
        return [f"{build}: no objects for {', '.join(missing or ['client/floor'])}: build it first"]
    table = {p: symbols(files) for p, files in parts.items()}
    provider = {}
    for p, (strong, _, _) in table.items():
        for name in strong:
            provider.setdefault(name, p)
    wrong = []
    for p, (_, defined, undefined) in sorted(table.items()):
        for name, where in sorted(undefined.items()):
            them = provider.get(name)
            if them is None or them == p or name in defined or them in BELOW[p]:
                continue
            wrong.append(f"{where}: {p} calls {demangle(name)}, defined by {them}: against the "
                         f"arrows ({p} may use {', '.join(sorted(BELOW[p])) or 'nothing else'})")
    return wrong


def self_test() -> int:
    """A fake build tree: the store calls the client (caught), config calls the floor (allowed)."""
    with tempfile.TemporaryDirectory() as tmp:
        build = pathlib.Path(tmp)

        def compile_to(obj: str, code: str) -> pathlib.Path:
            out = build / obj
            out.parent.mkdir(parents=True, exist_ok=True)
            src = out.with_suffix(".cc")
            src.write_text(code)
            subprocess.run(["c++", "-c", "-o", str(out), str(src)], check=True)
            return out

        floor = "proto/CMakeFiles/adjsnap_floor_objects.dir/floor/f.cc.o"
        compile_to(floor, "namespace adjsnap { int FloorCall() { return 1; } }\n")
        compile_to("client/CMakeFiles/adjsnap_client.dir/src/c.cc.o",
                   "namespace adjsnap { int ClientOnly() { return 2; } }\n")
        for lib in DAEMON_LIBS:
            call = {"store": "int ClientOnly(); int S() { return ClientOnly(); }",
                    "config": "int FloorCall(); int C() { return FloorCall(); }"}.get(lib, "")
            obj = compile_to(f"daemon/{lib}.o", f"namespace adjsnap {{ {call} }}\n")
            subprocess.run(["ar", "rcs", str(build / "daemon" / f"libadjsnap_{lib}.a"), str(obj)],
                           check=True)
        found = check(build)
        caught = [w for w in found if "daemon/store calls adjsnap::ClientOnly()" in w]
        if len(found) != 1 or not caught:
            print("self-test: expected only the store's call into the client, got:\n  " +
                  "\n  ".join(found or ["nothing"]), file=sys.stderr)
            return 1
    print("self-test: the planted daemon -> client call was caught, "
          "the config -> floor call was not")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wrong = check(pathlib.Path(sys.argv[1]))
    for w in wrong:
        print(w)
    if wrong:
        print(f"{len(wrong)} link(s) against the arrows", file=sys.stderr)
        return 1
    print("every call between the tree's parts follows the arrows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
