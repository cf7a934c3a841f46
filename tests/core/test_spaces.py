"""Index spaces: selections of every form against a numpy model, their set
operations, random splits (disjoint, covering, exact, fixed by the seed, O(1)
memory at 10^9), and mixtures (exact quotas, the stratification bound on
every prefix, every sample once before repeats across epochs, the
class-balanced case)."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep

IntArray = npt.NDArray[np.int64]

# ------------------------------------------------------------ selections


@st.composite
def selections(draw: st.DrawFn) -> tuple[ep.Selection, IntArray]:
    """A selection of any form and the ids it holds, in its order."""
    n = draw(st.sampled_from([0, 1, 2, 63, 64, 65]) | st.integers(0, 300))
    form = draw(st.sampled_from(["ranges", "slices", "mask", "indices", "list", "split"]))
    if form in ("ranges", "slices"):
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=8)))
        pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
        model = np.array([i for a, b in pairs for i in range(a, b)], dtype=np.int64)
        ranges: list[Any] = [slice(a, b) for a, b in pairs] if form == "slices" else pairs
        return ep.Selection.from_ranges(ranges, n), model
    if form == "mask":
        mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        return ep.Selection.from_mask(mask), np.flatnonzero(mask).astype(np.int64)
    if form in ("indices", "list"):
        ids = draw(st.permutations(range(n)))[: draw(st.integers(0, n))]
        model = np.array(ids, dtype=np.int64)
        given_ids: Any = model.copy() if form == "indices" else list(ids)
        return ep.Selection.from_indices(given_ids, n), model
    k = draw(st.integers(1, 4))
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=k - 1, max_size=k - 1)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    part = draw(st.integers(0, k - 1))
    sel = ep.random_split(n, sizes, seed=draw(st.integers(0, 2**64 - 1)))[part]
    return sel, np.asarray(sel)


FIXED = [
    (ep.Selection.from_ranges([], 0), np.zeros(0, np.int64)),
    (ep.Selection.from_ranges([(5, 5)], 10), np.zeros(0, np.int64)),
    (ep.Selection.from_ranges([(3, 4)], 10), np.array([3])),
    (ep.Selection.from_ranges([(0, 10)], 10), np.arange(10)),
    (ep.Selection.from_mask(np.zeros(7, bool)), np.zeros(0, np.int64)),
    (ep.Selection.from_mask(np.ones(130, bool)), np.arange(130)),
    (ep.Selection.from_indices(np.array([6], np.int64), 7), np.array([6])),
    (ep.Selection.from_indices(np.arange(9)[::-1].copy(), 9), np.arange(9)[::-1]),
]


def check_against_model(sel: ep.Selection, model: IntArray, data: st.DataObject | None) -> None:
    n = len(model)
    assert len(sel) == n
    got = np.asarray(sel)
    assert got.dtype == np.int64 and got.tolist() == model.tolist()
    assert [sel[j] for j in range(-n, n)] == model.tolist() * 2
    for j in (n, -n - 1):
        with pytest.raises(IndexError, match="index must be in"):
            sel[j]
    slices = [slice(None), slice(None, None, -1), slice(1, -1, 2), slice(-3, None)]
    if data is not None:
        part = st.none() | st.integers(-n - 3, n + 3)
        step = st.none() | st.integers(-5, 5).filter(bool)
        slices.append(data.draw(st.builds(slice, part, part, step)))
    for key in slices:
        assert sel[key].tolist() == model[key].tolist()
    if n:
        positions = np.array([0, n - 1, -1, -n, n // 2], dtype=np.int64)
        assert sel.take(positions).tolist() == model.take(positions).tolist()
        assert sel.take(positions.reshape(5, 1)).shape == (5, 1)
        assert sel.take(-1) == model[-1] and isinstance(sel.take(-1), np.int64)
    assert sel.take([]).tolist() == []
    store = np.zeros(sel.num_samples, bool)
    store[model] = True
    assert sel.to_mask().tolist() == store.tolist()
    assert [i in sel for i in range(-1, sel.num_samples + 1)] == [False, *store.tolist(), False]
    again = pickle.loads(pickle.dumps(sel))
    assert again == sel and hash(again) == hash(sel) and again.form == sel.form
    assert np.asarray(again).tolist() == model.tolist()


@settings(max_examples=300, deadline=None)
@given(case=selections(), data=st.data())
def test_selections_of_every_form_index_as_their_numpy_model(
    case: tuple[ep.Selection, IntArray], data: st.DataObject
) -> None:
    check_against_model(*case, data)


@pytest.mark.parametrize("case", range(len(FIXED)))
def test_empty_single_and_full_selections_index_as_their_model(case: int) -> None:
    check_against_model(*FIXED[case], None)


def test_forms_and_reprs_name_the_form() -> None:
    sel = ep.Selection.from_ranges([(0, 3), (3, 5), (7, 9)], 10)
    assert sel.form == "ranges" and sel.ranges == [(0, 5), (7, 9)]
    assert repr(sel) == "Selection(form='ranges', len=7, num_samples=10, ranges=[(0, 5), (7, 9)])"
    assert ep.Selection.from_mask([True]).form == "mask"
    assert ep.Selection.from_indices([0], 1).form == "indices"
    part = ep.random_split(10, [4, 6], seed=5)[1]
    assert part.form == "split" and part.ranges is None
    assert repr(part) == "Selection(form='split', len=6, num_samples=10, seed=5, start=4)"


def test_equality_is_the_same_ids_in_the_same_order_of_one_store() -> None:
    ranges = ep.Selection.from_ranges([(2, 5)], 10)
    assert ranges == ep.Selection.from_indices([2, 3, 4], 10)
    assert ranges == ep.Selection.from_mask((np.arange(10) >= 2) & (np.arange(10) < 5))
    assert ranges != ep.Selection.from_indices([4, 3, 2], 10)
    assert ranges != ep.Selection.from_ranges([(2, 5)], 11)
    assert ranges != [2, 3, 4]


def test_an_int64_contiguous_array_is_read_in_place_and_others_are_copied() -> None:
    ids = np.array([4, 1, 7, 0], dtype=np.int64)
    shared = ep.Selection.from_indices(ids, 8)
    strided = np.array([4, -1, 1, -1, 7, -1, 0, -1], dtype=np.int64)[::2]
    copied = ep.Selection.from_indices(strided, 8)
    narrow = ep.Selection.from_indices(ids.astype(np.int32), 8)
    ids[[0, 1]] = ids[[1, 0]]  # still distinct ids of the store
    assert shared[:].tolist() == [1, 4, 7, 0]  # no copy: the swap shows
    assert copied[:].tolist() == [4, 1, 7, 0] == narrow[:].tolist()
    assert ids.flags.writeable  # the caller's array is left as it was


def test_a_memory_map_of_ids_is_shared(tmp_path: Any) -> None:
    path = tmp_path / "ids.npy"
    np.save(path, np.arange(1000, dtype=np.int64)[::-1])
    ids = np.load(path, mmap_mode="r")
    sel = ep.Selection.from_indices(ids, 1000)
    assert sel.take([0, 999]).tolist() == [999, 0]


@st.composite
def pairs_of_one_kind(draw: st.DrawFn) -> tuple[str, int, npt.NDArray[np.bool_], Any]:
    n = draw(st.integers(0, 200))
    kind = draw(st.sampled_from(["ranges", "mask"]))
    masks = []
    for _ in range(2):
        if kind == "mask":
            masks.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool))
        else:
            cuts = sorted(draw(st.lists(st.integers(0, n), max_size=8)))
            mask = np.zeros(n, bool)
            for i in range(0, len(cuts) - 1, 2):
                mask[cuts[i] : cuts[i + 1]] = True
            masks.append(mask)
    return kind, n, masks[0], masks[1]


def as_kind(kind: str, mask: npt.NDArray[np.bool_]) -> ep.Selection:
    if kind == "mask":
        return ep.Selection.from_mask(mask)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return ep.Selection.from_ranges(list(zip(edges[::2], edges[1::2], strict=True)), len(mask))


@settings(max_examples=200, deadline=None)
@given(case=pairs_of_one_kind())
def test_set_operations_agree_with_numpy(case: tuple[str, int, Any, Any]) -> None:
    kind, n, ma, mb = case
    a, b = as_kind(kind, ma), as_kind(kind, mb)
    ia, ib = np.flatnonzero(ma), np.flatnonzero(mb)
    store = np.arange(n)
    for got, want in [
        (a & b, np.intersect1d(ia, ib)),
        (a | b, np.union1d(ia, ib)),
        (a - b, np.setdiff1d(ia, ib)),
        (~a, np.setdiff1d(store, ia)),
    ]:
        assert got.form == kind and got.num_samples == n
        assert np.asarray(got).tolist() == want.tolist()


def test_set_operations_of_other_kinds_say_what_to_convert() -> None:
    ranges = ep.Selection.from_ranges([(0, 4)], 8)
    mask = ep.Selection.from_mask(np.arange(8) % 2 == 0)
    ids = ep.Selection.from_indices([5, 1], 8)
    part = ep.random_split(8, [3, 5])[0]
    hint = r"Selection\.from_mask\(sel\.to_mask\(\)\)"
    for a, b in [(ranges, mask), (mask, ids), (part, ranges), (ids, ids)]:
        for op in (lambda x, y: x & y, lambda x, y: x | y, lambda x, y: x - y):
            with pytest.raises(TypeError, match=hint):
                op(a, b)
    for sel in (ids, part):
        with pytest.raises(TypeError, match="'~' needs .*" + hint):
            _ = ~sel
    converted = ep.Selection.from_mask(ranges.to_mask()) & mask
    assert converted[:].tolist() == [0, 2]
    with pytest.raises(ValueError, match="one store"):
        ranges & ep.Selection.from_ranges([(0, 4)], 9)
    with pytest.raises(TypeError):
        ranges & {1, 2}  # type: ignore[operator]


# ---------------------------------------------------------- random splits


def torch_sizes(n: int, fractions: list[float]) -> list[int]:
    """torch.utils.data.random_split's rounding of fractions."""
    sizes = [math.floor(n * f) for f in fractions]
    for i in range(n - sum(sizes)):
        sizes[i % len(sizes)] += 1
    return sizes


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 3000),
    weights=st.lists(st.integers(0, 9), min_size=1, max_size=5).filter(any),
    seed=st.integers(0, 2**64 - 1),
    as_fractions=st.booleans(),
)
def test_random_split_parts_are_disjoint_covering_and_exact(
    n: int, weights: list[int], seed: int, as_fractions: bool
) -> None:
    if as_fractions:
        total = sum(weights)
        spec: list[Any] = [w / total for w in weights]
        if not math.isclose(sum(spec), 1) or sum(spec) > 1:
            return
        sizes = torch_sizes(n, spec)
    else:
        sizes = [n * w // sum(weights) for w in weights]
        sizes[-1] += n - sum(sizes)
        spec = sizes
    parts = ep.random_split(n, spec, seed=seed)
    assert [len(p) for p in parts] == sizes
    ids = np.concatenate([np.asarray(p) for p in parts]) if parts else np.zeros(0)
    assert sorted(ids.tolist()) == list(range(n))
    again = ep.random_split(n, spec, seed=seed)
    assert all(a == b for a, b in zip(parts, again, strict=True))
    for part in parts:
        assert part.num_samples == n and all(i in part for i in np.asarray(part)[:20])


def test_random_split_depends_on_the_seed() -> None:
    a = np.asarray(ep.random_split(1000, [500, 500], seed=1)[0])
    b = np.asarray(ep.random_split(1000, [500, 500], seed=2)[0])
    assert a.tolist() != b.tolist()


def test_fractions_round_as_torch_does() -> None:
    assert [len(p) for p in ep.random_split(30, [0.3, 0.3, 0.4])] == [9, 9, 12]
    assert [len(p) for p in ep.random_split(10, [0.33, 0.33, 0.34])] == [4, 3, 3]
    assert [len(p) for p in ep.random_split(5, [np.float64(0.5), 0.5])] == [3, 2]


def test_a_split_of_a_billion_ids_holds_no_array_of_the_store() -> None:
    code = """
import resource
import numpy as np
import epochplan as ep
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = rss()
train, val = ep.random_split(10**9, [0.9, 0.1], seed=7)
assert (len(train), len(val)) == (900_000_000, 100_000_000)
rng = np.random.default_rng(0)
t = train.take(rng.integers(0, len(train), 20_000))
v = val.take(rng.integers(0, len(val), 20_000))
assert not any(int(i) in val for i in t) and all(int(i) in train for i in t)
assert not any(int(i) in train for i in v) and all(int(i) in val for i in v)
assert not set(t.tolist()) & set(v.tolist())
assert train[-1] not in val and val[0] not in train
big = ep.random_split(10**12, [0.9, 0.1])
assert big[1][12345] in big[1] and big[1][12345] not in big[0]
print(rss() - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    grown_kib = int(out.stdout.strip())
    assert grown_kib < 40_000, f"peak RSS grew by {grown_kib} KiB"  # a mask would be 125 MB


# ------------------------------------------------------------- mixtures


def depth(k: int, num_sources: int) -> int:
    """Source k's depth in the interleave's balanced tree."""
    lo, hi, d = 0, num_sources, 0
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        lo, hi = (lo, mid) if k < mid else (mid, hi)
        d += 1
    return d


def check_stratified(sources: IntArray, quotas: list[int]) -> None:
    """|c_k(P) - P q_k / S| <= d_k / 2 for every prefix P and source k."""
    s, num = len(sources), len(quotas)
    assert s == sum(quotas)
    prefix = np.arange(1, s + 1)
    for k, q in enumerate(quotas):
        counts = np.cumsum(sources == k)
        # Compared times 2S, in integers: |2 S c - 2 P q| <= d S.
        deviation = np.abs(2 * s * counts - 2 * prefix * q)
        assert (deviation <= depth(k, num) * s).all(), (k, quotas)
        assert depth(k, num) <= math.ceil(math.log2(num)) if num > 1 else depth(k, num) == 0


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    data=st.data(),
    seed=st.integers(0, 2**64 - 1),
)
def test_mixture_epochs_have_exact_quotas_stratified_prefixes_and_no_early_repeats(
    sizes: list[int], data: st.DataObject, seed: int
) -> None:
    quota_of = st.integers(0, 30)
    quotas = [data.draw(quota_of) if n else 0 for n in sizes]
    mix = ep.Mixture(sizes, quotas=quotas, seed=seed)
    assert mix.quotas == quotas and len(mix) == sum(quotas) and mix.sizes == sizes
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    shown: list[list[int]] = [[] for _ in sizes]  # each source's ids, in sequence order
    consumed = None
    for e in range(3):
        epoch = mix.epoch(e, consumed)
        assert epoch.consumed == [e * q for q in quotas]
        ids = np.asarray(epoch)
        src = epoch.sources(np.arange(len(epoch)))
        assert [int((src == k).sum()) for k in range(len(sizes))] == quotas
        assert ((ids >= offsets[src]) & (ids < offsets[src + 1])).all()
        check_stratified(src, quotas)
        for k, n in enumerate(sizes):
            mine = ids[src == k] - offsets[k]
            if n and (e * quotas[k]) % n == 0:  # an epoch starting at a pass boundary
                counts = np.bincount(mine, minlength=n)
                lo, hi = quotas[k] // n, -(-quotas[k] // n)
                assert ((counts == lo) | (counts == hi)).all()
            shown[k].extend(mine.tolist())
        consumed = epoch.consumed_after
    for k, n in enumerate(sizes):
        counts = np.zeros(max(n, 1), np.int64)
        for c, i in enumerate(shown[k], start=1):
            counts[i] += 1
            # After c elements every sample was shown floor or ceil of c / n times.
            assert counts.max() - counts.min() <= 1 and counts.sum() == c


def test_quotas_may_change_between_epochs_and_each_source_continues() -> None:
    sizes = [7, 5]
    shown: list[list[int]] = [[], []]
    consumed = [0, 0]
    for e, quotas in enumerate([[3, 5], [10, 1], [0, 4], [6, 6]]):
        epoch = ep.Mixture(sizes, quotas=quotas, seed=11).epoch(e, consumed)
        ids, src = np.asarray(epoch), epoch.sources(range(len(epoch)))
        shown[0].extend(ids[src == 0].tolist())
        shown[1].extend((ids[src == 1] - 7).tolist())
        consumed = epoch.consumed_after
    assert consumed == [19, 16]
    for k, n in enumerate(sizes):
        counts = np.bincount(shown[k], minlength=n)
        assert counts.max() - counts.min() <= 1
        assert sorted(shown[k][:n]) == list(range(n))  # the first pass shows each once


def test_the_bound_is_exhaustive_for_small_quotas() -> None:
    for num in range(1, 5):
        for quotas in np.ndindex(*([5] * num)):
            q = [int(x) for x in quotas]
            if sum(q):
                epoch = ep.Mixture([5] * num, quotas=q).epoch()
                check_stratified(epoch.sources(range(len(epoch))), q)


def test_weights_and_repeat_give_the_quotas() -> None:
    assert ep.Mixture([10, 10, 20], weights=[1, 1, 2]).quotas == [10, 10, 20]
    assert ep.Mixture([10, 10, 20], weights=[1, 1, 2], num_samples=10).quotas == [3, 2, 5]
    assert ep.Mixture([5, 3, 10], repeat=[0.5, 0.5, 1.25]).quotas == [2, 2, 12]
    assert ep.Mixture([4, 6]).quotas == [4, 6]


def test_mixtures_of_selections_keep_their_ids_and_pickle() -> None:
    train, val = ep.random_split(100, [0.8, 0.2], seed=3)
    mix = ep.Mixture([train, val], weights=[1, 1], num_samples=50, seed=2)
    epoch = mix.epoch(4)
    ids, src = np.asarray(epoch), epoch.sources(range(50))
    assert all(int(i) in (train if k == 0 else val) for i, k in zip(ids, src, strict=True))
    again = pickle.loads(pickle.dumps(epoch))
    assert np.asarray(again).tolist() == ids.tolist() and again.epoch == 4
    assert repr(mix) == "Mixture(sizes=[80, 20], quotas=[25, 25], seed=2)"
    assert epoch.take([-1, 0]).tolist() == [ids[-1], ids[0]]
    assert epoch[::7].tolist() == ids[::7].tolist() and epoch[-1] == ids[-1]


def test_class_balanced_batches_hold_each_class_within_the_bound() -> None:
    rng = np.random.default_rng(5)
    labels = rng.choice(4, size=5000, p=[0.7, 0.2, 0.07, 0.03])
    classes = [ep.Selection.from_mask(labels == c) for c in range(4)]
    mix = ep.Mixture(classes, quotas=[800] * 4, seed=9)
    global_batch, bound = 32, math.ceil(math.log2(4))  # a window: two prefixes
    for e in range(2):
        epoch = mix.epoch(e)
        ids, src = np.asarray(epoch), epoch.sources(range(len(epoch)))
        assert (labels[ids] == src).all()
        for start in range(0, len(epoch), global_batch):
            counts = np.bincount(src[start : start + global_batch], minlength=4)
            assert (np.abs(counts - global_batch / 4) <= bound).all(), counts
        check_stratified(src, [800] * 4)


# ------------------------------------------------------------- errors

ERRORS: list[tuple[Callable[[], object], type[Exception], str]] = [
    (lambda: ep.Selection.from_ranges([(0, 5), (3, 7)], 10), ValueError, r"ranges\[1\]"),
    (lambda: ep.Selection.from_ranges([(5, 7), (0, 3)], 10), ValueError, r"ranges\[1\]"),
    (lambda: ep.Selection.from_ranges([(0, 11)], 10), ValueError, r"ranges\[0\]"),
    (lambda: ep.Selection.from_ranges([(-1, 3)], 10), ValueError, r"ranges\[0\]"),
    (lambda: ep.Selection.from_ranges([slice(0, 4, 2)], 10), ValueError, r"ranges\[0\]"),
    (lambda: ep.Selection.from_ranges([(1, 2, 3)], 10), TypeError, r"ranges\[0\]"),
    (lambda: ep.Selection.from_ranges(5, 10), TypeError, "ranges"),
    (lambda: ep.Selection.from_ranges([], -1), ValueError, "num_samples"),
    (lambda: ep.Selection.from_mask(np.zeros(3, int)), TypeError, "mask"),
    (lambda: ep.Selection.from_mask(np.zeros((2, 2), bool)), ValueError, "mask"),
    (lambda: ep.Selection.from_indices([1, 1], 5), ValueError, r"ids\[1\]"),
    (lambda: ep.Selection.from_indices(np.array([5]), 5), ValueError, r"ids\[0\]"),
    (lambda: ep.Selection.from_indices([-1], 5), ValueError, r"ids\[0\]"),
    (lambda: ep.Selection.from_indices([True], 5), TypeError, "ids"),
    (lambda: ep.Selection.from_indices([[1]], 5), ValueError, "ids"),
    (lambda: ep.Selection.from_indices([2**64], 5), ValueError, "ids"),
    (lambda: ep.Selection.from_ranges([(0, 3)], 5)["a"], TypeError, "Selection indices"),
    (lambda: ep.Selection.from_ranges([(0, 3)], 5).take([3]), IndexError, "positions"),
    (lambda: ep.random_split(10, [3, 6]), ValueError, "sizes_or_fractions"),
    (lambda: ep.random_split(10, [0.5, 0.6]), ValueError, "sizes_or_fractions"),
    (lambda: ep.random_split(10, [-0.5, 1.5]), ValueError, "sizes_or_fractions"),
    (lambda: ep.random_split(10, [3, 7.0]), ValueError, "sizes_or_fractions"),
    (lambda: ep.random_split(10, [-3, 13]), ValueError, r"sizes_or_fractions\[0\]"),
    (lambda: ep.random_split(10, ["a"]), TypeError, r"sizes_or_fractions\[0\]"),
    (lambda: ep.random_split(10, [10], seed=-1), ValueError, "seed"),
    (lambda: ep.Mixture([]), ValueError, "sources"),
    (lambda: ep.Mixture([3, ep.Selection.from_mask([True])]), TypeError, "sources"),
    (lambda: ep.Mixture(["3"]), TypeError, r"sources\[0\]"),
    (lambda: ep.Mixture([-3]), ValueError, r"sources\[0\]"),
    (
        lambda: ep.Mixture([ep.Selection.from_mask([True]), ep.Selection.from_mask([True, False])]),
        ValueError,
        "one store",
    ),
    (lambda: ep.Mixture([3, 4], weights=[1, -1]), ValueError, r"weights\[1\]"),
    (lambda: ep.Mixture([3, 4], weights=[1, math.nan]), ValueError, r"weights\[1\]"),
    (lambda: ep.Mixture([3, 4], weights=[1, 1], quotas=[1, 1]), ValueError, "weights and quotas"),
    (lambda: ep.Mixture([3, 4], repeat=[1, 1], quotas=[1, 1]), ValueError, "repeat and quotas"),
    (lambda: ep.Mixture([3, 4], quotas=[1]), ValueError, "quotas"),
    (lambda: ep.Mixture([3, 4], quotas=[1, -1]), ValueError, r"quotas\[1\]"),
    (lambda: ep.Mixture([0, 4], quotas=[1, 1]), ValueError, r"quotas\[0\]"),
    (lambda: ep.Mixture([0, 4], weights=[1, 1]), ValueError, r"weights\[0\]"),
    (lambda: ep.Mixture([3, 4], repeat=[1, -1]), ValueError, r"repeat\[1\]"),
    (lambda: ep.Mixture([3, 4], repeat=[1, True]), TypeError, r"repeat\[1\]"),
    (lambda: ep.Mixture([3, 4], num_samples=5), ValueError, "num_samples"),
    (lambda: ep.Mixture([3, 4], weights=[1, 1], num_samples=-5), ValueError, "num_samples"),
    (lambda: ep.Mixture([3, 4], seed=None), TypeError, "seed"),
    (lambda: ep.Mixture([3, 4]).epoch(-1), ValueError, "epoch"),
    (lambda: ep.Mixture([3, 4]).epoch(0, [1]), ValueError, "consumed"),
    (lambda: ep.Mixture([3, 4]).epoch(2**63), OverflowError, "consumed"),
    (lambda: ep.Mixture([3, 4]).epoch().sources([7]), IndexError, "positions"),
    (lambda: ep.Mixture([3, 4]).epoch()[7], IndexError, "index"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_errors_name_their_argument(case: int) -> None:
    call, exc, pattern = ERRORS[case]
    with pytest.raises(exc, match=pattern):
        call()
