"""Damaged and edge rows of NVTX ranges, one case per copy of a real capture edited by SQL: the H200
capture of two concurrent executor threads (tests/data/gpu25-concurrent: 48 `pooler n=K` batch
ranges, each holding one `parse`, `transfer`, `head` and `encode`). Each case is a row no recording
gives on demand: an exact repeat beside near repeats, an end before the start, an end of exactly 0,
no end (NULL), a zero-length range, a stage just before, across or at its thread's first batch,
a batch range reversed, a capture of one or two ranges, sizes in the payload.

The expected figures are the SQL counts of the edited export plus the edit worked out by hand
(this stage lies outside every batch range, that one is cut), never the code's own rules."""
from __future__ import annotations


import numpy as np
import pytest

from clef_prof.analyze.judge import validate
from clef_prof.analyze.read.export import Export
from clef_prof.analyze.figures.stages import MAX_BATCH, batch_size_from_message, build
from clef_prof.base.config import StageConfig
from clef_prof.base.errors import CaptureError
from conftest import edited_copy, sql

NAME = "gpu25-concurrent"
STAGES = ("parse", "transfer", "head", "encode")
CONFIG = StageConfig(stages=STAGES)
NAMED = "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId"
NM = "COALESCE(e.text, s.value)"
# the ranges of the capture: rowid, start, end, thread, name
RANGES = f'SELECT e.rowid, e.start, e."end", e.globalTid, {NM} {NAMED} WHERE e.eventType IN (59, 60)'
BATCHES = RANGES + f" AND {NM} LIKE 'pooler n=%' ORDER BY e.start"


def main_thread(gtid: int) -> int:
    """The global thread id of the main thread of gtid's process (pid << 24 | tid, tid = pid)."""
    return ((gtid >> 24) << 24) | ((gtid >> 24) & 0xFFFFFF)


@pytest.fixture(scope="module")
def base(capture):
    """The capture, its batch ranges by start, its two batch threads and its parse ranges."""
    path = capture(NAME)
    batches = sql(path, BATCHES)
    threads = sorted({g for *_, g, _ in batches})
    parse = sql(path, RANGES + f" AND {NM} = 'parse' ORDER BY e.start")
    assert len(batches) == 48 and len(threads) == 2 and len(parse) == 48
    return path, batches, threads, parse


@pytest.fixture
def edit(base, tmp_path):
    """edit(*statements) -> a writable copy of the capture with the statements applied."""
    n = iter(range(1000))

    def make(*statements):
        return edited_copy(base[0], tmp_path / f"edited-{next(n)}.sqlite", *statements)
    return make


def copy_row(rowid: int, **values) -> list:
    """Statements that insert a copy of NVTX row `rowid` with some columns changed."""
    sets = ", ".join(f'"{k}" = ?' for k in values)
    out = [f"INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE rowid = {int(rowid)}"]
    if values:
        out.append((f"UPDATE NVTX_EVENTS SET {sets} WHERE rowid = last_insert_rowid()", tuple(values.values())))
    return out


def copy_row_of(path, rowid: int, **values) -> list:
    """Statements that insert, into another copy, NVTX row `rowid` of the export at `path` with
    some columns changed (for a table whose rows were deleted first)."""
    row, = sql(path, "SELECT * FROM NVTX_EVENTS WHERE rowid = ?", rowid)
    cols = [c for (_, c, *_) in sql(path, "PRAGMA table_info(NVTX_EVENTS)")]
    vals = [values.get(c, v) for c, v in zip(cols, row)]
    return [(f"INSERT INTO NVTX_EVENTS ({', '.join(f'[{c}]' for c in cols)}) VALUES ({', '.join('?' * len(cols))})",
             tuple(vals))]


def stages_of(path, config=CONFIG):
    with Export.open(str(path)) as cap:
        return build(cap, config)


def count(path, name: str) -> int:
    (n,), = sql(path, f"SELECT count(*) FROM ({RANGES} AND {NM} = ?)", name)
    return n


