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
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe

_NATIVE = "_native"


class EpochplanDocstrings(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "epochplan" or _NATIVE not in pkg.members:
            return
        runtime = importlib.import_module(f"{pkg.name}.{_NATIVE}")
        self._fill_native(pkg[_NATIVE], runtime, loader)
        # Docstrings are written with Sphinx's roles (":class:`~epochplan.Selection`"),
        # which Markdown shows as text: each becomes a link to the object where
        # the reference renders it, or plain code where it renders nowhere.
        documented = _documented(pkg)
        for obj in _walk(pkg):
            if obj.is_class:
                # A private base class is an implementation detail: not shown.
                obj.bases = [b for b in obj.bases if not str(b).rsplit(".", 1)[-1].startswith("_")]  # type: ignore[attr-defined]
            if obj.docstring is not None:
                obj.docstring.value = _ROLE.sub(
                    lambda m, obj=obj: _link(m, obj, documented), obj.docstring.value
                )

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


# ":class:`~epochplan.Selection`", ":meth:`micro_batches`", ...
_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):`(~?)([\w.]+)`")
_API_PAGES = Path(__file__).parent / "reference" / "api"


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias and (member.is_module or member.is_class or member.is_function):
            yield from _walk(member)  # type: ignore[arg-type]
        elif not member.is_alias:
            yield member  # type: ignore[misc]


def _documented(pkg: griffe.Module) -> dict[str, str]:
    """Every object the API pages render, by its canonical path and by the
    path a page names it with, to the identifier a link takes (the page's
    path and the member's name below it)."""
    out: dict[str, str] = {}
    for page in sorted(_API_PAGES.glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            if not line.startswith("::: "):
                continue
            named = line[4:].strip()
            target = _resolved(pkg, named)
            if target is None:
                continue
            out[named] = out[target.path] = named
            if target.is_class or target.is_module:
                for name, member in target.members.items():
                    real = _target(member)
                    if not name.startswith("_") and real is not None:
                        out[f"{named}.{name}"] = out[real.path] = f"{named}.{name}"
    return out


def _resolved(pkg: griffe.Module, path: str) -> griffe.Object | None:
    try:
        return _target(pkg.modules_collection.get_member(path))
    except (KeyError, AttributeError):
        return None


def _target(obj: Any) -> griffe.Object | None:
    """The object an alias points at (None for one outside the package)."""
    try:
        return obj.final_target if obj.is_alias else obj  # type: ignore[no-any-return]
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _link(match: re.Match[str], obj: griffe.Object, documented: dict[str, str]) -> str:
    """A role as a link to where it is rendered, else as code."""
    short, name = match.group(1) == "~", match.group(2)
    text = name.rsplit(".", 1)[-1] if short else name
    scopes = [obj.path, obj.parent.path if obj.parent else "", obj.module.path, "epochplan"]
    if obj.parent is not None and obj.parent.parent is not None:
        scopes.append(obj.parent.parent.path)
    for candidate in [name, *(f"{scope}.{name}" for scope in scopes if scope)]:
        identifier = documented.get(candidate)
        if identifier is not None:
            return f"[`{text}`][{identifier}]"
    return f"`{text}`"
