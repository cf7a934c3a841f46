"""Writing and verifying a token plan against a plain plan of the same size,
side by side in one run: ``epochplan plan`` (write, then verify) of N
samples, G=1024, W=8, once plain and once with ``--lengths`` (int32,
lognormal with median 403, clipped to [1, max_tokens]) and ``--max-tokens``.

Each plan is one ``epochplan plan`` process. Reported per run: the write and
verify times the command prints, its wall time, its peak resident memory
(``VmHWM`` in ``/proc/PID/status``, the high-water mark of the process's
own address space, read every 20 ms; ``ru_maxrss`` would also count this
script's memory at the fork) and the peak of its anonymous memory
(``RssAnon``, sampled as often): the memory the process allocated itself,
without the pages of the files it maps (the token plan reads the lengths
file by id through a memory map: its pages count in the resident memory,
as page cache, up to the file's size). The
token plan's ratios are against the plain plan of the same N. The lengths
file is written a chunk at a time, and every output is deleted after its
run; a size whose files would not fit on the disk of ``--dir`` is skipped
with the reason printed. ``--results FILE`` writes the rows and the run's
context (machine, command, load) for ``benches/render_performance.py``.

    python benches/bench_token_plans.py --sizes 1e8 1e9 --dir /var/tmp
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from epochplan.bench.results import Tables

G, W = 1024, 8


def write_lengths(path: Path, n: int, cap: int) -> None:
    """int32 lognormal lengths, written 2^22 at a time."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int32, shape=(n,))
    rng = np.random.default_rng(0)
    for start in range(0, n, 1 << 22):
        k = min(n, start + (1 << 22)) - start
        out[start : start + k] = np.clip(rng.lognormal(6.0, 1.0, k), 1, cap)
    out.flush()
    del out


def _status_kb(pid: int) -> dict[str, int]:
    """``VmHWM`` and ``RssAnon`` of a process, in KiB (empty once it is gone)."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":")[0]
                if key in ("VmHWM", "RssAnon"):
                    found[key] = int(line.split()[1])
    except OSError:
        pass
    return found


def run(args: list[str]) -> dict[str, float]:
    """One ``epochplan plan`` process: its times and peak memory."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", "plan", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = {"VmHWM": 0, "RssAnon": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for key, value in _status_kb(proc.pid).items():
                peak[key] = max(peak[key], value)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, status = os.waitpid(proc.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"epochplan plan {' '.join(args)} failed:\n{out}{err}")
    wrote = re.search(r"wrote .* in ([\d.]+) s", out)
    verified = re.search(r"verified in ([\d.]+) s", out)
    if wrote is None or verified is None:
        raise RuntimeError(f"unexpected output of epochplan plan:\n{out}")
    return {
        "write": float(wrote.group(1)),
        "verify": float(verified.group(1)),
        "wall": wall,
        "rss": peak["VmHWM"] / 1024,
        "anon": peak["RssAnon"] / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e8, 1e9])
    parser.add_argument("--max-tokens", type=int, default=32768)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (a disk)")
    parser.add_argument(
        "--results", type=Path, help="write the table's rows and the run's context (JSON)"
    )
    args = parser.parse_args()
    cap = args.max_tokens
    results = Tables(args.results, __file__, sys.argv[1:])
    results.parameters = {"global_batch_size": G, "world_size": W, "max_tokens": cap}
    print(f"G={G} W={W} max_tokens={cap}; lengths int32, lognormal; write + verify per process")
    print(
        f"{'N':>14} {'plan':>6} {'write s':>8} {'verify s':>9} {'wall s':>8} "
        f"{'peak RSS MB':>12} {'peak anon MB':>13} {'wall / plain':>13} {'RSS / plain':>12}"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        root = Path(d)
        for size in args.sizes:
            n = int(size)
            # The lengths (4 B a sample), then the larger plan: ids, lengths
            # and offsets (about 16 B a sample), with a tenth to spare.
            need = int(n * (4 + 16) * 1.1)
            free = shutil.disk_usage(root).free
            if need > free:
                why = (
                    f"its lengths and token plan need {need / 1e9:.1f} GB "
                    f"on {root}, {free / 1e9:.1f} GB are free"
                )
                print(f"{n:>14} skipped: {why}")
                results.add("plans", {"n": n, "skipped": why})
                continue
            lengths = root / "lengths.npy"
            write_lengths(lengths, n, cap)
            common = ["-n", str(n), "-g", str(G), "-w", str(W)]
            plain = run([*common, "-o", str(root / "plain")])
            shutil.rmtree(root / "plain")
            token_args = ["--lengths", str(lengths), "--max-tokens", str(cap)]
            token = run([*common, *token_args, "-o", str(root / "token")])
            shutil.rmtree(root / "token")
            lengths.unlink()
            for name, r in (("plain", plain), ("token", token)):
                ratio = r["wall"] / plain["wall"]
                rss_ratio = r["rss"] / plain["rss"]
                print(
                    f"{n:>14} {name:>6} {r['write']:>8.1f} {r['verify']:>9.1f} "
                    f"{r['wall']:>8.1f} {r['rss']:>12.0f} {r['anon']:>13.0f} "
                    f"{ratio:>12.2f}x {rss_ratio:>11.2f}x"
                )
                results.add(
                    "plans",
                    {"n": n, "plan": name, "write_s": r["write"], "verify_s": r["verify"],
                     "wall_s": r["wall"], "rss_mb": r["rss"], "anon_mb": r["anon"],
                     "wall_ratio": ratio, "rss_ratio": rss_ratio},
                )  # fmt: skip
    results.save()


if __name__ == "__main__":
    main()
