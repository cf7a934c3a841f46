"""A plan's parameters as flat fields, as manifests, Grain's reprs and CLI
flags write them: the order kind's name with ``chunk_size`` and
``preload_nchunks`` beside it, where the API has one value (a name or a
:class:`~epochplan.Chunked`)."""

from __future__ import annotations

from typing import Any

from epochplan._native import Chunked, PlanSpec

__all__ = ["KIND_FIELDS", "kind_value", "plan_fields"]

#: The fields a kind's own parameters are written under, beside its name
#: (the state dict's keys, as the native module records them).
KIND_FIELDS = ("chunk_size", "preload_nchunks")


def kind_value(name: str, chunk_size: Any = None, preload_nchunks: Any = None) -> str | Chunked:
    """The ``kind=`` value of a kind's name and its chunked parameters."""
    if name == "chunked":
        if preload_nchunks is None:
            return Chunked(chunk_size)
        return Chunked(chunk_size, preload_nchunks)
    if chunk_size is not None or preload_nchunks is not None:
        raise ValueError(
            f"chunk_size and preload_nchunks apply to kind='chunked' only, not kind={name!r}"
        )
    return name


def plan_fields(spec: PlanSpec) -> dict[str, Any]:
    """The fields of ``spec`` that decide its ids over ``range(num_samples)``
    (the space and the token arrays are recorded apart)."""
    kind = spec.kind
    fields: dict[str, Any] = {
        "num_samples": spec.num_samples,
        "global_batch_size": spec.global_batch_size,
        "seed": spec.seed,
        "kind": kind,
        "chunk_size": None,
        "preload_nchunks": None,
        "drop_last": spec.drop_last,
    }
    if isinstance(kind, Chunked):
        fields["kind"] = "chunked"
        fields.update({name: getattr(kind, name) for name in KIND_FIELDS})
    return fields
