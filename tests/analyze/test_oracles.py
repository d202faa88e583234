"""Independent oracles for the figures: plain SQL and plain Python loops on every shipped capture
(and on copies with nested GPU intervals and boundary ties)."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.intervals import covered, innermost_containing, union

TRACES = Path(__file__).resolve().parents[2] / "traces"
GPU_SLICES = ["gpu-main-slice", "gpu-pr-slice", "gpu25-pr-slice"]
STAGES = ("parse", "index", "transfer", "head", "encode")
GPU_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"]

# the stage ranges of domain `clef`, closed inside the session, with their names
RANGES = """
WITH dom AS (SELECT DISTINCT d.domainId AS did, d.globalTid >> 24 AS pk FROM NVTX_EVENTS d
             LEFT JOIN StringIds s ON s.id = d.textId WHERE d.eventType = 75 AND COALESCE(s.value, d.text) = 'clef'),
r AS (SELECT e.start AS s, e.[end] AS e, e.globalTid AS t, COALESCE(s.value, e.text) AS nm FROM NVTX_EVENTS e
      LEFT JOIN StringIds s ON s.id = e.textId
      WHERE e.eventType IN (59, 60, 70, 71) AND e.[end] IS NOT NULL
        AND e.[end] < (SELECT max(duration) FROM ANALYSIS_DETAILS)
        AND EXISTS (SELECT 1 FROM dom WHERE dom.did = e.domainId AND dom.pk = e.globalTid >> 24)),
b AS (SELECT * FROM r WHERE nm LIKE 'pooler %')
"""


def connect(path):
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def sql_host_time(path) -> dict[str, tuple[int, int]]:
    """name -> (instances, total ns): stage ranges held by a batch range on the same thread, and
    the batch ranges themselves."""
    with connect(path) as con:
        rows = con.execute(RANGES + """
            SELECT r.nm, count(*), sum(r.e - r.s) FROM r WHERE r.nm IN ('parse','index','transfer','head','encode')
              AND EXISTS (SELECT 1 FROM b WHERE b.t = r.t AND b.s <= r.s AND r.e <= b.e) GROUP BY r.nm
            UNION ALL SELECT 'pooler', count(*), sum(e - s) FROM b""").fetchall()
    return {n: (c, t or 0) for n, c, t in rows}


def loop_union(intervals):
    """Sorted disjoint union, by hand: a running end that only grows."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def loop_covered(merged, a, b):
    return sum(max(0, min(b, e) - max(a, s)) for s, e in merged if s < b and e > a)


def brute_overlap(path):
    """(busy ns within batch spans, batch span ns, per-batch fractions, busy ns of the GPU work
    whose API call lies in a batch range on its thread), with plain SQL and loops."""
    with connect(path) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        batches = con.execute(RANGES + "SELECT s, e, t FROM b ORDER BY s").fetchall()
        gpu, own = {}, {}
        for t in GPU_TABLES:
            if t not in tables:
                continue
            for s, e, pk, ts, te, tid in con.execute(
                    f"SELECT g.start, g.[end], g.globalPid >> 24, c.start, c.[end], c.globalTid "
                    f"FROM {t} g LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME c ON c.correlationId = g.correlationId "
                    f"AND c.globalTid >> 24 = g.globalPid >> 24"):
                gpu.setdefault(pk, []).append((s, e))
                if tid is not None and any(bt == tid and bs <= ts and te <= be for bs, be, bt in batches):
                    own.setdefault(pk, []).append((s, e))
    merged = {pk: loop_union(v) for pk, v in gpu.items()}
    busy = span = 0
    fractions = []
    for bs, be, bt in batches:
        c = loop_covered(merged.get(bt >> 24, []), bs, be)
        busy += c
        span += be - bs
        fractions.append(c / (be - bs))
    own_ns = sum(e - s for v in own.values() for s, e in loop_union(v))
    return busy, span, fractions, own_ns


def check_overlap(path):
    r = analyze(str(path)).result
    busy, span, fractions, own_ns = brute_overlap(path)
    assert r.batches == len(fractions) > 40
    o = r.overlap
    assert o.gpu_busy_fraction_of_pooler_span == pytest.approx(busy / span, rel=1e-12)
    assert o.gpu_busy_fraction_p50 == pytest.approx(float(np.percentile(fractions, 50)), rel=1e-12)
    assert o.gpu_busy_ms_in_pooler_span_per_request == pytest.approx(busy / 1e6 / r.requests, rel=1e-12)
    assert o.gpu_busy_ms_per_request == pytest.approx(own_ns / 1e6 / r.requests, rel=1e-12)
    return r


