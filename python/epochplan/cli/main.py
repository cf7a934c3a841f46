"""The ``epochplan`` command: ``plan``, ``verify``, ``permute``, ``bench`` and
``megatron-cache``.

Every user mistake (a bad number, a missing directory, an existing output
without ``--force``) prints one line on stderr and exits with status 2 (bad
arguments) or 1 (the work failed); Ctrl-C exits with 130, SIGTERM and SIGHUP
with 128 + the signal, each after removing what a write left unfinished. No
tracebacks.
"""

from __future__ import annotations

import os
import sys

# The console script imports this module before main() can handle a
# signal, so it imports nothing Python has not loaded at start-up (os and
# sys); the rest is imported inside main(). typing.TYPE_CHECKING without
# typing (type checkers take the name):
TYPE_CHECKING = False

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from sys import UnraisableHookArgs
    from types import TracebackType

__all__ = ["build_parser", "main"]

PROG = "epochplan"


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser. Imports the commands, and with them
    numpy and the native module."""
    from epochplan._version import __version__
    from epochplan.cli import audit, bench, megatron_cache, parts, permute, plan, verify
    from epochplan.cli.arguments import Help, Parser

    parser = Parser(
        prog=PROG,
        description="epochplan: exact, equal-step, elastic epoch plans.\n\n"
        "examples:\n  epochplan plan\n  epochplan plan -n 1e8 -g 1024 -w 8 --out plan/\n"
        "  epochplan verify plan/\n  epochplan audit logs/\n  epochplan permute\n"
        "  epochplan bench --sizes 1e6 1e7",
        formatter_class=Help,
    )
    parser.add_argument("--version", action="version", version=f"epochplan {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in (plan, verify, audit, permute, bench, megatron_cache):
        command.add_parser(sub)
    parts.add_merge_parser(sub)
    return parser


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is so that it unwinds as
    for Ctrl-C (partial files and the demo's temporary directory removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _UnwindOnTermination:
    """SIGTERM and SIGHUP raise :class:`_Terminated` while the block runs.

    Python runs a signal's handler wherever the main thread is, also inside
    a weakref callback or a ``__del__`` (the import system runs such
    callbacks), where an exception is reported as "ignored" and dropped. The
    block gets a function that raises such a dropped interruption (Ctrl-C's
    too), to call where the program can stop; until then nothing of it is
    printed.
    """

    def __init__(self) -> None:
        self._dropped: list[BaseException] = []
        self._previous: dict[int, object] = {}
        self._report_unraisable = sys.unraisablehook
        self._active = False

    def __enter__(self) -> Callable[[], None]:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return lambda: None  # signal handlers can only be set from the main thread
        self._active = True
        # A signal already ignored stays ignored (SIGHUP under nohup, say).
        for s in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(s) is not signal.SIG_IGN:
                self._previous[s] = signal.signal(s, _unwind)
        sys.unraisablehook = self._keep_interruptions
        return self._raise_dropped

    def _keep_interruptions(self, unraisable: UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, _Terminated | KeyboardInterrupt):
            self._dropped.append(unraisable.exc_value)
        else:
            self._report_unraisable(unraisable)

    def _raise_dropped(self) -> None:
        if self._dropped:
            raise self._dropped[0]

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._active:
            return
        import signal

        sys.unraisablehook = self._report_unraisable
        for s, handler in self._previous.items():
            signal.signal(s, handler)  # type: ignore[arg-type]


def _unwind(signum: int, _frame: object) -> None:
    raise _Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``epochplan`` console script."""
    # Started with stdout or stderr closed (``>&-``), Python has None there:
    # the output is discarded instead of failing on it.
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    prog = PROG
    try:
        # The handlers come first: importing the commands (numpy, the native
        # module) takes a few hundred milliseconds, and a signal then must exit
        # as documented too, not with a traceback or without a word.
        with _UnwindOnTermination() as raise_dropped:
            parser = build_parser()
            args = parser.parse_args(argv)
            args.argv = sys.argv[1:] if argv is None else list(argv)  # as given, for reports
            raise_dropped()
            if args.command is None:
                parser.print_help()
                return 2
            prog = f"{PROG} {args.command}"
            code = _run(args, prog)
            raise_dropped()
        # Written out here, whatever the outcome, so that a closed pipe is met
        # below rather than at exit (stdout to a pipe is block-buffered).
        sys.stdout.flush()
        return code
    except (KeyboardInterrupt, _Terminated) as e:
        return _stopped(prog, e)
    except BrokenPipeError:
        # The reader of the output went away (``epochplan permute | head``):
        # stop quietly, as a tool killed by SIGPIPE would, without a second
        # error when Python flushes stdout at exit.
        import signal

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    except Exception as e:
        # Python up to 3.11 wraps an exception raised while a class is created
        # (in a descriptor's __set_name__) in a RuntimeError: a signal that
        # arrives while the commands are imported can be met there.
        signal_stop = _signal_behind(e)
        if signal_stop is None:
            raise
        return _stopped(prog, signal_stop)


def _signal_behind(error: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or ``_Terminated`` in the chain of
    ``error``'s causes, if any (a chain may loop: ``raise e from e``)."""
    seen = set()
    cause = error.__cause__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (KeyboardInterrupt, _Terminated)):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def _stopped(prog: str, by: BaseException) -> int:
    """Reports a stop by Ctrl-C (``KeyboardInterrupt``) or by SIGTERM or
    SIGHUP (``_Terminated``); returns the exit status a shell gives a
    process killed by that signal."""
    if isinstance(by, _Terminated):
        import signal

        print(f"{prog}: terminated by {signal.Signals(by.signum).name}", file=sys.stderr)
        return 128 + by.signum
    print(f"{prog}: interrupted", file=sys.stderr)
    return 130


def _run(args: argparse.Namespace, prog: str) -> int:
    """Runs the command; a failure is one line on stderr and its exit status
    (signals and a closed pipe are left to :func:`main`)."""
    from epochplan.cli.arguments import UsageError

    try:
        code: int = args.run(args)
        return code
    except UsageError as e:
        print(f"{prog}: error: {e} (see --help)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except (ValueError, TypeError, OverflowError, OSError, MemoryError) as e:
        msg = str(e) or type(e).__name__
        if isinstance(e, OSError) and e.filename is not None and str(e.filename) not in msg:
            msg = f"{e.filename}: {msg}"
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 1
