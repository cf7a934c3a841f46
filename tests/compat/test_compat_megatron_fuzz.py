"""epochplan.compat.megatron against megatron-core's compiled helpers on
random inputs (hypothesis): the sample index and both blends."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

helpers_cpp = pytest.importorskip("megatron.core.datasets.helpers_cpp")

from epochplan.compat import megatron as em  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=80),
    epochs=st.integers(1, 4),
    seq=st.integers(2, 50),
    drop=st.booleans(),
    extra=st.integers(0, 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_sample_index_is_megatrons(sizes, epochs, seq, drop, extra, seed):
    lengths = np.array(sizes, np.int32)
    lengths[0] = max(int(lengths[0]), 1)
    doc_idx = np.tile(np.arange(len(sizes), dtype=np.int32), epochs)
    np.random.RandomState(seed).shuffle(doc_idx)
    tokens = int(lengths.sum())
    if tokens < 2:
        return
    args = (lengths, doc_idx, seq, epochs, tokens, drop, extra)
    ours, theirs = em.build_sample_idx_int64(*args), helpers_cpp.build_sample_idx_int64(*args)
    assert ours.tobytes() == theirs.tobytes()


@SETTINGS
@given(
    raw=st.lists(st.floats(1e-12, 1e3), min_size=1, max_size=60),
    size=st.integers(0, 3000),
)
def test_any_weighted_blend_is_megatrons(raw, size):
    w = np.array(raw) / np.sum(raw)
    outs = []
    for build in (em.build_blending_indices, helpers_cpp.build_blending_indices):
        index, sample = np.zeros(size, np.int16), np.zeros(size, np.int64)
        build(index, sample, w, len(w), size, False)
        outs.append(index.tobytes() + sample.tobytes())
    assert outs[0] == outs[1]


@SETTINGS
@given(sizes=st.lists(st.integers(1, 80), min_size=1, max_size=40))
def test_any_exhaustive_blend_is_megatrons(sizes):
    counts = np.array(sizes, np.int64)
    total = int(counts.sum())
    outs = []
    for build in (
        em.build_exhaustive_blending_indices,
        helpers_cpp.build_exhaustive_blending_indices,
    ):
        index, sample = np.zeros(total, np.int16), np.zeros(total, np.int64)
        build(index, sample, counts, len(counts))
        outs.append(index.tobytes() + sample.tobytes())
    assert outs[0] == outs[1]
