"""Journeys of copies of the real GPU recording (gpu25-journey) changed by SQL the way other servers
and other captures differ: batch ranges without `rid=` lists, a batch range nested in another (one
strictly inside, one with the same start), a batch's id list cut with `...`, batches on two
threads. Every segment of every request is held against tests/journey_oracle.py (its own SQL over
the changed copy), and the counts against SQL."""
from __future__ import annotations


import pytest

from clef_prof.analyze.figures.journey import select
from clef_prof.analyze.pipeline import analyze
from conftest import edited_copy, sql
from journey_oracle import check, compute

NAME = "gpu25-journey"
BATCH = "text LIKE 'pooler n=%'"
DROP_IDS = "UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ' rid=') - 1) WHERE"   # a range's id list cut off


@pytest.fixture(scope="module")
def changed(capture, tmp_path_factory):
    """changed(*statements) -> (path, analysis) of a copy of gpu25-journey with the SQL run on it."""
    def make(*statements: str):
        out = edited_copy(capture(NAME), tmp_path_factory.mktemp("journey") / f"{NAME}.sqlite", *statements)
        return out, analyze(str(out))
    return make


def test_batches_without_id_lists(changed):
    """No batch names its requests: every complete request range is without a batch, its time
    between enqueue and exit unattributed; the first 20 of them by start are listed."""
    path, a = changed(f"{DROP_IDS} {BATCH} AND text LIKE '% rid=%'")
    assert sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE '%rid=%' AND text LIKE 'pooler%'")[0][0] == 0
    oracle = compute(path)
    check(a, oracle)
    j = a.result.journey
    assert (j.request_ranges, j.cut_by_window, j.complete, j.batch_ids, j.unclaimed_batch_ids) == (2225, 16, 0, 0, 0)
    assert j.without_batch == len(oracle.requests) == 2225 - 16
    t = a.journeys
    assert (t["batch"] < 0).all() and (t["unattributed_ns"][~t["cut"]] > 0).all()
    first = [oracle.requests[k]["rid"] for k in sorted(oracle.requests, key=lambda k: (k[1], k[0]))[:20]]
    assert j.listed["without_batch"] == first
    # no complete journey: the words select nothing (they are not taken for request ids)
    for word in ("p50", "p99", "tail", "complete", "p50,p99"):
        assert len(select(t, word)) == 0, word
    assert len(select(t, "all")) == 2225


def test_nested_batch_ranges_and_a_cut_id_list(changed):
    """A batch range strictly inside the 11th, another with the 21st's start and an earlier end
    (both nested: not counted, no ids), and the 31st's id list cut with `...`: the kept batches
    still find their id lists, the cut list counts its ids but not `...`."""
    ins = ("INSERT INTO NVTX_EVENTS (start, [end], eventType, globalTid, domainId, text) SELECT start + {a}, "
           "[end] - 1000, eventType, globalTid, domainId, 'pooler n=1' FROM NVTX_EVENTS WHERE " + BATCH +
           " ORDER BY start LIMIT 1 OFFSET {k}")
    cut = (f"UPDATE NVTX_EVENTS SET text = text || ',...' WHERE rowid = (SELECT rowid FROM NVTX_EVENTS WHERE {BATCH} "
           "ORDER BY start LIMIT 1 OFFSET 30)")
    path, a = changed(ins.format(a=1000, k=10), ins.format(a=0, k=20), cut)
    assert sql(path, f"SELECT count(*) FROM NVTX_EVENTS WHERE {BATCH}")[0][0] == 151
    oracle = compute(path)
    check(a, oracle)
    assert not any(rid == "..." for _, rid in oracle.claims)
    j = a.result.journey
    assert a.result.batches == 149 and j.batches_with_cut_ids == 1
    assert j.batch_ids == len(oracle.claims) == sql(path, f"SELECT sum(CAST(substr(text, 10, 2) AS INT)) FROM "
                                                          f"NVTX_EVENTS WHERE {BATCH} AND text LIKE '% rid=%'")[0][0]
    assert (j.complete, j.without_batch) == (2209, 0)


