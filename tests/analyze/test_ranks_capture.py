"""Replica ranks, both NVTX range kinds and `requests=K` on a committed real capture (CPU-only),
and the per-request D2H figure (issue 21 item 8).

tests/data/cpu23-ranks.sqlite.xz is a real nsys 2023.4 recording of tests/programs/ranks_capture.py:
three phases of two spawned workers each, one after another: tensor-parallel replicas with request
ids (push/pop batch ranges, eventType 59), replicas without ids (start/end batch ranges, eventType
60), and data-parallel ranks whose batch messages say `requests=K`. Every expected figure comes from
the program (its batch sizes) and from SQL over the export, never from analyze's own code.
"""
from __future__ import annotations

import shutil
import sqlite3

import pytest

from clef_prof.analyze.pipeline import analyze
from conftest import sql

NAME = "cpu23-ranks"
SIZES = (3, 1, 4, 2, 5, 2)

# per process: its batch ranges, the sizes their messages give (n=K or requests=K), the range kinds
BATCHES_SQL = """
SELECT globalTid >> 24 & 16777215 AS pid, count(*), min(start),
       sum(CAST(CASE WHEN text LIKE 'pooler n=%' THEN substr(text, 10)
                     ELSE substr(text, 17) END AS INTEGER)),
       group_concat(DISTINCT eventType)
FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND (text LIKE 'pooler n=%' OR text LIKE 'pooler requests=%')
GROUP BY pid ORDER BY min(start)
"""



@pytest.fixture(scope="module")
def phases(capture):
    """[(pid, batches, requests, range kinds)] of the two processes of each phase, in time order."""
    rows = sql(capture(NAME), BATCHES_SQL)
    assert len(rows) == 6, rows
    out = [sorted(rows[i:i + 2]) for i in (0, 2, 4)]
    return [[(pid, n, req, kinds) for pid, n, _, req, kinds in pair] for pair in out]


@pytest.fixture(scope="module")
def result(capture):
    return analyze(str(capture(NAME))).result


def test_the_capture_holds_what_the_program_ran(phases, truth):
    tp_rid, tp_sizes, dp = phases
    total = sum(SIZES)
    assert [(n, req, kinds) for _, n, req, kinds in tp_rid] == [(6, total, "59")] * 2
    assert [(n, req, kinds) for _, n, req, kinds in tp_sizes] == [(6, total, "60")] * 2
    assert sorted((n, req) for _, n, req, _ in dp) == [(3, sum(SIZES[1::2])), (3, sum(SIZES[0::2]))]
    assert {kinds for *_, kinds in dp} == {"59"}
    assert truth(NAME)["ground_truth"]["requests"] == 3 * total


def test_replica_ranks_count_once_and_data_parallel_ranks_all(result, phases):
    tp_rid, tp_sizes, dp = phases
    # a replica pair counts its requests once, data-parallel ranks each count theirs
    assert result.requests == tp_rid[0][2] + tp_sizes[0][2] + dp[0][2] + dp[1][2] == 51
    assert result.batches == tp_rid[0][1] + tp_sizes[0][1] + dp[0][1] + dp[1][1] == 18
    assert result.stages["head"].instances == result.stages["parse"].instances == 18
    ranks = {x.pid: x for x in result.ranks}
    assert set(ranks) == {pid for pair in phases for pid, *_ in pair}
    for (first, n, req, _), (second, *_) in (tp_rid, tp_sizes):
        assert ranks[first].counted and ranks[first].first_rank_pid == first
        assert not ranks[second].counted and ranks[second].first_rank_pid == first
        assert (ranks[second].batches, ranks[second].requests) == (n, req)
    for pid, n, req, _ in dp:
        assert ranks[pid].counted and ranks[pid].first_rank_pid == pid
        assert (ranks[pid].batches, ranks[pid].requests) == (n, req)
    # matched without request ids (by sizes and times): said, with what the count would lack
    judged = [w for w in result.warnings if "taken for a replica rank" in w]
    (first, n, req, _), (second, *_) = tp_sizes
    assert judged == [w for w in judged if w.startswith(f"pid {second} was taken for a replica rank of pid {first} ")]
    assert len(judged) == 1 and f"its {n:,} batches ({req:,} requests) are missing from the count" in judged[0]
    assert f"({n:,} of its {n:,} batches and {n:,} of pid {first}'s {n:,} have none)" in judged[0]


