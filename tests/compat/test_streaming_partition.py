"""epochplan.compat.streaming.get_partitions against MosaicML Streaming's, live.

Every comparison runs both implementations on the same arguments and checks
the outcome is the same: the same array (shape, dtype, every element), or the
same exception type; the same warnings (category and text) and the same
logged messages. Streaming's package is loaded by file path (see
streaming_ref.py), needing only numpy; the comparisons are skipped
when it is not installed.

The argument space is sampled in layers, so the file stays fast while every
named range is covered: a coarse product of all axes, then the full range of
one axis at a time (num_samples 1..10,000 and primes, canonical and physical
nodes 1..16 against each other, ranks 1..8 with workers 1..8, batch 1..33,
drop_first over its whole valid range and past it, relaxed resumption from
every initial node count to every other), then random cases from hypothesis.
"""

from __future__ import annotations

import itertools
import linecache
import logging
import math
import multiprocessing
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.compat.streaming_ref import load_partition

try:
    get_partitions_ref = load_partition().get_partitions
    REF_INFO = "mosaicml-streaming's streaming.base.partition"
except pytest.skip.Exception as missing:
    get_partitions_ref, REF_INFO = None, str(missing)

import epochplan
from epochplan.compat.streaming import get_partition_part, get_partitions

needs_streaming = pytest.mark.skipif(get_partitions_ref is None, reason=REF_INFO)

Args = tuple[Any, ...]  # (algo, N, C, P, R, W, B, drop_first, initial_physical_nodes)


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


_LOGS = {"streaming": _Messages(), "epochplan": _Messages()}
logging.getLogger("streaming.base.partition").addHandler(_LOGS["streaming"])
logging.getLogger("epochplan.compat.streaming").addHandler(_LOGS["epochplan"])


def _outcome(name: str, func: Callable[..., Any] | None, args: Args) -> tuple[Any, ...]:
    assert func is not None
    log = _LOGS[name]
    log.messages.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, error = func(*args), None
        except Exception as exc:
            result, error = None, exc
    seen = [(w.category, str(w.message)) for w in caught]
    return result, error, seen, list(log.messages)


