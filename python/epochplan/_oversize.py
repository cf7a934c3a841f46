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


def _without(spec: PlanSpec, ids: npt.NDArray[np.int64]) -> Selection:
    """The spec's index space less ``ids`` (ascending, each in the space):
    ranges stay ranges (O(ranges + skipped) memory), a mask a mask; ids
    (``from_indices``, a ``random_split`` part) keep their order."""
    space = spec.space
    if space is None:
        return _ranges_without(ids, spec.num_samples)
    if isinstance(space, (Mixture, MixtureEpoch)):
        raise ValueError(
            'oversize="skip" does not apply to a Mixture: give its sources without the '
            'samples (Selection.from_ranges, from_mask), or oversize="truncate"'
        )
    if space.form == "ranges":
        return space & _ranges_without(ids, space.num_samples)
    if space.form == "mask":
        mask = space.to_mask()
        mask[ids] = False
        return Selection.from_mask(mask)
    kept = np.asarray(space)
    return Selection.from_indices(kept[~np.isin(kept, ids)], space.num_samples)


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
    if tokens.max_length is not None:
        raise ValueError(
            "oversize applies to lengths as given: the tokens already cut them "
            f"(max_length={tokens.max_length})"
        )
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
