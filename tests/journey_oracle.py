"""An independent by-hand computation of request journeys from an export's SQL rows, for tests.

Written from the definitions in docs/journey.md, one request at a time in plain Python (no code of
clef_prof.analyze): the request ranges, enqueue marks, batch ranges and encode ranges of domain
`clef` are read with their own SQL, and each request's points are looked up by scanning the rows.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field


@dataclass
class Oracle:
    requests: dict = field(default_factory=dict)     # (gtid, start) -> dict of points and segments
    cut: list = field(default_factory=list)           # ids of request ranges open at the end
    claims: list = field(default_factory=list)        # (batch start, rid) of every id a batch names
    unclaimed: set = field(default_factory=set)       # ids no request range took
    taken: set = field(default_factory=set)           # (batch start, rid as named) of the claims requests took
    replica_claims: int = 0                           # ids named by other ranks' batches twinned with the first's


def _text(con) -> str:
    """SQL for a row's message (registered string or ASCII text)."""
    has = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
    return "COALESCE(s.value, e.text)" if "textId" in has else "e.text"


def compute(path, domain: str = "clef", batch: str = "pooler", engine_id_pattern: str | None = None,
            ranks: bool = False) -> Oracle:
    """With `engine_id_pattern`, an id named by a batch or a mark that matches it in full stands for
    its group's request id; a request's batch is the latest-starting one in its range that names
    it, and every claim in its range is taken (its rows).

    With `ranks`, every process holding batches is a tensor-parallel rank running the same batches:
    the batches of the lowest pid (the first rank) are the ones requests take and whose ids count;
    the request's batch on each other rank is that rank's batch with the same id list nearest in
    start, and its batch runs from the earliest of their starts to the latest of their ends. A batch
    of another rank with no such twin among the first rank's has its ids counted, and unclaimed."""

    def req_id(x: str) -> str:
        m = re.fullmatch(engine_id_pattern, x) if engine_id_pattern else None
        return m.group(1) if m and m.group(1) else x

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    txt = _text(con)
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if txt.startswith("COALESCE") else ""
    doms = {(did, pk) for did, pk in con.execute(
        f"SELECT e.domainId, e.globalTid >> 24 FROM NVTX_EVENTS e {join} WHERE e.eventType = 75 AND {txt} = ?",
        (domain,))}

    def rows(types: str, like: str):
        out = []
        for start, end, gtid, did, text in con.execute(
                f"SELECT e.start, e.\"end\", e.globalTid, e.domainId, {txt} FROM NVTX_EVENTS e {join} "
                f"WHERE e.eventType IN ({types}) AND {txt} LIKE ?", (like,)):
            if (did, gtid >> 24) in doms:
                out.append((start, end, gtid, text))
        return out

    session_end = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()[0] \
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'ANALYSIS_DETAILS'").fetchone() else None
    reqs = rows("59, 60", "request rid=%")
    marks = rows("34", "enqueued rid=%")
    batches = [r for r in rows("59, 60", f"{batch}%") if r[1] is not None and (session_end is None or r[1] < session_end)]
    encodes_all = rows("59, 60", "encode")
    con.close()

    def rid_of(text: str) -> str:
        return re.search(r"rid=([^\s;)]+)", text).group(1)

    blist = []
    o = Oracle()
    for start, end, gtid, text in batches:
        m = re.search(r"rid=([^\s;)]+)", text)
        ids = [i for i in (m.group(1).split(",") if m else []) if i and i != "..."]
        blist.append((start, end, gtid, tuple(ids)))
    others: list = []                   # the batches of the ranks after the first
    if ranks and blist:
        first = min(g >> 24 for _, _, g, _ in blist)
        others = [b for b in blist if b[2] >> 24 != first]
        blist = [b for b in blist if b[2] >> 24 == first]

    def nearest(procs_batches, ids, t0):
        same = [b for b in procs_batches if b[3] == ids]
        return min(same, key=lambda b: abs(b[0] - t0)) if same else None

    twinned = set()
    for b in blist:
        for pk in {x[2] >> 24 for x in others}:
            tw = nearest([x for x in others if x[2] >> 24 == pk], b[3], b[0]) if b[3] else None
            if tw is not None:
                twinned.add(tw)
    lone = [b for b in others if b not in twinned]
    for start, _, _, ids in blist + lone:
        o.claims += [(start, i) for i in ids]
    o.replica_claims = sum(len(b[3]) for b in twinned)
    # encode ranges outside every batch range of their thread
    encodes = [(s, e, g) for s, e, g, _ in encodes_all
               if e is not None and not any(bg == g and bs <= s and e <= be for bs, be, bg, _ in blist + others)]
    marks_of: dict[str, list[int]] = {}
    for t, _, _, tx in marks:
        marks_of.setdefault(req_id(rid_of(tx)), []).append(t)
    batches_of: dict[str, list] = {}
    for b in blist:
        for i in b[3]:
            batches_of.setdefault(req_id(i), []).append((b, i))
    taken = set()
    for r0, r1, gtid, text in reqs:
        rid = rid_of(text)
        if r1 is None or (session_end is not None and r1 >= session_end):
            o.cut.append(rid)
            continue
        span = {}                       # a first-rank batch -> (start, end) over its twins on every rank
        for b_, _ in batches_of.get(rid, []):
            tws = [nearest([x for x in others if x[2] >> 24 == pk], b_[3], b_[0])
                   for pk in {x[2] >> 24 for x in others}]
            tws = [x for x in tws if x is not None and x in twinned]
            span[b_] = (min([b_[0]] + [x[0] for x in tws]), max([b_[1]] + [x[1] for x in tws]))
        cands = [(b, named) for b, named in batches_of.get(rid, []) if r0 <= span[b][0] <= r1]
        b = max((b for b, _ in cands), key=lambda b: span[b][0]) if cands else None
        if b is not None:
            b = (*span[b], b[2], b[3])
        ms = [t for t in marks_of.get(rid, []) if r0 <= t <= r1]
        e = min(ms) if ms else None
        floor = b[1] if b else (e if e is not None else r0)
        cs = [c for c in encodes if c[2] == gtid and c[1] <= r1]
        c = max(cs, key=lambda c: c[1]) if cs else None
        if c is not None and c[0] < floor:
            c = None
        taken.update((b_[0], named) for b_, named in cands)
        seg = {"receive": 0, "queue": 0, "batch": 0, "after_batch": 0, "encode": 0, "send": 0}
        if e is not None:
            seg["receive"] = e - r0
        if e is not None and b:
            seg["queue"] = b[0] - e
        if b:
            seg["batch"] = b[1] - b[0]
        if b and c:
            seg["after_batch"] = c[0] - b[1]
        if c:
            seg["encode"] = c[1] - c[0]
            seg["send"] = r1 - c[1]
        elif b:
            seg["send"] = r1 - b[1]
        seg["unattributed"] = (r1 - r0) - sum(seg.values())
        o.requests[(gtid, r0)] = {"rid": rid, "end": r1, "enqueue": e, "batch_start": b[0] if b else None,
                                  "rows": len(cands), "batches": len({b_[0] for b_, _ in cands}),
                                  "encode_start": c[0] if c else None, **seg}
    o.unclaimed = {rid for start, rid in o.claims if (start, rid) not in taken}
    o.taken = taken
    return o


