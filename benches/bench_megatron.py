"""megatron-core's dataset indices: epochplan.compat.megatron against
megatron-core 0.16.1's own code and compiled helpers, in one run.

Run ``python benches/bench_megatron.py`` (``--help`` for options; wrap it in
``flock /tmp/epochplan-bench.lock`` on a shared machine). Three cases:

- ``gpt``: a GPTDataset's three indices for one epoch of ``--docs``
  documents of 1 to 2,000 tokens (about 10^3 tokens each, so 10^11 tokens at
  10^8 documents) and ``--seq-length`` 4096: Megatron's own steps
  (``_get_num_tokens_per_epoch``'s sum, ``_build_document_index``, the copy
  of the lengths and ``helpers.build_sample_idx``, ``_build_shuffle_index``)
  against ``build_gpt_indices``.
- ``blend``: ``helpers_cpp.build_blending_indices`` against ours, ``--sources``
  sources of uniformly random weights, ``--blend-samples`` samples.
- ``exhaustive`` (only when named in ``--cases``):
  ``helpers_cpp.build_exhaustive_blending_indices`` against ours,
  ``--sources`` sources of uniformly random sizes that sum to
  ``--blend-samples``.

Each (case, implementation) runs in a fresh subprocess, inputs made before
the clock starts, so its peak RSS delta (peak resident memory during the
calls minus resident memory before them) is its own. Prints a Markdown
table: wall time and CPU time (user + system, all threads) medians, the
ratio of Megatron's median over ours for each, and whether the outputs are
byte-identical (sha256 of every output array). ``--results FILE`` writes the
table's rows (every run's times, too) and the run's context (machine,
command, load) for ``benches/render_performance.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from epochplan.bench.results import Tables


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _digest(arrays: tuple[np.ndarray, ...]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.dtype).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _megatron_gpt(lengths: np.ndarray, docs: np.ndarray, seq: int, seed: int) -> tuple:
    """GPTDataset._build_document_sample_shuffle_indices for one epoch, with
    Megatron's own functions, in its order."""
    from megatron.core.datasets import gpt_dataset, helpers

    tokens = int(np.sum(lengths[docs]))
    state = np.random.RandomState(seed)
    document_index = gpt_dataset._build_document_index(docs, 1, state, False)
    lengths_for_cpp = lengths.copy() if len(document_index) * 2 > len(lengths) else lengths
    sample_index = helpers.build_sample_idx(
        lengths_for_cpp, document_index, seq, 1, tokens, True, True
    )
    n = sample_index.shape[0] - 1
    shuffle_index = gpt_dataset._build_shuffle_index(n, n, state)
    return document_index, sample_index, shuffle_index


