"""Validation at its edges (issue 21 item 8): the lost-CUDA-tail cut on a batch that starts or ends
exactly at the last CUDA record, threads against processes, and the record manifest's tolerance
on the server's own count. Real captures (or a real one changed by SQL); expected figures from SQL.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import replace

import pytest

from clef_prof.analyze.judge import validate
from clef_prof.analyze.judge.manifest import check_manifest
from clef_prof.analyze.read.manifest import edge_tolerance
from clef_prof.analyze.pipeline import analyze
from conftest import sql

POOLER = "SELECT start, \"end\" FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' ORDER BY start"



@pytest.fixture(scope="module")
def main(capture):
    path = capture("gpu-q1c16-main")
    return path, analyze(str(path)).stages, sql(path, POOLER)


def test_tail_cut_keeps_a_batch_starting_at_the_last_cuda_record(main):
    _, stages, batches = main
    assert len(batches) == len(stages.batches) == 282
    last_start = batches[-1][0]
    kept, said = validate.lost_tail(stages, last_start)
    assert kept is stages and said == []          # a batch that starts at the last record is not silent
    kept, (msg,) = validate.lost_tail(stages, last_start - 1)
    late = sum(1 for _, e in batches if e > last_start - 1)
    assert late == 1 and len(kept.batches) == 281 and f"{late} batches ending after" in msg


def test_tail_cut_keeps_a_batch_ending_at_the_last_cuda_record(main):
    _, stages, batches = main
    edge = batches[-2][1]                         # the end of the last-but-one batch
    assert batches[-1][0] > edge
    kept, (msg,) = validate.lost_tail(stages, edge)
    assert len(kept.batches) == 281 and "1 batches ending after" in msg
    kept, (msg,) = validate.lost_tail(stages, edge - 1)
    assert len(kept.batches) == 280 and "2 batches ending after" in msg


def test_tail_cut_needs_a_batch_before_the_last_record(main):
    _, stages, batches = main
    assert validate.lost_tail(stages, batches[0][0] - 1) == (stages, [])     # every batch silent: no CUDA at all
    kept, (msg,) = validate.lost_tail(stages, batches[0][0])
    assert len(kept.batches) == 0 and "282 batches ending after" in msg
    assert validate.lost_tail(stages, None) == (stages, [])


@pytest.fixture(scope="module")
def one_process(capture, tmp_path_factory):
    """cpu23-ranks with the threads of its six processes moved into the first one (SQL): one process,
    six threads, none of them replicas of another."""
    f = tmp_path_factory.mktemp("merged") / "one-process.sqlite"
    shutil.copyfile(capture("cpu23-ranks"), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        (pk,), = con.execute("SELECT min(globalTid >> 24) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchall()
        for table, col in (("NVTX_EVENTS", "globalTid"), ("NVTX_EVENTS", "endGlobalTid"), ("ThreadNames", "globalTid")):
            con.execute(f"UPDATE {table} SET {col} = ({pk} << 24) | ({col} & 16777215) WHERE {col} IS NOT NULL")
    return f


def test_threads_of_one_process_are_not_processes(one_process):
    threads = sql(one_process, "SELECT DISTINCT e.globalTid >> 24 & 16777215, e.globalTid & 16777215 FROM NVTX_EVENTS e "
                               "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) "
                               "AND COALESCE(s.value, e.text) IN ('parse', 'head') ORDER BY 2")
    (pid,) = {p for p, _ in threads}
    assert len(threads) == 6 and any(t != pid for _, t in threads)
    r = analyze(str(one_process)).result
    # one process: no rank is a replica, every batch counts (2 x 17 + 2 x 17 + 17 requests)
    assert (r.batches, r.requests) == (30, 85)
    assert "stage ranges lie on 6 threads in 1 processes (parse: 6 threads, head: 6 threads)" in "\n".join(r.warnings)
    assert sorted((t.pid, t.tid) for t in r.capture.threads) == sorted(threads)
    assert sorted(t.batches for t in r.capture.threads) == [3, 3, 6, 6, 6, 6]
    # each thread's own stages (SQL, per thread), none outside a batch; its process named from PROCESSES
    per = dict(sql(one_process, "SELECT e.globalTid & 16777215, count(*) FROM NVTX_EVENTS e JOIN StringIds s "
                                "ON s.id = e.textId WHERE s.value = 'head' GROUP BY 1"))
    (pname,), = sql(one_process, f"SELECT name FROM PROCESSES WHERE globalPid >> 24 & 16777215 = {pid}")
    for t in r.capture.threads:
        assert t.stage_instances == {"parse": per[t.tid], "head": per[t.tid]} and t.outside_batch_instances == {}
        assert t.process == pname == "python3"


def test_six_processes_are_said_as_such(capture):
    r = analyze(str(capture("cpu23-ranks"))).result
    # replicas' stages are dropped: the stages of four processes (one thread each) remain
    assert "stage ranges lie on 4 threads in 4 processes" in "\n".join(r.warnings)
    assert all(t.pid == t.tid for t in r.capture.threads) and len(r.capture.threads) == 4


def _m(server, mode, concurrency=16):
    return {"status": "ok", "export": "capture.sqlite", "load": {"concurrency": concurrency},
            "server_counts": {"requests": server}, "window": {"mode": mode}}


@pytest.mark.parametrize("server, mode, warns", [
    (1020 + 32, "nsys", False), (1020 + 33, "nsys", True),            # at least the server's count, less 2 x 16
    (1020 - 32, "profiler-api", False), (1020 - 33, "profiler-api", True),   # a profiler-api window: at most too
    (1020 - 500, "nsys", False)])                                      # an nsys window may hold more
def test_server_count_within_two_edges_of_concurrency(slice_result, server, mode, warns):
    r = replace(slice_result, path="/x/capture.sqlite", requests=1020, requests_source="message n=K")
    out = check_manifest(r, _m(server, mode))
    assert bool(out) == warns and all(f"server counted {server}" in w for w in out)


def test_server_count_ignored_for_a_count_given_by_hand(slice_result):
    r = replace(slice_result, path="/x/capture.sqlite", requests=5, requests_source="--requests")
    assert check_manifest(r, _m(1000, "profiler-api")) == []
    assert check_manifest(replace(r, requests_source="message n=K"), _m(1000, "profiler-api")) != []


@pytest.mark.parametrize("load, tol", [({"concurrency": 3}, 3), ({"concurrency": 0.5}, 1), ({"concurrency": 0}, 16),
                                       ({}, 16), ({"concurrency": "8"}, 16), (None, 16)])
def test_edge_tolerance(load, tol):
    assert edge_tolerance({"load": load}) == tol


def _bounds(**kw):
    m = {"status": "ok", "export": "capture.sqlite", "load": {"concurrency": 16},
         "client": {"capture": {"requests_inside": 1000, "requests_overlapping": 1030, "recorded_s": 2.0}},
         "server_counts": {"requests": 1000}, "window": {"mode": "profiler-api"}}
    m.update(kw)
    return m


def test_manifest_checks_skip_what_cannot_be_judged(slice_result):
    r = replace(slice_result, path="/x/capture.sqlite", requests=5, requests_source="message n=K")
    assert len(check_manifest(r, _bounds())) == 2               # below the client's bounds and the server's count
    # no request count: nothing to hold against the bounds (and no error)
    assert check_manifest(replace(r, requests=None, requests_source=None), _bounds()) == []
    # a partial capture: said once, its count not judged
    (died,) = check_manifest(r, _bounds(status="server died", status_detail="exit 137 inside the window"))
    assert "'server died': exit 137 inside the window;" in died
    (died,) = check_manifest(r, _bounds(status="interrupted"))
    assert "'interrupted'; its figures cover a partial window" in died
    # one bound missing (a manifest cut short by hand): the bounds are not judged
    for key in ("requests_inside", "requests_overlapping"):
        client = {"capture": {k: v for k, v in _bounds()["client"]["capture"].items() if k != key}}
        assert check_manifest(replace(r, requests=999), _bounds(client=client, server_counts={})) == []
    assert check_manifest(replace(r, requests=1010), _bounds(server_counts=None)) == []
    # a result without a path is not "another export"
    assert check_manifest(replace(r, path=None, requests=1010), _bounds()) == []


def test_nsys_messages_are_passed_on(slice_result):
    r = replace(slice_result, path="/x/capture.sqlite", requests=1010, requests_source="message n=K")
    said = [f"m{i}" for i in range(7)]
    (w,) = check_manifest(r, _bounds(nsys={"messages": said}))
    assert w.startswith("nsys reported while recording or exporting: m0 | m1 | m2 | m3 | m4 (+2 more)")
    assert check_manifest(r, _bounds(nsys=None)) == check_manifest(r, _bounds(nsys={"messages": None})) == []


def test_manifest_beside_an_export(tmp_path):
    from clef_prof.analyze.read.manifest import ManifestError, find_for, read

    exp = tmp_path / "capture.sqlite"
    exp.write_bytes(b"")
    m = tmp_path / "manifest.json"
    for text, found in (('{"export": "capture.sqlite"}', True), ('{"export": "other.sqlite"}', False),
                        ('{"status": "ok"}', True), ("[1, 2]", False), ("{", False)):
        m.write_text(text)
        assert (find_for(str(exp)) == str(m)) is found, text
    m.write_text("[1, 2]")
    with pytest.raises(ManifestError, match="must be a JSON object"):
        read(str(m))


# --- what was traced: the export's COLLECT_* flag, else the record manifest, else nsys' diagnostics

def _variant(capture, folder, *statements) -> str:
    folder.mkdir(exist_ok=True)
    f = folder / "capture.sqlite"
    shutil.copyfile(capture("cpu23-ranks"), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        for s in statements:
            con.execute(s)
    return str(f)


NO_CUDA = {True: "CUDA was traced but the program made no CUDA calls", False: "CUDA was not traced (record with",
           None: "does not record whether CUDA was traced (could not tell)"}
STARTED = "DELETE FROM StringIds WHERE value = 'Profiling has started.'"


FLAGS_GONE = "DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%COLLECT_CUDA_TRACE' OR name LIKE '%COLLECT_NVTX_TRACE'"


# cpu23-ranks (nsys 2023.4) records PROCESS_0:COLLECT_CUDA_TRACE=false, COLLECT_NVTX_TRACE=true; its
# diagnostics (StringIds) say profiling started and name NVTX, not CUDA
@pytest.mark.parametrize("how, statements, manifest, asked", [
    ("flag false", (), None, False),
    ("flag true", ("UPDATE META_DATA_CAPTURE SET value = 'true' WHERE name = 'PROCESS_0:COLLECT_CUDA_TRACE'",),
     None, True),
    ("diagnostics", (FLAGS_GONE,), None, False),
    ("no diagnostics", (FLAGS_GONE, STARTED), None, None),
    ("no strings at all", (FLAGS_GONE, "DROP TABLE StringIds"), None, None),
    ("a CUDA diagnostic", (FLAGS_GONE, "INSERT INTO StringIds (id, value) VALUES (99999, 'CUDA injection initialized')"),
     None, True),
    ("manifest cuda", (FLAGS_GONE,), {"trace": {"trace": "cuda,nvtx,osrt"}}, True),
    ("manifest nvtx", (FLAGS_GONE, STARTED), {"trace": {"trace": "nvtx,osrt"}}, False),
    ("manifest without trace", (FLAGS_GONE,), {"trace": None}, False)])
def test_cuda_traced_or_not(capture, tmp_path, how, statements, manifest, asked):
    f = _variant(capture, tmp_path / "v", *statements)
    if manifest is not None:
        (tmp_path / "v" / "manifest.json").write_text(json.dumps({"export": "capture.sqlite", **manifest}))
    from clef_prof.analyze.read.export import Export
    with Export.open(f) as cap:
        assert validate.trace_requested(cap, "cuda") is asked
        assert validate.trace_requested(cap, "nvtx") is (None if how == "no strings at all" else True)
    r = analyze(f).result
    assert [w for w in r.warnings if "CUDA" in w and "traced" in w and NO_CUDA[asked] in w], r.warnings


@pytest.mark.parametrize("statements, says", [
    (("DELETE FROM NVTX_EVENTS WHERE eventType IN (59, 60)",),
     "NVTX domains were created ('clef') but no range was recorded"),
    (("DELETE FROM NVTX_EVENTS",), "no NVTX at all: NVTX was traced"),
    (("DELETE FROM NVTX_EVENTS WHERE eventType != 34",
      "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid) VALUES (1, 34, 'a mark', 1)"),
     "NVTX domains were created (none) but no range was recorded"),
    # only the tools' own domains and marks (nsys' Python sampling, clef-prof's clock marks): no user NVTX
    (("DELETE FROM NVTX_EVENTS WHERE eventType != 75 OR domainId IN (SELECT e.domainId FROM NVTX_EVENTS e "
      "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 75 AND COALESCE(e.text, s.value) = 'clef')",
      "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (1, 75, 'clef-prof clock', 1, 77)",
      "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId, int64Value) "
      "VALUES (2, 34, 'clef-prof clock', 1, 77, 5)"),
     "no NVTX at all: NVTX was traced")])
def test_nvtx_present_or_not(capture, tmp_path, statements, says):
    r = analyze(_variant(capture, tmp_path / "v", *statements)).result
    assert r.batches == 0 and any(w.startswith(says) for w in r.warnings), r.warnings


@pytest.mark.parametrize("statements, says", [
    ((), "NVTX was traced but the program emitted no NVTX (no NVTX_EVENTS table)"),
    ((FLAGS_GONE, "DELETE FROM StringIds WHERE value LIKE '%NVTX%'"), "NVTX was not traced (no NVTX_EVENTS table)"),
    ((FLAGS_GONE, "DELETE FROM StringIds WHERE value LIKE '%NVTX%'", STARTED),
     "no NVTX_EVENTS table, and the export does not record whether NVTX was traced (could not tell)")])
def test_no_nvtx_table(capture, tmp_path, statements, says):
    from clef_prof.base.errors import ClefError
    f = _variant(capture, tmp_path / "v", "DROP TABLE NVTX_EVENTS", *statements)
    with pytest.raises(ClefError) as exc:
        analyze(f)
    assert says in str(exc.value)


@pytest.mark.parametrize("zeros, says", [(1, "1 of 18 'pooler' ranges say n=0: batches without requests; their host "
                                             "time and CUDA work count against the other batches' requests"),
                                         (30, "18 of 18 'pooler' ranges say n=0: batches without requests; "
                                              "per-request figures cannot be computed")])
def test_batches_of_no_request(capture, tmp_path, zeros, says):
    """Batch messages saying n=0 (SQL): said, with how many of the batches counted."""
    f = _variant(capture, tmp_path / "v", "UPDATE NVTX_EVENTS SET text = 'pooler n=0' || substr(text, instr(text, ' rid=')) "
                 f"WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS WHERE text LIKE 'pooler n=% rid=%' ORDER BY start "
                 f"LIMIT {min(zeros, 12)})",
                 *(["UPDATE NVTX_EVENTS SET text = 'pooler n=0' WHERE text LIKE 'pooler n=%' AND text NOT LIKE '% rid=%'",
                    "UPDATE NVTX_EVENTS SET text = 'pooler n=0 ' || substr(text, instr(text, 'rid=')) "
                    "WHERE text LIKE 'pooler requests=%'"] if zeros > 12 else []))
    r = analyze(f).result
    assert says in "\n".join(r.warnings), r.warnings


def test_stages_spread_over_threads_are_named(capture, tmp_path):
    """The data-parallel phase alone (SQL): stages on 2 threads in 2 processes; with one process's
    'head' ranges deleted, only 'parse' is spread."""
    dp = [p for (p,) in sql(capture("cpu23-ranks"), "SELECT DISTINCT globalTid >> 24 & 16777215 FROM NVTX_EVENTS "
                                                    "WHERE text LIKE 'pooler requests=%'")]
    others = f"eventType IN (59, 60) AND (globalTid >> 24 & 16777215) NOT IN ({dp[0]}, {dp[1]})"
    r = analyze(_variant(capture, tmp_path / "a", f"DELETE FROM NVTX_EVENTS WHERE {others}")).result
    assert (r.batches, r.requests) == (6, 17)
    assert "stage ranges lie on 2 threads in 2 processes (parse: 2 threads, head: 2 threads)" in "\n".join(r.warnings)
    head = (f"DELETE FROM NVTX_EVENTS WHERE globalTid >> 24 & 16777215 = {dp[0]} AND textId IN "
            "(SELECT id FROM StringIds WHERE value = 'head')")
    r = analyze(_variant(capture, tmp_path / "b", f"DELETE FROM NVTX_EVENTS WHERE {others}", head)).result
    assert "stage ranges lie on 2 threads in 2 processes (parse: 2 threads);" in "\n".join(r.warnings), r.warnings


def test_stages_without_batches_are_said_so(capture, tmp_path):
    f = _variant(capture, tmp_path / "v", "DELETE FROM NVTX_EVENTS WHERE text LIKE 'pooler %'")
    (heads,), = sql(f, "SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = 'head'")
    r = analyze(f).result
    assert r.batches == 0 and r.stages["head"].instances == heads == 30      # every rank's, none folded
    assert any(w.startswith("no batch range 'pooler' found") for w in r.warnings), r.warnings
    assert not any(w.startswith("no range named") for w in r.warnings)
