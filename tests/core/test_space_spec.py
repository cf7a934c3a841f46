"""Index spaces written as JSON (the ``--space`` files): every form, nested
mixtures of selections, relative paths, and errors that name their key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan import load_space
from epochplan._space_spec import space_from_spec, split_space


def write(tmp_path: Path, spec: object) -> Path:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(spec))
    return path


def test_every_form_gives_its_selection(tmp_path: Path) -> None:
    mask = np.arange(100) % 3 == 0
    np.save(tmp_path / "mask.npy", mask)
    np.save(tmp_path / "ids.npy", np.array([9, 4, 77], dtype=np.int32))
    cases = [
        (
            {"ranges": [[0, 10], [20, 30]], "num_samples": 100},
            ep.Selection.from_ranges([(0, 10), (20, 30)], 100),
        ),
        ({"mask": "mask.npy"}, ep.Selection.from_mask(mask)),
        ({"indices": "ids.npy", "num_samples": 100}, ep.Selection.from_indices([9, 4, 77], 100)),
        (
            {"split": [0.9, 0.1], "part": 1, "num_samples": 100, "seed": 3},
            ep.random_split(100, [0.9, 0.1], seed=3)[1],
        ),
    ]
    for spec, want in cases:
        assert load_space(write(tmp_path, spec)) == want


def test_mixtures_of_sizes_and_of_selections(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(50) < 20)
    spec = {"mixture": [1000, 200], "weights": [0.5, 0.5], "num_samples": 300, "seed": 2}
    mix = load_space(write(tmp_path, spec))
    assert isinstance(mix, ep.Mixture) and mix.quotas == [150, 150] and mix.seed == 2
    spec = {
        "mixture": [{"mask": "a.npy"}, {"ranges": [[30, 50]], "num_samples": 50}],
        "quotas": [10, 40],
    }
    mix = load_space(write(tmp_path, spec))
    assert isinstance(mix, ep.Mixture) and mix.quotas == [10, 40]
    ids = np.asarray(mix.epoch(0))
    assert set(ids.tolist()) <= set(range(20)) | set(range(30, 50))


def test_a_split_shortcut_is_random_split() -> None:
    assert split_space(1000, [0.9, 0.1], 0, 5) == ep.random_split(1000, [0.9, 0.1], seed=5)[0]
    with pytest.raises(ValueError, match=r"part must be an int in \[0, 1\], got 2"):
        split_space(1000, [0.9, 0.1], 2, 0)


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ([1, 2], TypeError, r"spec must be a JSON object, got a list"),
        ({}, ValueError, r"spec must have exactly one of the keys"),
        ({"ranges": [[0, 1]], "mask": "m.npy"}, ValueError, r"exactly one of the keys"),
        ({"ranges": [[0, 1]]}, ValueError, r"spec is missing the key 'num_samples'"),
        (
            {"ranges": [[0, 1]], "num_samples": "9"},
            TypeError,
            r"spec\['num_samples'\] must be an int",
        ),
        ({"ranges": [[0, 1]], "num_samples": 9, "x": 1}, ValueError, r"unknown keys \['x'\]"),
        ({"ranges": [[5, 1]], "num_samples": 9}, ValueError, r"ranges\[0\]"),
        ({"mask": 3}, TypeError, r"spec\['mask'\] must be the path of a .npy file"),
        ({"mask": "absent.npy"}, ValueError, r"spec\['mask'\]: cannot load"),
        ({"mask": "ids2d.npy"}, ValueError, r"spec\['mask'\] must be 1-d"),
        ({"mask": "ints.npy"}, TypeError, r"spec\['mask'\] must hold a bool array"),
        ({"indices": "ints.npy", "num_samples": 2}, ValueError, r"ids\["),
        ({"split": 0.5, "part": 0, "num_samples": 9}, TypeError, r"spec\['split'\] must be a list"),
        ({"split": [0.5, 0.4], "part": 0, "num_samples": 9}, ValueError, r"sum"),
        ({"mixture": 5}, TypeError, r"spec\['mixture'\] must be a list of sources"),
        (
            {"mixture": [{"mixture": [1]}]},
            ValueError,
            r"spec\['mixture'\]\[0\] must be a selection",
        ),
        ({"mixture": [{"mask": 1}]}, TypeError, r"spec\['mixture'\]\[0\]\['mask'\]"),
        ({"mixture": [3, 4], "weights": [1, -1]}, ValueError, r"weights"),
        ({"mixture": [3, 4], "quotas": [1], "seed": -1}, ValueError, r"seed|quotas"),
    ],
)
def test_errors_name_their_key(tmp_path: Path, spec: object, error: type, match: str) -> None:
    np.save(tmp_path / "ids2d.npy", np.zeros((2, 2), dtype=bool))
    np.save(tmp_path / "ints.npy", np.arange(5))
    with pytest.raises(error, match=match):
        space_from_spec(spec, tmp_path)


def test_a_file_that_is_not_json_or_absent(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="is not JSON"):
        load_space(bad)
    with pytest.raises(ValueError, match="cannot read the space spec"):
        load_space(tmp_path / "none.json")