def test_batches_on_two_threads(changed):
    """Every other batch range, with the stage ranges inside it, moved to another thread of the
    process (two batching threads): requests still meet their batches by id."""
    path, a = changed(
        "CREATE TEMP TABLE moved AS SELECT g, s, e FROM (SELECT globalTid AS g, start AS s, [end] AS e, "
        f"row_number() OVER (ORDER BY start) AS k FROM NVTX_EVENTS WHERE {BATCH}) WHERE k % 2 = 0",
        "UPDATE NVTX_EVENTS SET globalTid = globalTid + 7 WHERE eventType = 59 AND EXISTS (SELECT 1 FROM moved m "
        "WHERE m.g = NVTX_EVENTS.globalTid AND NVTX_EVENTS.start >= m.s AND NVTX_EVENTS.[end] <= m.e)")
    threads = sql(path, f"SELECT globalTid, count(*) FROM NVTX_EVENTS WHERE {BATCH} GROUP BY 1")
    assert len(threads) == 2 and min(n for _, n in threads) >= 70
    check(a, compute(path))
    j = a.result.journey
    assert a.result.batches == 149 and (j.complete, j.without_batch) == (2209, 0)


def _long_list(path, length: int) -> str:
    """SQL giving the 41st batch range a message of `length` characters: one made-up id of z's
    (naming no request) before its own ids, so its own last id ends the message."""
    (rowid, text), = sql(path, f"SELECT rowid, text FROM NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT 1 OFFSET 40")
    head, ids = text.split(" rid=")
    filler = "z" * (length - len(head) - len(" rid=") - len(ids) - 1) + ","
    new = f"{head} rid={filler}{ids}"
    assert len(new) == length
    return f"UPDATE NVTX_EVENTS SET text = '{new}' WHERE rowid = {rowid}", ids.split(",")


def test_an_id_list_of_65536_characters_is_read_whole(changed, capture):
    change, ids = _long_list(capture(NAME), 65536)
    path, a = changed(change)
    oracle = compute(path)
    check(a, oracle)
    j = a.result.journey
    assert (j.without_batch, j.batches_with_cut_ids, j.unclaimed_batch_ids) == (0, 0, 15 + 1)    # + the z's
    assert len(ids) == 16


def test_an_id_list_past_65536_characters_is_cut_not_misread(changed, capture):
    """One character more: the read stops inside the last id, which is dropped and the list counted
    cut (not read as the id of another request); that one request is left without a batch."""
    change, ids = _long_list(capture(NAME), 65537)
    path, a = changed(change)
    j = a.result.journey
    assert (j.without_batch, j.batches_with_cut_ids) == (1, 1)
    assert j.listed["without_batch"] == [ids[-1]]
    assert j.batch_ids == len(compute(path).claims) - 1
    assert j.complete == 2209 - 1


def test_the_first_claim_and_a_zero_length_request(changed):
    """The first batch's id list removed (its 14 ids name requests opened before the window) and the
    second's cut to its first id: the capture's first claim is then a request's own; and one request
    range of zero length (end == start: a closed range, not one cut by the window)."""
    nth = f"(SELECT rowid FROM NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT 1 OFFSET {{k}})"
    path, a = changed(
        f"{DROP_IDS} rowid = {nth.format(k=0)}",
        f"UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ',') - 1) WHERE rowid = {nth.format(k=1)}",
        "UPDATE NVTX_EVENTS SET [end] = start WHERE rowid = (SELECT rowid FROM NVTX_EVENTS WHERE text LIKE "
        "'request rid=%' ORDER BY start LIMIT 1 OFFSET 100)",
        # an encode range of zero length at the start of the first request range the window cut
        "INSERT INTO NVTX_EVENTS (start, [end], eventType, globalTid, domainId, textId) SELECT r.start, r.start, 59, "
        "r.globalTid, r.domainId, (SELECT id FROM StringIds WHERE value = 'encode') FROM NVTX_EVENTS r WHERE r.text "
        "LIKE 'request rid=%' AND r.[end] >= (SELECT duration FROM ANALYSIS_DETAILS) ORDER BY r.start LIMIT 1")
    oracle = compute(path)
    check(a, oracle)
    j = a.result.journey
    empty, = sql(path, "SELECT text FROM NVTX_EVENTS WHERE text LIKE 'request rid=%' AND [end] = start")[0]
    rid = empty.split("rid=")[1]
    assert j.cut_by_window == 16 and j.without_batch == 15 + 1   # the 15 ids cut from the second list, the empty range
    assert rid in j.listed["without_batch"] and rid in oracle.unclaimed    # its batch names it all the same
    # a request cut by the window has no point of its own, the encode at its start included
    t = a.journeys
    cut = t["cut"]
    assert int(cut.sum()) == 16
    assert (t["enqueue"][cut] == -1).all() and (t["batch"][cut] == -1).all() and (t["encode_start"][cut] == -1).all()


