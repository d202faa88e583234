"""Ranks that run the same batches (tensor parallelism): count each request once.

In vLLM every worker of the last pipeline stage runs the pooler, so with tensor parallelism of
N each batch range appears in N processes, for the same requests. Processes are replicas of
one another when their batches match one to one: the same request ids (`rid=` in the batch
message) or, without ids, the same size at the same time (the ranges overlap by at least half
of the shorter one). Data-parallel processes run other batches and stay apart. Of each group
of replicas the lowest pid (the first rank) gives the headline figures; every rank keeps its
own figures (its batches, its GPU's overlap).
"""
from __future__ import annotations

import numpy as np

from ...base.redact import RID
from .arrays import unique
from ..read.columns import Table, factorize

MATCH_SHARE = 0.9        # of the smaller process's batches that must match, for two processes to be replicas


def rid_keys(messages: np.ndarray) -> np.ndarray:
    """The `rid=...` text of each batch message ("" when absent), once per distinct message."""
    if len(messages) == 0:
        return np.zeros(0, dtype=object)
    uniq, codes = factorize(messages)
    keys = np.array([(m.group(1) if (m := RID.search(str(t))) else "") for t in uniq], dtype=object)
    return keys[codes]


def _matched(a: Table, b: Table) -> int:
    """How many batches of `b` have a twin in `a` (same rid, or same size overlapping in time)."""
    order = np.argsort(a["start"], kind="stable")
    a_s, a_e, a_n, a_r = (a[c][order] for c in ("start", "end", "size", "rid"))
    b_s, b_e, b_n, b_r = (b[c] for c in ("start", "end", "size", "rid"))
    hit = np.zeros(len(b), dtype=bool)
    pos = np.searchsorted(a_s, b_s)
    for shift in (-1, 0):       # the nearest batch of `a` starting before or after
        i = np.clip(pos + shift, 0, len(a_s) - 1)
        overlap = np.minimum(a_e[i], b_e) - np.maximum(a_s[i], b_s)
        shorter = np.minimum(a_e[i] - a_s[i], b_e - b_s)
        with_ids = (a_r[i] != "") & (b_r != "")
        same = np.where(with_ids, a_r[i] == b_r, (a_n[i] == b_n) & (overlap * 2 >= shorter))
        hit |= same
    if (a_r != "").any() and (b_r != "").any():
        # with ids, a batch may sit further away in time: match by id over the whole process
        hit |= np.isin(b_r, a_r[a_r != ""]) & (b_r != "")
    return int(hit.sum())


def groups(batches: Table) -> dict[int, int]:
    """pid -> pid of the first rank of its replica group (itself when it has none).
    `batches` has start, end, size, rid and pid columns."""
    pids = [int(p) for p in unique(batches["pid"])]
    lead: dict[int, int] = {}
    by_pid = {p: batches[batches["pid"] == p] for p in pids}
    for p in pids:
        lead[p] = p
        for q in dict.fromkeys(lead.values()):
            if q == p:
                continue
            a, b = by_pid[q], by_pid[p]
            if _matched(a, b) >= MATCH_SHARE * min(len(a), len(b)) and _matched(b, a) >= MATCH_SHARE * min(len(a), len(b)):
                lead[p] = q
                break
    return lead


def fold(stages):
    """`stages` with the batches and stage instances of replica ranks moved to `stages.replicas`
    (their batches, with the pid of their first rank in `lead`); `stages.rank_lead` maps every
    process holding batches to its first rank."""
    from dataclasses import replace

    b = stages.batches
    if len(b) == 0:
        return stages
    pk = b["gtid"] >> 24
    if len(unique(pk)) < 2:
        return replace(stages, rank_lead={int(pk[0]): int(pk[0])})
    lead = groups(b.assign(pid=pk))
    replica_pk = [p for p, q in lead.items() if p != q]
    if not replica_pk:
        return replace(stages, rank_lead=lead)
    gone = np.isin(pk, replica_pk)
    reps = b[gone].assign(lead=np.array([lead[int(p)] for p in pk[gone]], dtype=np.int64))
    kept = stages.drop_batches(gone)
    inst = kept.instances
    kept.instances = inst[~np.isin(inst["gtid"] >> 24, replica_pk)]
    return replace(kept, replicas=reps, rank_lead=lead)