@pytest.mark.parametrize("side", [0, 1])
def test_a_replica_pair_with_ids_on_one_side_is_judged_without_ids(capture, tmp_path, phases, side):
    """One process of the pair with request ids loses them (its messages cut before `rid=`), the
    first rank or its replica: ids are compared only where both batches have one, so the pair is
    matched by sizes and times, and that is said."""
    (first, n, req, _), (second, *_) = phases[0]
    gone, kept = (first, second) if side == 0 else (second, first)
    f = _copy(capture, tmp_path, "UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ' rid=') - 1) "
              f"WHERE text LIKE 'pooler n=% rid=%' AND (globalTid >> 24 & 16777215) = {gone}")
    assert sql(f, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=% rid=%' "
                  f"AND (globalTid >> 24 & 16777215) = {kept}") == [(n,)]
    r = analyze(f).result
    assert (r.requests, r.batches) == (51, 18)
    judged = sorted(w.split(" was taken")[0] for w in r.warnings if "taken for a replica rank" in w)
    assert judged == sorted([f"pid {second}", f"pid {phases[1][1][0]}"])
    said = next(w for w in r.warnings if w.startswith(f"pid {second} was taken for a replica rank of pid {first} "))
    assert f"its {n:,} batches ({req:,} requests)" in said
    bare = (0, n) if side == 0 else (n, 0)          # batches without ids: the replica's, the first rank's
    assert f"({bare[0]:,} of its {n:,} batches and {bare[1]:,} of pid {first}'s {n:,} have none)" in said


