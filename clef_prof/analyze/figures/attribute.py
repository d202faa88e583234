"""Place CUDA API calls in stage instances: the innermost range on the same thread that
contains the whole call wins (the nsys `nvtx_gpu_proj_trace` rule)."""
from __future__ import annotations

import numpy as np

from .arrays import unique
from .intervals import Containment
from .stages import Stages


def slots(stages: Stages) -> list[str]:
    """Slot labels: one per stage, then work in a batch outside every stage, then the rest."""
    return [*stages.config.stages, f"{stages.config.batch} (no stage)", "outside"]


class Placer:
    """`place` with the stage and batch ranges prepared once, for calls read chunk by chunk."""

    def __init__(self, stages: Stages):
        inst, bat = stages.instances, stages.batches
        self.n_stages = len(stages.config.stages)
        key = np.concatenate([inst["gtid"], bat["gtid"]])
        s = np.concatenate([inst["start"], bat["start"]])
        e = np.concatenate([inst["end"], bat["end"]])
        self.empty = len(key) == 0
        self.threads = unique(key)
        self.containment = None if self.empty else Containment(key, s, e)
        self.unit_slot = np.concatenate([inst["code"].astype(np.int64),
                                         np.full(len(bat), self.n_stages, dtype=np.int64)])
        self.unit_batch = np.concatenate([inst["batch"], np.arange(len(bat), dtype=np.int64)])

    def __call__(self, gtid: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        outside = self.n_stages + 1
        if self.empty:
            return np.full(len(start), outside, dtype=np.int64), np.full(len(start), -1, dtype=np.int64)
        unit = self.containment.find(gtid, start, end)
        inside = unit >= 0
        u = np.maximum(unit, 0)
        slot = np.where(inside, self.unit_slot[u], outside)
        batch = np.where(inside, self.unit_batch[u], -1)
        return slot, batch
