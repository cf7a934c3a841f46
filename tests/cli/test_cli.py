"""The epochplan command, run as users run it: in a subprocess."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan.planfile import open_plan, verify_plan


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochplan.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("command", [[], ["plan"], ["verify"], ["permute"], ["bench"]])
def test_help_has_examples(command: list[str]) -> None:
    res = cli(*command, "--help")
    assert res.returncode == 0, res.stderr
    assert "examples:" in res.stdout
    assert "epochplan " + (command[0] if command else "plan") in res.stdout


def test_plan_then_verify(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    res = cli(
        "plan", "-n", "10_000", "-g", "64", "-w", "3", "--epoch", "2", "--epochs", "2",
        "--seed", "7", "--out", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "checksums ok" in res.stdout
    assert res.stderr == ""  # not a terminal: no progress bar
    d = open_plan(out)
    assert (d.num_samples, d.global_batch_size, d.world_size, d.seed, d.epochs) == (
        10_000,
        64,
        3,
        7,
        [2, 3],
    )
    np.testing.assert_array_equal(
        d.rank_ids(3, 1), ep.EpochPlan(10_000, 64, seed=7, epoch=3).rank_indices(1, 3)
    )
    res = cli("verify", str(out))
    assert res.returncode == 0 and res.stdout.startswith(f"{out}: ok (6 files")
    assert cli("verify", "--quiet", str(out)).stdout == ""


def test_plan_into_a_temporary_directory_is_removed(tmp_path: Path) -> None:
    res = cli("plan", "-n", "1e5", "-w", "4")
    assert res.returncode == 0, res.stderr
    where = re.search(r"-> (\S+)", res.stdout)
    assert where is not None
    assert not Path(where.group(1)).exists()
    for word in ("wrote 4 files", "ids/s", "checksums ok", "disk:", "peak memory"):
        assert word in res.stdout
    assert cli("plan", "-n", "1e5", "-q").stdout == ""


def test_plan_kept_from_a_temporary_directory(tmp_path: Path) -> None:
    res = cli("plan", "-n", "1e3", "-g", "10", "-w", "2", "--keep")
    assert res.returncode == 0, res.stderr
    kept = re.search(r"kept (\S+)", res.stdout)
    assert kept is not None, res.stdout
    plan = Path(kept.group(1))
    try:
        verify_plan(plan)
        assert open_plan(plan).world_size == 2
    finally:
        shutil.rmtree(plan.parent)


def test_the_last_epoch_may_be_the_largest(tmp_path: Path) -> None:
    last = str(2**64 - 1)
    res = cli(
        "plan",
        "-n",
        "10",
        "-g",
        "5",
        "-w",
        "1",
        "--epoch",
        last,
        "-q",
        "--out",
        str(tmp_path / "p"),
    )
    assert res.returncode == 0, res.stderr
    assert open_plan(tmp_path / "p").epochs == [2**64 - 1]


def test_no_command_prints_the_help_and_fails() -> None:
    res = cli()
    assert res.returncode == 2, res.stderr
    assert "usage:" in res.stdout and "plan" in res.stdout


def test_permute_summary() -> None:
    res = cli("permute", "-n", "1000", "--seed", "3", "--epoch", "1")
    assert res.returncode == 0, res.stderr
    ids = ep.permutation(1000, seed=3, epoch=1)
    first = ", ".join(str(x) for x in ids[:8])
    assert f"first ids: [{first}, ...]" in res.stdout
    digest = hashlib.blake2b(ids.astype("<i8").tobytes(), digest_size=16).hexdigest()
    assert digest in res.stdout


def test_closed_output_pipe_stops_quietly() -> None:
    # `epochplan permute | true`: the reader is gone before the summary
    # (stdout block-buffered, as to any pipe by default).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", "permute", "-n", "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert stderr == b""


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["plan", "-n", "abc"], 2, "expected a non-negative integer"),
        (["plan", "-n", "-5"], 2, "expected a non-negative integer"),
        (["plan", "-g", "0"], 2, "argument -g/--global-batch-size: must be in [1, 2**63 - 1]"),
        (["plan", "-w", "1.5"], 2, "expected a whole number, got '1.5'"),
        (["plan", "--kind", "fancy"], 2, "invalid choice"),
        (["plan", "-n", "10", "--kind", "chunked"], 2, "needs --chunk-size"),
        (["plan", "-n", "10", "--chunk-size", "3"], 2, "apply to --kind chunked only"),
        (["plan", "-n", "10", "--preload-nchunks", "4"], 2, "apply to --kind chunked only"),
        (["plan", "-n", "1e19"], 2, "argument -n/--num-samples: must be in [0, 2**63 - 1]"),
        (["plan", "-n", "9" * 1000], 2, "is too large"),
        (["plan", "-n", "10**" + "1" * 5000], 2, "1111'... is too large (see --help)"),
        (["plan", "-n", "0" * 50 + "1", "-g", "0"], 2, "argument -g"),
        (["plan", "--seed", "1e20"], 2, "argument --seed: must be in [0, 2**64 - 1]"),
        (["plan", "-n", "10", "-w", "3000000"], 2, "--world-size * --epochs must be at most"),
        (["plan", "-n", "10", "-w", "1024", "--epochs", "1025"], 2, "--world-size * --epochs"),
        (["plan", "--epoch", str(2**64 - 1), "--epochs", "2"], 2, "the last epoch"),
        (["plan", "-n", "10**15", "-w", "2", "--no-verify"], 1, "of disk, only"),
        (["plan", "-n", "10**15", "-w", "2"], 1, "(--no-verify writes the plan without"),
        (["verify"], 2, "the following arguments are required: DIR"),
        (["permute", "-n", "1e15"], 1, "of memory"),
        (["bench", "--repeats", "0"], 2, "argument --repeats: must be in [1, 2**63 - 1]"),
        (["bench", "--filter", "nothing-like-this"], 1, "matches no case"),
        (["nope"], 2, "invalid choice"),
    ],
)
def test_user_mistakes_are_one_line(args: list[str], code: int, message: str) -> None:
    res = cli(*args)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert message in lines[0]


def test_force_over_the_current_directory(tmp_path: Path) -> None:
    # `--out .` inside a plan: the new plan replaces the directory itself.
    plan = tmp_path / "p"
    assert cli("plan", "-n", "100", "-g", "10", "-w", "2", "-q", "--out", str(plan)).returncode == 0
    args = ["plan", "-n", "60", "-g", "10", "-w", "3", "--out", ".", "--force"]
    res = subprocess.run(
        [sys.executable, "-m", "epochplan.cli", *args],
        capture_output=True,
        text=True,
        cwd=plan,
    )
    assert res.returncode == 0, res.stderr
    assert "verified" in res.stdout
    assert open_plan(plan).world_size == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_missing_directory_and_existing_output(tmp_path: Path) -> None:
    res = cli("verify", str(tmp_path / "nowhere"))
    assert res.returncode == 1
    assert res.stderr.strip() == f"epochplan verify: error: {tmp_path / 'nowhere'}: does not exist"
    out = tmp_path / "p"
    assert cli("plan", "-n", "100", "-g", "10", "-w", "2", "--out", str(out)).returncode == 0
    res = cli("plan", "-n", "100", "-g", "10", "-w", "2", "--out", str(out))
    assert res.returncode == 1
    assert res.stderr.strip().endswith("already exists (use force=True, or --force, to replace it)")
    res = cli("plan", "-n", "100", "-g", "10", "-w", "5", "--out", str(out), "--force", "-q")
    assert res.returncode == 0 and open_plan(out).world_size == 5


def test_verify_names_the_corrupt_file(tmp_path: Path) -> None:
    out = tmp_path / "p"
    assert cli("plan", "-n", "5000", "-g", "100", "-w", "3", "--out", str(out)).returncode == 0
    f = out / "epoch-0000" / "rank-00002.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    res = cli("verify", str(out))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"epochplan verify: error: {f}: checksum mismatch")


def test_bench_writes_a_table_and_a_plot(tmp_path: Path) -> None:
    md, png = tmp_path / "r.md", tmp_path / "r.png"
    res = cli(
        "bench", "--sizes", "1000", "2000", "--repeats", "2", "--filter", "permutation",
        "--out", str(md), "--plot", str(png),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    table = md.read_text()
    for name in ("numpy default_rng().permutation", "**epochplan permutation(kind='uniform')**"):
        assert name in table
    rows = [line for line in table.splitlines() if line.startswith("| full permutation")]
    assert len(rows) == 8  # 4 implementations x 2 sizes
    # A speed-up, its peer named, and its range over the runs; each median's range.
    assert any(re.search(r"\| \d+\.\dx vs \S+ \(\d+\.\d to \d+\.\d\) \|", r) for r in rows)
    assert all(re.search(r"\| \d+\.\d{4} \| \d+\.\d{4} to \d+\.\d{4} \|", r) for r in rows)
    # matplotlib is in the test extra: the plot is always drawn here.
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bench_checks_its_output_files_before_the_run(tmp_path: Path) -> None:
    args = ("bench", "--sizes", "1000", "--repeats", "1", "--filter", "permutation", "-q")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    cases = [
        ("--out", "/dev/full", "is not a regular file"),
        ("--plot", "/dev/full", "is not a regular file"),
        ("--out", str(tmp_path), "is a directory"),
        ("--out", str(tmp_path / "no" / "r.md"), "does not exist"),
        ("--out", "/proc/r.md", "cannot write there"),
    ]
    if os.geteuid() != 0:  # root writes into a read-only directory anyway
        cases.append(("--out", str(tmp_path / "ro" / "r.md"), "cannot write there"))
    for flag, path, why in cases:
        res = cli(*args, flag, path)
        assert res.returncode == 1, (flag, path, res.stderr)
        assert res.stderr.startswith(f"epochplan bench: error: {flag} {path}"), res.stderr
        assert why in res.stderr and "wrote" not in res.stderr
    # A report is replaced whole, through a temporary file beside it.
    md = tmp_path / "r.md"
    md.write_text("old")
    assert cli(*args, "--out", str(md)).returncode == 0
    assert md.read_text().startswith("|") and sorted(p.name for p in tmp_path.iterdir()) == [
        "r.md",
        "ro",
    ]


def test_bench_without_matplotlib_says_so(tmp_path: Path) -> None:
    png = tmp_path / "r.png"
    # None in sys.modules makes `import matplotlib` raise ImportError.
    code = "import sys; sys.modules['matplotlib'] = None; from epochplan.cli import main; main()"
    res = subprocess.run(
        [sys.executable, "-c", code, "bench", "--sizes", "1000", "--repeats", "1",
         "--filter", "permutation", "--out", str(tmp_path / "r.md"), "--plot", str(png)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "matplotlib is not installed" in res.stderr
    assert not png.exists()


def test_bench_loads_streaming_without_its_package_init() -> None:
    if importlib.util.find_spec("streaming") is None:
        pytest.skip("mosaicml-streaming is not installed")
    res = cli("bench", "--sizes", "20000", "--repeats", "1", "--filter", "get_shuffle py1s")
    assert res.returncode == 0, res.stderr
    rows = [row for row in res.stdout.splitlines() if row.startswith("|")]
    peer = [row for row in rows if "streaming get_shuffle('py1s')" in row]
    assert len(peer) == 1 and "skipped" not in peer[0], res.stdout


@pytest.mark.parametrize("operation", ["a mask's ids", "a mixture of three datasets"])
def test_bench_times_index_spaces_against_their_peers(operation: str) -> None:
    # torch's sampler over a Subset for a mask, Streaming's epoch of three
    # streams (loaded from its files, its batching needs torch) for a mixture.
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    if "mixture" in operation and importlib.util.find_spec("streaming") is None:
        pytest.skip("mosaicml-streaming is not installed")
    res = cli("bench", "--sizes", "20000", "--repeats", "1", "--filter", operation)
    assert res.returncode == 0, res.stderr
    rows = [row for row in res.stdout.splitlines() if row.startswith("|") and operation in row]
    assert len(rows) == 2 and not any("skipped" in row for row in rows), res.stdout
    ours = next(row for row in rows if "**epochplan" in row)
    peer = "vs torch" if "mask" in operation else "vs streaming"
    assert peer in ours, ours


def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import fcntl
    import os
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", "plan", "-n", "3e7", "-w", "2"],
        stdin=child,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    os.close(main)
    text = b"".join(chunks).decode(errors="replace")
    assert "writing:" in text and "B/s" in text  # a bar with its rate
    assert "checksums ok" in text


def test_empty_paths_are_refused(tmp_path: Path) -> None:
    # Path("") is the current directory: --out '' must not replace it.
    (tmp_path / "keep.txt").write_text("precious")
    for args in (
        ["plan", "-n", "10", "-g", "3", "-w", "1", "--out", "", "--force"],
        ["verify", ""],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "epochplan.cli", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert res.returncode == 2 and "expected a path, got an empty string" in res.stderr
    assert (tmp_path / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("closed", [">&-", ">&- 2>&-"])
def test_closed_stdout_and_stderr(tmp_path: Path, closed: str) -> None:
    out = tmp_path / "p"
    command = f'"{sys.executable}" -m epochplan.cli plan -n 100 -g 10 -w 2 --out "{out}" {closed}'
    res = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    verify_plan(out)


# A child that runs the command with the native module's import held up for
# seconds: a signal that arrives then must exit as documented.
_SLOW_IMPORT = """
import sys, time

