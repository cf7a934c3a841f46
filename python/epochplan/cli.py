"""The ``epochplan`` command: ``plan``, ``verify``, ``permute`` and ``bench``.

Every user mistake (a bad number, a missing directory, an existing output
without ``--force``) prints one line on stderr and exits with status 2 (bad
arguments) or 1 (the work failed); Ctrl-C exits with 130, SIGTERM and SIGHUP
with 128 + the signal, each after removing what a write left unfinished. No
tracebacks.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from ._args import limit_label, size_label

PROG = "epochplan"


class _Parser(argparse.ArgumentParser):
    """Reports a usage mistake in one line (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class _Help(argparse.RawDescriptionHelpFormatter):
    pass


_NUMBER = re.compile(r"^\s*(\d[\d_]*)\s*(?:(?:\*\*|\^)\s*(\d+)|[eE]\+?(\d+))?\s*$")


_MAX_I64 = 2**63 - 1
_MAX_U64 = 2**64 - 1


class UsageError(ValueError):
    """A combination of arguments that cannot work (exit status 2)."""


def count(text: str) -> int:
    """A non-negative integer, also written as ``1e9``, ``10**9``, ``10^9``, ``1_000``."""
    m = _NUMBER.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"expected a non-negative integer (like 1000, 1e9), got {text[:40]!r}"
        )
    digits = m.group(1).replace("_", "").lstrip("0") or "0"
    if len(digits) > 40:
        # Far beyond any limit; also keeps huge numbers out of messages.
        raise argparse.ArgumentTypeError(f"{text[:40]!r}... is too large")
    base = int(digits)
    power, exponent = m.group(2), m.group(3)
    if power is None and exponent is None:
        return base
    # A long exponent is read only after its length is checked (int() refuses
    # over 4,300 digits).
    exp_digits = (power or exponent).lstrip("0") or "0"
    exp = int(exp_digits) if len(exp_digits) <= 3 else 1000
    if exp > (64 if power is not None else 20):
        shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
        raise argparse.ArgumentTypeError(f"{shown} is too large")
    return int(base**exp) if power is not None else int(base * 10**exp)


def path(text: str) -> Path:
    """A path; an empty one is refused (``Path("")`` is the current directory)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "expected a path, got an empty string (use . for the current directory)"
        )
    return Path(text)


def _in_range(lo: int, hi: int) -> Callable[[str], int]:
    """An argument type: an integer in ``[lo, hi]`` (see :func:`count`)."""
    top = limit_label(hi)

    def parse(text: str) -> int:
        value = count(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {top}], got {text!r}")
        return value

    return parse


#: Sample counts and sizes (int64), and seeds and epochs (uint64).
samples = _in_range(0, _MAX_I64)
positive = _in_range(1, _MAX_I64)
seed_or_epoch = _in_range(0, _MAX_U64)


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rate(n: float) -> str:
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
            f"\r{desc}: {pct:5.1f}% {_rate(done * scale)}/{_rate(total * scale)} {unit} "
            f"[{elapsed:.0f}s<{eta:.0f}s, {_rate(rate * scale)} {unit}/s]   "
        )
        sys.stderr.flush()
        drawn = True

    try:
        yield update_plain
    finally:
        if drawn:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.quiet and sys.stdout.isatty() and sys.stderr.isatty()


# ---------------------------------------------------------------------- plan

PLAN_HELP = """\
Write every rank's sample ids of one or more epochs to a plan directory:
manifest.json plus epoch-EEEE/rank-RRRRR.npy (int64, numpy.load(...,
mmap_mode="r")). Written in bounded memory on all cores, checksummed,
published atomically, then verified (unless --no-verify).

Without --out, the plan goes to a temporary directory that is removed at the
end (unless --keep): `epochplan plan` alone is a demo that writes and verifies
a plan of 10^9 samples for 8 ranks and prints a summary.

examples:
  epochplan plan
  epochplan plan --num-samples 1e8 --global-batch-size 1024 --world-size 8 --out plan/
  epochplan plan -n 8474566 -g 640 -w 7 --epoch 0 --epochs 3 --seed 42 --out plan/ --force
  epochplan plan -n 1e6 -g 256 -w 4 --kind chunked --chunk-size 1000 --preload-nchunks 8 --out p/
