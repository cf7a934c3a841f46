"""Tests of epochplan.grain inside Grain's own DataLoader and MapDataset. Each
test is marked ``grain`` (``pytest -m grain``)."""

from tests._support.folders import folder_marker

pytest_collection_modifyitems = folder_marker(__file__)
