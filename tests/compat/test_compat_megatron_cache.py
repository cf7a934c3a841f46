"""``epochplan megatron-cache`` against megatron-core 0.16.1 itself: the
cache it writes is, file for file and byte for byte, the one Megatron's
builder writes, and an unmodified Megatron build (no distributed init) loads
it with every index builder patched to fail."""

from __future__ import annotations

import json
import struct
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core.datasets.helpers_cpp")

import megatron.core.datasets.gpt_dataset as meg_gpt  # noqa: E402
import megatron.core.datasets.helpers as meg_helpers  # noqa: E402
from megatron.core.datasets.blended_megatron_dataset_builder import (  # noqa: E402
    BlendedMegatronDatasetBuilder,
)
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder  # noqa: E402

from epochplan.cli.main import main  # noqa: E402
from epochplan.compat.megatron.cache import read_index  # noqa: E402

# Megatron's own dataset writer passes torch tensors to numpy the old way.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Tokenizer:
    """The parts of a tokenizer a GPTDataset reads."""

    vocab_size = 1000
    eod = 0
    pad = 1

    @property
    def unique_identifiers(self) -> OrderedDict[str, str]:
        return OrderedDict([("class", "tests.Tokenizer"), ("tokenizer_path", "none")])


TOKENIZER = json.dumps(Tokenizer().unique_identifiers)


def write_dataset(prefix: Path, documents: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
    for _ in range(documents):
        length = int(rng.integers(1, 90))
        tokens = rng.integers(0, 999, length, dtype=np.int32)
        builder.add_document(torch.from_numpy(tokens), [length])
    builder.finalize(f"{prefix}.idx")


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("megatron-data")
    out = []
    for k, docs in enumerate([400, 150, 900]):
        write_dataset(root / f"part{k}", docs, k)
        out.append(str(root / f"part{k}"))
    return out


def megatron_build(cache: Path, blend, split, sizes, seq, seed, extra=True, surplus=0.005):
    per_split = isinstance(blend, list)
    config = meg_gpt.GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq,
        blend=None if per_split else blend,
        blend_per_split=blend if per_split else None,
        split=split,
        path_to_cache=str(cache),
        tokenizer=Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        add_extra_token_to_sequence=extra,
        mid_level_dataset_surplus=surplus,
    )
    return BlendedMegatronDatasetBuilder(meg_gpt.GPTDataset, sizes, lambda: True, config).build()


CASES = {
    "weighted-3": (lambda p: (p, [0.3, 0.2, 0.5]), "90,8,2", [3000, 200, 50], 64, 1234, True),
    "weighted-many-epochs": (
        lambda p: (p[:2], [1.0, 3.0]),
        "90,8,2",
        [9000, 700, 20],
        128,
        7,
        True,
    ),
    "one-prefix": (lambda p: ([p[0]], None), "80,20,0", [500, None, None], 32, 99, False),
    "by-length": (lambda p: (p, None), "90,10,0", [1000, 60, None], 48, 5, True),
    "exhaustive": (lambda p: (p[1:], None), "1,0,0", [None, None, None], 40, 11, True),
    # A blend per split: weighted, one source alone, by length, none.
    "per-split": (
        lambda p: [(p[::2], [1.0, 2.0]), ([p[1]], None), (p[:2], None)],
        None,
        [2000, None, 300],
        64,
        3,
        True,
    ),
    "per-split-partial": (
        lambda p: [(p, [1.0, 1.0, 2.0]), None, None],
        None,
        [500, 0, 0],
        32,
        8,
        True,
    ),
}


def _data_args(blend) -> list[str]:
    prefixes, weights = blend
    if not weights:
        return list(prefixes)
    return [str(a) for pair in zip(weights, prefixes, strict=True) for a in pair]


def our_build(cache: Path, blend, split, sizes, seq, seed, extra) -> None:
    argv = ["megatron-cache"]
    if isinstance(blend, list):
        for name, part in zip(("train", "valid", "test"), blend, strict=True):
            if part is not None:
                argv += [f"--{name}-data-path", *_data_args(part)]
    else:
        argv += ["--data-path", *_data_args(blend), "--split", split]
    for name, size in zip(("train", "valid", "test"), sizes, strict=True):
        argv += [f"--{name}-samples", "none" if size is None else str(size)]
    argv += ["--seq-length", str(seq), "--seed", str(seed), "--data-cache-path", str(cache)]
    argv += ["--tokenizer-identifiers", TOKENIZER]
    if not extra:
        argv.append("--no-extra-token")
    assert main(argv) == 0