"""


def _add_plan(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="write a plan directory (a demo with no arguments)",
        description=PLAN_HELP,
        formatter_class=_Help,
    )
    p.add_argument(
        "-n",
        "--num-samples",
        type=samples,
        default=10**9,
        metavar="N",
        help="samples per epoch (default 10^9)",
    )
    p.add_argument(
        "-g",
        "--global-batch-size",
        type=positive,
        default=4096,
        metavar="G",
        help="samples per step over all ranks (default 4096)",
    )
    p.add_argument(
        "-w",
        "--world-size",
        type=positive,
        default=8,
        metavar="W",
        help="ranks, one file each per epoch (default 8)",
    )
    p.add_argument(
        "-o",
        "--out",
        type=path,
        default=None,
        metavar="DIR",
        help="the plan directory to create (default: a temporary one)",
    )
    p.add_argument("--seed", type=seed_or_epoch, default=0, metavar="S", help="default 0")
    p.add_argument(
        "--epoch", type=seed_or_epoch, default=0, metavar="E", help="first epoch (default 0)"
    )
    p.add_argument(
        "--epochs",
        type=positive,
        default=1,
        metavar="K",
        help="number of epochs from --epoch on (default 1)",
    )
    p.add_argument(
        "--kind",
        default="cipher",
        choices=("cipher", "uniform", "chunked", "identity"),
        help="order kind (default cipher; uniform holds ~16 bytes per sample in memory)",
    )
    p.add_argument(
        "--chunk-size",
        type=positive,
        default=None,
        metavar="C",
        help="samples per chunk (kind chunked)",
    )
    p.add_argument(
        "--preload-nchunks",
        type=positive,
        default=None,
        metavar="P",
        help="chunks per shuffle window (kind chunked; default 1)",
    )
    p.add_argument("--drop-last", action="store_true", help="drop the short last step")
    p.add_argument(
        "--force", action="store_true", help="replace DIR if it is an existing plan directory"
    )
    p.add_argument(
        "--keep", action="store_true", help="keep the temporary plan directory (without --out)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip verifying after writing")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(run=_run_plan)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _run_plan(args: argparse.Namespace) -> int:
    from epochplan.planfile import (
        MAX_FILES,
        PlanError,
        _check_verify_memory,
        verify_plan,
        write_plan,
    )

    if args.kind == "chunked" and args.chunk_size is None:
        raise UsageError("--kind chunked needs --chunk-size")
    if args.kind != "chunked" and (args.chunk_size, args.preload_nchunks) != (None, None):
        raise UsageError("--chunk-size and --preload-nchunks apply to --kind chunked only")
    if args.world_size * args.epochs > MAX_FILES:
        raise UsageError(
            f"--world-size * --epochs must be at most {MAX_FILES} files, "
            f"got {args.world_size} * {args.epochs}"
        )
    if args.epoch + args.epochs - 1 > _MAX_U64:
        raise UsageError(
            f"the last epoch (--epoch + --epochs - 1) must be at most {limit_label(_MAX_U64)}, "
            f"got {args.epoch} + {args.epochs} - 1"
        )
    temp_root = None
    out = args.out
    if out is None:
        temp_root = Path(tempfile.mkdtemp(prefix="epochplan-"))
        out = temp_root / "plan"
    show = _show_progress(args)
    say = (lambda _msg: None) if args.quiet else print
    epochs = range(args.epoch, args.epoch + args.epochs)
    try:
        if not args.no_verify:
            # Known before writing: no plan is written that cannot be verified.
            try:
                _check_verify_memory(
                    Path(out),
                    args.num_samples,
                    args.global_batch_size,
                    args.kind,
                    args.drop_last,
                )
            except PlanError as e:
                raise PlanError(f"{e} (--no-verify writes the plan without verifying it)") from None
        t0 = time.perf_counter()
        with progress_bar("writing", "B", show, scale=8) as bar:
            d = write_plan(
                out,
                args.num_samples,
                args.global_batch_size,
                args.world_size,
                seed=args.seed,
                epochs=epochs,
                kind=args.kind,
                chunk_size=args.chunk_size,
                preload_nchunks=args.preload_nchunks,
                drop_last=args.drop_last,
                force=args.force,
                progress=bar,
            )
        t_write = time.perf_counter() - t0
        files = len(d.manifest["files"])
        nbytes = int(d.manifest["total_bytes"])
        ids = sum(int(f["count"]) for f in d.manifest["files"])
        say(
            f"plan: N={args.num_samples:,} G={args.global_batch_size} W={args.world_size} "
            f"epochs={list(epochs)} kind={args.kind} seed={args.seed} -> {out}"
        )
        say(
            f"wrote {files} files, {size_label(nbytes)} in {t_write:.1f} s "
            f"({_rate(ids / max(t_write, 1e-9))} ids/s, "
            f"{size_label(nbytes / max(t_write, 1e-9))}/s)"
        )
        if not args.no_verify:
            t1 = time.perf_counter()
            with progress_bar("verifying", "B", show) as bar:
                verify_plan(d.path, progress=bar)
            t_verify = time.perf_counter() - t1
            # A uniform order is rebuilt (and compared) only for a dropped step.
            compared = d.kind != "uniform" or (
                d.drop_last and d.num_samples % d.global_batch_size != 0
            )
            say(
                f"verified in {t_verify:.1f} s: checksums ok, every id "
                f"{'as planned and ' if compared else ''}once per epoch, "
                f"equal steps ({d.manifest['num_steps']:,} per rank)"
            )
        say(
            f"disk: {size_label(_dir_bytes(d.path))}, "
            f"peak memory (RSS): {size_label(_peak_rss_bytes())}"
        )
        if temp_root is not None:
            if args.keep:
                say(f"kept {out}")
            else:
                say(f"removed {out} (use --keep or --out DIR to keep a plan)")
    finally:
        if temp_root is not None and not args.keep:
            shutil.rmtree(temp_root, ignore_errors=True)
    return 0


# -------------------------------------------------------------------- verify

VERIFY_HELP = """\
Check a plan directory completely: the manifest, every file's header, size and
BLAKE3 checksum, equal steps (each rank file holds the plan's share of its
rank), every id against the plan (recomputed; for kind uniform only when a
dropped step needs the permutation) and exact coverage (every id of [0, N)
exactly once per epoch; for a plan written with --drop-last, exactly the
full steps' ids, none of the dropped step's).
Streams through the files with a bitmap of N/8 bytes (kind uniform with a
dropped step also builds the permutation, about 16 bytes per sample). Exit
status 0 when everything holds; otherwise one line naming the file and its
first violation, exit status 1.

