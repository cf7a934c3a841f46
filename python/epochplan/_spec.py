"""A plan's parameters as one value: what decides its ids, whatever the
epoch, the world size or the micro-batch size."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from epochplan._native import EpochPlan, Mixture, PlanLayout, Selection

__all__ = ["PlanSpec", "TokenSpec"]


@dataclass(frozen=True, eq=False)
class TokenSpec:
    """A token plan's arrays and models, as :class:`epochplan.EpochPlan` takes
    them: ``lengths`` (tokens per sample; a numpy array or ``np.memmap``,
    borrowed), ``loss_tokens`` (default: the lengths), ``cost``,
    ``loss_normalization`` and ``max_length`` (samples cut to it, for
    ``oversize="truncate"``). Checked by the plan that first uses it."""

    lengths: Any
    loss_tokens: Any = None
    cost: str | tuple[float, float] = "tokens"
    loss_normalization: str | None = None
    max_length: int | None = None

    def plan_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :class:`epochplan.EpochPlan` it stands for."""
        kwargs = {
            "lengths": self.lengths,
            "loss_tokens": self.loss_tokens,
            "cost": self.cost,
            "loss_normalization": self.loss_normalization,
        }
        if self.max_length is not None:
            kwargs["max_length"] = self.max_length
        return kwargs


@dataclass(frozen=True)
class PlanSpec:
    """The parameters that decide a plan's ids, as for :class:`epochplan.EpochPlan`.

    Build it with :meth:`checked`, which checks the values with the library's
    own messages and fills in the defaults the plan uses.
    """

    num_samples: int
    global_batch_size: int
    seed: int
    kind: str
    chunk_size: int | None
    preload_nchunks: int | None
    drop_last: bool
    #: The index space the plans permute (a ``Selection`` or ``Mixture``;
    #: None for ``range(num_samples)``, and then ``num_samples`` is its length).
    space: Selection | Mixture | None = None

    @classmethod
    def checked(
        cls,
        num_samples: int | Selection | Mixture,
        global_batch_size: int,
        *,
        seed: int = 0,
        kind: str = "cipher",
        chunk_size: int | None = None,
        preload_nchunks: int | None = None,
        drop_last: bool = False,
    ) -> PlanSpec:
        """The spec, checked by the plan itself (which builds no ids, whatever
        its kind), with the defaults the plan used filled in
        (``preload_nchunks`` of a chunked plan): the manifest records what the
        files hold, whatever later defaults are."""
        plan = EpochPlan(
            num_samples,
            global_batch_size,
            seed=seed,
            kind=kind,
            chunk_size=chunk_size,
            preload_nchunks=preload_nchunks,
            drop_last=drop_last,
        )
        return cls(
            plan.num_samples,
            plan.global_batch_size,
            plan.seed,
            plan.kind,
            plan.chunk_size,
            plan.preload_nchunks,
            plan.drop_last,
            num_samples if isinstance(num_samples, (Selection, Mixture)) else None,
        )

    def plan(self, epoch: int, tokens: TokenSpec | None = None) -> EpochPlan:
        """The plan of ``epoch`` (a ``"uniform"`` plan builds its N ids when
        first asked for ids), a token plan with ``tokens``."""
        return EpochPlan(
            self.num_samples if self.space is None else self.space,
            self.global_batch_size,
            seed=self.seed,
            epoch=epoch,
            kind=self.kind,
            chunk_size=self.chunk_size,
            preload_nchunks=self.preload_nchunks,
            drop_last=self.drop_last,
            **(tokens.plan_kwargs() if tokens is not None else {}),
        )

    def layout(self) -> PlanLayout:
        """The spec's steps, shares, micro-batch cuts and weights, without the
        order."""
        return PlanLayout(self.num_samples, self.global_batch_size, drop_last=self.drop_last)

    def rank_counts(self, world_size: int) -> list[int]:
        """Each rank's number of ids in an epoch."""
        layout = self.layout()
        return [layout.rank_size(r, world_size) for r in range(world_size)]

    def as_dict(self) -> dict[str, Any]:
        """The fields but the space, as the manifest and the native writer take them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "space"}
