"""The performance page's sections, one renderer per benchmark script's
results file (see ``render_performance.py``, which places each block): a
renderer takes the file's tables and returns the Markdown of its block."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from epochplan.bench import size_text
from epochplan.bench.results import Tables


def _sig(x: float) -> str:
    """``x`` to three significant digits, without an exponent."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def _x(ratio: float) -> str:
    """A ratio as the scripts print it: whole from 9.5 on, else two digits."""
    return f"{ratio:,.0f}x" if ratio >= 9.5 else f"{ratio:.2g}x"


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"


def _table(header: list[str], align: str, rows: list[list[str]]) -> list[str]:
    """A Markdown table: ``align`` one letter a column (l, r)."""
    rule = "|".join("---" if a == "l" else "---:" for a in align)
    return [f"| {' | '.join(header)} |", f"|{rule}|", *(f"| {' | '.join(r)} |" for r in rows)]


def _text(lines: list[str], notes: list[str]) -> str:
    """The lines, then a paragraph of notes if any."""
    return "\n".join([*lines, *(["", *notes] if notes else [])]) + "\n"


def _rows(tables: Tables, name: str) -> list[dict[str, Any]]:
    if name not in tables.tables:
        raise ValueError(f"{tables.path}: no table {name!r} (was its part run?)")
    return tables.tables[name]


SPACE_NAMES = {
    "plain": "plain, 0.9 N",
    "ranges": "ranges",
    "mask": "mask",
    "indices": "index array",
    "split": "random_split part",
    "mixture": "mixture",
    "torch": "torch Subset + DistributedSampler",
    "streaming": "Streaming, three streams",
}


SHORT_SPACE_NAMES = {"indices": "index array", "streaming": "Streaming"}


def _x2(ratio: float) -> str:
    """A ratio to the plain plan: whole from 9.5 on, else two decimals."""
    return f"{ratio:,.0f}x" if ratio >= 9.5 else f"{ratio:.2f}x"


def spaces_block(t: Tables) -> str:
    """benches/bench_spaces.py: one rank's share over each space."""
    p = t.parameters
    rows = _rows(t, "spaces")
    lines = [
        f"One rank's share (rank 0 of W = {p['world_size']}, G = {p['global_batch_size']}): "
        f"the median of {p['repeats']} processes, each the best of {p['calls']} calls (torch "
        "and Streaming: one call). The ratio is to the plain plan of the same N (for "
        "Streaming, also to the mixture); memory is the growth of the peak RSS beyond the "
        "output.",
        "",
    ]
    cells, notes = [], []
    for r in rows:
        if "skipped" in r:
            names = ", ".join(SHORT_SPACE_NAMES.get(k, k) for k in r["skipped"])
            notes.append(f"Skipped at N = {size_text(r['n'])}: {names}; {r['reason']}.")
            continue
        ratio = "1" if r["space"] == "plain" else _x2(r["ratio"])
        if r["space"] == "streaming":
            mix = [m for m in rows if m.get("space") == "mixture" and m["n"] == r["n"]]
            if mix:
                ratio += f" ({_x2(r['seconds'] / mix[0]['seconds'])} the mixture)"
        cells.append(
            [size_text(r["n"]), SPACE_NAMES.get(r["space"], r["space"]), _sig(r["seconds"]),
             ratio, f"{max(r['extra_mb'], 0):,.0f}"]
        )  # fmt: skip
    header = ["N", "space", "time (s)", "ratio to plain", "peak RSS growth (MB)"]
    lines += _table(header, "llrrr", cells)
    return _text(lines, notes)


def _case(r: dict[str, Any]) -> str:
    return f"{r['lengths']}, {r['G']}, {r['W']}"


def _skips(rows: list[dict[str, Any]], side: str) -> list[str]:
    """A note for each reason ``side`` was skipped, with its cases."""
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if "skipped" in r[side]:
            reasons.setdefault(r[side]["skipped"], []).append(_case(r))
    return [f"-: {why} ({'; '.join(cases)})." for why, cases in reasons.items()]


