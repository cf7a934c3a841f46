"""No code block of the docs site scrolls sideways at 1280 px browser width.

At 1280 px, mkdocs-material's content column shows 80 characters of a code
block (688 px; measured with headless Chromium by benches/check_docs_width.py,
which also checks the tables). This is its cheap static guard: every line
inside a fenced code block of docs/**/*.md and README.md is at most 80
characters long.

One exception: the README's marked test command (``<!-- test-command -->``)
stays one line, since .ci/run reads that line and runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
WIDTH = 80
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def long_lines(text: str) -> list[tuple[int, str]]:
    """The (line number, line) of each line of a fenced block over WIDTH."""
    found = []
    fence = None
    exempt = False
    previous = ""
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None:
            if opening:
                fence = opening.group(1)
                exempt = previous.strip() == "<!-- test-command -->"
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
        elif len(line) > WIDTH and not exempt:
            found.append((number, line))
        previous = line
    return found


def test_a_long_line_is_found_and_the_test_command_is_exempt() -> None:
    text = "```python\n" + "x" * (WIDTH + 1) + "\n```\n"
    assert long_lines(text) == [(2, "x" * (WIDTH + 1))]
    assert long_lines("x" * 200 + "\n````\n" + "y" * WIDTH + "\n````\n") == []
    assert long_lines("<!-- test-command -->\n```bash\n" + "z" * 200 + "\n```\n") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_line_of_a_code_block_is_wider_than_the_page(page: Path) -> None:
    found = long_lines(page.read_text(encoding="utf-8"))
    assert not found, "\n".join(
        f"{page.relative_to(ROOT)}:{n}: {len(line)} > {WIDTH} characters: {line}"
        for n, line in found
    )


# The API pages render the docstrings' examples as code blocks too: their
# prompt lines (">>> " and "... ", indentation and Rust's "///" removed).
SOURCES = sorted(
    [*(ROOT / "python" / "epochplan").rglob("*.py"), *(ROOT / "rust" / "py" / "src").rglob("*.rs")]
)
PROMPT = re.compile(r"^\s*(?:///)?\s*((?:>>>|\.\.\.)(?: .*)?)$")


def long_examples(text: str) -> list[tuple[int, str]]:
    """The (line number, example line) of each docstring example line over WIDTH."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        prompt = PROMPT.match(line)
        if prompt and len(prompt.group(1)) > WIDTH:
            found.append((number, prompt.group(1)))
    return found


def test_a_long_example_line_is_found() -> None:
    assert long_examples("    ///     >>> " + "x" * (WIDTH - 3)) == [
        (1, ">>> " + "x" * (WIDTH - 3))
    ]
    assert long_examples("        ... " + "y" * (WIDTH - 4)) == []


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_docstring_example_is_wider_than_the_page(source: Path) -> None:
    found = long_examples(source.read_text(encoding="utf-8"))
    assert not found, "\n".join(
        f"{source.relative_to(ROOT)}:{n}: {len(line)} > {WIDTH} characters: {line}"
        for n, line in found
    )
