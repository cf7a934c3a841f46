"""The docs: every Python block of the site and the README runs, docstring
examples, examples/, widths. Each test is marked ``docs`` (``pytest -m
docs``)."""

from tests._support.folders import folder_marker

pytest_collection_modifyitems = folder_marker(__file__)
