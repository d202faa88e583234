"""Validation of captures with rows missing or damaged, each a copy of a real capture edited by SQL
(tests/data/gpu25-concurrent: two executor threads of one process, 48 `pooler n=K` batch ranges,
each holding a `parse`, `transfer`, `head` and `encode`): no NVTX table with the trace flag said or
unsaid, every range cut, one stage range left or none, one thread, a PROCESSES table without its
globalPid column. Expected figures come from SQL over the edited export."""
from __future__ import annotations


import pytest

from clef_prof.analyze.judge import validate
from clef_prof.analyze.read.export import Export
from clef_prof.analyze.read.nvtx import census
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.stages import build
from clef_prof.base.config import StageConfig
from clef_prof.base.errors import CaptureError
from conftest import edited_copy, sql

NAME = "gpu25-concurrent"
STAGES = ("parse", "transfer", "head", "encode")
CONFIG = StageConfig(stages=STAGES)
IS_STAGE = f"(text IN {STAGES} OR textId IN (SELECT id FROM StringIds WHERE value IN {STAGES}))"


@pytest.fixture
def edit(capture, tmp_path):
    """edit(*statements) -> a writable copy of the capture with the statements applied."""
    n = iter(range(1000))

    def make(*statements):
        return edited_copy(capture(NAME), tmp_path / f"edited-{next(n)}.sqlite", *statements)
    return make


def presence(path):
    """nvtx_presence and stage_layout of an export, as analyze calls them."""
    with Export.open(str(path)) as cap:
        st = build(cap, CONFIG)
        return st, validate.nvtx_presence(cap, census(cap), st), validate.stage_layout(st)


NO_NVTX = "DROP TABLE NVTX_EVENTS"
FLAG = "UPDATE META_DATA_CAPTURE SET value = '{}' WHERE name LIKE '%:COLLECT_NVTX_TRACE'"


@pytest.mark.parametrize("edits,says", [
    ([FLAG.format("true")], "NVTX was traced but the program emitted no NVTX (no NVTX_EVENTS table)"),
    ([FLAG.format("false")], "NVTX was not traced (no NVTX_EVENTS table)"),
    # no flag, and none of nsys 2022.4's diagnostics either: the export does not say
    (["DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%COLLECT_NVTX_TRACE'",
      "DELETE FROM StringIds WHERE value LIKE '%NVTX%' OR value = 'Profiling has started.'"],
     "does not record whether NVTX was traced (could not tell)")], ids=["traced", "not-traced", "unknown"])
def test_no_nvtx_table_says_whether_nvtx_was_traced(edit, edits, says):
    f = edit(NO_NVTX, *edits)
    flags = sql(f, "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%COLLECT_NVTX_TRACE'")
    assert flags == ([] if "could not tell" in says else [("true",) if "was traced" in says else ("false",)])
    with pytest.raises(CaptureError) as err:
        analyze(str(f))
    assert says in str(err.value) and str(err.value).count("\n") == 0


def test_every_range_cut_is_said_as_cut_not_as_wrong_names(edit):
    f = edit("UPDATE NVTX_EVENTS SET \"end\" = NULL WHERE eventType = 59")
    (batches, stages), = sql(f, f"SELECT sum(text LIKE 'pooler n=%'), sum({IS_STAGE}) FROM NVTX_EVENTS "
                                "WHERE \"end\" IS NULL")
    st, said, layout = presence(f)
    assert (len(st.batches), len(st.instances)) == (0, 0)
    assert sum(st.cut.values()) == batches + stages == 240
    assert validate.cut_warning(st.cut) in said
    assert not any(w.startswith("no range named") or "but no stage range" in w for w in said)
    assert layout == []


def test_batches_with_one_stage_range_or_none(edit):
    (keep,), = sql(edit(), f"SELECT min(rowid) FROM NVTX_EVENTS WHERE {IS_STAGE}")
    one = edit(f"DELETE FROM NVTX_EVENTS WHERE {IS_STAGE} AND rowid != {keep}")
    (n_batches,), = sql(one, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'")
    (threads,), = sql(one, "SELECT count(DISTINCT globalTid) FROM NVTX_EVENTS WHERE eventType = 59")
    st, said, layout = presence(one)
    assert (len(st.batches), len(st.instances)) == (n_batches, 1) == (48, 1)
    assert not any("but no stage range" in w for w in said)
    # one stage range, on one of the two threads that hold batches
    assert layout == [f"stage ranges lie on {threads} threads in 1 processes; CUDA work is attributed per thread"]
    none = edit(f"DELETE FROM NVTX_EVENTS WHERE {IS_STAGE}")
    st, said, layout = presence(none)
    assert f"{n_batches} 'pooler' ranges but no stage range (parse, transfer, head, encode) in them: stage figures " \
           "are empty; check --stages or the annotation" in said
    assert layout == []


def test_one_thread(edit):
    """The second executor thread's ranges removed: the facts of the one thread left."""
    (second,), = sql(edit(), "SELECT max(globalTid) FROM NVTX_EVENTS WHERE eventType = 59")
    f = edit(f"DELETE FROM NVTX_EVENTS WHERE globalTid = {second}")
    (g, batches, requests), = sql(f, "SELECT globalTid, count(*), sum(CAST(substr(text, 10) AS INTEGER)) "
                                     "FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%' GROUP BY 1")
    (process,), = sql(f, "SELECT name FROM PROCESSES WHERE globalPid = ?", (g >> 24) << 24)
    r = analyze(str(f), CONFIG).result
    assert r.requests == requests
    (t,) = r.capture.threads
    assert (t.pid, t.tid, t.process, t.batches) == ((g >> 24) & 0xFFFFFF, g & 0xFFFFFF, process, batches) == \
        (492, 505, "python3", 24)
    assert t.stage_instances == {s: 24 for s in STAGES} and t.outside_batch_instances == {}
    assert not any("stage ranges lie on" in w for w in r.warnings)


def test_processes_without_global_pid(edit):
    """A PROCESSES table of another layout (no globalPid): the process name is unknown, not an error."""
    f = edit("ALTER TABLE PROCESSES DROP COLUMN globalPid")
    r = analyze(str(f), CONFIG).result
    assert [(t.tid, t.process, t.batches) for t in r.capture.threads] == [(505, None, 24), (506, None, 24)]
    g = edit("DROP TABLE PROCESSES")
    assert [t.process for t in analyze(str(g), CONFIG).result.capture.threads] == [None, None]