def dealing_block(t: Tables) -> str:
    """benches/bench_tokens.py --part dealing: per-step dealing against verl."""
    p = t.parameters
    times, balance = _rows(t, "dealing_time"), _rows(t, "dealing_balance")
    lines = [
        f"G samples a step, {p['steps']} steps, lengths in [1, {p['max_len']}], a cap of "
        f"{p['cap']} tokens a micro-batch; medians over the steps; against {p['verl']}.",
        "",
        "Time a step (lengths, G, W; in brackets, verl's time over epochplan's):",
        "",
    ]
    cells = []
    for r in times:
        mine, theirs = r["epochplan"], r["verl"]
        row = [_case(r)]
        for key in ("per_rank_s", "all_ranks_s"):
            row.append(_sig(mine[key] * 1e3))
            row.append(
                "-"
                if "skipped" in theirs
                else f"{_sig(theirs[key] * 1e3)} ({_x(theirs[key] / mine[key])})"
            )
        cells.append(row)
    header = ["lengths, G, W", "per rank: epochplan ms", "verl ms (ratio)",
              "all ranks: epochplan ms", "verl ms (ratio)"]  # fmt: skip
    lines += _table(header, "lrrrr", cells)
    lines += [
        "",
        "Balance and micro-batches, each cell epochplan / verl (max / mean: the largest "
        "rank's tokens over the mean; waste: the padding waste; largest: the largest "
        f"micro-batch in tokens, cap {p['cap']}; per rank: micro-batches per rank, fewest "
        "to most, and in brackets by how many a step's ranks differ at most):",
        "",
    ]
    cells = []
    for r in balance:
        row = [_case(r)]
        for key, fmt in (("max_over_mean", "{:.3f}"), ("waste", "{:.3f}"), ("largest_mb", "{}")):
            row.append(" / ".join(
                "-" if "skipped" in side else fmt.format(side[key])
                for side in (r["epochplan"], r["verl"])
            ))  # fmt: skip
        counts = []
        for side in (r["epochplan"], r["verl"]):
            if "skipped" in side:
                counts.append("-")
                continue
            gap = f" ({side['mb_rank_gap']})" if side["mb_rank_gap"] else ""
            counts.append(f"{side['mb_min']}-{side['mb_max']}{gap}")
        cells.append([*row, " / ".join(counts)])
    lines += _table(["lengths, G, W", "max / mean", "waste", "largest", "per rank"], "lrrrl", cells)
    notes = _skips(times, "verl")
    return _text(lines, notes)


def epoch_block(t: Tables) -> str:
    """benches/bench_tokens.py --part epoch: one rank's epoch from a memory map."""
    p = t.parameters
    rows = _rows(t, "epoch")
    done = [r for r in rows if "skipped" not in r]
    cap = done[0]["cap"] if done else "?"
    lines = [
        f"`EpochPlan(N, {p['epoch_g']}, tokens=Tokens(np.memmap(path, dtype=np.int32)))`, "
        f"then rank {p['rank']} of {p['world_size']} iterates `plan.micro_batches("
        f"{p['rank']}, {p['world_size']}, max_tokens={cap})` in a fresh process (the call "
        "and its iterator are timed). The call reads every length once, so a row of a few "
        "steps is mostly that read; the epoch of a row not run to its end is extrapolated "
        "from its steps after that read where the results file times the read apart "
        "(else -).",
        "",
    ]
    mib = 2**20
    times, memory = [], []
    for r in done:
        where = f"{size_text(r['n'])}, {r['cache']}"
        per_step = r["seconds"] / r["steps"]
        if r["steps"] == r["num_steps"]:
            whole = f"{r['seconds']:,.3f}"
        elif "first_call_s" in r:  # the call's one read of every length, then the steps
            steps = (r["seconds"] - r["first_call_s"]) / r["steps"]
            whole = f"~{r['first_call_s'] + steps * r['num_steps']:,.0f} (extrapolated)"
        else:
            whole = "-"
        times.append(
            [where, f"{r['steps']:,} / {r['num_steps']:,}", f"{r['seconds']:,.3f}",
             f"{per_step * 1e3:.3f}", whole]
        )  # fmt: skip
        memory.append(
            [where, f"{r['peak'] / mib:,.0f}", f"{r['RssAnon'] / mib:,.0f}",
             f"{r['RssFile'] / mib:,.0f}"]
        )  # fmt: skip
    header = ["N, page cache", "steps run / epoch", "time (s)", "ms a step", "epoch (s)"]
    lines += _table(header, "lrrrr", times)
    lines += ["", "Their memory:", ""]
    header = ["N, page cache", "peak RSS (MiB)", "anon. RSS, end (MiB)", "file pages, end (MiB)"]
    lines += _table(header, "lrrr", memory)
    notes = [f"Skipped at N = {size_text(r['n'])}: {r['skipped']}." for r in rows if "skipped" in r]
    return _text(lines, notes)


