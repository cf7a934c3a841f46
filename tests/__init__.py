"""epochplan's tests, in folders that mirror the package (see CONTRIBUTING.md).

A package, so that its folders import as ``tests.torch``, ``tests.grain``...
and never stand in for the real ``torch`` or ``grain``; pytest and
``pyproject.toml``'s ``pythonpath`` put the repository's root first on
``sys.path``, ahead of any other distribution's top-level ``tests``.
"""