examples:
  epochplan verify plan/
  epochplan verify --quiet plan/ && echo ok
"""


def _add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify", help="check a plan directory", description=VERIFY_HELP, formatter_class=_Help
    )
    p.add_argument("dir", type=path, metavar="DIR", help="the plan directory")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing when it is valid")
    p.set_defaults(run=_run_verify)


def _run_verify(args: argparse.Namespace) -> int:
    from epochplan.planfile import open_plan, verify_plan

    t0 = time.perf_counter()
    with progress_bar("verifying", "B", _show_progress(args)) as bar:
        verify_plan(args.dir, progress=bar)
    d = open_plan(args.dir)
    if not args.quiet:
        print(
            f"{args.dir}: ok ({len(d.manifest['files'])} files, "
            f"{size_label(int(d.manifest['total_bytes']))}, N={d.num_samples:,}, "
            f"W={d.world_size}, epochs={d.epochs}) in {time.perf_counter() - t0:.1f} s"
        )
    return 0


# ------------------------------------------------------------------- permute

PERMUTE_HELP = """\
Compute one permutation and print a short summary: time, throughput, peak
memory, the first ids and a checksum (BLAKE2b of the int64 ids, which is the
same on every machine and thread count).

examples:
  epochplan permute
  epochplan permute --num-samples 1e9 --kind cipher --seed 3 --epoch 1
