"""The adversarial pass over the LLM recipes and Megatron's cache: every
byte of a Megatron ``.idx`` flipped under ``epochplan megatron-cache``, and
random arguments for mixture schedules and the packed collate. Every input
gives a result or one clear error; nothing crashes."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochplan as ep
from tests.core.test_errors import ALLOWED

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder  # noqa: E402

from epochplan.cli.main import main  # noqa: E402
from epochplan.torch import PackedCollate  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_every_byte_of_a_megatron_index_flipped(tmp_path: Path) -> None:
    prefix = tmp_path / "data"
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
    rng = np.random.default_rng(0)
    for _ in range(12):
        length = int(rng.integers(1, 30))
        builder.add_document(
            torch.from_numpy(rng.integers(0, 99, length, dtype=np.int32)), [length]
        )
    builder.finalize(f"{prefix}.idx")
    index = Path(f"{prefix}.idx")
    original = index.read_bytes()
    outcomes = {0: 0, 1: 0, 2: 0}
    for i in range(len(original)):
        flipped = bytearray(original)
        flipped[i] ^= 0x01
        index.write_bytes(bytes(flipped))
        cache = tmp_path / f"cache{i}"
        argv = ["megatron-cache", "--data-path", str(prefix), "--split", "100,0,0",
                "--train-samples", "20", "--seq-length", "8", "--data-cache-path", str(cache),
                "--tokenizer-identifiers", "{}"]  # fmt: skip
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(argv)  # any other exception fails the test
        outcomes[code] += 1
        if code:
            assert err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue(), i
            assert not cache.exists() or not any(cache.rglob("*.npy")), i
    index.write_bytes(original)
    assert sum(outcomes.values()) == len(original) and outcomes[1] > 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(-1, 40), min_size=0, max_size=4),
    first=st.one_of(
        st.lists(st.one_of(st.floats(-1, 5), st.just(float("nan"))), max_size=4), st.none()
    ),
    phases=st.one_of(
        st.none(),
        st.lists(
            st.tuples(
                st.one_of(st.integers(-2, 6), st.floats(), st.none()),
                st.lists(st.one_of(st.floats(-1, 5), st.integers(-3, 40)), max_size=4),
            ),
            max_size=3,
        ),
        st.text(max_size=3),
    ),
    epoch=st.integers(0, 8),
)
def test_mixture_schedules_take_any_argument(
    sizes: list[int], first: object, phases: object, epoch: int
) -> None:
    try:
        m = ep.Mixture(sizes, weights=first, num_samples=30, phases=phases)  # type: ignore[arg-type]
        plan = ep.EpochPlan(m, 7, epoch=epoch)
        ids = plan.rank_indices(0, 2)
    except ALLOWED:
        return
    assert len(ids) == plan.layout.rank_size(0, 2)
    assert sum(m.quotas_at(epoch)) == len(m)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6),
    weights=st.lists(st.one_of(st.floats(-1, 2), st.just(float("nan"))), min_size=1, max_size=6),
    mask=st.booleans(),
    max_tokens=st.one_of(st.none(), st.integers(-1, 20)),
)
def test_the_packed_collate_takes_any_micro_batch(
    lengths: list[int], weights: list[float], mask: bool, max_tokens: int | None
) -> None:
    samples = [
        ((np.arange(n, dtype=np.int64) + 3).tolist(), w, i)
        for i, (n, w) in enumerate(zip(lengths, weights, strict=False))
    ]
    try:
        collate = PackedCollate(attention_mask=mask, max_tokens=max_tokens)
        batch = collate(samples)
    except ALLOWED:
        return
    assert int(batch.cu_seqlens[-1]) == batch.input_ids.shape[-1]
