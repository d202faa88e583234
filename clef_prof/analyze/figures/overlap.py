"""GPU busy time: the union of kernel, memcpy, memset and graph intervals per process, and
how much of each host span it covers.

Two coverages, side by side (docs/overlap.md): per batch, the GPU busy time inside that batch's
span; per capture, the GPU busy time inside the union of the batch spans of each process
(`span_union`), so that GPU time under two batches in flight at once counts once.

`BusyStream` computes the same figures from GPU rows read chunk by chunk, in bounded memory:
nsys writes each activity table in start order, so once every table has been read past time
W, the merged busy intervals that end before W are final; their coverage of the batch spans
is added up and they are dropped. The same watermark finalizes each batch's own busy time
(`BatchUnion`: the union of the intervals launched inside the batch). A table found out of
order raises `Unordered`, and the caller starts over with `ordered=False` (everything is held,
merged from time to time, until the end).
"""
from __future__ import annotations

import numpy as np

from .arrays import unique
from .intervals import covered, union

COMPACT_AT = 1 << 22        # unordered mode: merge the held intervals when this many accumulate


def span_union(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key, start, end) of the union of the intervals of each key (a process): disjoint, sorted
    by key and start; one `union` per key."""
    parts = [(np.full(len(s), k, dtype=np.int64), s, e)
             for k in unique(key) for s, e in [union(start[key == k], end[key == k])]]
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    return tuple(np.concatenate(c) for c in zip(*parts))


class Unordered(Exception):
    """A GPU table is not in start order: the streamed union cannot finalize early."""


class _Held:
    """Intervals not yet final, per process key."""

    def __init__(self):
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.size = 0

    def add(self, k: int, s: np.ndarray, e: np.ndarray) -> None:
        if len(s):
            self.parts.setdefault(k, []).append((s, e))
            self.size += len(s)

    def merged(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        parts = self.parts.get(k, [])
        if len(parts) == 1:
            s, e = parts[0]
        else:
            s = np.concatenate([p[0] for p in parts])
            e = np.concatenate([p[1] for p in parts])
        return union(s, e)


class BatchUnion:
    """Per batch, the length of the union of the intervals launched inside it, from rows fed
    chunk by chunk: the held rows are merged batch by batch (sorted by batch and start, a running
    maximum of the end within each batch), and the merged intervals that end before a watermark
    are added up and dropped; the others are held, merged, for the next rows."""

    def __init__(self, n_batches: int):
        self.ns = np.zeros(n_batches, dtype=np.int64)
        self._held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.size = 0
        self._first = float("inf")      # the earliest start held

    def add(self, batch: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        if len(batch):
            self._held.append((batch, start, end))
            self.size += len(batch)
            self._first = min(self._first, int(start.min()))

    def merge(self, w: float) -> None:
        """Merge the held intervals; account for the merged ones that end before w. Without a
        watermark (w = -inf) it only compacts them; with one at or before the earliest start held
        nothing can be final, and they are left as they are."""
        if not self._held or float("-inf") < w <= self._first:
            return
        b, s, e = (np.concatenate(c) for c in zip(*self._held)) if len(self._held) > 1 else self._held[0]
        self._held = []
        # by batch, then start; then the furthest end so far within the batch: one sort of
        # (batch, start) and one running max of (batch, end), each packed into one int64 key
        # (batch rank times the span of the held times, plus the time), as long as that fits
        t0 = int(min(s.min(), e.min()))
        span = int(max(s.max(), e.max())) - t0 + 1
        b0 = int(b.min())
        if (int(b.max()) - b0 + 1) * span < (1 << 62):
            base = (b - b0) * span - t0
            key = base + s
            if len(key) > 1 and not (key[1:] >= key[:-1]).all():      # often in order already
                o = np.argsort(key, kind="stable")
                b, s, e, base = b[o], s[o], e[o], base[o]
                del o
            reach = np.maximum.accumulate(base + e) - base
            del key, base
        else:
            o = np.lexsort((s, b))
            b, s, e = b[o], s[o], e[o]
            by_end = np.argsort(e, kind="stable")
            rank = np.empty_like(by_end)
            rank[by_end] = np.arange(len(e))
            n = len(e)
            reach = e[by_end[np.maximum.accumulate(b * n + rank) - b * n]]
            del o, by_end, rank
        first = np.flatnonzero(np.r_[True, (b[1:] != b[:-1]) | (s[1:] > reach[:-1])])
        gb, gs, ge = b[first], s[first], reach[np.r_[first[1:] - 1, len(b) - 1]]
        done = ge < w
        if done.any():
            lo, hi = int(gb[done][0]), int(gb[done][-1]) + 1
            self.ns[lo:hi] += np.bincount(gb[done] - lo, weights=(ge - gs)[done], minlength=hi - lo).astype(np.int64)
        keep = ~done
        self._held = [(gb[keep], gs[keep], ge[keep])] if keep.any() else []
        self.size = int(keep.sum())
        self._first = int(gs[keep].min()) if self.size else float("inf")


class BusyStream:
    """GPU busy coverage of batch spans, the busy ns of the work launched in stages (`staged`),
    and per batch the busy ns of the staged work launched inside it (`batch`, -1 outside every
    batch), from GPU rows fed chunk by chunk by `sources` (table names)."""

    def __init__(self, batch_pk: np.ndarray, batch_start: np.ndarray, batch_end: np.ndarray,
                 sources: list[str], ordered: bool = True, n_batches: int = 0):
        self.ordered = ordered
        self.cov = np.zeros(len(batch_start), dtype=np.int64)
        self.own_ns = 0
        self._a, self._b = np.asarray(batch_start), np.asarray(batch_end)
        bpk = np.asarray(batch_pk)
        self._batches = {int(k): np.flatnonzero(bpk == k) for k in unique(bpk)}
        self._last: dict[str, float | None] = {s: None for s in sources}   # None: not started
        self._all, self._own = _Held(), _Held()
        # while every row added is staged, the staged rows are all the rows: `_own` is not
        # kept, and its union is `_all`'s (one union per window instead of two)
        self._own_is_all = True
        self._per_batch = BatchUnion(n_batches)

    def add(self, source: str, pk: np.ndarray, start: np.ndarray, end: np.ndarray, staged: np.ndarray,
            batch: np.ndarray | None = None) -> None:
        if len(start) == 0:
            return
        if self.ordered:
            last = self._last[source]
            if (last is not None and start[0] < last) or (len(start) > 1 and (start[1:] < start[:-1]).any()):
                raise Unordered(source)
            self._last[source] = int(start[-1])
        if self._own_is_all and not staged.all():
            self._own_is_all = False
            self._own.parts = {k: list(p) for k, p in self._all.parts.items()}
            self._own.size = self._all.size
        keys = [int(pk[0])] if (pk == pk[0]).all() else [int(k) for k in unique(pk)]
        for k in keys:
            m = None if len(keys) == 1 else (pk == k)
            s, e, st = (start, end, staged) if m is None else (start[m], end[m], staged[m])
            self._all.add(k, s, e)
            if not self._own_is_all:
                self._own.add(k, s[st], e[st])
        if batch is not None:
            m = staged & (batch >= 0)
            self._per_batch.add(batch[m], start[m], end[m])
        held = self._all.size * (1 + self._own_is_all) + self._own.size + self._per_batch.size
        if self.ordered:
            if all(v is not None for v in self._last.values()):
                self._finalize(min(self._last.values()))
        elif held > COMPACT_AT:
            self._compact()

    def done(self, source: str) -> None:
        """No more rows from `source`."""
        self._last[source] = float("inf")

    def finish(self) -> tuple[np.ndarray, int, np.ndarray]:
        """(busy ns within each batch span, busy ns of the staged work, per batch the busy ns of
        the staged work launched inside it)."""
        self._finalize(float("inf"))
        return self.cov, self.own_ns, self._per_batch.ns

    def _compact(self) -> None:
        for held in (self._all, self._own):
            for k in list(held.parts):
                held.parts[k] = [held.merged(k)]
            held.size = sum(len(p[0][0]) for p in held.parts.values())
        self._per_batch.merge(float("-inf"))

    def _finalize(self, w: float) -> None:
        """Account for the merged intervals that end before w: no later row can touch them."""
        self._per_batch.merge(w)
        for held, own in ((self._all, False), (self._own, True)):
            size = 0
            for k in list(held.parts):
                ms, me = held.merged(k)
                cut = len(me) if w == float("inf") else int(np.searchsorted(me, w, side="left"))
                fs, fe = ms[:cut], me[:cut]
                if cut:
                    if own or self._own_is_all:
                        self.own_ns += int((fe - fs).sum())
                    if not own:
                        self._cover(k, fs, fe)
                if cut < len(ms):
                    held.parts[k] = [(ms[cut:], me[cut:])]
                    size += len(ms) - cut
                else:
                    del held.parts[k]
            held.size = size

    def _cover(self, k: int, ms: np.ndarray, me: np.ndarray) -> None:
        idx = self._batches.get(k)
        if idx is None or len(idx) == 0:
            return
        a, b = self._a[idx], self._b[idx]
        m = (b > ms[0]) & (a < me[-1])
        if m.any():
            self.cov[idx[m]] += covered(ms, me, a[m], b[m])