def token_files_block(t: Tables) -> str:
    """benches/bench_token_files.py: by id against token plan files."""
    p = t.parameters
    lines = [
        f"Rank 0's whole epoch, G = {p['global_batch_size']}, W = {p['world_size']}, "
        f"`max_tokens={p['max_tokens']}`, int32 lognormal lengths; cold: the files' pages "
        "dropped from the page cache first.",
        "",
    ]
    cells = []
    for r in _rows(t, "paths"):
        if r["plan_bytes"] is None:
            read = f"lengths file: {_mb(r['lengths_bytes'])}, scattered"
        else:
            read = f"plan files: {_mb(r['plan_bytes'])}, in order"
        cells.append(
            [size_text(r["n"]), r["path"], f"{r['cold_s']:.3f}", f"{r['warm_s']:.3f}", read]
        )
    lines += _table(["N", "path", "cold (s)", "warm (s)", "read by the rank"], "llrrl", cells)
    return "\n".join(lines) + "\n"


def token_plans_block(t: Tables) -> str:
    """benches/bench_token_plans.py: writing and verifying, token against plain."""
    p = t.parameters
    lines = [
        f"`epochplan plan -n N -g {p['global_batch_size']} -w {p['world_size']}` (write, "
        "then verify), plain and with `--lengths L.npy --max-tokens "
        f"{p['max_tokens']}`, each in its own process; in brackets, the token plan over the "
        "plain plan of the same N.",
        "",
    ]
    cells, notes = [], []
    for r in _rows(t, "plans"):
        if "skipped" in r:
            notes.append(f"Skipped at N = {size_text(r['n'])}: {r['skipped']}.")
            continue
        cells.append(
            [f"{size_text(r['n'])}, {r['plan']}", f"{r['write_s']:,.1f}, {r['verify_s']:,.1f}",
             f"{r['wall_s']:,.1f} ({r['wall_ratio']:.2f}x)",
             f"{r['rss_mb']:,.0f} ({r['rss_ratio']:.2f}x)", f"{r['anon_mb']:,.0f}"]
        )  # fmt: skip
    header = ["N, plan", "write, verify (s)", "wall (s)", "peak RSS (MB)", "peak anon. (MB)"]
    lines += _table(header, "lrrrr", cells)
    return _text(lines, notes)


