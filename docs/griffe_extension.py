"""Griffe extension for the API reference of epochplan.

The reference is built by static analysis: nothing of torch is imported. One
thing static analysis cannot do alone is done here: the docstrings of the
compiled core. For ``epochplan._native`` static analysis reads the type stub
``_native.pyi``, which has the signatures but no docstrings: they live in the
Rust sources and exist only at run time. The compiled module is imported (it
needs numpy alone) and each docstring the stub lacks is copied from it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import griffe

_NATIVE = "_native"


class EpochplanDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "epochplan" or _NATIVE not in pkg.members:
            return
        runtime = importlib.import_module(f"{pkg.name}.{_NATIVE}")
        self._fill_native(pkg[_NATIVE], runtime, loader)

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
