"""Placing CUDA API calls in stage instances (analyze.figures.attribute): the innermost range of the same
thread that holds the whole call, checked call by call against a plain loop over the ranges."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.figures.attribute import Placer, slots
from clef_prof.analyze.read.columns import Table
from clef_prof.analyze.figures.stages import Stages
from clef_prof.base.config import StageConfig

CFG = StageConfig(stages=("parse", "transfer", "head"))
I64 = np.int64


def _stages(batches, instances):
    """batches: (gtid, start, end); instances: (gtid, code, start, end, batch)."""
    b = np.array(batches, dtype=I64).reshape(-1, 3)
    i = np.array(instances, dtype=I64).reshape(-1, 5)
    return Stages(CFG,
                  Table(gtid=b[:, 0], start=b[:, 1], end=b[:, 2], size=np.ones(len(b), I64), rid=np.full(len(b), "")),
                  Table(gtid=i[:, 0], code=i[:, 1], stage=np.array([CFG.stages[c] for c in i[:, 1]], dtype=object),
                        start=i[:, 2], end=i[:, 3], batch=i[:, 4]))


def by_hand(batches, instances, gtid, start, end):
    """Each call's (slot, batch): the shortest range of its thread holding it whole; stages before
    batches when equal (a stage is the more specific), else 'outside'."""
    units = [(e - s, 0, g, s, e, code, bt) for g, code, s, e, bt in instances]
    units += [(e - s, 1, g, s, e, len(CFG.stages), k) for k, (g, s, e) in enumerate(batches)]
    slot, batch = [], []
    for g, s, e in zip(gtid, start, end):
        holding = sorted(u for u in units if u[2] == g and u[3] <= s and e <= u[4])
        slot.append(holding[0][5] if holding else len(CFG.stages) + 1)
        batch.append(holding[0][6] if holding else -1)
    return slot, batch


BATCHES = [(7, 0, 100), (7, 200, 300), (9, 0, 1000)]
INSTANCES = [(7, 0, 10, 40, 0), (7, 1, 50, 90, 0), (7, 2, 210, 290, 1), (7, 2, 220, 230, 1),   # head nested in head
             (9, 1, 100, 200, 2)]
CALLS = [  # (gtid, start, end)
    (7, 10, 40), (7, 10, 41), (7, 9, 40), (7, 60, 70), (7, 45, 48), (7, 0, 100), (7, 100, 101), (7, 150, 160),
    (7, 225, 226), (7, 212, 213), (7, 200, 200), (7, 300, 300), (9, 150, 150), (9, 50, 60), (9, 1000, 1000),
    (8, 20, 30), (9, 999, 1001), (7, 40, 50),
]


def test_innermost_holding_range_of_the_thread():
    g, s, e = (np.array(c, dtype=I64) for c in zip(*CALLS))
    slot, batch = Placer(_stages(BATCHES, INSTANCES))(g, s, e)
    want_slot, want_batch = by_hand(BATCHES, INSTANCES, g, s, e)
    assert slot.tolist() == want_slot and batch.tolist() == want_batch
    # the cases, by name: the first stage instance (unit 0) and its exact edges; a call one ns over
    # an edge; a batch's own time; a nested head; another thread's batch; a thread with no ranges
    assert slot.tolist()[:6] == [0, 3, 3, 1, 3, 3] and batch.tolist()[:6] == [0, 0, 0, 0, 0, 0]
    assert slot.tolist()[8:10] == [2, 2] and batch.tolist()[8:10] == [1, 1]
    assert slot.tolist()[15:] == [4, 4, 3] and batch.tolist()[15:] == [-1, -1, 0]


def test_random_calls_against_the_plain_loop():
    rng = np.random.default_rng(21)
    g = rng.choice([7, 8, 9], 3000).astype(I64)
    s = rng.integers(-20, 1020, 3000).astype(I64)
    e = s + rng.integers(0, 60, 3000)
    slot, batch = Placer(_stages(BATCHES, INSTANCES))(g, s, e)
    want_slot, want_batch = by_hand(BATCHES, INSTANCES, g, s, e)
    assert slot.tolist() == want_slot and batch.tolist() == want_batch
    assert set(want_slot) == {0, 1, 2, 3, 4}


def test_no_ranges_at_all_puts_every_call_outside():
    placer = Placer(_stages([], []))
    slot, batch = placer(np.array([7, 8], I64), np.array([0, 5], I64), np.array([1, 9], I64))
    assert slot.tolist() == [4, 4] and batch.tolist() == [-1, -1]
    assert slot.dtype == I64 and batch.dtype == I64
    slot, batch = placer(np.array([], I64), np.array([], I64), np.array([], I64))
    assert len(slot) == len(batch) == 0


def test_batches_without_stages():
    slot, batch = Placer(_stages([(7, 0, 100), (7, 100, 200)], []))(
        np.array([7, 7, 7], I64), np.array([0, 100, 99], I64), np.array([100, 200, 101], I64))
    assert slot.tolist() == [3, 3, 4] and batch.tolist() == [0, 1, -1]


def test_slot_labels():
    assert slots(_stages([], [])) == ["parse", "transfer", "head", "pooler (no stage)", "outside"]


@pytest.mark.parametrize("n", [1, 2])
def test_a_stage_instance_outside_every_batch_keeps_batch_minus_one(n):
    inst = [(7, 0, 0, 10, -1)] * n
    slot, batch = Placer(_stages([(7, 100, 200)], inst))(np.array([7], I64), np.array([2], I64), np.array([3], I64))
    assert slot.tolist() == [0] and batch.tolist() == [-1]
