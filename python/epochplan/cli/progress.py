"""What a command shows while it runs: a progress bar, rates and peak memory."""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["peak_rss_bytes", "progress_bar", "rate_text", "show_progress"]


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rate_text(n: float) -> str:
    for unit in ("", "k", "M", "G"):
        if abs(n) < 1000 or unit == "G":
            return f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}G"


@contextmanager
def progress_bar(
    desc: str, unit: str, enabled: bool, scale: int = 1
) -> Iterator[Callable[[int, int], None] | None]:
    """A ``progress(done, total)`` callback drawing a bar with rate and ETA on
    stderr (tqdm when installed, else a plain line), or None when disabled."""
    if not enabled:
        yield None
        return
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar: Any = None

        def update_tqdm(done: int, total: int) -> None:
            nonlocal bar
            if bar is None:
                bar = tqdm(
                    total=total * scale,
                    desc=desc,
                    unit=unit,
                    unit_scale=True,
                    unit_divisor=1000,
                    dynamic_ncols=True,
                    leave=False,
                )
            bar.update(done * scale - bar.n)

        try:
            yield update_tqdm
        finally:
            if bar is not None:
                bar.close()
        return

    start = time.perf_counter()
    drawn = False

    def update_plain(done: int, total: int) -> None:
        nonlocal drawn
        elapsed = time.perf_counter() - start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        pct = 100.0 * done / total if total else 100.0
        sys.stderr.write(
            f"\r{desc}: {pct:5.1f}% {rate_text(done * scale)}/{rate_text(total * scale)} {unit} "
            f"[{elapsed:.0f}s<{eta:.0f}s, {rate_text(rate * scale)} {unit}/s]   "
        )
        sys.stderr.flush()
        drawn = True

    try:
        yield update_plain
    finally:
        if drawn:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()


def show_progress(args: argparse.Namespace) -> bool:
    return not args.quiet and sys.stdout.isatty() and sys.stderr.isatty()