def per_stage(st) -> dict[str, int]:
    return {s: int((st.instances["stage"] == s).sum()) for s in STAGES}


def in_batch(parse_row, batches):
    """The batch range (by start) that holds a parse row on its thread."""
    _, s, e, g, _ = parse_row
    (b,) = [b for b in batches if b[3] == g and b[1] <= s and e <= b[2]]
    return b


# --- repeats ------------------------------------------------------------------------------------

def test_an_exact_repeat_counts_once_and_near_repeats_count_apart(base, edit):
    """Three copies of one parse row, inserted in this order: the same end but a later start, the
    same start but an earlier end, and an exact repeat. Only the last is a duplicated row; the
    near repeats lie between the original and its repeat in the table's order."""
    _, batches, _, parse = base
    rowid, start, end, *_ = parse[10]
    f = edit(*copy_row(rowid, start=start + 100), *copy_row(rowid, end=end - 100), *copy_row(rowid))
    rows = sql(f, f"SELECT e.globalTid, e.start, e.\"end\", {NM} {NAMED} WHERE e.eventType IN (59, 60)")
    assert len(rows) - len(set(rows)) == 1
    st = stages_of(f)
    assert st.duplicates == 1
    (distinct,), = sql(f, f"SELECT count(*) FROM (SELECT DISTINCT e.globalTid, e.start, e.\"end\" {NAMED} "
                          f"WHERE e.eventType = 59 AND {NM} = 'parse')")
    assert per_stage(st) == {"parse": distinct, "transfer": 48, "head": 48, "encode": 48} and distinct == 50
    # all three stay in the batch of the row they copy
    b = in_batch(parse[10], batches)
    k = int(np.flatnonzero(st.batches["start"] == b[1])[0])
    held = st.instances[st.instances["batch"] == k]
    assert sorted(held["stage"].tolist()) == ["encode", "head", "parse", "parse", "parse", "transfer"]
    assert st.reversed == 0 and st.cut == {} and st.outside_batch == 0


def test_a_capture_of_one_batch_range(base, edit):
    (rowid, *_), = [b for b in base[1] if b[4] == "pooler n=3"][:1]
    f = edit(f"DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND rowid != {rowid}")
    (n,), = sql(f, f"SELECT CAST(substr({NM}, 10) AS INTEGER) {NAMED} WHERE e.eventType = 59")
    st = stages_of(f)
    assert (len(st.batches), st.requests, st.duplicates, len(st.instances), st.outside_batch) == (1, n, 0, 0, 0) == \
        (1, 3, 0, 0, 0)


def test_a_capture_of_one_batch_range_and_its_repeat(base, edit):
    rowid = base[1][0][0]
    f = edit(f"DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND rowid != {rowid}", *copy_row(rowid))
    (rows, n), = sql(f, f"SELECT count(*), max(CAST(substr({NM}, 10) AS INTEGER)) {NAMED} WHERE e.eventType = 59")
    st = stages_of(f)
    assert rows == 2
    assert (len(st.batches), st.requests, st.duplicates) == (1, n, 1)


# --- ends: reversed, 0, NULL, zero length -------------------------------------------------------

def test_a_stage_ending_before_it_starts_is_reversed_not_cut(base, edit):
    rowid, start, *_ = base[3][7]
    f = edit(('UPDATE NVTX_EVENTS SET "end" = ? WHERE rowid = ?', (start - 1, rowid)))
    (bad,), = sql(f, 'SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "end" < start')
    st = stages_of(f)
    assert st.reversed == bad == 1
    assert st.cut == {} and st.outside_batch == 0
    assert per_stage(st)["parse"] == count(f, "parse") - 1 == 47