def fail(*args, **kwargs):
    raise AssertionError("megatron-core built an index instead of loading it")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cache_is_megatrons_and_megatron_loads_it_building_nothing(
    case, prefixes, tmp_path, monkeypatch
):
    blend_of, split, sizes, seq, seed, extra = CASES[case]
    blend = blend_of(prefixes)
    theirs, ours = tmp_path / "megatron", tmp_path / "epochplan"
    # Megatron's BlendedDataset asks for the rank when it builds: a
    # one-process group for the reference build only.
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        built = megatron_build(theirs, blend, split, sizes, seq, seed, extra)
    finally:
        torch.distributed.destroy_process_group()
    our_build(ours, blend, split, sizes, seq, seed, extra)

    names = sorted(p.name for p in theirs.iterdir())
    assert names == sorted(p.name for p in ours.iterdir())
    assert any("GPTDataset" in n for n in names)
    for name in names:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name

    for module, name in [
        (meg_gpt, "_build_document_index"),
        (meg_gpt, "_build_shuffle_index"),
        (meg_helpers, "build_sample_idx"),
        (meg_helpers, "build_blending_indices"),
        (meg_helpers, "build_exhaustive_blending_indices"),
    ]:
        monkeypatch.setattr(module, name, fail)
    assert not torch.distributed.is_initialized()
    loaded = megatron_build(ours, blend, split, sizes, seq, seed, extra)
    for a, b in zip(built, loaded, strict=True):
        assert (a is None) == (b is None)
        if a is None:
            continue
        if hasattr(a, "dataset_index"):
            assert np.array_equal(a.dataset_index, b.dataset_index)
            assert np.array_equal(a.dataset_sample_index, b.dataset_sample_index)
            assert a[len(a) - 1]["dataset_id"] == b[len(b) - 1]["dataset_id"]
        else:
            assert np.array_equal(a.shuffle_index, b.shuffle_index)
            assert torch.equal(a[0]["tokens"], b[0]["tokens"])


def test_bad_sources_are_errors_naming_the_file(prefixes, tmp_path, capsys):
    good = Path(prefixes[0] + ".idx").read_bytes()
    bad = tmp_path / "bad"
    Path(f"{bad}.bin").write_bytes(b"")
    Path(f"{bad}.idx").write_bytes(good[:100])
    with pytest.raises(ValueError, match=rf"{bad}.idx: truncated"):
        read_index(bad)
    Path(f"{bad}.idx").write_bytes(good[:9] + struct.pack("<Q", 2) + good[17:])
    with pytest.raises(ValueError, match=rf"{bad}.idx: unknown index version 2"):
        read_index(bad)
    with pytest.raises(FileNotFoundError, match=r"missing\.idx"):
        read_index(tmp_path / "missing")
    argv = ["megatron-cache", "--data-path", str(tmp_path / "missing"), "--seq-length", "8"]
    argv += ["--data-cache-path", str(tmp_path / "c"), "--tokenizer-identifiers", "{}"]
    assert main(argv) == 1
    assert "missing.idx" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_a_failed_write_leaves_complete_files_or_none(prefixes, tmp_path, monkeypatch):
    import epochplan.compat.megatron.cache as cache_module

    real_save = np.save
    saves = []

    def failing_save(f, array):
        saves.append(array.shape)
        if len(saves) == 5:
            f.write(b"partial")
            raise OSError(28, "No space left on device")
        real_save(f, array)

    monkeypatch.setattr(cache_module.np, "save", failing_save)
    with pytest.raises(OSError, match="No space left"):
        cache_module.write_cache(
            tmp_path,
            (prefixes, [1.0, 1.0, 1.0]),
            "90,8,2",
            [100, 10, 10],
            sequence_length=32,
            random_seed=1,
            tokenizer={"class": "t"},
        )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not [n for n in names if n.endswith(".tmp")]
    # The first dataset is whole (three indices and its description); the
    # second has the indices written before the failure, each complete.
    assert len([n for n in names if n.endswith("description.txt")]) == 1
    for name in names:
        if name.endswith(".npy"):
            assert np.load(tmp_path / name).size > 0
