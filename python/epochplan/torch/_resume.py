"""What a loaded state does to the epoch that ``set_epoch`` chose (shared by
every sampler of this package)."""

from __future__ import annotations


def keeps_set_epoch(epoch_set: bool, epoch: int, saved_epoch: int, saved_finished: bool) -> bool:
    """Whether a loaded state leaves the sampler on the epoch ``set_epoch`` chose.

    torchdata's ``StatefulDataLoader`` loads the sampler's state at the next
    ``iter()``, after the loop's ``set_epoch`` for that iteration. A state saved
    at the end of an epoch has nothing of it left to resume: taking its epoch
    then would undo ``set_epoch(next_epoch)`` and train on nothing (or on the
    finished epoch's order again). So a finished state of another epoch, loaded
    after ``set_epoch``, keeps the set epoch at its start; any other state is
    resumed as saved.
    """
    return epoch_set and saved_finished and saved_epoch != epoch