def test_an_end_of_exactly_zero_is_a_time_before_the_start(base, edit):
    """end = 0 is a real timestamp (the session's first ns), not a missing end: the range ends
    before it starts, so it is reversed; a NULL end is the missing one, and is cut."""
    rowid = base[3][7][0]
    f = edit(f'UPDATE NVTX_EVENTS SET "end" = 0 WHERE rowid = {rowid}')
    st = stages_of(f)
    assert (st.reversed, st.cut, st.outside_batch) == (1, {}, 0)
    assert per_stage(st)["parse"] == 47
    g = edit(f'UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid = {rowid}')
    (null,), = sql(g, 'SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "end" IS NULL')
    st = stages_of(g)
    assert (st.reversed, st.cut, st.outside_batch) == (0, {"parse": null}, 0) and null == 1


def test_a_zero_length_stage_is_kept(base, edit):
    rowid, start, *_ = base[3][7]
    f = edit(f'UPDATE NVTX_EVENTS SET "end" = start WHERE rowid = {rowid}')
    st = stages_of(f)
    assert (st.reversed, st.cut, st.outside_batch) == (0, {}, 0)
    assert per_stage(st)["parse"] == 48
    kept = st.instances[(st.instances["stage"] == "parse") & (st.instances["start"] == start)]
    assert len(kept) == 1 and kept["end"][0] == start and kept["batch"][0] >= 0


def test_a_zero_length_stage_at_time_zero_is_not_cut(base, edit):
    """start = end = 0 on the main thread (which holds no batch): a range at the session's first ns,
    outside every batch range."""
    _, _, threads, parse = base
    f = edit(*copy_row(parse[0][0], start=0, end=0, globalTid=main_thread(threads[0])))
    st = stages_of(f)
    assert (st.reversed, st.cut, st.outside_batch) == (0, {}, 1)
    assert per_stage(st)["parse"] == count(f, "parse") == 49


def test_a_stage_without_end_is_cut_and_holds_nothing(base, edit):
    """A parse with no end inside a batch of the first thread is cut; a parse after that thread's
    last batch range (and before the session ends) lies outside every batch, not in the open one."""
    _, batches, threads, parse = base
    mine = [p for p in parse if p[3] == threads[0]]
    last = [b for b in batches if b[3] == threads[0]][-1]
    (duration,), = sql(base[0], "SELECT duration FROM ANALYSIS_DETAILS")
    assert last[2] + 2000 < duration
    f = edit(f'UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid = {mine[3][0]}',
             *copy_row(mine[0][0], start=last[2] + 1000, end=last[2] + 2000))
    st = stages_of(f)
    assert (st.reversed, st.cut, st.outside_batch) == (0, {"parse": 1}, 1)
    assert per_stage(st)["parse"] == count(f, "parse") - 1 == 48
    outside = st.instances[st.instances["batch"] < 0]
    assert outside["start"].tolist() == [last[2] + 1000]


def test_a_reversed_batch_range_is_dropped_and_its_stages_are_outside(base, edit):
    _, batches, threads, _ = base
    last = [b for b in batches if b[3] == threads[0]][-1]
    f = edit(('UPDATE NVTX_EVENTS SET "end" = ? WHERE rowid = ?', (last[1] - 1, last[0])))
    (inside,), = sql(f, f'SELECT count(*) {NAMED} WHERE e.eventType = 59 AND {NM} IN {STAGES} AND e.globalTid = ? '
                        'AND e.start >= ? AND e."end" <= ?', last[3], last[1], last[2])
    (req,), = sql(f, f'SELECT sum(CAST(substr({NM}, 10) AS INTEGER)) {NAMED} WHERE e.eventType = 59 '
                     f'AND {NM} LIKE \'pooler n=%\' AND e."end" >= e.start')
    st = stages_of(f)
    assert (st.reversed, st.cut, len(st.batches), st.requests) == (1, {}, 47, req)
    assert st.outside_batch == inside == 4 and len(st.instances) == 192
    # with CUDA records up to the end, no batch is silent: the outside stages stay outside
    kept, said = validate.lost_tail(st, int(st.batches["end"].max()))
    assert kept is st and said == []