def packing_block(t: Tables) -> str:
    """benches/bench_packing.py: packing against axolotl and verl, the global
    batches for several W, one rank's epoch and a phased schedule."""
    p = t.parameters
    lines: list[str] = []
    notes: list[str] = []
    if "packing" in t.tables:
        sides = {r["side"]: r for r in t.tables["packing"]}
        ours, axo, verl = sides["epochplan"], sides["axolotl"], sides["verl"]
        packed = sides["epochplan_first_fit"]
        # Runs before the larger step was measured have two epochplan columns.
        large = sides.get("epochplan_first_fit_large")
        mine = [ours, packed] if large is None else [ours, packed, large]
        uncut = t.tables.get("uncut", [])
        lines += [
            f"{size_text(p['n'])} lognormal lengths ({ours['over_cap_samples']:,} over the "
            f"cap), W = 8, a cap of {p['cap']:,} tokens a micro-batch, epochplan at G = "
            f"{p['global_batch_size']:,}"
            + (f" (and first fit at {large['global_batch_size']:,})" if large else "")
            + f"; {p['axolotl']}, {p['verl']} (its first {p['verl_steps']} steps).",
        ]
        if "step_bound" in ours:
            lines[-1] += (
                f" With steps of {p['global_batch_size']:,} samples and every rank given the "
                "same count, no packer fills more "
                f"than {ours['step_bound']:.3f} (a step of T tokens needs `ceil(T / cap)` "
                "rows, and every rank takes the count of the rank that needs most)."
            )
        lines += [""]

        def cell(side: dict[str, Any], text: Callable[[dict[str, Any]], str]) -> str:
            return "-" if "skipped" in side else text(side)

        # axolotl's bins over the cap on lengths not cut to it (the W run's).
        uncut_note = (
            f" ({uncut[0]['axolotl_bins_over_cap']:,} on uncut lengths, at "
            f"{size_text(uncut[0]['n'])})"
            if uncut
            else ""
        )

        def ours_cells(text: Callable[[dict[str, Any]], str]) -> list[str]:
            return [cell(side, text) for side in mine]

        rows = [
            ["packing efficiency", *ours_cells(lambda s: f"{s['efficiency']:.4f}"),
             cell(axo, lambda s: f"{s['efficiency']:.4f}"),
             cell(verl, lambda s: f"{s['efficiency']:.4f}")],
            ["samples dropped", *ours_cells(lambda s: f"{s['dropped']:,} ({s['truncated']:,} "
                                      "truncated, reported)"),
             cell(axo, lambda s: f"{s['dropped']:,}"), cell(verl, lambda s: "0")],
            ["micro-batches over the cap", *ours_cells(lambda s: f"{s['over_cap']:,}"),
             cell(axo, lambda s: f"{s['over_cap']:,}{uncut_note}"),
             cell(verl, lambda s: f"{s['over_cap']:,}")],
            ["equal micro-batch counts on ranks",
             *ours_cells(lambda s: "every step" if s["equal_counts"] else "no"),
             cell(axo, lambda s: "yes" if s["batches_per_rank"][0] == s["batches_per_rank"][1]
                  else f"cut to the fewest, {s['batches_per_rank'][0]:,} a rank"),
             cell(verl, lambda s: f"{s['unequal_steps']} of {s['steps']} steps differ")],
            ["time to pack, all 8 ranks", *ours_cells(lambda s: f"{s['seconds']:.1f} s"),
             cell(axo, lambda s: f"{s['seconds']:.1f} s"),
             cell(verl, lambda s: f"{s['seconds_per_step']:.2f} s a step")],
        ]  # fmt: skip
        header = ["", "epochplan, sorted", "epochplan, first fit", "axolotl", "verl"]
        if large is not None:
            header.insert(3, f"epochplan, first fit, G = {large['global_batch_size']:,}")
        lines += _table(header, "l" * len(header), rows)
        notes += [f"-: {s['skipped']}." for s in (axo, verl) if "skipped" in s]
    if "steps" in t.tables:
        by_size = t.tables["steps"]
        clean = all(
            r["dropped"] == r["repeated"] == r["over_cap"] == 0 and r["equal_counts"]
            for r in by_size
        )
        lines += [
            "",
            f"First fit by global batch size (the same {size_text(by_size[0]['n'])} lengths "
            "cut to the cap, W = 8): the larger the step, the fewer partly filled rows a "
            "token. "
            + (
                "At every size no sample is dropped or repeated, no micro-batch is over the "
                "cap, and every rank has the same count in every step:"
                if clean
                else "Some size dropped, repeated or overfilled (see the results file):"
            ),
            "",
        ]
        rows = [[f"{r['global_batch_size']:,}", f"{r['tokens_per_step'] / 1e6:,.1f} M",
                 f"{r['micro_batches'] / (8 * r['steps']):,.1f}", f"{r['step_bound']:.4f}",
                 f"{r['efficiency']:.4f}"] for r in by_size]  # fmt: skip
        header = ["G", "tokens a step", "micro-batches a rank a step", "bound of equal steps",
                  "first fit"]  # fmt: skip
        lines += _table(header, "rrrrr", rows)
    if "worlds" in t.tables:
        worlds = t.tables["worlds"]
        lines += [
            "",
            f"The global batches (each step's samples over all ranks) for each W, at "
            f"{size_text(worlds[0]['n'])} samples cut to the cap: the steps equal to "
            "W = 1's, and the samples axolotl drops:",
            "",
        ]
        rows = []
        for r in worlds:
            if "axolotl_same" in r:
                axo_cells = [
                    f"{r['axolotl_same']:,} of {r['axolotl_steps']:,} "
                    f"(W = 1: {r['axolotl_reference']:,})",
                    f"{r['axolotl_dropped']:,}",
                ]
            else:
                axo_cells = ["-", "-"]
            rows.append(
                [str(r["W"]), f"{r['epochplan_same']:,} of {r['epochplan_steps']:,}", *axo_cells]
            )
        header = ["W", "epochplan: steps as W = 1's", "axolotl: steps as W = 1's",
                  "axolotl: samples dropped"]  # fmt: skip
        lines += _table(header, "rrrr", rows)
    if "one_rank" in t.tables:
        (r,) = t.tables["one_rank"]
        axo = f"{r['axolotl_seconds']:.1f}" if "axolotl_seconds" in r else "-"
        lines += [
            "",
            "One rank's epoch (rank 3 of 8, lengths in memory), epochplan's construction "
            "(the oversize scan of the lengths included) apart:",
            "",
        ]
        header = ["N", "epochplan, sorted (s)", "first fit (s)", "construction (s)", "axolotl (s)"]
        row = [size_text(r["n"]), f"{r['epochplan_seconds']:.2f}",
               f"{r['first_fit_seconds']:.2f}", f"{r['construction']:.2f}", axo]  # fmt: skip
        if "first_fit_largest_seconds" in r:
            header.insert(3, f"first fit, G = {r['largest_global_batch_size']:,} (s)")
            row.insert(3, f"{r['first_fit_largest_seconds']:.2f}")
        lines += _table(header, "r" * len(header), [row])
    if "schedule" in t.tables:
        rows_s = t.tables["schedule"]
        first = rows_s[0]
        sizes = " and ".join(size_text(n) for n in first["sizes"])
        if len(set(first["sizes"])) == 1:
            sizes = f"{size_text(first['sizes'][0])} each"
        lines += [
            "",
            "A three-phase schedule (1:1, then 2:1, then 1:3, two epochs of "
            f"{first['epoch_len']:,} samples each, two sources of {sizes}): samples shown "
            "fewer than `floor(c / n)` times (lost) or more than `ceil(c / n)` (repeated):",
            "",
        ]
        names = {
            "epochplan": "epochplan, `Mixture(..., phases=...)`",
            "megatron_rebuild": "Megatron's blend rebuilt at each change (simulated)",
        }
        rows = [[names.get(r["side"], r["side"]), f"{r['lost']:,}", f"{r['repeated']:,}"]
                for r in rows_s]  # fmt: skip
        lines += _table(["", "lost", "repeated"], "lrr", rows)
    if not lines:
        raise ValueError(f"{t.path}: no table of any part")
    return _text(lines, notes)


