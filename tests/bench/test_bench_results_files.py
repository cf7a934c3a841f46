"""Each benchmark script's ``--results FILE`` at tiny sizes: the file holds the
run's context (the command as run, the machine, the load at the start and the
end, the epochplan version) and its tables' rows, and the performance page's
renderer (benches/render_performance.py) renders every block it feeds."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from epochplan import __version__
from epochplan.bench.results import Tables

ROOT = Path(__file__).resolve().parents[2]


def render() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "render_performance", ROOT / "benches" / "render_performance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


#: (results file, the script's tiny arguments, the modules it needs).
RUNS = [
    ("spaces", ["--sizes", "20000", "50001", "--repeats", "1", "--calls", "1",
                "--large-n", "50000", "--spaces", "plain", "ranges", "mask", "mixture"], ()),
    ("tokens", ["--tiny", "--dists", "lognormal", "--steps", "1", "--epoch-n", "10000",
                "--epoch-g", "64", "--big-n", "50000", "--big-steps", "20", "--cold-steps",
                "10", "--dir", "{tmp}"], ()),
    ("token_files", ["--sizes", "5000", "--global-batch-size", "64", "--world-size", "4",
                     "--dir", "{tmp}"], ("torch",)),
    ("token_plans", ["--sizes", "20000", "--dir", "{tmp}"], ()),
    ("packing", ["--tiny", "--part", "schedule"], ()),
    ("megatron_1e7", ["--docs", "2e4", "--blend-samples", "2e4", "--repeats", "1"],
     ("megatron.core",)),
    ("megatron_exhaustive", ["--cases", "exhaustive", "--blend-samples", "2e4",
                             "--repeats", "1"], ("megatron.core",)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "needs"), RUNS, ids=[r[0] for r in RUNS])
def test_the_results_file_holds_the_context_and_renders(
    name: str, args: list[str], needs: tuple[str, ...], tmp_path: Path
) -> None:
    if not has(*needs):
        pytest.skip(f"needs {', '.join(needs)}")
    module = render()
    blocks = [b for b in module.SECTION_BLOCKS if b.name == name]
    script = blocks[0].script
    out = tmp_path / f"{name}.json"
    argv = [a.format(tmp=tmp_path) for a in args] + ["--results", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benches" / script), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tables = Tables.load(out)
    assert tables.script == script
    context = tables.context
    assert context.command.startswith(f"python benches/{script} ")
    assert context.command.endswith(f"--results {out}")
    assert context.epochplan == __version__
    assert "CPUs" in context.machine and context.date
    assert len(context.load_start) == 3 and len(context.load_end) == 3
    assert context.seconds >= 0
    assert tables.tables and all(tables.tables.values())
    if name == "packing":  # the schedule part alone: its table only
        assert list(tables.tables) == ["schedule"]
    for block in blocks:
        text = module.section_block(block, tmp_path)
        assert text.startswith("Measured on ") and f"`{context.command}`" in text
        assert "\n| " in text  # a table


def test_a_results_file_that_cannot_be_written_fails_before_the_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "bench_token_plans.py"), "--sizes", "1e9",
         "--results", str(tmp_path / "no" / "such" / "dir.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--results" in proc.stderr and "does not exist" in proc.stderr
    assert "1000000000" not in proc.stdout  # nothing ran
