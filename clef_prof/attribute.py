"""Place CUDA API calls in stage instances: the innermost range on the same thread that
contains the whole call wins (the nsys `nvtx_gpu_proj_trace` rule)."""
from __future__ import annotations

import numpy as np

from .intervals import innermost_containing
from .stage import Stages


def slots(stages: Stages) -> list[str]:
    """Slot labels: one per stage, then work in a batch outside every stage, then the rest."""
    return [*stages.config.stages, f"{stages.config.batch} (no stage)", "outside"]


def place(stages: Stages, gtid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot, batch) of each call. slot indexes `slots(stages)`; batch is -1 outside batches."""
    inst, bat = stages.instances, stages.batches
    key = np.concatenate([inst["gtid"].to_numpy(), bat["gtid"].to_numpy()])
    s = np.concatenate([inst["start"].to_numpy(), bat["start"].to_numpy()])
    e = np.concatenate([inst["end"].to_numpy(), bat["end"].to_numpy()])
    n_stages = len(stages.config.stages)
    if len(key) == 0:
        return np.full(len(start), n_stages + 1, dtype=np.int64), np.full(len(start), -1, dtype=np.int64)
    unit = innermost_containing(key, s, e, gtid, start, end)
    unit_slot = np.concatenate([inst["stage"].cat.codes.to_numpy().astype(np.int64),
                                np.full(len(bat), n_stages, dtype=np.int64)])
    unit_batch = np.concatenate([inst["batch"].to_numpy(), np.arange(len(bat), dtype=np.int64)])
    slot = np.where(unit >= 0, unit_slot[np.maximum(unit, 0)], n_stages + 1)
    batch = np.where(unit >= 0, unit_batch[np.maximum(unit, 0)], -1)
    return slot, batch