def test_front_end_encode_with_and_without_a_batch(changed):
    """The demo encodes inside its batch; here each request range also gets an `encode` range of its
    own on its thread (R1 - 20 us to R1 - 10 us, outside every batch), and the first 10 batches
    with claimed ids lose their id lists: requests with a batch get after_batch, encode and send;
    those without a batch an encode after their enqueue and no after_batch."""
    path, a = changed(
        "INSERT INTO NVTX_EVENTS (start, [end], eventType, globalTid, domainId, textId) SELECT r.[end] - 20000, "
        "r.[end] - 10000, 59, r.globalTid, r.domainId, (SELECT id FROM StringIds WHERE value = 'encode') FROM "
        "NVTX_EVENTS r WHERE r.text LIKE 'request rid=%' AND r.[end] IS NOT NULL",
        f"{DROP_IDS} rowid IN (SELECT rowid FROM "
        f"NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT 10 OFFSET 1)")
    oracle = compute(path)
    check(a, oracle)
    t, j = a.journeys, a.result.journey
    nob = ~t["cut"] & (t["batch"] < 0)
    assert int(nob.sum()) == j.without_batch > 100
    assert (t["encode_start"][nob] >= 0).all() and (t["after_batch_ns"][nob] == 0).all()
    assert (t["encode_ns"][nob] == 10000).all()
    ok = ~t["cut"] & (t["batch"] >= 0)
    assert (t["after_batch_ns"][ok] > 0).any() and j.segments["encode"].mean_ms == pytest.approx(0.01)