def streaming_raised_it(exc: BaseException) -> bool:
    """Whether Streaming raised `exc` on purpose: a ``raise`` statement of its
    own, or its lookup of the algorithm's name (KeyError, or TypeError for
    an unhashable name). Not a failure inside numpy or of its arithmetic
    (ZeroDivisionError), where our message names the argument instead."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or "streaming" not in tb.tb_frame.f_code.co_filename:
        return False
    line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
    return line.startswith("raise ") or line == "get = algos[algo]"


def compare(args: Args) -> str | None:
    """None if both implementations agree on `args`, else what differs."""
    return _compare(args)[0]


def _compare(args: Args) -> tuple[str | None, bool]:
    problem = _difference(args)
    return problem, _LAST_OK[0]


_LAST_OK = [False]


def _difference(args: Args) -> str | None:
    want, want_error, want_warnings, want_logs = _outcome("streaming", get_partitions_ref, args)
    got, got_error, got_warnings, got_logs = _outcome("epochplan", get_partitions, args)
    _LAST_OK[0] = want_error is None
    if want_error is not None or got_error is not None:
        if type(want_error) is not type(got_error):
            return f"{args}: Streaming raised {want_error!r}, epochplan {got_error!r}"
        # Streaming's own message comes first in ours, word for word.
        if streaming_raised_it(want_error) and not str(got_error).startswith(str(want_error)):
            return f"{args}: Streaming's message {want_error}, epochplan's {got_error}"
    elif want.shape != got.shape or want.dtype != got.dtype:
        return f"{args}: shape/dtype {want.shape}/{want.dtype} vs {got.shape}/{got.dtype}"
    elif not np.array_equal(want, got):
        first = np.argwhere(want != got)[0]
        return f"{args}: first difference at {tuple(first)}"
    if want_warnings != got_warnings:
        return f"{args}: warnings {want_warnings} vs {got_warnings}"
    if want_logs != got_logs:
        return f"{args}: logged {want_logs} vs {got_logs}"
    return None


def check_all(cases: Iterable[Args], min_ok: float = 0.3) -> int:
    """Compares every case; fails with the first differences. Also fails when
    fewer than `min_ok` of the cases produced an array (a grid that only
    exercises errors proves little)."""
    failures: list[str] = []
    total = ok = 0
    for args in cases:
        total += 1
        problem, produced = _compare(args)
        if problem is not None:
            failures.append(problem)
        elif produced:
            ok += 1
    assert not failures, f"{len(failures)} of {total} cases differ:\n" + "\n".join(failures[:8])
    assert total > 0
    assert ok >= min_ok * total, f"only {ok} of {total} cases produced an array"
    return total


def world_end(n: int, nodes: int, ranks: int) -> int:
    """The largest drop_first Streaming accepts."""
    world = nodes * ranks
    return n + world - n % world


def primes(limit: int) -> list[int]:
    sieve = np.ones(limit + 1, dtype=bool)
    sieve[:2] = False
    for i in range(2, math.isqrt(limit) + 1):
        if sieve[i]:
            sieve[i * i :: i] = False
    return [int(p) for p in np.flatnonzero(sieve)]


# ---------------------------------------------------------------------------
# Against Streaming


@needs_streaming
def test_coarse_product_of_every_axis() -> None:
    cases = []
    for n, c, p, r, w, b in itertools.product(
        [1, 2, 3, 7, 16, 31, 100, 257, 1009, 9973],
        [1, 2, 3, 4, 8, 12, 16],
        [1, 2, 3, 4, 8, 16],
        [1, 2, 3, 8],
        [1, 3, 8],
        [1, 4, 33],
    ):
        end = world_end(n, p, r)
        for d in sorted({0, 5 % (end + 1), end // 2 + 1, end}):
            cases.append(("orig", n, c, p, r, w, b, d, None))
    check_all(cases)


@needs_streaming
def test_every_num_samples_to_10000() -> None:
    cases = [("orig", n, 8, 4, 3, 2, 5, 0, None) for n in range(1, 10_001)]
    check_all(cases)


@needs_streaming
def test_num_samples_primes_and_small_counts_over_layouts() -> None:
    layouts = [
        (1, 1, 1, 1, 1),
        (3, 1, 4, 2, 7),
        (2, 8, 2, 3, 4),
        (16, 4, 8, 8, 33),
        (5, 5, 1, 8, 1),
    ]
    ns = sorted(set(range(1, 200)) | set(primes(10_000)[::7]) | {9_973, 10_000})
    check_all(("orig", n, *layout, 0, None) for layout in layouts for n in ns)


@needs_streaming
def test_every_canonical_and_physical_node_count() -> None:
    # Dividing and not dividing, fewer samples than nodes, padded rows.
    cases = [
        (algo, n, c, p, r, 2, 3, d, None)
        for c, p in itertools.product(range(1, 17), range(1, 17))
        for n in (1, 5, 16, 17, 120, 1001)
        for r in (1, 3)
        for algo in ("orig", "relaxed")
        for d in (0, 7)
    ]
    check_all(cases, min_ok=0.2)


@needs_streaming
def test_every_rank_and_worker_count() -> None:
    cases = [
        ("orig", n, c, p, r, w, b, d, None)
        for r, w in itertools.product(range(1, 9), range(1, 9))
        for n, c, p, b, d in [
            (3, 2, 2, 2, 0),
            (250, 4, 2, 3, 10),
            (1999, 8, 4, 7, 0),
            (40, 1, 8, 1, 1),
        ]
    ]
    check_all(cases)


@needs_streaming
def test_every_batch_size() -> None:
    cases = [
        ("orig", n, c, p, r, w, b, d, None)
        for b in range(1, 34)
        for n, c, p, r, w, d in [(1, 1, 1, 1, 1, 0), (500, 2, 4, 3, 5, 8), (4099, 16, 4, 8, 8, 64)]
    ]
    check_all(cases)


@needs_streaming
@pytest.mark.parametrize(
    ("n", "c", "p", "r", "w", "b"),
    [
        (100, 1, 1, 1, 1, 1),
        (97, 4, 2, 3, 2, 5),
        (211, 2, 8, 2, 3, 4),
        (64, 16, 4, 8, 1, 33),
        (13, 3, 1, 5, 2, 2),
        (5, 8, 8, 3, 2, 1),
        (1000, 8, 8, 8, 8, 32),
    ],
)
def test_every_drop_first_and_just_past(n: int, c: int, p: int, r: int, w: int, b: int) -> None:
    end = world_end(n, p, r)
    cases = [("orig", n, c, p, r, w, b, d, None) for d in range(end + 3)]
    assert check_all(cases) == end + 3


def divides_either_way(a: int, b: int) -> bool:
    """Whether one of two node counts is a multiple of the other."""
    return a % b == 0 or b % a == 0


@needs_streaming
def test_relaxed_from_every_initial_node_count_to_every_other() -> None:
    # "relaxed" re-partitions the initial node count's partition when the
    # canonical node count fits the initial node count but not the current
    # one; otherwise it is "orig". Every (initial, current) pair of 1..16 is
    # compared through the re-partitioning wherever a canonical count in
    # 1..16 leads there, and through the fallback otherwise.
    repartitioned = 0
    for initial, p in itertools.product(range(1, 17), range(1, 17)):
        if initial == p:
            continue
        fits = initial // math.gcd(initial, p)  # batch sizes that keep the global batch
        through = [
            c
            for c in range(1, 17)
            if divides_either_way(c, initial) and not divides_either_way(c, p)
        ]
        cases = [
            ("relaxed", n, c, p, r, 2, b, d, initial)
            for c in (through[:1] + through[-1:] if through else [p])
            for b, r in ((fits, 1), (2 * fits, 3))
            for n, d in ((97, 0), (1000, 50))
        ]
        # Every case gives an array: the batch sizes keep the global batch.
        check_all(cases, min_ok=1.0)
        repartitioned += bool(through)
    # How many pairs can be re-partitioned with canonical counts up to 16.
    assert repartitioned == 215  # of the 240 pairs
    # A batch size that changes the global batch is Streaming's ValueError.
    check_all([("relaxed", 100, 3, 2, 1, 2, 1, 0, 4)], min_ok=0.0)


@needs_streaming
def test_outputs_filled_in_parallel_pieces() -> None:
    # Beyond one piece of 65,536 elements the output is filled in parallel
    # pieces that start mid-batch; a few such cases against Streaming.
    cases = [
        ("orig", 250_003, 8, 4, 2, 3, 7, 1_001, None),
        ("orig", 600_000, 16, 8, 4, 2, 32, 0, None),
        ("orig", 999_983, 6, 3, 5, 2, 9, 123_457, None),
        ("relaxed", 400_001, 12, 6, 2, 4, 16, 77_777, 4),
        ("relaxed", 750_000, 8, 2, 8, 1, 33, 5, 8),
    ]
    assert check_all(cases, min_ok=1.0) == len(cases)


def test_unknown_algorithm_and_order_of_checks() -> None:
    # Unknown names raise KeyError, but only after the drop_first check.
    check_all(
        [
            ("bogus", 10, 1, 1, 1, 1, 1, 0, None),
            ("ORIG", 10, 1, 1, 1, 1, 1, 0, None),
            ("bogus", 10, 1, 1, 1, 1, 1, 12, None),
            ("relaxed", 10, 3, 2, 1, 1, 1, 0, 2),
            ("relaxed", 10, 3, 2, 1, 1, 1, 0, None),
            ("orig", 10, 4, 2, 1, 1, 1, 0, 3),
            # Any other hashable name is a KeyError, an unhashable one a
            # TypeError; drop_first=None fails its comparison (TypeError).
            (None, 10, 2, 2, 1, 1, 2, 0, None),
            (1, 10, 2, 2, 1, 1, 2, 0, None),
            (b"orig", 10, 2, 2, 1, 1, 2, 0, None),
            (["orig"], 10, 2, 2, 1, 1, 2, 0, None),
            ("\udcff", 10, 2, 2, 1, 1, 2, 0, None),
            ("orig", 10, 2, 2, 1, 1, 2, None, None),
            # initial_physical_nodes is read only by "relaxed" resuming on
            # incompatible node counts: elsewhere any value is ignored.
            ("orig", 10, 2, 2, 1, 1, 2, 0, -1),
            ("orig", 10, 2, 2, 1, 1, 2, 0, "x"),
            ("relaxed", 10, 4, 2, 1, 1, 2, 0, 2.0),
            ("relaxed", 10, 3, 2, 1, 1, 2, 0, -1),
        ],
        min_ok=0.15,
    )


@needs_streaming
def test_streaming_checks_come_before_the_zero_counts_it_divides_by() -> None:
    # Streaming divides by a zero count only after its own checks; where one
    # of them fails first, ours gives its message too.
    check_all(
        [
            ("orig", 10, 3, 2, 1, 0, 1, 0, None),  # no workers, nodes that do not divide
            ("orig", 10, 3, 2, 1, 1, 0, 0, None),  # batch size 0, the same
            ("orig", 0, 3, 2, 1, 1, 1, 0, None),  # no samples, the same
            ("orig", 0, 1, 1, 1, 1, 1, 2, None),  # no samples, drop_first past the end
            ("orig", 10, 0, 2, 1, 1, 1, 13, None),  # no canonical nodes, the same
            ("relaxed", 10, 0, 2, 1, 0, 0, 13, 3),
            ("relaxed", 10, 3, 2, 1, 1, 0, 0, 4),  # global batch 0, then 3 and 4 nodes
            ("bogus", 10, 0, 1, 1, 0, 0, 0, None),  # the name before the counts
        ],
        min_ok=0.0,
    )


def test_unknown_algorithm_is_streamings_key_error_with_a_note() -> None:
    with pytest.raises(KeyError) as info:
        get_partitions("fast", 20, 2, 2, 1, 1, 1)
    assert info.value.args == ("fast",)
    assert info.value.__notes__ == ['algo must be "orig" or "relaxed", got \'fast\'']


@st.composite
def any_args(draw: st.DrawFn) -> Args:
    n = draw(st.integers(1, 10_000))
    c, p = draw(st.integers(1, 16)), draw(st.integers(1, 16))
    if draw(st.booleans()):  # often a dividing pair, which Streaming accepts
        p = c * draw(st.integers(1, 4)) if draw(st.booleans()) else max(1, c // 2)
    r, w, b = draw(st.integers(1, 8)), draw(st.integers(1, 8)), draw(st.integers(1, 33))
    d = draw(st.integers(0, world_end(n, p, r) + 2))
    algo = draw(st.sampled_from(["orig", "relaxed"]))
    initial = draw(st.none() | st.integers(1, 16))
    return (algo, n, c, p, r, w, b, d, initial)


@needs_streaming
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_args())
def test_random_arguments(args: Args) -> None:
    assert compare(args) is None


# ---------------------------------------------------------------------------
# One rank's part


PART_CASES: list[Args] = [
    ("orig", 1000, 8, 4, 3, 2, 5, 0, None),
    ("orig", 1000, 2, 8, 2, 3, 4, 17, None),
    ("orig", 3, 4, 4, 3, 2, 1, 0, None),  # fewer samples than nodes: warnings
    ("orig", 37, 8, 4, 8, 5, 33, 3, None),
    ("orig", 250_003, 16, 8, 8, 8, 32, 1000, None),  # large enough to run in parallel
    ("relaxed", 997, 8, 3, 2, 2, 4, 40, 2),
    ("relaxed", 5000, 12, 5, 4, 3, 20, 0, 4),
]


@pytest.mark.parametrize("args", PART_CASES)
def test_part_is_the_slice_of_the_whole(args: Args) -> None:
    with warnings.catch_warnings(record=True) as whole_warnings:
        warnings.simplefilter("always")
        full = get_partitions(*args)
    nodes, ranks = full.shape[:2]
    for node, rank in itertools.product(range(nodes), range(ranks)):
        with warnings.catch_warnings(record=True) as part_warnings:
            warnings.simplefilter("always")
            part = get_partition_part(*args, node=node, rank=rank)
        assert part.dtype == np.int64
        assert part.shape == full.shape[2:]
        np.testing.assert_array_equal(part, full[node, rank])
        assert [str(w.message) for w in part_warnings] == [str(w.message) for w in whole_warnings]


@needs_streaming
@settings(max_examples=300, deadline=None)
@given(any_args(), st.integers(0, 15), st.integers(0, 7))
def test_random_parts_against_streaming(args: Args, node: int, rank: int) -> None:
    assert get_partitions_ref is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            full = get_partitions_ref(*args)
        except (ValueError, KeyError) as exc:
            with pytest.raises(type(exc)):
                get_partition_part(*args, node=0, rank=0)
            return
        node, rank = node % full.shape[0], rank % full.shape[1]
        np.testing.assert_array_equal(
            get_partition_part(*args, node=node, rank=rank), full[node, rank]
        )


@pytest.mark.parametrize(
    ("node", "rank", "error", "match"),
    [
        (4, 0, IndexError, r"node must be in \[0, 4\)"),
        (-1, 0, IndexError, r"node must be in \[0, 4\)"),
        (0, 3, IndexError, r"rank must be in \[0, 3\)"),
        (0, 2**70, IndexError, r"rank must be in \[0, 3\)"),
        (1.0, 0, TypeError, "node must be an int"),
        (0, True, TypeError, "rank must be an int"),
    ],
)
def test_part_checks_node_and_rank(node: Any, rank: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        get_partition_part("orig", 100, 4, 4, 3, 2, 2, node=node, rank=rank)


def test_part_of_a_huge_plan_is_computed_alone() -> None:
    # 10^12 samples over 65,536 nodes: the whole would be 8 TB, one rank's
    # part is 15 MB. With as many canonical as physical nodes, node p reads
    # row p, samples [p * N // C, (p + 1) * N // C), dealt to its ranks.
    n, nodes, ranks, workers, batch = 10**12, 2**16, 8, 4, 64
    node, rank = nodes - 3, 5
    part = get_partition_part("orig", n, nodes, nodes, ranks, workers, batch, node=node, rank=rank)
    per_node = -(-n // nodes)
    per_rank = -(-per_node // ranks)
    assert part.shape == (workers, -(-per_rank // (workers * batch)), batch)
    start, stop = node * n // nodes, (node + 1) * n // nodes
    in_order = part.transpose(1, 0, 2).reshape(-1)  # (batch, worker, slot): sample order
    np.testing.assert_array_equal(in_order[:5000], start + rank + ranks * np.arange(5000))
    ids = in_order[in_order >= 0]
    assert ids.min() >= start and ids.max() < stop


# ---------------------------------------------------------------------------
# Arguments, errors, threads


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_samples": 0}, ValueError, "num_samples"),
        ({"num_canonical_nodes": 0}, ValueError, "num_canonical_nodes"),
        ({"num_physical_nodes": -1}, ValueError, "num_physical_nodes"),
        ({"ranks_per_node": 0}, ValueError, "ranks_per_node"),
        ({"workers_per_rank": 0}, ValueError, "workers_per_rank"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"drop_first": -1}, ValueError, "drop_first"),
        (
            {"drop_first": 23},
            ValueError,
            r"^Resuming further into the dataset \(23\) than it has samples \(20\): drop_first",
        ),
        ({"num_samples": 2.0}, TypeError, "num_samples must be an int"),
        ({"batch_size": True}, TypeError, "batch_size must be an int"),
        ({"algo": ["orig"]}, TypeError, "^unhashable type: 'list'; algo must be a str, got list"),
        # Streaming's KeyError, the names in a note (pytest matches notes too).
        ({"algo": "fast"}, KeyError, r"^'fast'\nalgo must be \"orig\" or \"relaxed\", got 'fast'$"),
        ({"drop_first": None}, TypeError, "drop_first must be an int, got NoneType"),
        ({"num_samples": 2**63}, ValueError, "num_samples"),
        ({"num_samples": 2**62, "batch_size": 2**62}, OverflowError, "2\\*\\*63 - 1"),
        (
            {"num_canonical_nodes": 3},
            ValueError,
            "^Either canonical or physical nodes must be evenly divisible by the other, .*: "
            r"num_canonical_nodes \(3\) and num_physical_nodes \(2\) must be multiples",
        ),
        (
            {"algo": "relaxed", "num_canonical_nodes": 3, "initial_physical_nodes": 0},
            ValueError,
            "initial_physical_nodes must be an int in \\[1, ",
        ),
        (
            {"algo": "relaxed", "num_canonical_nodes": 3, "initial_physical_nodes": -1},
            ValueError,
            "initial_physical_nodes must be an int in \\[1, ",
        ),
        (
            {"algo": "relaxed", "num_canonical_nodes": 3, "initial_physical_nodes": 5},
            ValueError,
            "^A global batch size of 2 is not evenly divisible by the initial total number of "
            r"devices of 5\. .*initial_physical_nodes \* ranks_per_node",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(kwargs: dict[str, Any], error: type, match: str) -> None:
    base: dict[str, Any] = {
        "algo": "orig",
        "num_samples": 20,
        "num_canonical_nodes": 2,
        "num_physical_nodes": 2,
        "ranks_per_node": 1,
        "workers_per_rank": 1,
        "batch_size": 1,
    }
    with pytest.raises(error, match=match):
        get_partitions(**{**base, **kwargs})


def test_too_large_for_memory_raises_memory_error() -> None:
    with pytest.raises(MemoryError):
        get_partitions("orig", 2**40, 1, 1, 1, 1, 1)


def test_numpy_integers_and_keywords_are_accepted() -> None:
    a = get_partitions("orig", np.int64(100), np.int32(4), 2, 2, 3, batch_size=np.uint8(5))
    b = get_partitions(
        algo="orig",
        num_samples=100,
        num_canonical_nodes=4,
        num_physical_nodes=2,
        ranks_per_node=2,
        workers_per_rank=3,
        batch_size=5,
        drop_first=0,
        initial_physical_nodes=None,
    )
    np.testing.assert_array_equal(a, b)
    assert a.flags.c_contiguous and a.flags.writeable


def test_warnings_point_at_the_caller() -> None:
    with pytest.warns(UserWarning, match="Trying to partition 3 samples over 8") as caught:
        get_partitions("orig", 3, 8, 2, 1, 1, 1)
    assert caught[0].filename == __file__


def test_drop_first_rounding_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="epochplan.compat.streaming"):
        get_partitions("orig", 100, 4, 4, 1, 1, 1, drop_first=6)
    assert any("Rounding it down" in r.getMessage() for r in caplog.records)


def test_same_output_for_any_thread_count() -> None:
    args = ("orig", 1_000_003, 64, 8, 8, 8, 32, 100)
    try:
        outs = []
        for threads in (1, 2, 3):
            epochplan.set_num_threads(threads)
            outs.append(get_partitions(*args))
    finally:
        epochplan.set_num_threads(0)
    for out in outs[1:]:
        np.testing.assert_array_equal(outs[0], out)


def _child_sum(queue: Any) -> None:
    queue.put(int(get_partitions("orig", 1_000_003, 64, 8, 8, 8, 32).sum()))


def test_works_after_fork() -> None:
    expected = int(get_partitions("orig", 1_000_003, 64, 8, 8, 8, 32).sum())
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_sum, args=(queue,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert queue.get(timeout=5) == expected
