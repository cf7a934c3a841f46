"""Tests of epochplan.audit: consumption logs and the exactly-once audit. Each
test is marked ``audit`` (``pytest -m audit``)."""

from tests._support.folders import folder_marker

pytest_collection_modifyitems = folder_marker(__file__)