def _copy(capture, tmp_path, *statements) -> str:
    f = tmp_path / "changed.sqlite"
    shutil.copyfile(capture(NAME), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        for s in statements:
            con.execute(s)
    return str(f)


@pytest.mark.parametrize("kind", [59, 60, 70, 71])
def test_push_pop_and_start_end_ranges_count_alike(capture, tmp_path, result, kind):
    """Every range rewritten as one kind (59 push/pop, 60 start/end, 70/71 their twins from an
    imported NVTXT file, which NVIDIA's own stats scripts read alike): the same figures."""
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET eventType = {kind} WHERE eventType IN (59, 60)")
    assert sql(f, "SELECT DISTINCT eventType FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)") == [(kind,)]
    r = analyze(f).result
    assert (r.requests, r.batches, r.stages["head"].instances) == (51, 18, 18)
    assert [(x.pid, x.counted, x.batches, x.requests) for x in r.ranks] == \
        [(x.pid, x.counted, x.batches, x.requests) for x in result.ranks]


def test_requests_k_is_a_batch_size(capture, tmp_path, result, phases):
    """`requests=K` reads as the batch size: spelled `n=K` instead, the figures stay; with the size
    removed from the data-parallel messages, the request count is unknown (not 34)."""
    assert result.requests_source is not None
    same = _copy(capture, tmp_path, "UPDATE NVTX_EVENTS SET text = replace(text, 'pooler requests=', 'pooler n=')")
    r = analyze(same).result
    assert (r.requests, r.batches) == (result.requests, result.batches) == (51, 18)
    gone = tmp_path / "gone"
    gone.mkdir()
    f = _copy(capture, gone, "UPDATE NVTX_EVENTS SET text = replace(text, 'pooler requests=', 'pooler k=')")
    r = analyze(f).result
    assert r.batches == 18 and r.requests is None and r.per_request.pooler_host_ms is None
    assert any("batch size not found" in w for w in r.warnings)
    # a count given by hand is the request source: no warning, figures per those requests
    r = analyze(f, requests=40).result
    assert (r.requests, r.requests_source) == (40, "--requests")
    assert not any("batch size not found" in w for w in r.warnings)
    assert r.per_request.pooler_host_ms == pytest.approx(r.pooler.host_ms_total / 40)


def test_d2h_per_request_counts_d2h_copies(capture):
    """gpu-q1c16-main copies once device-to-host per batch (its truth) and 9 times host-to-device per
    request: the per-request D2H figure is the D2H count (SQL, copyKind 2) over the requests."""
    path = capture("gpu-q1c16-main")
    (d2h,), = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2")
    (req,), = sql(path, "SELECT SUM(CAST(substr(text, 10) AS INT)) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'")
    (batches,), = sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'")
    assert (d2h, req, batches) == (282, 1520, 282)
    r = analyze(str(path)).result
    assert r.per_request.d2h_copies == pytest.approx(d2h / req)
    assert r.stages["head"].cuda_per_request.d2h_copies == pytest.approx(d2h / req)
    assert r.per_request.h2d_copies == 9.0 != r.per_request.d2h_copies


def test_one_batch_of_six_differing_keeps_ranks_apart(capture, tmp_path, phases):
    """Replicas match at least 90% of their batches: the second replica of the sizes-only phase with
    one batch size changed (3 -> 9) matches 5 of 6 (83%), so both ranks count."""
    second = phases[1][1][0]
    first_batch = (f"(SELECT rowid FROM NVTX_EVENTS WHERE text = 'pooler n=3' AND globalTid >> 24 & 16777215 = {second} "
                   "ORDER BY start LIMIT 1)")
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET text = 'pooler n=9' WHERE rowid = {first_batch}")
    assert sql(f, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'pooler n=9'") == [(1,)]
    r = analyze(f).result
    assert (r.batches, r.requests) == (24, 51 + sum(SIZES) - 3 + 9)
    assert all(x.counted for x in r.ranks if x.pid in (phases[1][0][0], second))


def test_same_sizes_half_a_batch_apart_are_not_replicas(capture, tmp_path, phases):
    """Without ids, twins must overlap by half the shorter batch: the second replica's ranges moved
    later (SQL) so that each batch overlaps its twin by less than half, but still starts before the
    twin's next batch, make two ranks that count apart."""
    import numpy as np

    first, second = phases[1][0][0], phases[1][1][0]
    rows = {p: np.array(sql(capture(NAME), f"SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType = 60 AND "
                                           f"globalTid >> 24 & 16777215 = {p} ORDER BY start"))
            for p in (first, second)}
    (sa, ea), (sb, eb) = rows[first].T, rows[second].T
    shorter = np.minimum(ea - sa, eb - sb)

    def apart(s):       # every batch overlaps its twin by less than half the shorter one
        return bool((2 * (np.minimum(ea, eb + s) - np.maximum(sa, sb + s)) < shorter).all())

    shift = next(s for s in range(0, 30_000_000, 50_000) if apart(s))
    assert (sb[:-1] + shift < sa[1:]).all()         # the nearest batch before it is still its twin
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET start = start + {shift}, \"end\" = \"end\" + {shift} "
                                 f"WHERE globalTid >> 24 & 16777215 = {second}")
    r = analyze(f).result
    assert (r.batches, r.requests) == (24, 51 + sum(SIZES))
    assert all(x.counted for x in r.ranks if x.pid in (first, second))


def test_a_single_batch_range(capture, tmp_path):
    """One batch range left (SQL deletes the others): one batch, its size, its rank."""
    keep = "(SELECT rowid FROM NVTX_EVENTS WHERE text LIKE 'pooler n=% rid=%' ORDER BY start LIMIT 1)"
    f = _copy(capture, tmp_path, f"DELETE FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND text LIKE 'pooler %' "
                                 f"AND rowid != {keep}")
    ((text, pid),) = sql(f, "SELECT text, globalTid >> 24 & 16777215 FROM NVTX_EVENTS WHERE text LIKE 'pooler %'")
    r = analyze(f).result
    assert (r.batches, r.requests) == (1, int(text.split()[1][2:])) == (1, 3)
    assert not any("no batch range" in w or "ranges but no stage range" in w for w in r.warnings), r.warnings
    assert [(x.pid, x.counted, x.batches) for x in r.ranks] == [(pid, True, 1)]


def _rank_sql(pid: int) -> str:
    return f"globalTid >> 24 & 16777215 = {pid}"


@pytest.mark.parametrize("which", [0, 1])
def test_both_ranks_must_match_each_other(capture, tmp_path, phases, which):
    """Matching is checked both ways: one rank of the ids phase whose six batches all carry the first
    batch's ids matches the other rank's batches only one way (6 of its batches have a twin there,
    1 of the other's has one here), so the two count apart. Either rank, as first or second."""
    pid = phases[0][which][0]
    (first_rid,) = sql(capture(NAME), f"SELECT substr(text, instr(text, ' rid=')) FROM NVTX_EVENTS WHERE "
                                      f"{_rank_sql(pid)} AND text LIKE 'pooler n=%' ORDER BY start LIMIT 1")[0]
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ' rid=') - 1) || "
                                 f"'{first_rid}' WHERE {_rank_sql(pid)} AND text LIKE 'pooler n=%'")
    assert sql(f, f"SELECT count(DISTINCT substr(text, instr(text, ' rid='))) FROM NVTX_EVENTS WHERE "
                  f"{_rank_sql(pid)} AND text LIKE 'pooler n=%'") == [(1,)]
    r = analyze(f).result
    assert (r.batches, r.requests) == (24, 51 + sum(SIZES))
    assert all(x.counted for x in r.ranks if x.pid in (phases[0][0][0], phases[0][1][0]))


