"""Samples longer than the token cap, found before the first batch, and
what a sampler or a plan writer does with them (``oversize=``).

The samples are found by the plan (:meth:`epochplan.EpochPlan.oversize`):
one pass over the lengths in id order, in Rust, kept for the plan's life.
The policies:

* ``"error"`` (default): the sampler or writer refuses the plan, naming how
  many samples and the first ids (the plan's own message);
* ``"truncate"``: each such sample is cut to its first ``max_tokens``
  tokens (the plan's ``max_length``): its length becomes ``max_tokens`` and
  its loss tokens lose the tokens cut;
* ``"skip"``: the samples leave the plan's index space (the space less
  their ids, O(number skipped) in memory), so no step holds them and no
  weight or ``step_tokens`` counts them.

The report (:class:`OversizeReport`) says which samples were truncated or
skipped, with their lengths.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import numpy.typing as npt

from epochplan._native import EpochPlan, Mixture, MixtureEpoch, PlanSpec, Selection

__all__ = [
    "OversizeReport",
    "apply_oversize",
    "report_of",
]


@dataclasses.dataclass(frozen=True, eq=False)
class OversizeReport:
    """The samples longer than ``max_tokens`` and what was done with them.

    Attributes:
        policy: ``"error"``, ``"truncate"`` or ``"skip"``.
        max_tokens: the cap.
        ids: the samples' ids, ascending (int64).
        lengths: their lengths as given (before any cut).
    """

    policy: str
    max_tokens: int
    ids: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]

    @property
    def count(self) -> int:
        """How many samples are over the cap."""
        return int(self.ids.size)

    def __repr__(self) -> str:
        first = self.ids[:10].tolist()
        more = ", ..." if self.count > 10 else ""
        return (
            f"OversizeReport(policy={self.policy!r}, max_tokens={self.max_tokens}, "
            f"count={self.count}, ids=[{', '.join(map(str, first))}{more}])"
        )


def _ranges_without(ids: npt.NDArray[np.int64], n: int) -> Selection:
    """``range(n)`` less ``ids`` (ascending): ``len(ids) + 1`` ranges at most."""
    starts = np.concatenate([[0], ids + 1])
    stops = np.concatenate([ids, [n]])
    keep = stops > starts
    ranges = list(zip(starts[keep].tolist(), stops[keep].tolist(), strict=True))
    return Selection.from_ranges(ranges, n)


def _without(spec: PlanSpec, ids: npt.NDArray[np.int64]) -> Selection | Mixture:
    """The spec's index space less ``ids`` (ascending, each in the space)."""
    space = spec.space
    if space is None:
        return _ranges_without(ids, spec.num_samples)
    if isinstance(space, MixtureEpoch):
        raise ValueError(
            'oversize="skip" applies to a Mixture, not to one of its epochs: give the '
            "Mixture (each epoch's plan is then over the mixture less those samples)"
        )
    if isinstance(space, Mixture):
        return _mixture_without(space, ids)
    return _selection_without(space, ids)


def _selection_without(sel: Selection, ids: npt.NDArray[np.int64]) -> Selection:
    """``sel`` less those of ``ids`` it holds: ranges stay ranges
    (O(ranges + skipped) memory), a mask a mask; ids (``from_indices``, a
    ``random_split`` part) keep their order."""
    if sel.form == "ranges":
        return sel & _ranges_without(ids, sel.num_samples)
    if sel.form == "mask":
        mask = sel.to_mask()
        mask[ids] = False
        return Selection.from_mask(mask)
    kept = np.asarray(sel)
    return Selection.from_indices(kept[~np.isin(kept, ids)], sel.num_samples)


def _mixture_without(mixture: Mixture, ids: npt.NDArray[np.int64]) -> Mixture:
    """The mixture of the same quotas (and phases) and seed over its sources
    less ``ids``: each source keeps its exact count an epoch, its passes over
    the samples left. A source given by its size is the range of the store
    it stands for (the arrangement of such a mixture and of its ranges is
    the same)."""
    sources = mixture.sources
    if sources and not isinstance(sources[0], Selection):
        store = sum(mixture.sizes)
        starts = np.cumsum([0, *mixture.sizes])
        sources = [
            Selection.from_ranges([(a, b)], store) for a, b in itertools.pairwise(starts.tolist())
        ]
    kept = []
    for k, source in enumerate(sources):
        assert isinstance(source, Selection)
        left = _selection_without(source, ids)
        if len(left) == 0:
            raise ValueError(
                f'oversize="skip" leaves source {k} of the Mixture without samples: every '
                'one is longer than max_tokens (give oversize="truncate", or leave the '
                "source out of the mixture)"
            )
        kept.append(left)
    (_, quotas), *later = mixture.phases
    return Mixture(kept, quotas=quotas, seed=mixture.seed, phases=later or None)


def apply_oversize(
    spec: PlanSpec, max_tokens: int | None
) -> tuple[PlanSpec, OversizeReport | None]:
    """The spec that carries out its tokens' ``oversize`` policy for plans
    capped at ``max_tokens``, and the report (None without lengths or a cap).

    With ``"error"`` nothing changes and nothing is read here (no report):
    the plan refuses the cap at its first ``micro_batches`` call (a sampler
    asks at construction), and :func:`report_of` then reads its kept scan.
    """
    tokens = spec.tokens
    if tokens is None or max_tokens is None or tokens.oversize == "error":
        return spec, None
    policy = tokens.oversize
    # Tokens that cut already (a sampler's spec, say) are read cut: only a
    # sample still over the cap is reported.
    ids, lengths = spec.plan(0).oversize(max_tokens)
    report = OversizeReport(policy, int(max_tokens), ids, lengths)
    if report.count == 0:
        return spec, report
    if policy == "truncate":
        return spec.replace(tokens=tokens.replace(max_length=int(max_tokens))), report
    return spec.replace(num_samples=_without(spec, ids)), report


def report_of(plan: EpochPlan, max_tokens: int) -> OversizeReport:
    """The ``"error"`` report of a plan that passed its check (empty): the
    plan's kept scan, not a second pass."""
    ids, lengths = plan.oversize(max_tokens)
    return OversizeReport("error", int(max_tokens), ids, lengths)
