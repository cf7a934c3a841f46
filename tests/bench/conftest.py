"""Tests of epochplan.bench and benches/: the runner, the scripts' results
files and the generated performance page. Each test is marked ``bench``
(``pytest -m bench``)."""

from tests._support.folders import folder_marker

pytest_collection_modifyitems = folder_marker(__file__)
