"""clef_prof.explore.svg, the HTML report's pictures: the SVG timeline draws the batches, stage bars,
copies, kernels and graph launches the export holds (counted by SQL on the export itself, and by
analyze's per-batch table), from the rows of its window only."""
from __future__ import annotations

import sqlite3
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from clef_prof.analyze.figures import cuda as cu
from clef_prof.analyze.pipeline import Analysis, analyze
from clef_prof.base.errors import ClefError
from clef_prof.explore import svg
from clef_prof.explore.html import render_html
from clef_prof.explore.style import (GRAPH_COLOR, LANE_BATCH, LANE_D2H, LANE_GRAPHS, LANE_H2D, LANE_KERNELS,
                                     MEMORY_COLORS, OTHER_COLOR)

TRACES = Path(__file__).resolve().parents[2] / "traces"
NS = "{http://www.w3.org/2000/svg}"

# stage instances (push/pop or start/end ranges) of one thread inside a span, by name
STAGES_SQL = """SELECT COALESCE(e.text, s.value), count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                WHERE e.eventType IN (59, 60) AND e.globalTid = ? AND e.start >= ? AND e."end" <= ?
                GROUP BY 1"""


def gpu_sql(table: str, where: str = "") -> str:
    """GPU records of `table` whose API call (same process and correlationId) ran on a thread in a span."""
    return (f"SELECT count(*) FROM {table} g JOIN {cu.RUNTIME} r ON r.correlationId = g.correlationId "
            f"AND r.globalTid >> 24 = g.globalPid >> 24 "
            f"WHERE r.globalTid = ? AND r.start >= ? AND r.\"end\" <= ? {where}")


GRAPH_CALLS_SQL = (f"SELECT count(*) FROM {cu.RUNTIME} r JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE "
                   "'cudaGraphLaunch%' AND r.globalTid = ? AND r.start >= ? AND r.\"end\" <= ?")


def lanes(text: str) -> dict[str, list[dict]]:
    """Each lane's marks: class, batch and colour of every element that carries a batch."""
    out = {}
    for g in ET.fromstring(text).iter(f"{NS}g"):
        if g.get("data-lane"):
            out[g.get("data-lane")] = [{"cls": el.get("class"), "batch": int(el.get("data-batch")),
                                        "color": el.get("fill") if el.get("fill") != "none" else el.get("stroke")}
                                       for el in g if el.get("data-batch") is not None]
    return out


def own(marks: list[dict]) -> Counter:
    return Counter(m["batch"] for m in marks if m["cls"] == "own")


@pytest.mark.parametrize("name, first, memory", [("gpu-q1c16-main", 0, "pageable"), ("gpu-q1c16-main", -4, "pageable"),
                                                 ("gpu-q1c16-pr", 100, "pinned")])