@pytest.mark.parametrize("name", GPU_SLICES)
def test_overlap_brute_force_on_every_shipped_capture(name):
    check_overlap(TRACES / f"{name}.sqlite")


def test_graph_trace_rows_are_busy_time():
    """The 2025.3 graph-mode capture: GRAPH_TRACE rows are the only GPU record of graph work."""
    path = TRACES / "gpu25-pr-slice.sqlite"
    with connect(path) as con:
        assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0] > 200
    check_overlap(path)


@pytest.mark.parametrize("name", ["gpu-main-slice", "gpu25-pr-slice"])
def test_overlap_brute_force_with_nested_gpu_intervals(tmp_path, name):
    """Long GPU intervals that hold shorter ones (which end before the next starts): the union
    needs its running maximum. Rows appended out of time order also take the unordered path."""
    f = tmp_path / "nested.sqlite"
    shutil.copyfile(TRACES / f"{name}.sqlite", f)
    with sqlite3.connect(f) as con:
        cols = [c[1] for c in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        given = ("start", "end", "streamId", "correlationId")
        pick = ", ".join("?" if c in given else f"[{c}]" for c in cols)
        batches = con.execute(RANGES + "SELECT s, e FROM b ORDER BY s LIMIT 12").fetchall()
        rows = []
        for i, (s, e) in enumerate(batches):
            d = e - s
            rows.append((s + d // 5, e + d // 3, 99, 10**9 + 3 * i))                  # long
            rows.append((s + d // 4, s + d // 3, 98, 10**9 + 3 * i + 1))              # inside it
            rows.append((s + d // 2, s + d // 2 + d // 10, 97, 10**9 + 3 * i + 2))    # and another
        assert [c for c in cols if c in given] == list(given)
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT {pick} FROM CUPTI_ACTIVITY_KIND_KERNEL "
                        "LIMIT 1", rows)
    con.close()
    check_overlap(f)


@pytest.mark.parametrize("seed", range(20))
def test_union_and_coverage_against_loops(seed):
    """Random nested, touching and tied intervals, in start order (the streamed case) and not."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 400, 60)
    e = s + rng.choice([0, 1, 3, 40, 150], 60)
    spans = rng.integers(0, 450, (30, 2))
    a, b = spans.min(1), spans.max(1)
    for order in (np.argsort(s, kind="stable"), rng.permutation(60)):
        ms, me = union(s[order], e[order])
        want = loop_union(zip(s.tolist(), e.tolist()))
        assert list(map(list, zip(ms.tolist(), me.tolist()))) == want
        assert covered(ms, me, a, b).tolist() == [loop_covered(want, x, y) for x, y in zip(a.tolist(), b.tolist())]


@pytest.mark.parametrize("seed", range(20))
def test_innermost_containing_against_loops(seed):
    """Properly nested ranges per thread with shared starts and ends (a stage that opens or closes
    with its batch), and calls that start or end exactly on a boundary."""
    rng = np.random.default_rng(seed)
    key, start, end = [], [], []

    def nest(k, lo, hi, depth):
        key.append(k), start.append(lo), end.append(hi)
        if depth == 0 or hi - lo < 4:
            return
        cuts = np.unique(np.r_[lo, hi, rng.integers(lo, hi, rng.integers(1, 4))])
        for x, y in zip(cuts[:-1], cuts[1:]):
            if rng.random() < 0.8 and (x, y) != (lo, hi):
                nest(k, x, y, depth - 1)

    for k in (1, 2):
        t = 0
        for _ in range(5):
            w = int(rng.integers(10, 200))
            nest(k, t, t + w, 3)
            t += w + int(rng.integers(0, 3))
    key, start, end = map(np.array, (key, start, end))
    qk = rng.choice([1, 2, 3], 300)
    qs = rng.choice(np.r_[start, rng.integers(0, 1000, 50)], 300)
    qe = qs + rng.choice([1, 5, 30], 300)
    qe = np.where(rng.random(300) < 0.3, rng.choice(end, 300), qe)
    qe = np.maximum(qe, qs + 1)            # calls take time: a zero-length one on a shared boundary is ambiguous
    got = innermost_containing(key, start, end, qk, qs, qe)
    for i in range(300):
        best = -1
        for j in range(len(start)):
            if key[j] == qk[i] and start[j] <= qs[i] and qe[i] <= end[j]:
                if best < 0 or (end[j] - start[j], -j) < (end[best] - start[best], -best):
                    best = j
        # equal spans (a range and its duplicate child): either is innermost
        assert got[i] == best or (got[i] >= 0 and (start[got[i]], end[got[i]]) == (start[best], end[best])), i


@pytest.mark.parametrize("name", [*GPU_SLICES, "cpu23-inline"])
def test_host_time_per_stage_against_sql(name):
    path = TRACES / f"{name}.sqlite"
    r = analyze(str(path)).result
    want = sql_host_time(path)
    assert r.excluded.outside_batch_instances == 0
    for s in STAGES:
        st = r.stages[s]
        assert (st.instances, st.host_ns_total) == want[s], s
        assert st.host_ms_per_request == pytest.approx(want[s][1] / 1e6 / r.requests, rel=1e-12)
    assert (r.pooler.instances, r.pooler.host_ns_total) == want["pooler"]


@pytest.mark.parametrize("name", ["gpu-q1c16-main", "gpu25-q1c16-pr", "cpu23-inline"])
def test_host_time_per_stage_against_sql_whole_captures(capture, name):
    path = capture(name)
    r = analyze(str(path)).result
    want = sql_host_time(path)
    for s in STAGES:
        assert (r.stages[s].instances, r.stages[s].host_ns_total) == want[s], s


def test_ties_at_range_boundaries(tmp_path):
    """Calls that start exactly at their stage's start and end exactly at its end, and batch
    ranges that start with their first stage and end with their last: all inside."""
    f = tmp_path / "ties.sqlite"
    shutil.copyfile(TRACES / "gpu-main-slice.sqlite", f)

    def stage_id(con, name):
        return con.execute("SELECT id FROM StringIds WHERE value = ?", (name,)).fetchone()[0]

    def fit(con, stage, like):
        calls = (f"FROM CUPTI_ACTIVITY_KIND_RUNTIME c WHERE c.globalTid = NVTX_EVENTS.globalTid AND c.start >= "
                 f"NVTX_EVENTS.start AND c.[end] <= NVTX_EVENTS.[end] AND c.nameId IN "
                 f"(SELECT id FROM StringIds WHERE {like})")
        con.execute(f"UPDATE NVTX_EVENTS SET start = (SELECT min(c.start) {calls}), [end] = (SELECT max(c.[end]) "
                    f"{calls}) WHERE textId = {stage_id(con, stage)}")

    with sqlite3.connect(f) as con:
        fit(con, "transfer", "value LIKE 'cudaMemcpy%'")
        fit(con, "head", "value LIKE 'cudaLaunchKernel%' OR value LIKE 'cudaGraphLaunch%'")
        inside = ("FROM NVTX_EVENTS x WHERE x.globalTid = NVTX_EVENTS.globalTid AND x.start >= NVTX_EVENTS.start "
                  "AND x.[end] <= NVTX_EVENTS.[end] AND x.textId = ")
        con.execute(f"UPDATE NVTX_EVENTS SET start = (SELECT x.start {inside}{stage_id(con, 'parse')}), "
                    f"[end] = (SELECT x.[end] {inside}{stage_id(con, 'encode')}) WHERE text LIKE 'pooler n=%'")
        ties = con.execute("SELECT count(*) FROM NVTX_EVENTS b JOIN NVTX_EVENTS p ON p.globalTid = b.globalTid "
                           "AND p.start = b.start WHERE b.text LIKE 'pooler n=%' AND p.textId = ?",
                           (stage_id(con, "parse"),)).fetchone()[0]
        h2d = con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN CUPTI_ACTIVITY_KIND_RUNTIME c "
            "ON c.correlationId = m.correlationId JOIN NVTX_EVENTS t ON t.globalTid = c.globalTid "
            "AND t.start <= c.start AND c.[end] <= t.[end] WHERE m.copyKind = 1 AND t.textId = ?",
            (stage_id(con, "transfer"),)).fetchone()[0]
        at_edge = con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME c JOIN NVTX_EVENTS t ON t.globalTid = c.globalTid "
            "AND (c.start = t.start OR c.[end] = t.[end]) WHERE t.textId IN (?, ?)",
            (stage_id(con, "transfer"), stage_id(con, "head"))).fetchone()[0]
    con.close()
    assert ties == 48 and at_edge >= 4 * 48
    r = analyze(str(f)).result
    assert r.batches == 48 and [w for w in r.warnings if "ships CUPTI 12.4" not in w] == []
    assert all(r.stages[s].instances == 48 for s in STAGES)
    assert r.stages["transfer"].cuda.h2d_copies == h2d == 9 * 256
    assert r.stages["head"].cuda.kernel_launches == 15 * 256
    assert r.stages["head"].cuda.graph_launches == 256
    want = sql_host_time(f)
    for s in (*STAGES, "pooler"):
        block = r.pooler if s == "pooler" else r.stages[s]
        assert (block.instances, block.host_ns_total) == want[s], s
