#!/usr/bin/env python3
"""Prints how many tests of a pass skipped and why, from its JUnit XML (ctest --output-junit or
pytest --junitxml). With ADJSNAP_STRICT_SKIPS=1 it fails (exit 1) when a skip hides something the
machine could have tested:
  - a test labelled `gpu` skipped while `nvidia-smi -L` lists a GPU;
  - nvcc is installed, the build did not turn CUDA off (ADJSNAP_WITH_CUDA=OFF), and no `gpu`
    test was built;
  - a test that needs root (its skip reason says "needs root") skipped while running as root.

  report_skips.py --junit FILE --name NAME [--ctest-build DIR]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET


def skip_reason(case):
    """The reason a skipped test case gives, or None if it ran."""
    skipped = case.find("skipped")
    if skipped is None and case.get("status") not in ("notrun", "disabled"):
        return None
    out = case.findtext("system-out") or ""
    # GoogleTest: "<file>:<line>: Skipped\n<message>\n[  SKIPPED ] ...".
    m = re.search(r": Skipped\n(.*?)\n\[  SKIPPED \]", out, re.S)
    if m and m.group(1).strip():
        return " ".join(m.group(1).split())
    message = skipped.get("message", "") if skipped is not None else ""
    if message and message != "SKIP_REGULAR_EXPRESSION_MATCHED":
        return " ".join(message.split())
    return "(no reason given)"


def ctest_names(build, label):
    """The tests of a ctest build directory that carry `label`."""
    out = subprocess.run(["ctest", "--test-dir", build, "-N", "-L", label],
                         capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"Test +#\d+: (\S+)", out)}


def base_name(name):
    """A ctest name without the "  # GetParam() = ..." gtest_discover_tests appends."""
    return name.split()[0] if name.split() else name


def cuda_turned_off(build):
    """Whether the build directory was configured with ADJSNAP_WITH_CUDA off."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("ADJSNAP_WITH_CUDA:"):
                    return line.split("=", 1)[1].strip().upper() in ("OFF", "0", "FALSE", "NO")
    except OSError:
        pass
    return False


def gpu_present():
    if shutil.which("nvidia-smi") is None:
        return False
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


def nvcc_present():
    candidates = [os.environ.get("CUDACXX", ""), shutil.which("nvcc") or "",
                  "/usr/local/cuda/bin/nvcc"]
    return any(c and os.access(c, os.X_OK) for c in candidates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--junit", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--ctest-build")
    args = ap.parse_args()

    cases = ET.parse(args.junit).getroot().iter("testcase")
    skips = []
    total = 0
    for case in cases:
        total += 1
        reason = skip_reason(case)
        if reason is not None:
            name = case.get("name", "?")
            if case.get("classname") and not args.ctest_build:
                name = case.get("classname") + "::" + name
            skips.append((name, reason))
    print(f"== {args.name}: {len(skips)} of {total} tests skipped")
    for name, reason in skips:
        print(f"  skipped {name}: {reason}")

    problems = []
    if args.ctest_build:
        gpu_tests = ctest_names(args.ctest_build, "gpu")
        if gpu_present():
            problems += [f"{n} (label gpu) skipped on a machine where nvidia-smi lists a GPU"
                         for n, _ in skips if base_name(n) in gpu_tests]
        if not cuda_turned_off(args.ctest_build) and nvcc_present() and not gpu_tests:
            problems.append("nvcc is installed but no gpu-labelled test was built")
    if os.geteuid() == 0:
        problems += [f"{n} needs root and skipped though running as root"
                     for n, r in skips if "needs root" in r]

    strict = os.environ.get("ADJSNAP_STRICT_SKIPS", "0") == "1"
    for p in problems:
        print(f"  {'error' if strict else 'warning'}: {p}")
    return 1 if strict and problems else 0


if __name__ == "__main__":
    sys.exit(main())