def test_timeline_marks_are_the_exports_records(capture, name, first, memory):
    path = str(capture(name))
    a = analyze(path)
    tl = svg.timeline(a, first, 4)
    drawn = lanes(tl.svg)
    b, pb = a.stages.batches, a.batch_table
    n_b = len(b)
    want = list(range(first % n_b, first % n_b + 4))
    assert tl.batches == want and [m["batch"] for m in drawn[LANE_BATCH]] == want
    assert tl.requests == int(b["size"][want].sum())
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        for i in want:
            span = (int(b["gtid"][i]), int(b["start"][i]), int(b["end"][i]))
            stages = dict(db.execute(STAGES_SQL, span).fetchall())
            for s in a.config.stages:
                assert own(drawn[s])[i] == stages.get(s, 0) == 1, (i, s)
            h2d = db.execute(gpu_sql(cu.MEMCPY, "AND g.copyKind = 1"), span).fetchone()[0]
            d2h = db.execute(gpu_sql(cu.MEMCPY, "AND g.copyKind = 2"), span).fetchone()[0]
            kernels = db.execute(gpu_sql(cu.KERNEL), span).fetchone()[0]
            graphs = db.execute(GRAPH_CALLS_SQL, span).fetchone()[0]
            assert own(drawn[LANE_H2D])[i] == h2d == pb["h2d_copies"][i] > 0     # copyCount is 1 in nsys 2023.4
            assert own(drawn[LANE_D2H])[i] == d2h == pb["d2h_copies"][i]
            assert own(drawn[LANE_KERNELS])[i] == kernels > 0
            assert own(drawn[LANE_GRAPHS])[i] == graphs == pb["graph_launches"][i]   # graph mode: launch calls
        # every H2D copy of the process in the window is drawn: the plotted batches' in colour, the rest grey
        w0, w1 = tl.window_ns
        pks = ",".join(str(int(p)) for p in np.unique(b["gtid"][want] >> 24))
        in_window = f'WHERE "end" >= {w0} AND start <= {w1} AND globalPid >> 24 IN ({pks})'
        n_h2d = db.execute(f"SELECT count(*) FROM {cu.MEMCPY} {in_window} AND copyKind = 1").fetchone()[0]
        assert len(drawn[LANE_H2D]) == n_h2d == tl.marks[LANE_H2D] + tl.other_marks[LANE_H2D]
        # and these are the only rows read: those of the window
        assert tl.rows_read["transfers"] == db.execute(f"SELECT count(*) FROM {cu.MEMCPY} {in_window}").fetchone()[0]
        assert tl.rows_read["kernels"] == db.execute(f"SELECT count(*) FROM {cu.KERNEL} {in_window}").fetchone()[0]
        assert tl.rows_read["kernels"] < db.execute(f"SELECT count(*) FROM {cu.KERNEL}").fetchone()[0] / 20
    assert {m["color"] for m in drawn[LANE_H2D] if m["cls"] == "own"} == {MEMORY_COLORS[memory]}
    assert {m["color"] for m in drawn[LANE_H2D] if m["cls"] == "other"} <= {OTHER_COLOR}
    assert {m["color"] for m in drawn[LANE_GRAPHS] if m["cls"] == "own"} == {GRAPH_COLOR}
    assert tl.h2d_marks == sum(pb["h2d_copies"][want]) and tl.notes == [
        "graphs: launch calls (the capture has no GPU record of graph executions)"]
    # the zoom: the smallest batch's copies, one mark each, all in transfer
    z = tl.zoom
    small = min(want, key=lambda i: (b["size"][i], b["start"][i]))
    assert z["batch"] == small and z["stage"] == "transfer"
    zoomed = lanes(tl.zoom_svg)
    assert len(zoomed["zoom H2D copies"]) == z["h2d_marks"] == pb["h2d_copies"][small]
    assert len(zoomed["zoom stage"]) == 1 and len(zoomed["zoom memcpy calls"]) >= 1


def test_graph_executions_and_cpu_only(capture):
    """nsys 2025.3 in graph mode records each graph execution: one per request in the pr server."""
    a = analyze(str(TRACES / "gpu25-pr-slice.sqlite"))
    tl = svg.timeline(a, 0, 3)
    assert tl.marks[LANE_GRAPHS] == tl.requests and tl.h2d_per_request == 3 and not tl.notes
    assert set(own(lanes(tl.svg)[LANE_GRAPHS])) == set(tl.batches)
    cpu = svg.timeline(analyze(str(capture("cpu23-inline"))), 2, 3)
    assert cpu.lanes == ["batch", "parse", "index", "transfer", "head", "encode"]
    assert cpu.marks["batch"] == 3 and cpu.h2d_marks == 0 and cpu.zoom_svg is None and cpu.rows_read == {}
    assert set(lanes(cpu.svg)) == set(cpu.lanes)


def test_stage_durations_one_dot_per_batch(capture):
    a = analyze(str(capture("gpu-q1c16-main")))
    root = ET.fromstring(svg.stage_durations(a))
    series = {g.get("data-series"): int(g.find(f"{NS}path").get("data-n")) for g in root.iter(f"{NS}g")}
    assert list(series) == [*a.config.stages, "pooler (batch)"]
    assert set(series.values()) == {len(a.stages.batches)}           # every stage ran in every batch
    assert root.find(f"{NS}title").text.endswith(f"({len(a.stages.batches)} batches)")


def test_timeline_errors():
    a = analyze(str(TRACES / "gpu-pr-slice.sqlite"))
    with pytest.raises(ClefError, match="past the last batch"):
        svg.timeline(a, first=500)


def test_report_never_reads_every_row(capture, monkeypatch):
    def refuse(self):
        raise AssertionError("the report read every row of the capture")

    monkeypatch.setattr(Analysis, "load_rows", refuse)
    page = render_html(analyze(str(capture("gpu-q1c16-main"))))
    assert page.count("<svg") == 3 and "198 H2D = 9.00 per request" in page