def child(case: str, impl: str, a: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    from epochplan.compat import megatron as em

    rng = np.random.default_rng(0)
    if case == "gpt":
        n = int(float(a.docs))
        lengths = rng.integers(1, 2001, n, dtype=np.int32)
        docs = np.arange(n, dtype=np.int32)
        if impl == "megatron":
            _megatron_gpt(lengths[:1000], docs[:1000], a.seq_length, 1)  # imports
        else:
            em.build_gpt_indices(lengths[:1000], docs[:1000], None, a.seq_length, 1)

        def run() -> tuple:
            if impl == "megatron":
                return _megatron_gpt(lengths, docs, a.seq_length, 1234)
            return tuple(em.build_gpt_indices(lengths, docs, None, a.seq_length, 1234))

    elif case == "exhaustive":
        k, size = a.sources, int(float(a.blend_samples))
        # Shares of uniformly random weights, each at least 1, the rounding
        # given to the last: exactly `size` samples in all.
        w = rng.random(k)
        sizes = np.maximum(np.floor(w / w.sum() * (size - k)), 0).astype(np.int64) + 1
        sizes[-1] += size - int(sizes.sum())
        if impl == "megatron":
            from megatron.core.datasets.helpers_cpp import (
                build_exhaustive_blending_indices as exhaustive,
            )
        else:
            exhaustive = em.build_exhaustive_blending_indices
        small = np.full(k, 8, np.int64)
        exhaustive(np.zeros(8 * k, np.int16), np.zeros(8 * k, np.int64), small, k)

        def run() -> tuple:
            total = int(sizes.sum())
            index = np.zeros(total, dtype=np.int16)
            sample = np.zeros(total, dtype=np.int64)
            exhaustive(index, sample, sizes, k)
            return index, sample

    else:
        k, size = a.sources, int(float(a.blend_samples))
        w = rng.random(k)
        w = (w / w.sum()).tolist()
        if impl == "megatron":
            from megatron.core.datasets.helpers_cpp import build_blending_indices as build
        else:
            build = em.build_blending_indices
        # Code pages and first allocations out of the measurement, as above.
        build(np.zeros(1000, np.int16), np.zeros(1000, np.int64), np.array(w), k, 1000, False)

        def run() -> tuple:
            index = np.zeros(size, dtype=np.int16)
            sample = np.zeros(size, dtype=np.int64)
            build(index, sample, np.array(w), k, size, False)
            return index, sample

    times: list[float] = []
    cpu: list[float] = []
    peak = 0
    digest = ""
    for r in range(a.repeats):
        _reset_peak()
        before = _rss_kib("VmRSS")
        c0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        peak = max(peak, _rss_kib("VmHWM") - before)
        if r == 0:
            digest = _digest(out)
        del out
    print(json.dumps({"times": times, "cpu": cpu, "peak_kib": peak, "digest": digest}))


def _run_child(case: str, impl: str, a: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", case, impl]
    cmd += [f"--docs={a.docs}", f"--seq-length={a.seq_length}", f"--sources={a.sources}"]
    cmd += [f"--blend-samples={a.blend_samples}", f"--repeats={a.repeats}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cases", default="gpt,blend")
    p.add_argument("--docs", default="1e7", help="documents of the gpt case")
    p.add_argument("--seq-length", type=int, default=4096)
    p.add_argument("--sources", type=int, default=128, help="sources of the blend cases")
    p.add_argument("--blend-samples", default="1e7")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--results", type=Path, help="write the table's rows and the run's context (JSON)"
    )
    p.add_argument("--child", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if "exhaustive" in a.cases.split(",") and int(float(a.blend_samples)) < a.sources:
        p.error("the exhaustive case needs --blend-samples of at least --sources")
    if a.child:
        child(a.child[0], a.child[1], a)
        return
    tables = Tables(a.results, __file__, sys.argv[1:])
    tables.parameters = {
        "docs": int(float(a.docs)),
        "seq_length": a.seq_length,
        "sources": a.sources,
        "blend_samples": int(float(a.blend_samples)),
        "repeats": a.repeats,
        "megatron_core": _megatron_version(),
    }
    print(f"median of {a.repeats} runs, {os.cpu_count()} CPUs, megatron-core 0.16.1\n")
    print(
        "| case | implementation | wall time | ratio | CPU time | CPU ratio "
        "| peak RSS delta | identical |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for case in a.cases.split(","):
        label = {
            "gpt": f"GPT indices, {float(a.docs):.0e} docs, S={a.seq_length}",
            "blend": f"blending, K={a.sources}, {float(a.blend_samples):.0e} samples",
            "exhaustive": f"exhaustive blending, K={a.sources}, "
            f"{float(a.blend_samples):.0e} samples",
        }[case]
        results = {impl: _run_child(case, impl, a) for impl in ("megatron", "epochplan")}
        same = results["megatron"]["digest"] == results["epochplan"]["digest"]
        wall_ref = statistics.median(results["megatron"]["times"])
        cpu_ref = statistics.median(results["megatron"]["cpu"])
        for impl, name in (("megatron", "megatron-core 0.16.1"), ("epochplan", "epochplan")):
            r = results[impl]
            wall, cpu = statistics.median(r["times"]), statistics.median(r["cpu"])
            mib = r["peak_kib"] / 1024
            print(
                f"| {label} | {name} | {wall:.3f} s | {wall_ref / wall:.1f}x | {cpu:.3f} s | "
                f"{cpu_ref / cpu:.1f}x | {mib:,.0f} MiB | {'yes' if same else 'NO'} |"
            )
            tables.add(
                "indices",
                {
                    "case": case,
                    "label": label,
                    "implementation": impl,
                    "wall_s": wall,
                    "wall_ratio": wall_ref / wall,
                    "cpu_s": cpu,
                    "cpu_ratio": cpu_ref / cpu,
                    "peak_mib": mib,
                    "identical": same,
                    "times": r["times"],
                    "cpu": r["cpu"],
                },
            )
    print(f"\nload average: {os.getloadavg()[0]:.2f} (1 min)")
    tables.save()


def _megatron_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("megatron-core")
    except PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    main()