# --- the first batch of a thread: the edge rule ------------------------------------------------

@pytest.fixture
def first(base):
    """The first batch range of the first thread (the first of the capture) and a parse row."""
    _, batches, threads, parse = base
    b0 = batches[0]
    assert b0[3] == threads[0]
    return b0, parse[0][0]


def test_a_stage_on_a_thread_without_batches_before_every_batch_is_outside(base, edit, first):
    (b0, prow), threads = first, base[2]
    f = edit(*copy_row(prow, start=b0[1] - 5000, end=b0[1] - 1000, globalTid=main_thread(threads[0])))
    st = stages_of(f)
    assert (st.cut, st.outside_batch, per_stage(st)["parse"]) == ({}, 1, 49)


@pytest.mark.parametrize("thread", [0, 1])
def test_a_stage_between_two_batches_of_its_thread_is_outside(base, edit, thread):
    """Between the first and the second batch range of either thread."""
    _, batches, threads, parse = base
    one, two = [b for b in batches if b[3] == threads[thread]][:2]
    assert one[2] + 2000 < two[1]
    prow = next(p for p in parse if p[3] == threads[thread])
    f = edit(*copy_row(prow[0], start=one[2] + 1000, end=one[2] + 2000))
    st = stages_of(f)
    assert (st.cut, st.outside_batch, per_stage(st)["parse"]) == ({}, 1, 49)
    outside = st.instances[st.instances["batch"] < 0]
    assert (outside["gtid"].tolist(), outside["start"].tolist()) == ([threads[thread]], [one[2] + 1000])


def test_a_stage_across_the_first_batch_start_is_outside_not_cut(edit, first):
    """It starts before its thread's first batch range and ends inside it: not held by the batch,
    and not the tail of a batch cut by the capture's start (that one ends by the batch's start)."""
    b0, prow = first
    f = edit(*copy_row(prow, start=b0[1] - 1000, end=b0[1] + 10))
    st = stages_of(f)
    assert (st.cut, st.outside_batch, per_stage(st)["parse"]) == ({}, 1, 49)


def test_a_stage_across_a_batch_end_is_outside(base, edit, first):
    """It starts inside the first batch range and ends 1 us after it: not held by the batch."""
    b0, prow = first
    f = edit(*copy_row(prow, start=b0[2] - 1000, end=b0[2] + 1000))
    st = stages_of(f)
    assert (st.cut, st.outside_batch, per_stage(st)["parse"]) == ({}, 1, 49)
    assert int((st.instances["batch"] == 0).sum()) == 4


def test_stages_ending_at_the_first_batch_start(edit, first):
    """Zero length at the first batch's start: inside that batch. Ending there with a length: the
    rest of a batch cut by the capture's start, cut."""
    b0, prow = first
    f = edit(*copy_row(prow, start=b0[1], end=b0[1]), *copy_row(prow, start=b0[1] - 1000, end=b0[1]))
    st = stages_of(f)
    assert (st.cut, st.outside_batch, per_stage(st)["parse"]) == ({"parse": 1}, 0, 49)
    assert st.batches["start"][0] == b0[1]
    held = st.instances[(st.instances["batch"] == 0) & (st.instances["stage"] == "parse")]
    assert sorted(held["end"].tolist())[0] == b0[1] and len(held) == 2


# --- batch sizes ------------------------------------------------------------------------------

def test_sizes_from_the_payload_when_the_message_has_none(base, edit):
    """`pooler` without `n=K`: the integer payload (int64Value, here 1..4) is the size."""
    f = edit(f"UPDATE NVTX_EVENTS SET text = 'pooler' WHERE text LIKE 'pooler n=%'")
    (n, total, ones), = sql(f, "SELECT count(*), sum(int64Value), sum(int64Value = 1) FROM NVTX_EVENTS "
                               "WHERE text = 'pooler'")
    st = stages_of(f)
    assert (st.requests_source, st.requests, len(st.batches)) == ("payload", total, n) == ("payload", 120, 48)
    assert ones == 12 and int((st.batches["size"] == 1).sum()) == ones


