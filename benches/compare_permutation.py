"""Side-by-side timings of the permutation core against numpy and torch.

Every case runs in a fresh interpreter (so its peak RSS is its own), repeated,
and the table reports the median and min wall time, the ratio to the peers and
the peak resident memory. Usage::

    python benches/compare_permutation.py               # N = 10**8, 3 repeats
    python benches/compare_permutation.py --n 10**7 --repeats 5

Targets (from the project's issue): uniform >= 8x numpy and >= 4x torch;
Permutation(10**9)[3::8] < 0.1x numpy's 10**8 time and < 1.5 GB peak; the
cipher <= 5 ns per element on one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def case_function(name: str, n: int) -> Callable[[], object]:
    """The timed call of a case (imports happen before timing)."""
    if name == "numpy":
        import numpy as np

        return lambda: np.random.default_rng(0).permutation(n)
    if name == "torch":
        import torch

        return lambda: torch.randperm(n)
    import epochplan as ep

    if name == "uniform":
        permutation = ep.permutation  # loaded on first use: load it before timing
        return lambda: permutation(n, kind="uniform")
    if name == "share_1e9":
        p = ep.Permutation(10**9)
        return lambda: p[3::8]
    if name == "cipher_1t":
        ep.set_num_threads(1)
        p = ep.Permutation(n)
        return lambda: p[:]
    if name == "cipher":
        p = ep.Permutation(n)
        return lambda: p[:]
    raise ValueError(f"unknown case {name!r}")


def run_case(name: str, n: int, repeats: int) -> dict[str, object]:
    """Runs one case in this process; returns times and memory."""
    fn = case_function(name, n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        del out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"times": times, "base_mb": base, "peak_mb": peak}


def in_subprocess(name: str, n: int, repeats: int) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--case", name, "--n", str(n), "--repeats", str(repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=3600)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rust_cipher_ns(n: int) -> float | None:
    """ns per element of the cipher on one thread into a warm buffer, from
    rust/core/examples/cipher_speed.rs (None without cargo)."""
    if shutil.which("cargo") is None:
        return None
    cmd = ["cargo", "run", "-q", "--release", "-p", "epochplan-core", "--example"]
    cmd += ["cipher_speed", "--", str(n), "1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    values = [float(v) for v in re.findall(r"([0-9.]+) ns per element", done.stdout)]
    return statistics.median(values) if values else None


def size(n: int) -> str:
    """10**8 as "1e8", other sizes with digit grouping."""
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else f"{n:,}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="10**8", help="samples for the materialised cases")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = int(eval(args.n, {})) if isinstance(args.n, str) else int(args.n)  # "10**8"
    if args.case:
        print(json.dumps(run_case(args.case, n, args.repeats)))
        return

    load = os.getloadavg()[0]
    cases = [
        ("uniform", f"epochplan permutation({size(n)}, kind='uniform')"),
        ("numpy", f"numpy default_rng(0).permutation({size(n)})"),
        ("torch", f"torch.randperm({size(n)})"),
        ("share_1e9", "epochplan Permutation(1e9)[3::8] (125M ids)"),
        ("cipher", f"epochplan Permutation({size(n)})[:] (cipher, all threads)"),
        ("cipher_1t", f"epochplan Permutation({size(n)})[:] (cipher, 1 thread)"),
    ]
    results = {}
    for key, label in cases:
        print(f"running {label} ...", file=sys.stderr)
        results[key] = in_subprocess(key, n, args.repeats)
    med = {k: statistics.median(r["times"]) for k, r in results.items()}  # type: ignore[arg-type]

    print(f"\nN = {n:,}; {args.repeats} repeats per case, each case in a fresh process;")
    print(f"{os.cpu_count()} CPUs, load average {load:.1f} at start.\n")
    print(
        "| case | median (s) | min (s) | numpy / case | torch / case "
        "| peak RSS (MB, whole process) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for key, label in cases:
        r = results[key]
        times: list[float] = r["times"]  # type: ignore[assignment]
        print(
            f"| {label} | {med[key]:.3f} | {min(times):.3f} | {med['numpy'] / med[key]:.1f}x"
            f" | {med['torch'] / med[key]:.1f}x | {r['peak_mb']:.0f} |"
        )
    cipher_ns = med["cipher_1t"] * 1e9 / n
    warm = rust_cipher_ns(n)
    share = results["share_1e9"]
    print("\n| target | measured | met |")
    print("|---|---:|:-:|")
    rows = [
        ("uniform >= 8x numpy", med["numpy"] / med["uniform"], 8, True),
        ("uniform >= 4x torch", med["torch"] / med["uniform"], 4, True),
        (
            f"1e9 share time / numpy {size(n)} time < 0.1",
            med["share_1e9"] / med["numpy"],
            0.1,
            False,
        ),
        ("1e9 share peak RSS < 1.5 GB (MB)", float(share["peak_mb"]), 1536, False),  # type: ignore[arg-type]
        ("cipher ns/element, 1 thread, with allocation", cipher_ns, 5, False),
    ]
    if warm is not None:
        rows.append(("cipher ns/element, 1 thread, warm buffer (Rust)", warm, 5, False))
    for label, value, target, at_least in rows:
        met = value >= target if at_least else value < target
        print(f"| {label} | {value:.3g} | {'yes' if met else 'no'} |")


if __name__ == "__main__":
    main()