def test_a_replica_without_ids_matches_by_size_and_time(capture, tmp_path, phases):
    """Ids on one rank only: its replica is matched by size and time, as without ids."""
    second = phases[0][1][0]
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ' rid=') - 1) "
                                 f"WHERE {_rank_sql(second)} AND text LIKE 'pooler n=% rid=%'")
    r = analyze(f).result
    assert (r.batches, r.requests) == (18, 51)
    assert [x.counted for x in r.ranks if x.pid == second] == [False]


def test_ids_match_replicas_far_apart_in_time(capture, tmp_path, phases):
    """With ids, a twin may be anywhere in the other process: the second rank of the ids phase moved
    two batches later (SQL) still replicates the first."""
    first, second = phases[0][0][0], phases[0][1][0]
    starts = [s for (s,) in sql(capture(NAME), f"SELECT start FROM NVTX_EVENTS WHERE {_rank_sql(first)} AND "
                                               "text LIKE 'pooler n=%' ORDER BY start")]
    shift = starts[2] - starts[0] + 1
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET start = start + {shift}, \"end\" = \"end\" + {shift} "
                                 f"WHERE {_rank_sql(second)}")
    r = analyze(f).result
    assert (r.batches, r.requests) == (18, 51)


@pytest.mark.parametrize("which", [0, 1])
def test_replica_batches_of_unequal_length_match_on_the_shorter(capture, tmp_path, phases, which):
    """Sizes-only replicas, one rank's batch ranges cut to 40% of their length (SQL): each lies inside
    its twin, overlapping all of the shorter one, so they still replicate."""
    pid = phases[1][which][0]
    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET \"end\" = start + (\"end\" - start) * 2 / 5 "
                                 f"WHERE {_rank_sql(pid)} AND text LIKE 'pooler n=%'")
    r = analyze(f).result
    assert r.batches == 18 and r.requests == 51


def test_two_processes_only(capture, tmp_path, phases):
    """A capture of the ids phase alone (the other phases' rows deleted): two replicas, 17 requests."""
    keep = " OR ".join(_rank_sql(pid) for pid, *_ in phases[0])
    f = _copy(capture, tmp_path, f"DELETE FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND NOT ({keep})")
    r = analyze(f).result
    assert (r.batches, r.requests) == (6, sum(SIZES))
    assert sorted(x.counted for x in r.ranks) == [False, True]


def test_ninety_percent_matched_is_enough(capture, tmp_path, phases):
    """The match share counts at exactly 90%: the sizes-only pair given four more batches each (copies
    of their first four, 100 ms later, by SQL) has 10 batches a rank; with one size changed 9 of 10
    match, and the two still replicate."""
    first, second = phases[1][0][0], phases[1][1][0]

    def more(pid):
        return (f"INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId) "
                f"SELECT start + 100000000, \"end\" + 100000000, eventType, text, globalTid, domainId FROM NVTX_EVENTS "
                f"WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS WHERE eventType = 60 AND {_rank_sql(pid)} "
                f"ORDER BY start LIMIT 4)")
    one = (f"UPDATE NVTX_EVENTS SET text = 'pooler n=9' WHERE rowid = (SELECT rowid FROM NVTX_EVENTS WHERE "
           f"text = 'pooler n=3' AND {_rank_sql(second)} ORDER BY start LIMIT 1)")
    f = _copy(capture, tmp_path, more(first), more(second), one)
    assert sql(f, f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60 AND {_rank_sql(second)}") == [(10,)]
    r = analyze(f).result
    extra = sum(SIZES[:4])
    assert (r.batches, r.requests) == (22, 51 + extra)
    assert [x.counted for x in r.ranks if x.pid == second] == [False]


@pytest.mark.parametrize("n, ok", [(2**31 - 1, True), (2**31, False)])
def test_the_largest_batch_size(capture, tmp_path, n, ok):
    """A batch of 2^31 - 1 requests is read; one more is a damaged export, refused in one line."""
    from clef_prof.base.errors import CaptureError

    f = _copy(capture, tmp_path, f"UPDATE NVTX_EVENTS SET text = 'pooler n={n}' WHERE rowid = (SELECT rowid FROM "
                                 "NVTX_EVENTS WHERE text LIKE 'pooler requests=%' ORDER BY start LIMIT 1)")
    if ok:
        assert analyze(f).result.requests == 51 - sql_dp_first(capture) + n
    else:
        with pytest.raises(CaptureError, match="beyond 2147483647 requests"):
            analyze(f)


def sql_dp_first(capture) -> int:
    """The size of the first data-parallel batch (the one the test above rewrites)."""
    ((text,),) = sql(capture(NAME), "SELECT text FROM NVTX_EVENTS WHERE text LIKE 'pooler requests=%' "
                                    "ORDER BY start LIMIT 1")
    return int(text.split()[1].split("=")[1])