def test_no_size_anywhere_leaves_sizes_unknown(base, edit):
    """One payload of 0: the payload is not a size, no batch has one (size 0, the unknown), and
    the request count is unknown unless given."""
    f = edit(f"UPDATE NVTX_EVENTS SET text = 'pooler' WHERE text LIKE 'pooler n=%'",
             f"UPDATE NVTX_EVENTS SET int64Value = 0 WHERE rowid = {base[1][5][0]}")
    st = stages_of(f)
    assert (st.requests_source, st.requests, len(st.batches)) == (None, None, 48)
    assert st.batches["size"].tolist() == [0] * 48
    with Export.open(str(f)) as cap:
        given = build(cap, CONFIG, requests_override=500)
    assert (given.requests_source, given.requests) == ("--requests", 500)


def test_batch_size_from_message():
    names = np.array(["pooler", "pooler n=3", "pooler size: 7", "pooler n=3", "pooler (requests=12)"], dtype=object)
    assert batch_size_from_message(names).tolist() == [-1, 3, 7, 3, 12]
    assert batch_size_from_message(np.array([], dtype=object)).tolist() == []
    assert batch_size_from_message(np.array([f"pooler n={MAX_BATCH}"], dtype=object)).tolist() == [2 ** 31 - 1]
    for n in (str(2 ** 31), "9" * 11, "9" * 5000):     # 5000 digits: beyond int()'s own limit of 4300
        with pytest.raises(CaptureError, match="batch size beyond"):
            batch_size_from_message(np.array([f"pooler n={n}"], dtype=object))


def test_no_batch_range(base, edit):
    f = edit(f"DELETE FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'")
    st = stages_of(f)
    assert (len(st.batches), st.requests, st.requests_source, st.outside_batch) == (0, None, None, 0)
    assert per_stage(st) == {s: count(f, s) for s in STAGES} == {s: 48 for s in STAGES}


# --- dropping batches ---------------------------------------------------------------------------

def test_drop_batches_keeps_outside_stages_and_renumbers(base, edit, first):
    """Drop the first and the last batch: their stages go, the stage outside every batch stays
    outside, and each kept batch holds the stages SQL finds inside its range."""
    _, batches, threads, _ = base
    b0, prow = first
    f = edit(*copy_row(prow, start=b0[1] - 5000, end=b0[1] - 1000, globalTid=main_thread(threads[0])))
    st = stages_of(f)
    mask = np.zeros(len(st.batches), dtype=bool)
    mask[[0, -1]] = True
    kept = st.drop_batches(mask)
    assert len(kept.batches) == 46 and st.outside_batch == kept.outside_batch == 1
    assert int((kept.instances["batch"] == -1).sum()) == 1
    assert len(kept.instances) == 192 + 1 - 8
    inside = sql(f, f'SELECT b.start, count(x.rowid) FROM ({BATCHES}) b LEFT JOIN ({RANGES} AND {NM} IN {STAGES}) x '
                    'ON x.globalTid = b.globalTid AND x.start >= b.start AND x."end" <= b."end" GROUP BY b.start')
    want = dict(inside)
    got = np.bincount(kept.instances["batch"][kept.instances["batch"] >= 0], minlength=46)
    assert {int(s): int(n) for s, n in zip(kept.batches["start"], got)} == \
        {s: n for s, n in want.items() if s not in (batches[0][1], batches[-1][1])}
    assert (st.cut, st.duplicates, st.reversed, st.nested) == (kept.cut, kept.duplicates, kept.reversed, kept.nested)


# --- batch ranges cut or damaged in the middle of a thread ---------------------------------------

