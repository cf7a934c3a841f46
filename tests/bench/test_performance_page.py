"""The performance page's table and the README's are rendered from
benches/results.json (benches/render_performance.py): they agree with it,
and a changed measurement or a hand-edited number is caught."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from epochplan.bench.results import load
from epochplan.cli import main

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benches" / "results.json"


def render() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "render_performance", ROOT / "benches" / "render_performance.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_page_and_the_readme_agree_with_the_results_file() -> None:
    assert render().main(["--check"]) == 0


def test_a_changed_measurement_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    doc = json.loads(RESULTS.read_text())
    row = next(r for r in doc["results"] if r["ours"] and not r["skip"])
    row["seconds"] = [s * 2 for s in row["seconds"]]
    changed = tmp_path / "results.json"
    changed.write_text(json.dumps(doc))
    assert render().main(["--check", "--results", str(changed)]) == 1
    assert "out of date" in capsys.readouterr().out


def test_every_readme_row_is_measured() -> None:
    context, results = load(RESULTS)
    block = render().readme_block(context, results)
    assert "not measured" not in block
    assert block.count("\n| ") == 1 + len(render().README_ROWS)  # the header and the rows


def test_the_page_table_is_what_the_cli_renders(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    assert main(["bench", "--from-results", str(RESULTS), "--out", str(out)]) == 0
    table = out.read_text().split("\n\n")[0]
    assert table in (ROOT / "docs" / "performance" / "index.md").read_text()


def test_a_file_that_is_not_a_results_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "report.md"
    bad.write_text("| a | b |\n")
    assert main(["bench", "--from-results", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--from-results" in err and "not a results file" in err
    assert main(["bench", "--from-results", str(RESULTS), "--results", str(bad)]) == 2
