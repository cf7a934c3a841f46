"""epochplan.compat.megatron against the real megatron-core 0.16.1 wheel:
its compiled helpers and its GPTDataset / BlendedDataset code, byte for byte
(values and dtypes), over many configurations."""

from __future__ import annotations

import numpy as np
import pytest

helpers_cpp = pytest.importorskip("megatron.core.datasets.helpers_cpp")
meg_helpers = pytest.importorskip("megatron.core.datasets.helpers")
meg_gpt = pytest.importorskip("megatron.core.datasets.gpt_dataset")

import epochplan as ep  # noqa: E402
from epochplan.compat import megatron as em  # noqa: E402


def same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


# ---------------------------------------------------------------- sample index

SAMPLE_CASES = [
    # (documents, epochs, seq_length, drop_last, extra, seed)
    (50, 1, 8, True, 1, 0),
    (50, 3, 8, True, 1, 1),
    (200, 2, 64, True, 0, 2),
    (200, 2, 64, False, 1, 3),
    (1000, 5, 17, False, 0, 4),
    (3000, 1, 2, True, 1, 5),
]


@pytest.mark.parametrize(("docs", "epochs", "seq", "drop", "extra", "seed"), SAMPLE_CASES)
def test_sample_index_is_megatrons_for_int32_and_int64(docs, epochs, seq, drop, extra, seed):
    rng = np.random.default_rng(seed)
    # Empty documents included: the walk steps over them.
    sizes = rng.integers(0, 40, docs).astype(np.int32)
    sizes[0] = max(int(sizes[0]), 1)
    doc_idx = np.tile(np.arange(docs, dtype=np.int32), epochs)
    rng.shuffle(doc_idx)
    tpe = int(sizes.sum())
    args = (sizes, doc_idx, seq, epochs, tpe, drop, extra)
    same(em.build_sample_idx_int32(*args), helpers_cpp.build_sample_idx_int32(*args))
    same(em.build_sample_idx_int64(*args), helpers_cpp.build_sample_idx_int64(*args))
    wrap = (sizes, doc_idx, seq, epochs, tpe, drop, bool(extra))
    same(em.build_sample_idx(*wrap), meg_helpers.build_sample_idx(*wrap))


def test_sample_index_past_the_last_document_matches():
    # tokens_per_epoch larger than the documents hold: the walk runs off the
    # end and repeats the last document's final offset, as the C++ does.
    sizes = np.array([5, 9, 4], np.int32)
    doc_idx = np.array([2, 0, 1], np.int32)
    args = (sizes, doc_idx, 4, 1, 40, False, 1)
    same(em.build_sample_idx_int64(*args), helpers_cpp.build_sample_idx_int64(*args))