def test_a_batch_range_without_end_mid_thread(base, edit):
    """A batch range of the first thread with no end (NULL), in the middle of the capture: it is
    cut with the stages inside its recorded span; the later batches of the thread keep theirs;
    a parse that starts before it (after the previous batch) and ends inside its span is outside
    every batch, neither cut nor held."""
    _, batches, threads, parse = base
    mine = [b for b in batches if b[3] == threads[0]]
    before, mid = mine[9], mine[10]
    (inside,), = sql(base[0], f'SELECT count(*) {NAMED} WHERE e.eventType = 59 AND {NM} IN {STAGES} '
                              'AND e.globalTid = ? AND e.start >= ? AND e."end" <= ?', mid[3], mid[1], mid[2])
    assert inside == 4 and before[2] + 1000 < mid[1]
    prow = next(p for p in parse if p[3] == threads[0])
    f = edit(f'UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid = {mid[0]}',
             *copy_row(prow[0], start=mid[1] - 500, end=mid[1] + 1))
    st = stages_of(f)
    assert st.cut == {"parse": 1, "transfer": 1, "head": 1, "encode": 1, "pooler": 1}
    assert (len(st.batches), len(st.instances), st.outside_batch) == (47, 192 - inside + 1, 1)
    later = [b for b in mine if b[1] > mid[1]]
    held = np.isin(st.instances["batch"], np.flatnonzero(np.isin(st.batches["start"], [b[1] for b in later])))
    assert int(held.sum()) == 4 * len(later) == 4 * 13


def test_a_batch_range_without_end_before_the_first_batch(base, edit, first):
    """A copy of the first batch range that starts 1 us earlier and has no end: cut, and nothing
    else with it (every stage of its thread lies in a whole batch range)."""
    b0, _ = first
    f = edit(*copy_row(b0[0], start=b0[1] - 1000), f'UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid = '
             '(SELECT max(rowid) FROM NVTX_EVENTS)')
    st = stages_of(f)
    assert (st.cut, len(st.batches), len(st.instances), st.outside_batch) == ({"pooler": 1}, 48, 192, 0)


def test_a_batch_range_ending_at_zero(base, edit):
    """end = 0 on a batch range in the middle of the first thread: reversed (it ends before it
    starts), dropped, not nested in the batch before it; its stages lie outside every batch."""
    _, batches, threads, _ = base
    mid = [b for b in batches if b[3] == threads[0]][10]
    f = edit(f'UPDATE NVTX_EVENTS SET "end" = 0 WHERE rowid = {mid[0]}')
    st = stages_of(f)
    assert (st.reversed, st.nested, st.cut, len(st.batches), st.outside_batch) == (1, 0, {}, 47, 4)


def test_two_batch_ranges_of_zero_length_at_time_zero(base, edit, first):
    """Two batch ranges [0, 0] of one thread, `pooler n=1` and `pooler n=2`: the same span seen
    twice, so one batch (the first recorded) and one nested range, as for any other span."""
    b0, _ = first
    f = edit(*copy_row(b0[0], start=0, end=0, text="pooler n=1"), *copy_row(b0[0], start=0, end=0, text="pooler n=2"))
    (n,), = sql(f, f'SELECT count(*) {NAMED} WHERE e.eventType = 59 AND e.start = 0 AND e."end" = 0')
    st = stages_of(f)
    assert n == 2
    assert (st.nested, st.reversed, st.cut, len(st.batches), st.requests) == (1, 0, {}, 49, 121)


def test_a_range_is_a_batch_or_a_stage_never_both(base):
    """A stage named as the batch: the `pooler` ranges are the batches, and no stage instance."""
    st = stages_of(base[0], StageConfig(batch="pooler", stages=("parse", "pooler")))
    assert (len(st.batches), st.requests) == (48, 120)
    assert st.instances["stage"].tolist().count("pooler") == 0 and len(st.instances) == 48


