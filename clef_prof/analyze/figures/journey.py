"""Per-request journeys: each request range (`request rid=ID`), joined by id to its enqueue mark
(`enqueued rid=ID`) and to the batch range whose `rid=` list names it, and on its own thread to
the `encode` range it ends with, cut into segments that sum to its end-to-end span exactly.

The points of a journey, in time order: handler entry R0, enqueue E, batch start B0 and end B1,
encode start C0 and end C1, handler exit R1. The segments between them:

    receive      R0 -> E        handler entry to enqueue (body read, JSON parse)
    queue        E  -> B0       waiting for the batcher
    batch        B0 -> B1       its batch's whole span (split further by the batch's stages)
    after_batch  B1 -> C0       batch end to the start of its own encode
    encode       C0 -> C1       its `encode` range outside every batch range
    send         C1 -> R1       encode end (batch end when it has no encode of its own) to exit
    unattributed                end-to-end minus all of the above

A segment counts only when both its points are known; what lies between known points that no
segment names (no enqueue mark: R0 -> B0; no batch: E -> C0 or E -> R1) is `unattributed`.
Points are put in order inside [R0, R1] first (a point before the one it follows is moved up to
it and the journey counted `out_of_order`), so every segment is >= 0 and they close exactly.

Matching: every id a batch names (a row) belongs to the request of that id whose range holds the
batch's start (the latest of the id to start at or before it); the batch of a request is the batch
of its last row (a request of several rows, several prompts or a prompt over several steps, is
done when its last row is; its queue holds the batches of its earlier rows); its enqueue mark, the
first mark of its id in [R0, R1]; its encode, the last
`encode` range outside every batch on the request range's thread that ends by R1 and starts at or
after B1 (or E, or R0). For a coroutine handler that does not `await` between its encode and its
return, that is its own encode even with other requests interleaved on the loop's thread.

Tensor-parallel ranks run every batch in each rank's process, with the same ids; analyze keeps the
first rank's batches (clef_prof.analyze.figures.ranks) and the others' are its replicas. A replica batch is
the twin of the first rank's batch with the same id list nearest in start; a request's batch then
runs from the earliest start of its batch on any rank to the latest end (the union of the twins'
spans): the batch is underway once one rank has started it, and the front end that gathers every
rank's answer waits for the last. The replicas' ids are counted once, with the first rank's (a
replica batch with no twin has its ids counted unclaimed).

A server that renames ids on their way to the engine (vLLM: the API server's `<id>` becomes
`embd-<id>-<n>-<8 hex>`, one per prompt) is joined by a pattern (a spec's
`[request].engine_id_pattern`): a row's or a mark's id that matches it in full stands for its one
group; ids that do not match are taken as they are.

Everything here is a pure function over NumPy arrays; `read` (the SQL) is at the edge.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from .arrays import percentile
from ..read.columns import Table, factorize
from ..read.export import Export

SEGMENTS = ("receive", "queue", "batch", "after_batch", "encode", "send", "unattributed")
REQUEST = "request"             # clef_prof.annotate.api.REQUEST (not imported: annotate is a layer above)
ENQUEUED = "enqueued"
ENCODE = "encode"               # the stage whose range outside every batch is a request's own encode
RID_CHARS = 65536               # a batch message's rid= list is read up to this many characters (cut past it)
LISTED = 20                     # ids listed per kind of mismatch (all are counted)
TAIL_PCT = 99.0                 # the tail: requests at or above this percentile of end-to-end
_NONE = -1


@dataclass
class Inputs:
    """What a journey needs from the capture, as columns.

    requests: start, end (-1 when open), gtid, rid. marks: time, gtid, rid. batches: start, end,
    gtid, size, rids (the `rid=` text, "" when none; analyze's kept batches, in their order).
    encodes: start, end, gtid (the `encode` stage outside every batch range)."""

    requests: Table
    marks: Table
    batches: Table
    encodes: Table
    session_end: int | None = None
    engine_id_pattern: str | None = None
    replicas: Table | None = None       # replica ranks' batches: start, end, gtid, lead (first rank's pid key), rids
    duplicate_requests: int = 0         # request ranges that repeated another exactly: counted once
    duplicate_marks: int = 0            # enqueue marks that repeated another exactly: counted once


def read(cap: Export, domain: str, batch_name: str, batches: Table, encodes: Table,
         engine_id_pattern: str | None = None, replicas: Table | None = None) -> Inputs | None:
    """The request ranges, enqueue marks and full batch rid lists of `domain` (None without request
    ranges). `batches` are analyze's kept batches (start, end, gtid, size); their messages are read
    again here with up to RID_CHARS characters, so long id lists are whole (a longer one is cut:
    `_whole_ids`). `replicas`: the batches of replica ranks (start, end, gtid, lead), read alike."""
    from ..read.nvtx import MARK_TYPES, read_ids, read_ranges
    from .ranks import rid_keys

    if len(read_ranges(cap, domain, [], [REQUEST], probe=True)) == 0:
        return None
    r, raw = read_ids(cap, domain, REQUEST)
    requests = Table(start=r["start"], end=r["end"], gtid=r["gtid"], rid=_ids_of(r["id"], raw, rid_keys))
    requests, dup_requests = _once(requests, ("gtid", "start", "end", "rid"))
    requests = requests[np.lexsort((requests["gtid"], requests["start"]))]
    m, raw = read_ids(cap, domain, ENQUEUED, MARK_TYPES)
    marks, dup_marks = _once(Table(time=m["start"], gtid=m["gtid"], rid=_ids_of(m["id"], raw, rid_keys)),
                             ("gtid", "time", "rid"))
    rids = np.full(len(batches), "", dtype=object)
    reps = None
    if len(batches):
        full = read_ranges(cap, domain, [], [batch_name], chars=RID_CHARS + 1)
        keys = _whole_ids(full.name, rid_keys(full.name))
        rids = _align(batches, full.start, full.end, full.gtid, keys)
        if replicas is not None and len(replicas):
            reps = Table(start=replicas["start"], end=replicas["end"], gtid=replicas["gtid"], lead=replicas["lead"],
                         rids=_align(replicas, full.start, full.end, full.gtid, keys))
    b = Table(start=batches["start"], end=batches["end"], gtid=batches["gtid"], size=batches["size"], rids=rids)
    return Inputs(requests, marks, b, encodes, cap.duration_ns, engine_id_pattern, reps, dup_requests, dup_marks)


def _once(t: Table, keys: tuple[str, ...]) -> tuple[Table, int]:
    """`t` with rows that repeat another in every one of `keys` (a merged or re-exported trace's
    duplicated rows) kept once, and how many were dropped."""
    if len(t) < 2:
        return t, 0
    codes = [factorize(t[k])[1] if t[k].dtype == object else t[k] for k in keys]
    order = np.lexsort(codes[::-1])
    same = np.ones(len(t) - 1, dtype=bool)
    for c in codes:
        same &= c[order][1:] == c[order][:-1]
    if not same.any():
        return t, 0
    keep = np.ones(len(t), dtype=bool)
    keep[order[1:][same]] = False
    return t[keep], int(same.sum())


def _ids_of(ids: np.ndarray, raw: np.ndarray, keys) -> np.ndarray:
    """The ids read_ids cut out in SQL, and `keys` (ranks.rid_keys) of the other rows' messages."""
    other = np.flatnonzero(raw != "")
    if len(other):
        ids[other] = keys(raw[other])
    return ids


def _whole_ids(names: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The rid= lists of batch messages read with RID_CHARS + 1 characters: a list that runs past
    RID_CHARS was cut by the read, so its last id may be partial; it is dropped and the list marked
    cut (`...`), as a server marks a list it cut itself, rather than read as another id."""
    long = np.flatnonzero(np.fromiter(map(len, names), np.int64, len(names)) > RID_CHARS)
    for i in long:
        if keys[i] and str(names[i]).endswith(keys[i]):
            keys[i] = keys[i].rpartition(",")[0] + ",..." if "," in keys[i] else "..."
    return keys


def _align(batches: Table, start, end, gtid, values) -> np.ndarray:
    """`values` of the ranges (start, end, gtid) placed on the rows of `batches` with the same
    three; "" where none matches."""
    out = np.full(len(batches), "", dtype=object)
    if len(start) == 0:
        return out
    keys = np.stack([gtid, start, end], axis=1)
    want = np.stack([batches["gtid"], batches["start"], batches["end"]], axis=1)
    order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
    ks = keys[order]
    kv = ks.view([("g", np.int64), ("s", np.int64), ("e", np.int64)]).ravel()
    wv = np.ascontiguousarray(want).view([("g", np.int64), ("s", np.int64), ("e", np.int64)]).ravel()
    i = np.minimum(np.searchsorted(kv, wv), len(kv) - 1)
    hit = kv[i] == wv
    out[hit] = np.asarray(values, dtype=object)[order][i[hit]]
    return out


def claims(rids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch index, request id) of every id named in the batches' `rid=` texts, and whether each
    batch's list was cut (it ends in `...`)."""
    rids = np.asarray(rids, dtype=object)
    has = np.flatnonzero(rids != "")
    if len(has) == 0:
        return np.zeros(0, np.int64), np.zeros(0, dtype=object), np.zeros(len(rids), bool)
    texts = rids[has]
    counts = np.fromiter((t.count(",") + 1 for t in texts), dtype=np.int64, count=len(texts))
    ids = np.array(",".join(texts).split(","), dtype=object)
    batch = np.repeat(has, counts)
    keep = (ids != "...") & (ids != "")
    cut = np.zeros(len(rids), bool)
    cut[batch[ids == "..."]] = True
    return batch[keep], ids[keep], cut


def request_ids(ids: np.ndarray, pattern: str | None) -> tuple[np.ndarray, int]:
    """The request id each engine id stands for (the pattern's group where it matches in full, the
    id itself elsewhere), and how many ids matched; once per distinct id."""
    ids = np.asarray(ids, dtype=object)
    if pattern is None or len(ids) == 0:
        return ids, 0
    match = re.compile(pattern).fullmatch
    uniq, codes = factorize(ids)
    groups = [m.group(1) if (m := match(u)) else None for u in uniq]
    matched = np.array([bool(g) for g in groups], dtype=bool)       # a group left empty is no id
    mapped = np.array([g if g else u for g, u in zip(groups, uniq)], dtype=object)
    return mapped[codes], int(matched[codes].sum())


def _ranked_keys(key_code, key_t, code, t) -> tuple[np.ndarray, np.ndarray]:
    """(code, time) of the sorted keys and of the queries as one int64 each: times ranked
    together first, so the composite key never overflows and keeps the keys' order."""
    _, inv = np.unique(np.concatenate([key_t, t]), return_inverse=True)
    width = int(inv.max()) + 2
    return key_code.astype(np.int64) * width + inv[:len(key_t)], code.astype(np.int64) * width + inv[len(key_t):]


def _first_at_or_after(key_code, key_t, code, t) -> np.ndarray:
    """For each (code, t), the index into the sorted (key_code, key_t) arrays of the first entry
    with the same code and key_t >= t; -1 when none."""
    if len(key_code) == 0 or len(code) == 0:
        return np.full(len(code), _NONE, np.int64)
    kk, qq = _ranked_keys(key_code, key_t, code, t)
    j = np.searchsorted(kk, qq, side="left")
    ok = (j < len(kk))
    jj = np.minimum(j, len(kk) - 1)
    ok &= key_code[jj] == code
    return np.where(ok, jj, _NONE)


def _last_at_or_before(key_code, key_t, code, t) -> np.ndarray:
    """For each (code, t), the index of the last sorted entry with the same code and key_t <= t."""
    if len(key_code) == 0 or len(code) == 0:
        return np.full(len(code), _NONE, np.int64)
    kk, qq = _ranked_keys(key_code, key_t, code, t)
    j = np.searchsorted(kk, qq, side="right") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (key_code[jj] == code)
    return np.where(ok, jj, _NONE)


def twins(batches: Table, replicas: Table) -> np.ndarray:
    """For each replica batch, the index of its twin among `batches` (the first rank's): the batch
    of its first rank (`lead` = the batch's gtid >> 24) with the same id list whose start is nearest;
    -1 when none (or the replica names no ids)."""
    if len(replicas) == 0 or len(batches) == 0:
        return np.full(len(replicas), _NONE, np.int64)
    n = len(batches)
    pk = np.concatenate([batches["gtid"].astype(np.int64) >> 24, replicas["lead"].astype(np.int64)])
    texts = np.concatenate([batches["rids"], replicas["rids"]]).astype(object)
    _, tcode = factorize(texts)
    _, code = np.unique(np.stack([pk, tcode], axis=1), axis=0, return_inverse=True)
    code = code.ravel().astype(np.int64)
    bs, rs = batches["start"].astype(np.int64), replicas["start"].astype(np.int64)
    order = np.lexsort((bs, code[:n]))
    kc, kt = code[:n][order], bs[order]
    before = _last_at_or_before(kc, kt, code[n:], rs)
    after = _first_at_or_after(kc, kt, code[n:], rs)
    gap_b = np.where(before >= 0, rs - kt[np.maximum(before, 0)], np.iinfo(np.int64).max)
    gap_a = np.where(after >= 0, kt[np.maximum(after, 0)] - rs, np.iinfo(np.int64).max)
    pick = np.where(gap_a < gap_b, after, before)
    out = np.where(pick >= 0, order[np.maximum(pick, 0)], _NONE)
    return np.where(replicas["rids"] != "", out, _NONE).astype(np.int64)


def journeys(inp: Inputs) -> tuple[Table, dict]:
    """One row per request range, and what did not meet (`meta`).

    Columns: rid, gtid, start, end, cut (the range is open at the capture's end, or `reversed`: it
    ends before it starts, a damaged row; either way in no figure), reversed, enqueue, batch
    (index into the batches, -1: none), batch_size, batch_rows (the rows of batches it took: its
    prompts, or steps), batch_start, batch_end, encode_start, encode_end (-1 where absent),
    out_of_order, e2e_ns, other_ranks_ns (the batch segment outside its first rank's span: 0 without
    replica ranks) and one `<segment>_ns` per SEGMENTS (0 for a cut request). meta: claims (ids named
    by batches), unclaimed (claim indices no request took), claim_rid (as the batches name them),
    rid_cut_batches (batches whose id list was cut), duplicate_requests/_marks (exact repeats dropped
    at `read`), renamed (claims the engine id pattern matched),
    replica_claims (ids named by replica ranks' batches with a twin, counted with it), ranks (whether
    the batches have replica ranks)."""
    q, mk, enc = inp.requests, inp.marks, inp.encodes
    b, reps = _rank_union(inp.batches, inp.replicas)
    n = len(q)
    r0, r1 = q["start"].astype(np.int64), q["end"].astype(np.int64)
    reversed_ = (r1 < r0) & (r1 >= 0)           # a damaged row; an open range reads end -1
    open_ = (r1 < 0) & ~reversed_
    if inp.session_end is not None:
        open_ |= r1 >= inp.session_end
    cut = open_ | reversed_
    r1c = np.where(cut, r0, r1)

    c_batch, c_rid, rid_cut = claims(b["rids"])
    lone = claims(reps["rids"][reps["twin"] < 0])[1] if reps is not None else np.zeros(0, dtype=object)
    c_req, renamed = request_ids(c_rid, inp.engine_id_pattern)
    m_req, _ = request_ids(mk["rid"], inp.engine_id_pattern)
    # ids as codes of the request ranges' distinct ids; a mark's or a row's id that no request
    # range has is -1 (it meets none)
    index = dict(zip(dict.fromkeys(q["rid"]), itertools.count()))
    q_code = np.fromiter(map(index.__getitem__, q["rid"]), np.int64, n)
    m_code = np.fromiter(map(index.get, m_req, itertools.repeat(_NONE)), np.int64, len(m_req))
    c_code = np.fromiter(map(index.get, c_req, itertools.repeat(_NONE)), np.int64, len(c_req))
    del index

    # each row (claim) to the request of its id whose range holds its batch's start: the latest of
    # the id to start at or before it, not cut, ending at or after it
    c_start = b["start"][c_batch] if len(c_batch) else np.zeros(0, np.int64)
    order_q = np.lexsort((r0, q_code))
    j = _last_at_or_before(q_code[order_q], r0[order_q], c_code, c_start)
    owner = np.where(j >= 0, order_q[np.maximum(j, 0)], _NONE) if n else np.full(len(c_batch), _NONE)
    ow = np.maximum(owner, 0)
    used = (owner >= 0) & ~cut[ow] & (c_start <= r1c[ow]) if n else np.zeros(len(c_batch), bool)
    rows = np.bincount(owner[used], minlength=n).astype(np.int64)
    # a request's batch: that of its last row (by batch start)
    u = np.flatnonzero(used)
    u = u[np.lexsort((c_start[u], owner[u]))]
    last = u[np.r_[owner[u][1:] != owner[u][:-1], True]] if len(u) else u
    bidx = np.full(n, _NONE, np.int64)
    bidx[owner[last]] = c_batch[last]
    has_b = bidx >= 0
    b0 = np.where(has_b, b["start"][np.maximum(bidx, 0)] if len(b) else 0, _NONE)
    b1 = np.where(has_b, b["end"][np.maximum(bidx, 0)] if len(b) else 0, _NONE)

    # the enqueue mark: first of the id in [R0, R1]
    m_t = mk["time"].astype(np.int64)
    order_m = np.lexsort((m_t, m_code))
    k = _first_at_or_after(m_code[order_m], m_t[order_m], q_code, r0)
    e = np.where(k >= 0, m_t[order_m][np.maximum(k, 0)] if len(m_t) else 0, _NONE)
    has_e = (k >= 0) & (e <= r1c) & ~cut
    e = np.where(has_e, e, _NONE)

    # the encode: last encode range on the request's thread ending by R1, starting after B1 / E / R0
    ge, es, ee = enc["gtid"].astype(np.int64), enc["start"].astype(np.int64), enc["end"].astype(np.int64)
    threads, g_code = np.unique(np.concatenate([ge, q["gtid"].astype(np.int64)]), return_inverse=True)
    order_c = np.lexsort((ee, g_code[:len(ge)]))
    h = _last_at_or_before(g_code[:len(ge)][order_c], ee[order_c], g_code[len(ge):], r1c)
    hh = order_c[np.maximum(h, 0)] if len(ge) else np.zeros(n, np.int64)
    c0 = np.where(h >= 0, es[hh] if len(es) else 0, _NONE)
    c1 = np.where(h >= 0, ee[hh] if len(ee) else 0, _NONE)
    floor = np.where(has_b, b1, np.where(has_e, e, r0))
    has_c = (h >= 0) & (c0 >= floor) & ~cut
    c0, c1 = np.where(has_c, c0, _NONE), np.where(has_c, c1, _NONE)

    seg, ooo = segments(r0, r1c, e, has_e, b0, b1, has_b, c0, c1, has_c)
    for s in seg.values():
        s[cut] = 0
    size = np.where(has_b, b["size"][np.maximum(bidx, 0)] if len(b) else 0, 0).astype(np.int64)
    own = b["own_end"] - b["own_start"]
    other = np.where(has_b & ~cut, seg["batch"] - (own[np.maximum(bidx, 0)] if len(b) else 0), 0)
    t = Table(rid=q["rid"], gtid=q["gtid"], start=r0, end=r1, cut=cut, reversed=reversed_, enqueue=e, batch=bidx.astype(np.int64),
              batch_size=size, batch_rows=rows, batch_start=b0, batch_end=b1, encode_start=c0, encode_end=c1,
              out_of_order=ooo & ~cut, e2e_ns=np.where(cut, 0, r1c - r0), other_ranks_ns=np.maximum(other, 0),
              **{f"{s}_ns": v for s, v in seg.items()})
    meta = {"claims": len(c_batch) + len(lone),
            "unclaimed": np.r_[np.flatnonzero(~used), len(c_batch) + np.arange(len(lone))].astype(np.int64),
            "claim_rid": np.concatenate([c_rid, lone]).astype(object), "rid_cut_batches": int(rid_cut.sum()),
            "renamed": renamed, "ranks": reps is not None, "duplicate_requests": inp.duplicate_requests,
            "duplicate_marks": inp.duplicate_marks,
            "replica_claims": len(claims(reps["rids"][reps["twin"] >= 0])[1]) if reps is not None else 0}
    return t, meta


def _rank_union(batches: Table, replicas: Table | None) -> tuple[Table, Table | None]:
    """`batches` with own_start/own_end (their own span) and start/end widened to the union with
    their replica twins' spans; the replicas with their `twin` (None without replicas)."""
    b = batches.assign(own_start=batches["start"].astype(np.int64), own_end=batches["end"].astype(np.int64))
    if replicas is None or len(replicas) == 0:
        return b, None
    tw = twins(batches, replicas)
    ok = tw >= 0
    start, end = b["own_start"].copy(), b["own_end"].copy()
    np.minimum.at(start, tw[ok], replicas["start"].astype(np.int64)[ok])
    np.maximum.at(end, tw[ok], replicas["end"].astype(np.int64)[ok])
    return b.assign(start=start, end=end), replicas.assign(twin=tw)


def segments(r0, r1, e, has_e, b0, b1, has_b, c0, c1, has_c) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The segments (ns) of journeys with the given points (-1 and has_* False where absent), and
    which journeys had a point out of order (moved up to the point before it). Points are put in
    order one column at a time (the running maximum of the points so far, capped at R1): a few
    arrays of one column each at a time, not a table of all seven."""
    lo = np.iinfo(np.int64).min
    R0 = np.minimum(r0, r1)
    ooo = R0 != r0
    run = r0.astype(np.int64, copy=True)
    fixed = []
    for p, has in ((e, has_e), (b0, has_b), (b1, has_b), (c0, has_c), (c1, has_c)):
        np.maximum(run, np.where(has, p, lo), out=run)
        f = np.minimum(run, r1)
        ooo |= has & (f != p)
        fixed.append(f)
    del run
    E, B0, B1, C0, C1 = fixed
    R1 = r1
    seg = {
        "receive": np.where(has_e, E - R0, 0),
        "queue": np.where(has_e & has_b, B0 - E, 0),
        "batch": np.where(has_b, B1 - B0, 0),
        "after_batch": np.where(has_b & has_c, C0 - B1, 0),
        "encode": np.where(has_c, C1 - C0, 0),
        "send": np.where(has_c, R1 - C1, np.where(has_b, R1 - B1, 0)),
    }
    seg["unattributed"] = (R1 - R0) - sum(seg.values())
    return {k: v.astype(np.int64, copy=False) for k, v in seg.items()}, ooo


def complete(t: Table) -> np.ndarray:
    """The journeys the figures are over: not cut by the window, with a batch."""
    return ~t["cut"] & (t["batch"] >= 0)


def stats(values_ns: np.ndarray, e2e_ns: np.ndarray) -> dict[str, float | None]:
    """mean/p50/p99 (ms) of one segment across requests, and its share (%) of their summed
    end-to-end (None for no requests)."""
    if len(values_ns) == 0:
        return {"mean_ms": None, "p50_ms": None, "p99_ms": None, "share_pct": None}
    total = float(e2e_ns.sum())
    return {"mean_ms": float(values_ns.mean()) / 1e6, "p50_ms": percentile(values_ns, 50) / 1e6,
            "p99_ms": percentile(values_ns, 99) / 1e6,
            "share_pct": 100.0 * float(values_ns.sum()) / total if total > 0 else None}


def tail(e2e_ns: np.ndarray, pct: float = TAIL_PCT) -> np.ndarray:
    """The requests at or above the `pct` percentile of end-to-end latency (a mask)."""
    if len(e2e_ns) == 0:
        return np.zeros(0, bool)
    return e2e_ns >= percentile(e2e_ns, pct)


def batch_stage_ns(t: Table, stage_ns: dict[str, np.ndarray], ranks: bool = False) -> dict[str, np.ndarray]:
    """Each request's batch segment split by its batch's stages (the stages' host ns in that batch,
    on its first rank), `(no stage)`, the rest of the first rank's span, and with replica ranks
    `(other ranks)`, the part of the union of the ranks' spans outside the first rank's: one column
    per name, 0 for requests without a batch."""
    b = t["batch"]
    ok = b >= 0
    out = {}
    for name, per_batch in stage_ns.items():
        v = np.asarray(per_batch, dtype=np.int64)
        out[name] = np.where(ok, v[np.maximum(b, 0)] if len(v) else 0, 0)
    other = t["other_ranks_ns"] if ranks else 0
    out["(no stage)"] = t["batch_ns"] - other - (sum(out.values()) if out else 0)
    if ranks:
        out["(other ranks)"] = other
    return out


def _ids(values: np.ndarray) -> list[str]:
    return [str(v) for v in values[:LISTED]]


def figures(t: Table, meta: dict, stage_ns: dict[str, np.ndarray], tail_pct: float = TAIL_PCT):
    """The typed journey part of analyze's result (model.Journey) from `journeys`' table and meta,
    and each batch's host ns per stage (`stage_ns`, aligned with the batches)."""
    from ..model import Journey, SegmentFigures

    ok = complete(t)
    e2e = t["e2e_ns"][ok]
    tl = tail(e2e, tail_pct)

    def seg(v: np.ndarray) -> SegmentFigures:
        f = stats(v[ok], e2e)
        if len(e2e):
            f2 = stats(v[ok][tl], e2e[tl])
            f.update(tail_mean_ms=f2["mean_ms"], tail_share_pct=f2["share_pct"])
        return SegmentFigures(**f)

    e = stats(e2e, e2e)
    rev = t["reversed"]
    cut, nob = t["cut"] & ~rev, ~t["cut"] & (t["batch"] < 0)
    unclaimed = meta["unclaimed"]
    return Journey(
        request_ranges=len(t), complete=int(ok.sum()), cut_by_window=int(cut.sum()), without_batch=int(nob.sum()),
        without_enqueue=int((ok & (t["enqueue"] < 0)).sum()), without_encode=int((ok & (t["encode_start"] < 0)).sum()),
        out_of_order=int((ok & t["out_of_order"]).sum()), batch_ids=int(meta["claims"]),
        unclaimed_batch_ids=int(len(unclaimed)), batches_with_cut_ids=int(meta["rid_cut_batches"]),
        tail_requests=int(tl.sum()), renamed_batch_ids=int(meta.get("renamed", 0)), e2e_ms_mean=e["mean_ms"], e2e_ms_p50=e["p50_ms"], e2e_ms_p99=e["p99_ms"],
        segments={s: seg(t[f"{s}_ns"]) for s in SEGMENTS},
        batch_stages={k: seg(v) for k, v in batch_stage_ns(t, stage_ns, meta.get("ranks", False)).items()},
        replica_batch_ids=int(meta.get("replica_claims", 0)), reversed=int(rev.sum()),
        duplicate_requests=int(meta.get("duplicate_requests", 0)), duplicate_marks=int(meta.get("duplicate_marks", 0)),
        listed={"cut_by_window": _ids(t["rid"][cut]), "reversed": _ids(t["rid"][rev]), "without_batch": _ids(t["rid"][nob]),
                "unclaimed_batch_ids": _ids(meta["claim_rid"][unclaimed])})


SELECT_WORDS = ("all", "complete", "p50", "p99", "tail")


def select(t: Table, which: str, tail_pct: float = TAIL_PCT) -> np.ndarray:
    """Row indices of the journeys named by `which`: `all`; `complete`; `p50` (the complete journey
    whose end-to-end is nearest the median); `p99`/`tail` (the complete journeys at or above the p99
    of end-to-end); or comma-separated words and request ids (their union, in start order). An id
    that names no request range raises ValueError."""
    from .arrays import percentile

    ok = complete(t)
    idx = np.flatnonzero(ok)
    e2e = t["e2e_ns"]
    out = np.zeros(len(t), bool)
    ids = []
    for w in (p.strip() for p in which.split(",")):
        if not w:
            continue
        if w == "all":
            out[:] = True
        elif w == "complete":
            out |= ok
        elif w == "p50" and len(idx):
            med = percentile(e2e[idx], 50)
            out[idx[np.argmin(np.abs(e2e[idx] - med))]] = True
        elif w in ("p99", "tail") and len(idx):
            out[idx[tail(e2e[idx], tail_pct)]] = True
        elif w not in SELECT_WORDS:
            ids.append(w)
    if ids:
        hit = np.isin(t["rid"].astype(str), ids)
        missing = sorted(set(ids) - set(t["rid"][hit].astype(str)))
        if missing:
            raise ValueError(f"no request range has the id {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''}")
        out |= hit
    return np.flatnonzero(out)