class HoldUp:
    def find_spec(self, name, path=None, target=None):
        if name == "epochplan._native":
            time.sleep(5)
        return None

sys.meta_path.insert(0, HoldUp())
from epochplan.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _default_signals() -> None:
    # A test run in the background ignores SIGINT, and under nohup SIGHUP.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (SigCgt)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [
        (signal.SIGINT, 130, "epochplan: interrupted"),
        (signal.SIGTERM, 143, "epochplan: terminated by SIGTERM"),
        (signal.SIGHUP, 129, "epochplan: terminated by SIGHUP"),
    ],
)
def test_a_signal_while_the_command_starts_exits_as_documented(
    tmp_path: Path, sig: signal.Signals, code: int, message: str
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_IMPORT, "plan", "-n", "1e6", "--out", str(tmp_path / "p")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [
            signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGHUP)
        ],
    )
    deadline = time.monotonic() + 30
    # The handlers are installed before the commands are imported.
    while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert stderr.strip() == message
    assert not (tmp_path / "p").exists()


_SIGNAL_IN_A_CALLBACK = """
import importlib, os, signal, sys, weakref

cli_main = importlib.import_module("epochplan.cli.main")

build_parser = cli_main.build_parser
signum = int(sys.argv.pop(1))


def build_then_signal_inside_a_callback():
    parser = build_parser()

    class Box:
        pass

    box = Box()

    def callback(_ref):
        os.kill(os.getpid(), signum)
        for _ in range(10_000):  # the handler runs here, inside the callback
            pass

    ref = weakref.ref(box, callback)
    del box
    return parser


cli_main.build_parser = build_then_signal_inside_a_callback
sys.exit(cli_main.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [
        (signal.SIGINT, 130, "epochplan: interrupted"),
        (signal.SIGHUP, 129, "epochplan: terminated by SIGHUP"),
    ],
)
def test_a_signal_handled_inside_a_callback_still_stops_the_command(
    tmp_path: Path, sig: signal.Signals, code: int, message: str
) -> None:
    # Python drops an exception raised inside a weakref callback (the import
    # system runs such callbacks, which is where a signal at start-up can
    # land): the command must stop all the same, without the report.
    proc = _plan_signalled_by(_SIGNAL_IN_A_CALLBACK, sig, tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (code, message)
    assert not (tmp_path / "p").exists()


def _plan_signalled_by(
    script: str, sig: signal.Signals, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """Runs ``script`` (which signals itself with its first argument) as
    ``epochplan plan`` writing to ``tmp_path / "p"``."""
    command = ["plan", "-n", "1e6", "--out", str(tmp_path / "p")]
    return subprocess.run(
        [sys.executable, "-c", script, str(int(sig)), *command],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_default_signals,
    )


_SIGNAL_WHILE_A_CLASS_IS_CREATED = """
import importlib, os, signal, sys

