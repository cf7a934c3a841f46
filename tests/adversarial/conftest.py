"""Adversarial inputs across the package: fuzzed arguments, memory and thread
limits, killed writers. Each test is marked ``adversarial`` (``pytest -m
adversarial``)."""

from tests._support.folders import folder_marker

pytest_collection_modifyitems = folder_marker(__file__)