"""


def _add_permute(sub: Any) -> None:
    p = sub.add_parser(
        "permute",
        help="compute one permutation and summarise it",
        description=PERMUTE_HELP,
        formatter_class=_Help,
    )
    p.add_argument(
        "-n", "--num-samples", type=samples, default=10**8, metavar="N", help="default 10^8"
    )
    p.add_argument("--seed", type=seed_or_epoch, default=0, metavar="S")
    p.add_argument("--epoch", type=seed_or_epoch, default=0, metavar="E")
    p.add_argument(
        "--kind",
        default="uniform",
        choices=("uniform", "cipher", "identity"),
        help="default uniform",
    )
    p.set_defaults(run=_run_permute)


def _run_permute(args: argparse.Namespace) -> int:
    import numpy as np

    import epochplan as ep

    n = args.num_samples
    from epochplan.planfile import _available_memory

    avail = _available_memory()
    need = (16 if args.kind == "uniform" else 8) * n
    if avail is not None and need > avail:
        raise ValueError(
            f"--num-samples {n:,} needs about {size_label(need)} of memory, "
            f"{size_label(avail)} is available"
        )
    base = _peak_rss_bytes()
    t0 = time.perf_counter()
    ids = ep.permutation(n, seed=args.seed, epoch=args.epoch, kind=args.kind)
    dt = time.perf_counter() - t0
    peak = _peak_rss_bytes()
    digest = hashlib.blake2b(np.ascontiguousarray(ids, dtype="<i8").data, digest_size=16)
    first = ", ".join(str(int(x)) for x in ids[:8])
    print(
        f"permutation({n:,}, seed={args.seed}, epoch={args.epoch}, kind={args.kind!r}): "
        f"{dt:.2f} s, {_rate(n / max(dt, 1e-9))} ids/s, {ep.get_num_threads()} threads"
    )
    print(
        f"peak memory (RSS): {size_label(peak)} ({size_label(peak - base)} for the call, "
        f"output {size_label(ids.nbytes)})"
    )
    print(f"first ids: [{first}{', ...' if n > 8 else ''}]")
    print(f"blake2b-128 of the int64 ids: {digest.hexdigest()}")
    return 0


# --------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    parser = _Parser(
        prog=PROG,
        description="epochplan: exact, equal-step, elastic epoch plans.\n\n"
        "examples:\n  epochplan plan\n  epochplan plan -n 1e8 -g 1024 -w 8 --out plan/\n"
        "  epochplan verify plan/\n  epochplan permute\n  epochplan bench --sizes 1e6 1e7",
        formatter_class=_Help,
    )
    from epochplan import __version__

    parser.add_argument("--version", action="version", version=f"epochplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_plan(sub)
    _add_verify(sub)
    _add_permute(sub)
    from epochplan import bench

    bench.add_parser(sub, _Help)
    return parser


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is so that it unwinds as
    for Ctrl-C (partial files and the demo's temporary directory removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _unwind_on_termination() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def unwind(signum: int, _frame: object) -> None:
        raise _Terminated(signum)

    # A signal already ignored stays ignored (SIGHUP under nohup, say).
    signals = [
        s for s in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) is not signal.SIG_IGN
    ]
    previous = {s: signal.signal(s, unwind) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``epochplan`` console script."""
    # Started with stdout or stderr closed (``>&-``), Python has None there:
    # the output is discarded instead of failing on it.
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    prog = f"{PROG} {args.command}"
    try:
        code = _dispatch(args, prog)
        # Written out here, whatever the outcome, so that a closed pipe is met
        # below rather than at exit (stdout to a pipe is block-buffered).
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader of the output went away (``epochplan permute | head``):
        # stop quietly, as a tool killed by SIGPIPE would, without a second
        # error when Python flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE


def _dispatch(args: argparse.Namespace, prog: str) -> int:
    """Runs the command; a failure is one line on stderr and its exit status."""
    try:
        with _unwind_on_termination():
            code: int = args.run(args)
        return code
    except UsageError as e:
        print(f"{prog}: error: {e} (see --help)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except _Terminated as e:
        print(f"{prog}: terminated by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum
    except BrokenPipeError:
        raise  # for main
    except (ValueError, TypeError, OverflowError, OSError, MemoryError) as e:
        msg = str(e) or type(e).__name__
        if isinstance(e, OSError) and e.filename is not None and str(e.filename) not in msg:
            msg = f"{e.filename}: {msg}"
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
