"""Turn NVTX ranges into batch instances and stage instances.

A batch is an outer range named `pooler` (message `pooler n=K`); stages are ranges named
`parse`, `index`, ... Each stage instance is placed in the innermost batch range that holds
it on the same thread; one outside every batch range is a stage all the same (batch -1).
Ranges cut by the capture edges (open at the end of the session, or with no valid end) are
dropped and counted, and so are the stages nested in a cut batch range.

A batch range inside another batch range of the same thread (an annotation in the code plus an
injected spec on the same function, or one batch target calling another) is the same batch
seen twice: only the outermost counts (its size, its span; the stages inside go to it), and
the nested ones are counted in `Stages.nested`. Push/pop ranges nest as calls do, so any
batch range inside another on its thread is nested; start/end ranges (coroutines) of
concurrent tasks can interleave on one thread, so one of those is nested only inside a
batch range of the same message (the same `n=K`, the same request ids).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..read.export import Export
from ..read.columns import Table, factorize
from ...base.errors import CaptureError
from ...base.config import StageConfig
from .intervals import innermost_containing
from ..read.nvtx import read_ranges
from .ranks import rid_keys

_SIZE_RE = re.compile(r"(?:^|[\s,;(])(?:n|size|batch|requests)\s*[=:]\s*(\d+)")
# the size read (its word up to a separator) written as a number that is no count (n=1.5, n=1.5GB,
# n=0x10, n=1_000), read as its leading digits before: damage. Other text after the digits
# (n=16/32, batch=16x128, n=16.) keeps them; a negative one (n=-1) is no size, as before.
_WORD = re.compile(r"[^\s,;)]*")
_NOT_A_COUNT = re.compile(r"\d+\.\d.*|0[xX][0-9a-fA-F]+|\d+(?:_\d+)+")
MAX_BATCH = (1 << 31) - 1      # requests in one batch range: beyond it the message is damage


def batch_size_from_message(names: np.ndarray) -> np.ndarray:
    """`n=K` (or size=/batch=/requests=) in each message; -1 where absent."""
    if len(names) == 0:
        return np.full(0, -1, dtype=np.int64)
    uniq, codes = factorize(names)
    size = np.full(len(uniq), -1, dtype=np.int64)
    for i, text in enumerate(uniq):        # once per distinct message
        m = _SIZE_RE.search(text)
        if m and _NOT_A_COUNT.fullmatch(word := _WORD.match(text, m.start(1)).group()):
            raise CaptureError(f"batch range {text[:60]!r}: batch size {word[:20]!r} is not written as a count of "
                               "requests (digits only); a damaged or edited export")
        if m:
            if len(m.group(1)) > 10 or int(m.group(1)) > MAX_BATCH:
                raise CaptureError(f"batch range {text[:60]!r}: a batch size beyond {MAX_BATCH} requests; "
                                   "a damaged or edited export")
            size[i] = int(m.group(1))
    return size[codes]


@dataclass
class Stages:
    """Batches and stage instances of one capture, plus what was dropped and why."""

    config: StageConfig
    batches: Table                   # start, end, gtid, size, rid (`rid=` text, "" when none)
    instances: Table                 # code (index into config.stages), stage, start, end, gtid, batch (-1: none)
    cut: dict[str, int] = field(default_factory=dict)         # name -> ranges cut at the edges
    cross_thread: int = 0
    outside_batch: int = 0           # stage instances outside every batch range, when there are batches
    requests_source: str | None = None
    requests_override: int | None = None
    replicas: Table | None = None     # batches of replica ranks (clef_prof.analyze.figures.ranks), not counted
    rank_lead: dict[int, int] = field(default_factory=dict)   # pid key (gtid >> 24) -> its first rank's
    duplicates: int = 0              # ranges repeated exactly (thread, start, end, name): counted once
    reversed: int = 0                # ranges that end before they start: dropped
    nested: int = 0                  # batch ranges inside another batch range of their thread: not counted
    crossing: int = 0                # stage ranges with one end inside a batch range of their thread, one outside

    @property
    def requests(self) -> int | None:
        if self.requests_override is not None:
            return int(self.requests_override)
        if self.requests_source is None:
            return None
        return int(self.batches["size"].sum())

    def drop_batches(self, mask: np.ndarray) -> "Stages":
        """A copy without the masked batches and the stage instances inside them."""
        keep = ~np.asarray(mask, dtype=bool)
        remap = np.full(len(self.batches) + 1, -1, dtype=np.int64)
        remap[:-1][keep] = np.arange(int(keep.sum()))
        b = self.instances["batch"]
        inst = self.instances[(b < 0) | keep[np.maximum(b, 0)]]
        inst["batch"] = remap[inst["batch"]]
        return Stages(self.config, self.batches[keep], inst,
                      dict(self.cut), self.cross_thread, self.outside_batch, self.requests_source,
                      self.requests_override, self.replicas, dict(self.rank_lead), self.duplicates,
                      self.reversed, self.nested, self.crossing)


class _Names:
    """Range names factorized once, so that each match is decided per distinct name."""

    def __init__(self, names: np.ndarray):
        self.uniq, self.codes = factorize(names)

    def match(self, wanted: str) -> np.ndarray:
        if len(self.codes) == 0:
            return np.zeros(0, dtype=bool)
        hit = np.array([u == wanted or u.startswith(wanted + " ") for u in self.uniq], dtype=bool)
        return hit[self.codes]


def build(cap: Export, config: StageConfig, requests_override: int | None = None) -> Stages:
    r = read_ranges(cap, config.domain, [config.batch, *config.stages], [config.batch, *config.stages])
    names = _Names(r.name)
    r, duplicates = _dedupe(r, names)
    names = _Names(r.name)
    end_of_session = cap.duration_ns
    reversed_ = (r.end < r.start) & (r.end >= 0)       # NULL end (read -1): unclosed, cut below
    cut_mask = (r.end < 0) | reversed_
    if end_of_session is not None:
        cut_mask |= r.end >= end_of_session
    cut: dict[str, int] = {}

    is_batch = names.match(config.batch)
    stage_code = np.full(len(r), -1, dtype=np.int64)
    for code, name in enumerate(config.stages):
        stage_code[names.match(name) & ~is_batch] = code

    # a range with no end (open at the capture end, or damaged) is cut, and holds no other
    nested = np.zeros(len(r), dtype=bool)
    whole = is_batch & ~reversed_ & (r.end >= 0)
    nested[whole] = nested_ranges(r.take(whole), names.codes[whole])
    cut_mask &= ~nested         # a nested range is counted as nested; its outermost one may be cut
    open_ = cut_mask & ~reversed_
    _count_cut(cut, np.where(is_batch, len(config.stages), stage_code)[open_], [*config.stages, config.batch])
    b = r.take(is_batch & ~cut_mask & ~nested)
    size = batch_size_from_message(b.name)
    source = "message n=K"
    if len(b) and (size < 0).any():
        if (b.payload > 0).all():
            size, source = b.payload.astype(np.int64), "payload"
        else:
            source = None
    elif len(b) == 0:
        source = None
    if requests_override is not None:
        source = "--requests"
    order = np.lexsort((b.gtid, b.start))
    batches = Table(start=b.start, end=b.end, gtid=b.gtid, size=np.where(size < 0, 0, size),
                    rid=rid_keys(b.name))[order]

    s_mask = (stage_code >= 0) & ~cut_mask
    s = r.take(s_mask)
    codes = stage_code[s_mask]
    bidx = innermost_containing(batches["gtid"], batches["start"], batches["end"], s.gtid, s.start, s.end)
    # a stage inside a batch range cut at the capture end goes with its batch
    cb = is_batch & cut_mask & ~reversed_ & ~nested
    in_cut = innermost_containing(r.gtid[cb], r.start[cb], np.full(int(cb.sum()), np.iinfo(np.int64).max),
                                  s.gtid, s.start, s.end) >= 0
    edge = (bidx < 0) & in_cut
    # nsys records nothing of a range already open when the capture starts, but the ranges nested
    # in it that begin later: a stage on a batch thread that ends before the thread's first batch
    # range is the rest of a batch cut by the capture's start, and goes the same way
    if len(batches):
        bg = batches["gtid"]
        order = np.lexsort((batches["start"], bg))
        g_sorted, first_at = bg[order], np.r_[True, bg[order][1:] != bg[order][:-1]]
        threads, firsts = g_sorted[first_at], batches["start"][order][first_at]
        k = np.minimum(np.searchsorted(threads, s.gtid), max(len(threads) - 1, 0))
        on_batch_thread = threads[k] == s.gtid
        edge |= (bidx < 0) & on_batch_thread & (s.end <= firsts[k])
    _count_cut(cut, codes[edge], config.stages)
    keep = ~edge
    instances = Table(code=codes[keep], stage=np.array(config.stages, dtype=object)[codes[keep]],
                      start=s.start[keep], end=s.end[keep], gtid=s.gtid[keep], batch=bidx[keep])
    outside = int((bidx[keep] < 0).sum()) if len(batches) else 0
    crossing = 0
    if len(batches):        # outside every batch, yet starting or ending inside one: nesting broken
        lone = keep & (bidx < 0)
        g, t0, t1 = s.gtid[lone], s.start[lone] + 1, s.end[lone] - 1      # one ns in: touching is not crossing
        bb = (batches["gtid"], batches["start"], batches["end"])
        crossing = int(((innermost_containing(*bb, g, t0, t0) >= 0) | (innermost_containing(*bb, g, t1, t1) >= 0)).sum())
    return Stages(config=config, batches=batches, instances=instances, cut=cut,
                  cross_thread=int(r.cross_thread.sum()), outside_batch=outside,
                  requests_source=source, requests_override=requests_override, duplicates=duplicates,
                  reversed=int(reversed_.sum()), nested=int(nested.sum()), crossing=crossing)


def nested_ranges(r, name_codes: np.ndarray) -> np.ndarray:
    """Which ranges lie inside an earlier-starting (or equal, longer) range of the same thread:
    push/pop ranges inside any range of the thread, start/end ranges inside a range of the same
    thread and name. Of two with the same start and end, the first (in `r`'s order) holds the other."""
    n = len(r)
    if n < 2:
        return np.zeros(n, dtype=bool)
    end = r.end
    _, thread = np.unique(r.gtid, return_inverse=True)
    _, same_name = np.unique(thread.astype(np.int64) * (int(name_codes.max()) + 1) + name_codes, return_inverse=True)
    return np.where(r.push_pop, _inside(thread, r.start, end), _inside(same_name, r.start, end))


def _inside(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per interval: is it inside another interval of the same key that starts earlier (or at the
    same time and ends later or at the same time, sorted first)? By key, start and longest first,
    an interval is inside when its end is at most the furthest end before it in its key: the
    dense rank of the end is packed with the key rank into one int64, so one running maximum
    over all keys does it."""
    _, end_rank = np.unique(end, return_inverse=True)
    span = int(end_rank.max()) + 1
    order = np.lexsort((-end_rank, start, key))
    packed = key[order].astype(np.int64) * span + end_rank[order]
    before = np.r_[-1, np.maximum.accumulate(packed)[:-1]]
    out = np.empty(len(key), dtype=bool)
    out[order] = before >= packed
    return out


def _count_cut(cut: dict[str, int], codes: np.ndarray, labels) -> None:
    """Add the cut ranges of each label code to cut[labels[code]]; labels not yet in `cut`
    go in the order of their first range (the order the warning names them in)."""
    uniq, first, counts = np.unique(codes, return_index=True, return_counts=True)
    for j in np.argsort(first):
        name = labels[uniq[j]]
        cut[name] = cut.get(name, 0) + int(counts[j])


def _dedupe(r, names: _Names):
    """Ranges without exact repeats (same thread, start, end and name: a duplicated row), and
    how many repeats there were."""
    if len(r) < 2:
        return r, 0
    order = np.lexsort((names.codes, r.end, r.start, r.gtid))
    keys = (r.gtid[order], r.start[order], r.end[order], names.codes[order])
    same = np.ones(len(r) - 1, dtype=bool)
    for k in keys:
        same &= k[1:] == k[:-1]
    if not same.any():
        return r, 0
    keep = np.ones(len(r), dtype=bool)
    keep[order[1:][same]] = False
    return r.take(keep), int(same.sum())


def lost_tail(stages: Stages, cuda_last_end: int | None) -> tuple[Stages, tuple[int, int, int] | None]:
    """Drop batches that start after the last CUDA record (the CUDA stream was lost or killed),
    and once loss is evident the batch cut by that record too: (stages kept, (the last CUDA
    record's end, the last batch's end, batches dropped) or None when nothing was lost)."""
    b = stages.batches
    if cuda_last_end is None or len(b) == 0:
        return stages, None
    silent = b["start"] > cuda_last_end
    if not silent.any() or silent.all():
        return stages, None
    late = b["end"] > cuda_last_end
    return stages.drop_batches(late), (int(cuda_last_end), int(b["end"].max()), int(late.sum()))
