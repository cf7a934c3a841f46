"""epochplan.compat.streaming.get_shuffle against MosaicML Streaming's own
get_shuffle, live (no stored outputs)."""

from __future__ import annotations

import types
import warnings
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochplan
from epochplan._native import _testing
from epochplan.compat.streaming import get_shuffle
from tests.compat.streaming_ref import load_shuffle

ALGOS = ["naive", "py1s", "py2s", "py1br", "py1e"]


class _RecordingNumpy(types.ModuleType):
    """numpy, except that ``argsort`` records its inputs (py1e's sort keys)."""

    def __init__(self) -> None:
        super().__init__("numpy")
        self.keys: list[np.ndarray] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    def argsort(self, a: Any, *args: Any, **kwargs: Any) -> Any:
        self.keys.append(np.array(a, copy=True))
        return np.argsort(a, *args, **kwargs)


Warned = list[tuple[type[Warning], str]]


def _call(fn: Any, *args: Any) -> tuple[Any, Warned]:
    """``fn(*args)`` (or the type of its exception) and its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(*args)
        except Exception as exc:
            out = type(exc)
    return out, [(w.category, str(w.message)) for w in caught]


def _reference(
    algo: str, sizes: npt.NDArray[np.int64], ncn: int, seed: int, epoch: int, block: int
) -> tuple[Any, Warned, list[np.ndarray]]:
    """Streaming's output (or exception type), warnings and py1e's per-node
    sort keys."""
    ref = load_shuffle()
    recorder = _RecordingNumpy()
    module = ref.py1e if algo == "py1e" else None
    if module is not None:
        module.np = recorder
    try:
        out, warned = _call(ref.get_shuffle, algo, sizes, ncn, seed, epoch, block)
    finally:
        if module is not None:
            module.np = np
    return out, warned, recorder.keys


def _ours(algo: str, sizes: Any, ncn: int, seed: int, epoch: int, block: int) -> tuple[Any, Warned]:
    return _call(get_shuffle, algo, sizes, ncn, seed, epoch, block)


def _assert_matches(
    algo: str, sizes: npt.NDArray[np.int64], ncn: int, seed: int, epoch: int, block: int
) -> bool:
    """Asserts our output (or exception and warning) is Streaming's; returns
    whether it was a non-empty array."""
    ref, ref_warned, keys = _reference(algo, sizes, ncn, seed, epoch, block)
    ours, warned = _ours(algo, sizes, ncn, seed, epoch, block)
    case = f"{algo} sizes={sizes.tolist()[:20]} ncn={ncn} seed={seed} epoch={epoch} block={block}"
    assert warned == ref_warned, case
    if isinstance(ref, type):
        assert ours is ref, case
        return False
    assert not isinstance(ours, type), f"{case}: raised {ours}"
    assert ours.dtype == np.int64, case
    assert ours.shape == ref.shape, case
    if algo != "py1e" or all(len(np.unique(k)) == len(k) for k in keys):
        np.testing.assert_array_equal(ours, ref, err_msg=case)
        return len(ref) > 0
    # Equal sort keys: numpy's argsort leaves their order undefined. The
    # output must agree outside runs of equal keys and hold the same samples
    # within each run.
    offset = 0
    for k in keys:
        sorted_keys = np.sort(k)
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        ends = np.r_[starts[1:], len(k)]
        for s, e in zip(starts, ends, strict=True):
            a = np.sort(ours[offset + s : offset + e])
            b = np.sort(ref[offset + s : offset + e])
            np.testing.assert_array_equal(a, b, err_msg=case)
        offset += len(k)
    assert offset == len(ref), case
    return True


SIZE_PATTERNS: dict[str, list[int]] = {
    "empty": [],
    "one_sample": [1],
    "one_shard": [37],
    "ones": [1] * 50,
    "with_zeros": [0, 5, 0, 0, 3, 9, 0],
    "all_zero": [0, 0, 0],
    "tiny_many": [1, 2, 3, 1, 2, 1, 1, 4] * 40,
    "equal": [100] * 30,
    "one_huge": [3, 50_000, 2, 7],
    "mixed": [17, 1, 250, 3, 0, 64, 1024, 5, 2, 999],
}


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("pattern", list(SIZE_PATTERNS))
def test_grid(algo: str, pattern: str) -> None:
    sizes = np.array(SIZE_PATTERNS[pattern], dtype=np.int64)
    for ncn in (1, 2, 3, 8):
        # A negative epoch is Streaming's too while seed + epoch is not (else ValueError).
        for seed, epoch in (
            (0, 0),
            (1, 0),
            (0, 1),
            (9176, 3),
            (2**63, 2**64 - 1),
            (5, -5),
            (3, -4),
        ):
            for block in (2, 5, 64, 1 << 18):
                if block < 16 and sizes.sum() > 5000:
                    continue  # Streaming's py1br loops in Python per block: slow.
                _assert_matches(algo, sizes, ncn, seed, epoch, block)


@pytest.mark.parametrize("algo", ALGOS)
def test_property(algo: str) -> None:
    # Random shard sizes (a few empty), node counts, seeds, epochs and block
    # sizes (a few invalid); every algorithm must be compared on enough
    # non-empty outputs, not only on errors and empty arrays. One run per
    # algorithm: drawn from one run, an algorithm got as few as 5 examples.
    compared: Counter[str] = Counter()

    @settings(
        max_examples=80,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        sizes=st.one_of(
            st.lists(st.integers(0, 30), min_size=1, max_size=60),
            st.lists(st.integers(1, 3000), min_size=1, max_size=12),
            st.lists(st.sampled_from([0, 1, 2, 2**14]), max_size=8),
        ),
        ncn=st.integers(1, 12),
        seed=st.one_of(st.integers(0, 2**16), st.integers(0, 2**64 - 1)),
        epoch=st.integers(-5, 50),
        block=st.one_of(st.integers(1, 400), st.sampled_from([0, 1, 2, 3, 4, 2**18, 2**30])),
    )
    def compare(sizes: list[int], ncn: int, seed: int, epoch: int, block: int) -> None:
        if _assert_matches(algo, np.array(sizes, dtype=np.int64), ncn, seed, epoch, block):
            compared[algo] += 1

    compare()
    assert compared[algo] >= 10, compared


@pytest.mark.parametrize("algo", ALGOS)
def test_too_large_for_memory_raises_memory_error_like_streaming(algo: str) -> None:
    sizes = np.array([10**17], np.int64)
    ref, _ = _call(load_shuffle().get_shuffle, algo, sizes, 1, 0, 0, 1 << 18)
    assert isinstance(ref, type) and issubclass(ref, MemoryError)
    with pytest.raises(MemoryError, match="not enough memory"):
        get_shuffle(algo, sizes, 1, 0, 0, 1 << 18)


def test_larger_inputs() -> None:
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 5000, 300)
    for algo in ALGOS:
        for ncn in (1, 7, 64):
            _assert_matches(algo, sizes, ncn, 17, 2, 1 << 14)


def test_py1s_in_many_pieces() -> None:
    # Over a million samples: py1s is cut into pieces whose swap partners the
    # generator's thread draws for tasks to apply, or that it shuffles itself.
    # Then shards of up to 2^18 + 1 samples (longer walks, wider masks).
    many = np.random.default_rng(9).integers(1, 3000, 1200)
    long = np.array([70_000, 5, 131_073, 262_145, 256, 257, 65_536], dtype=np.int64)
    try:
        for threads in (2, 4):
            epochplan.set_num_threads(threads)
            for ncn in (1, 9):
                _assert_matches("py1s", many, ncn, 23, 4, 1 << 14)
            _assert_matches("py1s", long, 2, 5, 1, 1 << 14)
    finally:
        epochplan.set_num_threads(0)


def test_py1s_vector_walk_batches_at_the_mask_change() -> None:
    # Seeds where a batch of the vector walk starts just below a smaller mask
    # and its first candidates are all accepted (found by search: about one
    # seed in 700,000 reaches it).
    sizes = np.array([301, 70_000], dtype=np.int64)
    try:
        epochplan.set_num_threads(2)
        for epoch in (667_184, 1_431_800):
            _assert_matches("py1s", sizes, 1, 0, epoch, 1 << 18)
    finally:
        epochplan.set_num_threads(0)


def test_py1e_large_node_in_segments() -> None:
    # One canonical node of 1.7 x 10^7 samples: on two threads it is sorted in
    # segments of its shifted positions, each by its own task.
    sizes = np.full(1700, 10_000, dtype=np.int64)
    try:
        epochplan.set_num_threads(2)
        _assert_matches("py1e", sizes, 1, 31, 2, 1 << 18)
    finally:
        epochplan.set_num_threads(0)


def test_independent_of_thread_count(restore_threads: None) -> None:
    sizes = np.full(200, 3000, dtype=np.int64)
    outs = []
    for threads in (1, 2, 3):
        epochplan.set_num_threads(threads)
        outs.append([get_shuffle(a, sizes, 16, 3, 1, 1 << 12) for a in ALGOS])
    for other in outs[1:]:
        for a, b in zip(outs[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def test_py1e_warns_like_streaming() -> None:
    sizes = np.array([500, 3, 4], dtype=np.int64)
    ref = load_shuffle()
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        ref.get_shuffle("py1e", sizes, 1, 0, 0, 16)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        get_shuffle("py1e", sizes, 1, 0, 0, 16)
    # The same category and text, to the character.
    assert [(w.category, str(w.message)) for w in ours] == [
        (w.category, str(w.message)) for w in theirs
    ]
    assert len(ours) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_shuffle("py1e", sizes, 1, 0, 0, 4096)
    # Pieces of 6 and blocks in [6, 10): a block equal to its piece is not
    # smaller, on the threads that plan pieces ahead too.
    try:
        for threads in (1, 2):
            epochplan.set_num_threads(threads)
            _assert_matches("py1e", np.full(11_000, 6, dtype=np.int64), 2, 0, 0, 8)
    finally:
        epochplan.set_num_threads(0)


def test_tie_rule_is_stable_order() -> None:
    # py1e orders equal shifted positions by position (argsort kind="stable").
    rng = np.random.default_rng(0)
    for n in (1, 2, 10, 100, 5000):
        keys = np.floor(rng.uniform(0, n / 4 + 1, n) * 2) / 2
        samples = rng.permutation(n)
        got = _testing._np_sort_by_keys(keys.tolist(), samples.tolist())
        np.testing.assert_array_equal(got, samples[np.argsort(keys, kind="stable")])


def test_bad_inputs() -> None:
    sizes = np.array([3, 4], dtype=np.int64)
    # Streaming's KeyError (the name alone), the allowed names in its note.
    # (pytest matches the notes too).
    with pytest.raises(
        KeyError, match=r"^'py3s'\nalgo must be one of .*\"py1e\".*, got 'py3s'$"
    ) as info:
        get_shuffle("py3s", sizes, 1, 0, 0)
    assert info.value.args == ("py3s",)
    with pytest.raises(TypeError, match=r"^unhashable type: 'list'; algo must be a str, got list"):
        get_shuffle(["py1e"], sizes, 1, 0, 0)  # type: ignore[arg-type]
    for name in (None, 1, b"py1e"):
        with pytest.raises(KeyError):
            get_shuffle(name, sizes, 1, 0, 0)  # type: ignore[arg-type]
    for algo in ALGOS:
        with pytest.raises(ValueError, match="shard_sizes"):
            get_shuffle(algo, np.array([3, -1]), 1, 0, 0)
        with pytest.raises(TypeError, match="shard_sizes"):
            get_shuffle(algo, np.array([3.0, 1.0]), 1, 0, 0)
        with pytest.raises(ValueError, match="shard_sizes"):
            get_shuffle(algo, np.ones((2, 2), dtype=np.int64), 1, 0, 0)
        with pytest.raises(OverflowError, match="shard_sizes"):
            get_shuffle(algo, np.array([2**62, 2**62, 2**62]), 1, 0, 0)
        with pytest.raises(ValueError, match="seed"):
            get_shuffle(algo, sizes, 1, -1, 0)
        with pytest.raises(TypeError, match="epoch"):
            get_shuffle(algo, sizes, 1, 0, 1.5)  # type: ignore[arg-type]
    # Streaming returns uninitialised memory (py1s, py1br, py1e) or fails
    # (py2s) without canonical nodes; naive ignores them.
    for algo in ["py1s", "py2s", "py1br", "py1e"]:
        with pytest.raises(ValueError, match="num_canonical_nodes"):
            get_shuffle(algo, sizes, 0, 0, 0)
    assert len(get_shuffle("naive", sizes, 0, 0, 0)) == 7
    # Streaming's own failures: an empty canonical node (py1e), an empty
    # random block range (py1e, py1br).
    with pytest.raises(
        ValueError,
        match=r"^The number of samples assigned to a canonical node is 0\. .*, which is 8\. "
        r".*num_canonical_nodes=8 leaves one without samples, 7 samples in all",
    ):
        get_shuffle("py1e", sizes, 8, 0, 0)
    with pytest.raises(ValueError, match="block_size"):
        get_shuffle("py1e", sizes, 1, 0, 0, 0)
    with pytest.raises(ValueError, match="block_size"):
        get_shuffle("py1br", sizes, 1, 0, 0, 1)
    with pytest.raises(ValueError, match="block_size"):
        get_shuffle("py1br", sizes, 1, 0, 0, -4)
    # Ignored arguments are ignored, as in Streaming.
    np.testing.assert_array_equal(
        get_shuffle("py1s", sizes, 1, 0, 0, block_size=None),  # type: ignore[arg-type]
        get_shuffle("py1s", sizes, 1, 0, 0),
    )


@pytest.mark.parametrize(
    ("algo", "sizes", "num_canonical_nodes"),
    [("py3s", [3, 4], 1), (None, [3, 4], 1), (["py1e"], [3, 4], 1), ("py1e", [3, 4], 8)],
)
def test_messages_begin_with_streamings(
    algo: Any, sizes: list[int], num_canonical_nodes: int
) -> None:
    get_shuffle_ref = load_shuffle().get_shuffle
    with pytest.raises(Exception) as theirs:
        get_shuffle_ref(algo, np.array(sizes), num_canonical_nodes, 0, 0)
    with pytest.raises(type(theirs.value)) as ours:
        get_shuffle(algo, np.array(sizes), num_canonical_nodes, 0, 0)
    assert str(ours.value).startswith(str(theirs.value))


def test_lists_and_numpy_scalars_are_accepted() -> None:
    a = get_shuffle("py1e", [5, 6, 7], np.int64(2), np.uint32(4), np.int8(1), np.int64(64))
    b = get_shuffle("py1e", np.array([5, 6, 7]), 2, 4, 1, 64)
    np.testing.assert_array_equal(a, b)
    assert len(get_shuffle("py1s", [], 3, 0, 0)) == 0
