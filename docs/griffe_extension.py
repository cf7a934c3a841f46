"""Griffe extension for the API reference of epochplan.

The reference is built by static analysis: nothing of torch is imported. Two
things static analysis cannot do alone are done here.

* Docstrings of the compiled core. For ``epochplan._native`` static analysis
  reads the type stub ``_native.pyi``, which has the signatures but no
  docstrings: they live in the Rust sources and exist only at run time. The
  compiled module is imported (it needs numpy alone) and each docstring the
  stub lacks is copied from it.
* Two habits of our Google-style docstrings are read as Google style means
  them: an ``Example:`` heading is an ``Examples:`` section (its ``>>>``
  lines are rendered as code), and related parameters documented together
  (``seed, epoch, kind: as for Permutation``) may list their names over
  several lines.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import griffe

_NATIVE = "_native"
_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
# A line of parameter names ending with a comma, continued on the next line.
_NAMES = r"[A-Za-z_]\w*(?:,[ \t]*[A-Za-z_]\w*)*"
_CONTINUED = re.compile(rf"^([ \t]+)({_NAMES},)[ \t]*\n\1[ \t]*(?=[A-Za-z_])", re.MULTILINE)


def _normalise(text: str) -> str:
    text = _EXAMPLE.sub(r"\1Examples:", text)
    while True:
        joined = _CONTINUED.sub(r"\1\2 ", text)
        if joined == text:
            return text
        text = joined


class EpochplanDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "epochplan":
            return
        if _NATIVE in pkg.members:
            runtime = importlib.import_module(f"{pkg.name}.{_NATIVE}")
            self._fill_native(pkg[_NATIVE], runtime, loader)
        self._normalise(pkg)

    def _fill_native(self, obj: griffe.Object, runtime: Any, loader: griffe.GriffeLoader) -> None:
        for name, member in obj.members.items():
            if member.is_alias or name.startswith("_"):
                continue
            value = getattr(runtime, name, None)
            # Module constants are ints: their __doc__ is int's own.
            documented = inspect.isclass(value) or inspect.isroutine(value)
            documented = documented or inspect.isdatadescriptor(value)
            doc = getattr(value, "__doc__", None) if documented else None
            if doc and not member.docstring:
                member.docstring = griffe.Docstring(
                    inspect.cleandoc(doc),
                    parent=member,
                    parser=loader.docstring_parser,
                    parser_options=loader.docstring_options,
                )
            if member.is_class:
                self._fill_native(member, value, loader)

    def _normalise(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _normalise(obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._normalise(member)
