"""The performance page's tables and the README's are rendered from the
results files (benches/render_performance.py): `epochplan bench`'s
benches/results.json and the benchmark scripts' benches/results/NAME.json,
one generated block each. The page agrees with every file, and a changed
measurement, a hand-edited number, a missing file and a block without its
file are caught."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from epochplan.bench.results import load
from epochplan.cli import main

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benches" / "results.json"
RESULTS_DIR = ROOT / "benches" / "results"
PAGE = ROOT / "docs" / "performance" / "index.md"


def render() -> ModuleType:
    """benches/render_performance.py, loaded afresh."""
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


#: The scripts' results files the page's sections are rendered from.
NAMES = sorted({b.name for b in render().SECTION_BLOCKS})


def test_every_section_block_has_its_results_file_and_its_markers() -> None:
    page = PAGE.read_text()
    for block in render().SECTION_BLOCKS:
        assert (RESULTS_DIR / f"{block.name}.json").is_file(), f"{block.name}.json is missing"
        assert page.count(block.marker) == 1, block.marker
    # No results file that no block renders.
    assert sorted(p.stem for p in RESULTS_DIR.glob("*.json")) == NAMES


def _copy_results(tmp_path: Path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(RESULTS_DIR, out)
    return out


def _scaled(value: object) -> object:
    """Every float in ``value`` three times larger."""
    if isinstance(value, float):
        return value * 3
    if isinstance(value, list):
        return [_scaled(v) for v in value]
    if isinstance(value, dict):
        return {k: _scaled(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("name", NAMES)
def test_a_changed_measurement_of_a_script_is_caught(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    results = _copy_results(tmp_path)
    doc = json.loads((results / f"{name}.json").read_text())
    doc["tables"] = _scaled(doc["tables"])
    (results / f"{name}.json").write_text(json.dumps(doc))
    assert render().main(["--check", "--results-dir", str(results)]) == 1
    out = capsys.readouterr().out
    assert "out of date" in out and "error:" not in out, out


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_results_file_is_caught(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    results = _copy_results(tmp_path)
    (results / f"{name}.json").unlink()
    assert render().main(["--check", "--results-dir", str(results)]) == 1
    out = capsys.readouterr().out
    assert f"error: {name}.json is missing" in out, out


def test_a_file_of_another_script_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = _copy_results(tmp_path)
    shutil.copy(results / "token_files.json", results / "spaces.json")
    assert render().main(["--check", "--results-dir", str(results)]) == 1
    assert "written by bench_token_files.py, not bench_spaces.py" in capsys.readouterr().out


def test_a_hand_edited_section_and_an_unknown_block_are_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    module = render()
    text = PAGE.read_text()
    marker = module.SECTION_BLOCKS[0].marker
    head, rest = text.split(marker)
    block, tail = rest.split(module.END, 1)
    edited = tmp_path / "index.md"
    edited.write_text(head + marker + block.replace("|", "| 9", 1) + module.END + tail)
    module.PAGE = edited
    assert module.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().out
    unknown = marker.replace("spaces.json", "nothing.json")
    edited.write_text(text + f"\n{unknown}\n{module.END}\n")
    assert module.main(["--check"]) == 1
    assert "nothing.json -->" in capsys.readouterr().out