def check(analysis, oracle: Oracle) -> None:
    """Every segment of every request equals the oracle's; they sum to end-to-end; every count agrees."""
    t = analysis.journeys
    assert t is not None
    seen = 0
    for i in range(len(t)):
        if t["cut"][i]:
            assert str(t["rid"][i]) in oracle.cut
            continue
        want = oracle.requests[(int(t["gtid"][i]), int(t["start"][i]))]
        assert str(t["rid"][i]) == want["rid"]
        assert int(t["batch_start"][i]) == (want["batch_start"] if want["batch_start"] is not None else -1)
        assert int(t["batch_rows"][i]) == want["rows"]
        assert int(t["enqueue"][i]) == (want["enqueue"] if want["enqueue"] is not None else -1)
        assert int(t["encode_start"][i]) == (want["encode_start"] if want["encode_start"] is not None else -1)
        got = {s: int(t[f"{s}_ns"][i]) for s in ("receive", "queue", "batch", "after_batch", "encode", "send",
                                                 "unattributed")}
        assert got == {s: want[s] for s in got}, (want["rid"], got, want)
        assert sum(got.values()) == int(t["e2e_ns"][i]) == want["end"] - int(t["start"][i])
        assert not t["out_of_order"][i]
        seen += 1
    assert seen == len(oracle.requests) and int(t["cut"].sum()) == len(oracle.cut)
    j = analysis.result.journey
    assert j.request_ranges == len(oracle.requests) + len(oracle.cut)
    assert j.cut_by_window == len(oracle.cut)
    assert j.batch_ids == len(oracle.claims)
    assert j.unclaimed_batch_ids == len(set(oracle.claims) - oracle.taken)
    assert j.replica_batch_ids == oracle.replica_claims
