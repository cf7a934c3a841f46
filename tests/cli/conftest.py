"""Tests of the epochplan command (epochplan.cli). Each test is marked ``cli``
(``pytest -m cli``)."""

from tests._support.folders import folder_marker

pytest_collection_modifyitems = folder_marker(__file__)