# ---------------------------------------------------------- document / shuffle


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("n", [1, 2, 255, 256, 257, 10_000])
def test_document_and_shuffle_indices_leave_the_state_as_megatron(n, separate):
    ours, theirs = np.random.RandomState(n), np.random.RandomState(n)
    docs = np.arange(3, 3 + n, dtype=np.int32)
    same(
        em.build_document_index(docs, 3, ours, separate),
        meg_gpt._build_document_index(docs, 3, theirs, separate),
    )
    same(
        em.build_shuffle_index(n // 2, n + 5, ours),
        meg_gpt._build_shuffle_index(n // 2, n + 5, theirs),
    )
    assert ours.randint(2**31) == theirs.randint(2**31)


# ------------------------------------------------------------------- blending


def _weights(kind: str, k: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        w = rng.random(k)
    elif kind == "equal":
        w = np.ones(k)
    elif kind == "lognormal":
        w = rng.lognormal(0.0, 2.0, k)
    elif kind == "tiny":
        w = np.r_[1.0, np.full(k - 1, 1e-9), 1e-300][:k]
    elif kind == "ties":
        w = rng.integers(1, 4, k).astype(np.float64)
    else:
        raise AssertionError(kind)
    return w / w.sum()


BLEND_CASES = [
    ("uniform", 2, 1000),
    ("uniform", 8, 20_000),
    ("uniform", 128, 50_000),
    ("uniform", 1000, 20_000),
    ("equal", 64, 10_000),
    ("equal", 1000, 5_000),
    ("lognormal", 128, 30_000),
    ("tiny", 5, 10_000),
    ("tiny", 300, 10_000),
    ("ties", 100, 20_000),
]


@pytest.mark.parametrize(("kind", "k", "size"), BLEND_CASES)
def test_blending_indices_are_megatrons(kind, k, size):
    w = _weights(kind, k, np.random.default_rng(k))
    outs = []
    for build in (em.build_blending_indices, helpers_cpp.build_blending_indices):
        index, sample = np.zeros(size, np.int16), np.zeros(size, np.int64)
        build(index, sample, w, k, size, False)
        outs.append((index, sample))
    same(outs[0][0], outs[1][0])
    same(outs[0][1], outs[1][1])


@pytest.mark.parametrize(
    ("w", "size"),
    [
        ([2.0, 3.0, 0.5, 7.0], 3000),
        # Errors past 2^52, where a double cannot tell e from e - 1: sources
        # of equal weight are not taken round robin there.
        ([1e10, 1e10, 3.0], 1_000_000),
    ],
)
def test_unnormalized_weights_are_megatrons_too(w, size):
    w = np.array(w)
    outs = []
    for build in (em.build_blending_indices, helpers_cpp.build_blending_indices):
        index, sample = np.zeros(size, np.int16), np.zeros(size, np.int64)
        build(index, sample, w, len(w), size, False)
        outs.append((index, sample))
    same(outs[0][0], outs[1][0])
    same(outs[0][1], outs[1][1])


@pytest.mark.parametrize(("kind", "k", "threads"), [("uniform", 128, 2), ("lognormal", 6, 3)])
def test_long_blends_filled_in_pieces_are_megatrons(kind, k, threads):
    # From 2**20 positions a blend is filled in pieces (one a thread, or 32 a
    # thread in vector lanes with AVX-512), each from a guess of the samples
    # taken before it, then mended in order.
    w = _weights(kind, k, np.random.default_rng(k))
    size = 3 * 2**20 + 4321
    ep.set_num_threads(threads)
    try:
        ours = np.zeros(size, np.int16), np.zeros(size, np.int64)
        em.build_blending_indices(*ours, w, k, size, False)
        sizes = np.random.default_rng(3).integers(1, 2 * size // k, k)
        mine = np.zeros(int(sizes.sum()), np.int16), np.zeros(int(sizes.sum()), np.int64)
        em.build_exhaustive_blending_indices(*mine, sizes, k)
    finally:
        ep.set_num_threads(0)
    theirs = np.zeros(size, np.int16), np.zeros(size, np.int64)
    helpers_cpp.build_blending_indices(*theirs, w, k, size, False)
    same(ours[0], theirs[0])
    same(ours[1], theirs[1])
    exhaustive = np.zeros(int(sizes.sum()), np.int16), np.zeros(int(sizes.sum()), np.int64)
    helpers_cpp.build_exhaustive_blending_indices(*exhaustive, sizes, k)
    same(mine[0], exhaustive[0])
    same(mine[1], exhaustive[1])


EXHAUSTIVE_CASES = [[7], [3, 3, 3], [1, 100, 7, 7, 50], "random300", "equal1000"]


@pytest.mark.parametrize("sizes", EXHAUSTIVE_CASES, ids=str)
def test_exhaustive_blending_indices_are_megatrons(sizes):
    rng = np.random.default_rng(7)
    if sizes == "random300":
        sizes = rng.integers(1, 200, 300)
    elif sizes == "equal1000":
        sizes = np.full(1000, 5)
    sizes = np.asarray(sizes, np.int64)
    total = int(sizes.sum())
    outs = []
    builds = (em.build_exhaustive_blending_indices, helpers_cpp.build_exhaustive_blending_indices)
    for build in builds:
        index, sample = np.zeros(total, np.int16), np.zeros(total, np.int64)
        build(index, sample, sizes, len(sizes))
        outs.append((index, sample))
    same(outs[0][0], outs[1][0])
    same(outs[0][1], outs[1][1])


# ------------------------------------------------------------------ the sizes


@pytest.mark.parametrize("surplus", [0.0, 0.005, 0.5])
def test_sizes_per_dataset_follow_the_surplus_rule(surplus):
    builder = pytest.importorskip("megatron.core.datasets.blended_megatron_dataset_builder")
    from megatron.core.datasets.utils import normalize

    w = normalize([0.3, 0.2, 1e-4, 5.0])
    targets = [10_000, 333, 7]
    assert em.normalize([0.3, 0.2, 1e-4, 5.0]) == w
    assert em.get_size_per_split_per_dataset(w, targets, surplus) == (
        builder._get_size_per_split_per_dataset(w, targets, surplus)
    )


# ---------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_errors_naming_the_argument():
    sizes = np.array([4, 4], np.int32)
    with pytest.raises(ValueError, match=r"document_idx\[1\] = 5"):
        em.build_sample_idx_int32(sizes, np.array([0, 5], np.int32), 2, 1, 8)
    with pytest.raises(ValueError, match="seq_length"):
        em.build_sample_idx_int32(sizes, np.array([0, 1], np.int32), 1, 1, 8)
    with pytest.raises(TypeError, match="sizes"):
        em.build_sample_idx(np.array([1.5, 2.0]), np.array([0, 1]), 2, 1, 3)
    small = np.zeros(3, np.int16)
    with pytest.raises(ValueError, match="dataset_index must hold at least 4"):
        em.build_blending_indices(small, np.zeros(4, np.int64), [0.5, 0.5], 2, 4)
    with pytest.raises(TypeError, match="dataset_index"):
        em.build_blending_indices(np.zeros(4, np.int32), np.zeros(4, np.int64), [1.0], 1, 4)
    with pytest.raises(ValueError, match=r"weights\[1\] must be finite"):
        em.build_blending_indices(np.zeros(4, np.int16), np.zeros(4, np.int64), [1, np.nan], 2, 4)
    with pytest.raises(ValueError, match="num_datasets"):
        em.build_blending_indices(np.zeros(4, np.int16), np.zeros(4, np.int64), [1.0], 0, 4)
    with pytest.raises(ValueError, match=r"sizes\[1\] must be positive"):
        index, sample = np.zeros(4, np.int16), np.zeros(4, np.int64)
        em.build_exhaustive_blending_indices(index, sample, [4, 0], 2)
    with pytest.raises(TypeError, match="numpy_random_state"):
        em.build_document_index(np.arange(3), 1, np.random.default_rng(0), False)  # type: ignore[arg-type]


# ------------------------------------------------------- whole GPTDataset


class _LowLevel:
    """What GPTDataset reads of an indexed dataset."""

    def __init__(self, lengths: np.ndarray, prefix: str) -> None:
        self.sequence_lengths = lengths
        self.path_prefix = prefix


class _Tokenizer:
    vocab_size = 1000

    @property
    def unique_identifiers(self) -> dict[str, str]:
        return {"class": "tests.Tokenizer"}


# (documents, fraction of an epoch requested or None, split, extra, drop_last_valid)
GPT_CASES = [
    (300, None, "train", True, True),  # one epoch
    (300, 0.5, "train", True, True),  # less than an epoch
    (300, 2.3, "train", True, True),  # final epoch of 30%: separate
    (300, 2.9, "train", True, True),  # final epoch of 90%: shuffled with the rest
    (300, 4.79, "train", False, True),  # at the 80% threshold, no extra token
    (500, 3.5, "valid", True, False),  # the last partial validation sequence kept
    (500, 1.2, "valid", False, False),
    (2000, 7.05, "test", True, True),
    # Past 2**18 document-index positions the build runs on two threads.
    (150_000, 2.3, "train", True, True),
    (300_000, None, "valid", False, False),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("docs", "epochs", "split", "extra", "drop_valid"), GPT_CASES)
def test_gpt_dataset_indices_are_megatrons(
    docs, epochs, split, extra, drop_valid, threads, tmp_path
):
    from megatron.core.datasets.utils import Split

    rng = np.random.default_rng(docs)
    lengths = rng.integers(1, 300, docs).astype(np.int32)
    indices = np.arange(docs // 10, docs, dtype=np.int32)
    seq = 64
    tokens = int(lengths[indices].sum())
    num_samples = None if epochs is None else int(epochs * (tokens - int(extra)) / seq)
    config = meg_gpt.GPTDatasetConfig(
        random_seed=docs + 1,
        sequence_length=seq,
        split="1",
        blend=(["unused"], None),
        path_to_cache=str(tmp_path),
        tokenizer=_Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=drop_valid,
    )
    theirs = meg_gpt.GPTDataset(
        _LowLevel(lengths, str(tmp_path)), "data", indices, num_samples, Split[split], config
    )
    ep.set_num_threads(threads)
    try:
        ours = em.build_gpt_indices(
            lengths,
            indices,
            num_samples,
            seq,
            docs + 1,
            add_extra_token_to_sequence=extra,
            drop_last_partial_sequence=drop_valid if split == "valid" else True,
        )
    finally:
        ep.set_num_threads(0)
    same(ours.document_index, theirs.document_index)
    same(ours.sample_index, theirs.sample_index)
    same(ours.shuffle_index, theirs.shuffle_index)
