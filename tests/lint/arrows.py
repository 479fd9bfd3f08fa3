#!/usr/bin/env python3
"""The arrows, checked: every #include of the tree's sources resolved to the file it names, and
refused when it points from a part to one that part may not use (docs/architecture.md, "Layout").

    tools -> client / daemon -> kernels -> floor (proto/)

Inside the daemon, each folder may include only the folders its CMake target links
(daemon/CMakeLists.txt). An include is resolved as the compiler would: next to the including
file, then along the include roots (proto/, kernels/include/, client/include/, daemon/,
client/src/, kernels/); <adjsnap/...> as "adjsnap/...". Generated protos (adjsnap/v1/*.pb.h) are
the floor's. tests/ may include anything.

    arrows.py [SOURCE_DIR]        exit 0: no include against the arrows; 1: each one printed
    arrows.py --self-test         plants a back-edge in a copy of the tree and checks it is caught
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOTS = ["proto", "kernels/include", "client/include", "daemon", "client/src", "kernels"]
DAEMON_LEAVES = {"config", "host_tier", "disk_tier", "catalog", "sessions", "metrics", "service"}
STORE = {"store", "ingest", "tiering"}

# What each part may include besides itself.
BELOW = {
    "floor": set(),
    "kernels": {"floor"},
    "client": {"kernels", "floor"},
    "tools": {"client", "kernels", "floor"},
    "daemon/base": {"floor"},
}
for leaf in DAEMON_LEAVES:
    BELOW[f"daemon/{leaf}"] = {"daemon/base", "kernels", "floor"}
for part in STORE:  # one target today (adjsnap_store): its three folders use one another
    BELOW[f"daemon/{part}"] = ({f"daemon/{p}" for p in STORE} |
                               {"daemon/config", "daemon/host_tier", "daemon/disk_tier",
                                "daemon/catalog", "daemon/base", "kernels", "floor"})
BELOW["daemon/data_plane"] = BELOW["daemon/store"] | {f"daemon/{p}" for p in STORE} | {
    "daemon/sessions", "daemon/metrics"}
BELOW["daemon/control"] = BELOW["daemon/data_plane"] | {"daemon/data_plane"}
BELOW["daemon/main"] = BELOW["daemon/control"] | {"daemon/control", "daemon/service"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
SOURCES = (".h", ".cc", ".cu", ".c")


def part_of(rel: str):
    """The part a tree path belongs to, or None (tests, generated, outside the parts)."""
    p = pathlib.PurePosixPath(rel)
    top = p.parts[0]
    if top == "proto":
        return "floor"
    if top == "kernels":
        return "kernels"
    if top == "client":
        if len(p.parts) > 1 and p.parts[1] == "tools":
            return "tools"
        return "client"
    if top == "daemon":
        if len(p.parts) == 2:  # the daemon's root: log.h for all, main.cc and daemon.cc on top
            return "daemon/base" if p.stem == "log" else "daemon/main"
        return f"daemon/{p.parts[1]}"
    return None


def resolve(src: pathlib.Path, including: pathlib.Path, name: str, quoted: bool):
    """The tree path `name` names from `including`, "<generated>" for a generated proto, or None
    (a system or third-party header)."""
    if name.startswith("adjsnap/v1/") or name.startswith("grpc/health/"):
        return "proto/<generated>"
    if quoted:
        here = including.parent / name
        if here.is_file():
            return here.resolve().relative_to(src).as_posix()
    for root in ROOTS:
        f = src / root / name
        if f.is_file():
            return f.resolve().relative_to(src).as_posix()
    return None


def check(src: pathlib.Path) -> list:
    src = src.resolve()
    wrong = []
    for top in ("proto", "kernels", "client", "daemon"):
        for path in sorted((src / top).rglob("*")):
            rel = path.relative_to(src).as_posix()
            if path.suffix not in SOURCES or "/python/build" in rel or "/tests/" in rel:
                continue
            me = part_of(rel)
            if me is None:
                continue
            text = path.read_text(errors="replace")
            for m in INCLUDE.finditer(text):
                target = resolve(src, path, m.group(2), m.group(1) == '"')
                if target is None:
                    continue
                them = part_of(target)
                if them is None or them == me or them in BELOW[me]:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                wrong.append(f"{rel}:{line}: {me} includes {m.group(2)} ({target}, {them}): "
                             f"against the arrows ({me} may use {', '.join(sorted(BELOW[me])) or 'nothing else'})")
    return wrong


def self_test() -> int:
    """A copy of the tree with one back-edge planted must fail; the tree itself must pass."""
    src = pathlib.Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp) / "tree"
        for top in ("proto", "kernels", "client", "daemon"):
            shutil.copytree(src / top, copy / top,
                            ignore=shutil.ignore_patterns("build", "*.so", "__pycache__"))
        planted = [("daemon/host_tier/host_tier.cc", '#include "store/store.h"'),
                   ("proto/floor/status.cc", '#include "adjsnap/client.h"'),
                   ("kernels/cpu_reference.cc", '#include "data_plane/data_plane.h"')]
        for rel, line in planted:
            f = copy / rel
            f.write_text(line + "\n" + f.read_text())
            found = check(copy)
            f.write_text(f.read_text().split("\n", 1)[1])
            if not any(w.startswith(rel + ":1:") for w in found):
                print(f"self-test: a planted '{line}' in {rel} was not caught", file=sys.stderr)
                return 1
    print(f"self-test: {len(planted)} planted back-edges caught")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                       pathlib.Path(__file__).resolve().parents[2])
    wrong = check(src)
    for w in wrong:
        print(w)
    print(f"arrows: {len(wrong)} include{'' if len(wrong) == 1 else 's'} against the arrows")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