def test_batches_are_in_start_order(base):
    """By start, then thread: the order of the per-batch table and of every per-batch figure.
    In this capture the two threads' batches interleave, so end order is another order."""
    st = stages_of(base[0])
    rows = sql(base[0], f"SELECT e.start, e.globalTid {NAMED} WHERE e.eventType = 59 AND {NM} LIKE 'pooler n=%' "
                        "ORDER BY e.start, e.globalTid")
    by_end = sql(base[0], f"SELECT e.start, e.globalTid {NAMED} WHERE e.eventType = 59 AND {NM} LIKE 'pooler n=%' "
                          'ORDER BY e."end", e.globalTid')
    assert list(zip(st.batches["start"].tolist(), st.batches["gtid"].tolist())) == rows != by_end


# --- batch ranges inside batch ranges -----------------------------------------------------------

def test_a_push_pop_batch_range_inside_another_is_nested(base, edit, first):
    """A push/pop range `pooler n=7` 10 ns inside the first batch range of its thread (another
    message): nested, whatever its message; the outer range is the batch, with its stages."""
    b0, _ = first
    f = edit(*copy_row(b0[0], start=b0[1] + 10, end=b0[2] - 10, text="pooler n=7"))
    st = stages_of(f)
    assert (st.nested, len(st.batches), st.requests) == (1, 48, 120)
    assert (st.batches["start"][0], st.batches["end"][0], st.batches["size"][0]) == (b0[1], b0[2], int(b0[4][9:]))
    assert int((st.instances["batch"] == 0).sum()) == 4


@pytest.mark.parametrize("text,nested", [(None, 1), ("pooler n=7", 0)], ids=["same-message", "other-message"])
def test_a_start_end_batch_range_inside_another(base, edit, first, text, nested):
    """A start/end range (a coroutine's) inside the first batch range of its thread: nested when it
    has the same message; with another message it is a second batch in flight on the thread."""
    b0, _ = first
    f = edit(*copy_row(b0[0], start=b0[1] + 10, end=b0[2] - 10, eventType=60, text=text or b0[4]))
    (types,), = sql(f, f"SELECT group_concat(e.eventType) {NAMED} WHERE e.start = ?", b0[1] + 10)
    st = stages_of(f)
    assert types == "60"
    assert (st.nested, len(st.batches)) == (nested, 49 - nested)
    assert st.requests == 120 + (7 if not nested else 0)


def test_start_end_batch_ranges_of_three_threads(base, edit, first):
    """Start/end batch ranges only, on three threads: [40, 310] `pooler n=1` and [50, 300]
    `pooler n=2` on one, [100, 200] `pooler n=1` on a second, [120, 180] `pooler n=1` on a third.
    The ranges of other threads lie inside each other in time, but none is inside a range of its
    own thread and message: four batches, none nested."""
    b0, _ = first
    g0 = b0[3]
    rows = [(g0 + 1, 100, 200, "pooler n=1"), (g0, 50, 300, "pooler n=2"), (g0, 40, 310, "pooler n=1"),
            (g0 + 2, 120, 180, "pooler n=1")]
    f = edit("DELETE FROM NVTX_EVENTS WHERE eventType = 59",
             *(s for g, a, b, t in rows for s in copy_row_of(base[0], b0[0], globalTid=g, start=a, end=b, text=t,
                                                              eventType=60)))
    got = sql(f, f'SELECT e.globalTid, e.start, e."end", {NM} {NAMED} WHERE e.eventType = 60 ORDER BY e.rowid')
    assert got == rows
    st = stages_of(f)
    assert (st.nested, len(st.batches), st.requests, st.cut, st.reversed) == (0, 4, 5, {}, 0)


def test_two_batch_ranges_one_inside_the_other(base, edit, first):
    """A capture of two range rows: a batch range and a push/pop one inside it."""
    b0, _ = first
    f = edit(f"DELETE FROM NVTX_EVENTS WHERE eventType = 59 AND rowid != {b0[0]}",
             *copy_row(b0[0], start=b0[1] + 10, end=b0[2] - 10, text="pooler n=7"))
    (n,), = sql(f, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59")
    st = stages_of(f)
    assert n == 2 and (st.nested, len(st.batches), st.requests) == (1, 1, int(b0[4][9:]))