cli_main = importlib.import_module("epochplan.cli.main")

build_parser = cli_main.build_parser
signum = int(sys.argv.pop(1))


class SignalledWhileNamed:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signum)
        for _ in range(10_000):  # the handler runs here, inside __set_name__
            pass


def build_then_signal_while_a_class_is_created():
    parser = build_parser()
    type("Created", (), {"attribute": SignalledWhileNamed()})
    return parser


cli_main.build_parser = build_then_signal_while_a_class_is_created
sys.exit(cli_main.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [
        (signal.SIGINT, 130, "epochplan: interrupted"),
        (signal.SIGTERM, 143, "epochplan: terminated by SIGTERM"),
        (signal.SIGHUP, 129, "epochplan: terminated by SIGHUP"),
    ],
)
def test_a_signal_met_while_a_class_is_created_still_stops_the_command(
    tmp_path: Path, sig: signal.Signals, code: int, message: str
) -> None:
    # Python up to 3.11 wraps an exception raised in a descriptor's __set_name__
    # in a RuntimeError (an import creates classes, which is where a signal
    # at start-up can land): the command must stop as documented all the same.
    proc = _plan_signalled_by(_SIGNAL_WHILE_A_CLASS_IS_CREATED, sig, tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (code, message)
    assert not (tmp_path / "p").exists()


_ERROR_CAUSED_BY_ITSELF = """
import importlib, sys

cli_main = importlib.import_module("epochplan.cli.main")


def build_parser():
    error = ValueError("its own cause")
    raise error from error


cli_main.build_parser = build_parser
sys.exit(cli_main.main(sys.argv[1:]))
"""


def test_an_error_that_is_its_own_cause_is_raised_as_before() -> None:
    # The search for a signal behind an error must end on a loop of causes.
    proc = subprocess.run(
        [sys.executable, "-c", _ERROR_CAUSED_BY_ITSELF, "plan"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_default_signals,
    )
    assert proc.returncode == 1
    assert proc.stderr.rstrip().endswith("ValueError: its own cause")
