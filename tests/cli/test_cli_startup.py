"""Ctrl-C at any moment of the command's start-up exits as documented (130,
one line, no traceback): before main() runs, the console script imports only
three small modules of ours, and every later import happens inside main()."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What the console script does, with SIGINT sent to itself the moment a
# given module starts to load (the 'import' audit event fires before it runs).
SCRIPT = """
import os, signal, sys
target = sys.argv[1]
def hook(event, args):
    if event == "import" and args[0] == target:
        os.kill(os.getpid(), signal.SIGINT)
sys.addaudithook(hook)
from epochplan.cli import main
sys.exit(main(["permute", "-n", "1000"]))
"""


def test_only_three_modules_load_before_main() -> None:
    code = (
        "import sys; before = set(sys.modules); from epochplan.cli import main; "
        "print(sorted(set(sys.modules) - before - {'__future__'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['epochplan', 'epochplan.cli', 'epochplan.cli.main']"


@pytest.mark.parametrize(
    "module",
    ["importlib.metadata", "epochplan._version", "argparse", "numpy", "epochplan._native"],
)
def test_ctrl_c_while_main_imports_exits_130_in_one_line(module: str) -> None:
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, module], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr in ("epochplan permute: interrupted\n", "epochplan: interrupted\n")
