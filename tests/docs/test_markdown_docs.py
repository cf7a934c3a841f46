"""Every Python block of the README and the docs site runs, page by page.

Sybil parses the Markdown: ```python blocks, invisible setup blocks
(``<!-- invisible-code-block: python -->``) and ``<!-- skip: next -->``,
which marks the few blocks that need several processes (those are run by
their own tests: tests/docs/test_torch_example.py runs examples/ddp_train.py).
The blocks of a page share one namespace and run in order, in a temporary
working directory, so plan directories they write disappear with it. The
contributing guide quotes the README's test command (the one CI runs).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

import epochplan as ep

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture
def clean_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A temporary working directory, and the process-wide settings a page may
    change (threads, the rank provider) restored afterwards, even on failure."""
    monkeypatch.chdir(tmp_path)
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    yield
    ep.set_num_threads(0)
    if "epochplan.torch" in sys.modules:
        sys.modules["epochplan.torch"].set_rank_provider(None)


def test_the_docs_have_pages_with_python_blocks() -> None:
    assert ROOT / "README.md" in PAGES
    assert ROOT / "docs" / "index.md" in PAGES
    with_code = [p for p in PAGES if "```python" in p.read_text(encoding="utf-8")]
    assert len(with_code) >= 15


@pytest.mark.parametrize("page", PAGES, ids=page_id)
@pytest.mark.usefixtures("clean_state")
def test_every_python_block_of_the_page_runs(page: Path) -> None:
    document = SYBIL.parse(page)
    examples = list(document)
    # Every ```python fence is an example Sybil found (a typo in a fence or a
    # marker would otherwise leave a block untested without a word).
    fences = page.read_text(encoding="utf-8").count("```python")
    code = [e for e in examples if isinstance(e.parsed, str)]  # skips parse as tuples
    assert len(code) >= fences, f"{page_id(page)}: {fences} python fences, {len(code)} parsed"
    for example in examples:
        example.evaluate()


def test_the_contributing_guide_quotes_the_readme_test_command() -> None:
    # The README's marked command is the one CI runs; the guide repeats it.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    marked = readme.split("<!-- test-command -->", 1)[1].split("```")[1]
    command = marked.removeprefix("bash").strip()
    assert command.startswith("pip install")
    assert command in (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