def test_batch_stages_of_the_first_batch_and_a_tail_of_one(changed, capture):
    """The first batch range (whose ids name requests opened before the window) and its stage
    ranges deleted, and every id list but the new first batch's removed: 16 complete journeys, all
    in batch 0 (n=16). Each stage's share of their batch segment is its ns in that batch (SQL); the tail
    (>= p99 of 16) is the slowest request alone."""
    first = f"(SELECT start, [end], globalTid FROM NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT 1)"
    path, a = changed(
        f"DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND EXISTS (SELECT 1 FROM {first} b WHERE "
        "NVTX_EVENTS.globalTid = b.globalTid AND NVTX_EVENTS.start >= b.start AND NVTX_EVENTS.[end] <= b.[end])",
        f"{DROP_IDS} rowid IN (SELECT rowid FROM "
        f"NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT -1 OFFSET 1)")
    oracle = compute(path)
    check(a, oracle)
    t, j = a.journeys, a.result.journey
    ok = ~t["cut"] & (t["batch"] >= 0)
    assert j.complete == int(ok.sum()) == 16 and set(t["batch"][ok].tolist()) == {0}
    bs, be = sql(path, f"SELECT start, [end] FROM NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT 1")[0]
    for stage in ("parse", "index", "transfer", "head", "encode"):
        (ns,), = sql(path, "SELECT sum(e.[end] - e.start) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                           "WHERE s.value = ? AND e.start >= ? AND e.[end] <= ?", stage, bs, be)
        assert ns > 0 and j.batch_stages[stage].mean_ms == pytest.approx(ns / 1e6, rel=1e-12), stage
    assert j.tail_requests == 1
    assert j.segments["batch"].tail_mean_ms == pytest.approx((be - bs) / 1e6, rel=1e-12)
    slowest = max((v["end"] - k[1], v) for k, v in oracle.requests.items() if v["batch_start"] is not None)[1]
    assert j.segments["queue"].tail_mean_ms == pytest.approx(slowest["queue"] / 1e6, rel=1e-12)


def test_p50_is_the_journey_nearest_the_median(capture):
    """`select(t, "p50")`: the complete journey whose end-to-end is nearest the median (by hand over
    the oracle's end-to-end figures of gpu25-journey)."""
    import numpy as np

    path = capture(NAME)
    a = analyze(str(path))
    oracle = compute(path)
    e2e = {k: v["end"] - k[1] for k, v in oracle.requests.items() if v["batch_start"] is not None}
    med = float(np.median(list(e2e.values())))
    near = min(abs(v - med) for v in e2e.values())
    t = a.journeys
    (i,) = select(t, "p50")
    assert abs(int(t["e2e_ns"][i]) - med) == near
    assert int(t["e2e_ns"][i]) > min(e2e.values())


def test_a_single_claim(changed):
    """Every id list removed but the 3rd batch's, cut to its first id: one claim, one complete
    journey; its figures are its own segments (by the oracle)."""
    nth = f"(SELECT rowid FROM NVTX_EVENTS WHERE {BATCH} ORDER BY start LIMIT 1 OFFSET 2)"
    path, a = changed(
        f"UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ',') - 1) WHERE rowid = {nth}",
        f"{DROP_IDS} {BATCH} AND text LIKE "
        f"'% rid=%' AND rowid != {nth}")
    oracle = compute(path)
    check(a, oracle)
    j = a.result.journey
    assert (j.batch_ids, j.complete, j.tail_requests) == (1, 1, 1)
    (one,) = [v for v in oracle.requests.values() if v["batch_start"] is not None]
    for s in ("receive", "queue", "batch", "send"):
        f = j.segments[s]
        assert f.mean_ms == f.p50_ms == f.p99_ms == f.tail_mean_ms == pytest.approx(one[s] / 1e6, rel=1e-12), s


def test_long_messages_whose_id_list_is_whole_or_absent(changed, capture):
    """Two batch messages past 65536 characters that are not long id lists: the 41st keeps its whole
    list followed by a long note, the 51st has a long note and no list. Neither list is cut: every
    id of the 41st is read, the 51st names none (its requests are without a batch)."""
    src = capture(NAME)
    rows = sql(src, f"SELECT rowid, text FROM NVTX_EVENTS WHERE {BATCH} ORDER BY start")
    (r41, t41), (r51, t51) = rows[40], rows[50]
    note = "note=" + "z" * 65600
    path, a = changed(f"UPDATE NVTX_EVENTS SET text = '{t41} {note}' WHERE rowid = {r41}",
                      f"UPDATE NVTX_EVENTS SET text = '{t51.split(' rid=')[0]} {note}' WHERE rowid = {r51}")
    oracle = compute(path)
    check(a, oracle)
    j = a.result.journey
    assert j.batches_with_cut_ids == 0 and j.without_batch == len(t51.split(" rid=")[1].split(","))


def test_batch_stages_are_each_requests_own_batch(capture):
    """gpu25-journey unchanged: each stage's mean over the complete journeys is the mean of the
    stage's ns in each request's own batch (SQL per batch range, joined through the oracle's batch
    start of each request)."""
    import numpy as np

    path = capture(NAME)
    a = analyze(str(path))
    oracle = compute(path)
    starts = [v["batch_start"] for v in oracle.requests.values() if v["batch_start"] is not None]
    assert len(starts) == a.result.journey.complete == 2209 and len(set(starts)) > 100
    for stage in ("parse", "index", "transfer", "head", "encode"):
        per = dict(sql(path, "SELECT p.start, sum(e.[end] - e.start) FROM NVTX_EVENTS p JOIN NVTX_EVENTS e ON "
                             "e.globalTid = p.globalTid AND e.start >= p.start AND e.[end] <= p.[end] JOIN StringIds s "
                             f"ON s.id = e.textId WHERE p.{BATCH} AND s.value = ? GROUP BY p.rowid", stage))
        want = float(np.mean([per[s] for s in starts])) / 1e6
        assert a.result.journey.batch_stages[stage].mean_ms == pytest.approx(want, rel=1e-12), stage
