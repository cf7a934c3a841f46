"""Token plans in plan directories: :mod:`.write` (the files, written by the
core), :mod:`.read` (one rank's view, for
:class:`~epochplan.torch.PlanSampler`) and :mod:`.verify` (checked by the
core). They build on the plan directory's reader and its manifest, whose
token part (:mod:`epochplan.planfile.manifest.tokens`) lies below them and
is re-exported here.

A token plan directory (plan-file version 3) holds, beside each rank file of
ids (in the balanced dealing's order), what a rank needs to cut its own
micro-batches without reading any other rank's data or the global lengths,
each a 1-d little-endian int64 ``.npy`` file (the lengths and loss tokens
keep their source's integer type when it has at most 32 bits, plan-file
version 7)::

    epoch-EEEE/steps.npy                    4 values per step: T_t, M, filler id, filler length
    epoch-EEEE/rank-RRRRR.offsets.npy       num_steps + 1 offsets of the steps in the rank file
    epoch-EEEE/rank-RRRRR.lengths.npy       the lengths of the rank file's ids, in its order
    epoch-EEEE/rank-RRRRR.loss_tokens.npy   their loss tokens (only when not the lengths)
"""

from epochplan.planfile.manifest.tokens import (
    CUT_PLAN_FILE_VERSION,
    NARROW_PLAN_FILE_VERSION,
    PACKED_PLAN_FILE_VERSION,
    STEP_COLUMNS,
    TOKEN_PLAN_FILE_VERSION,
    ArraySource,
    TokenFile,
    TokenInfo,
    token_file_name,
)

__all__ = [
    "CUT_PLAN_FILE_VERSION",
    "NARROW_PLAN_FILE_VERSION",
    "PACKED_PLAN_FILE_VERSION",
    "STEP_COLUMNS",
    "TOKEN_PLAN_FILE_VERSION",
    "ArraySource",
    "TokenFile",
    "TokenInfo",
    "token_file_name",
]