def megatron_block(t: Tables) -> str:
    """benches/bench_megatron.py: the GPT and blending indices."""
    p = t.parameters
    runs = "one run" if p["repeats"] == 1 else f"medians of {p['repeats']} runs"
    lines = [
        f"Against megatron-core {p['megatron_core']}, {runs}; a ratio is megatron-core's "
        "time over the row's; epochplan's output compared with megatron-core's byte for byte.",
        "",
    ]
    cells = []
    for r in _rows(t, "indices"):
        k, size = p["sources"], size_text(p["blend_samples"])
        case = {
            "gpt": f"GPT indices, {size_text(p['docs'])} docs, S={p['seq_length']}",
            "blend": f"blending, K={k}, {size} samples",
            "exhaustive": f"exhaustive blending, K={k}, {size} samples",
        }[r["case"]]
        if r["implementation"] == "megatron":
            impl = f"megatron-core {p['megatron_core']}"
        else:
            impl = "epochplan (identical)" if r["identical"] else "epochplan (**differs**)"
        cells.append(
            [case, impl, f"{r['wall_s']:.3f} ({r['wall_ratio']:.1f}x)",
             f"{r['cpu_s']:.3f} ({r['cpu_ratio']:.1f}x)", f"{r['peak_mib']:,.0f}"]
        )  # fmt: skip
    header = ["case", "implementation", "wall time (s)", "CPU time (s)", "peak RSS delta (MiB)"]
    lines += _table(header, "llrrr", cells)
    return "\n".join(lines) + "\n"
