"""Validation warnings on real captures, and on real captures damaged the way lost data looks."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from clef_prof.base import cupti
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.stages import StageConfig
from clicheck import run_main

TRACES = Path(__file__).resolve().parents[2] / "traces"


def test_wrong_names_lists_names_seen(capture):
    r = analyze(str(capture("cpu23-inline")), StageConfig(stages=("tokenize", "embed"), batch="step")).result
    assert r.batches == 0 and r.requests is None
    (w,) = [w for w in r.warnings if w.startswith("no range named")]
    assert "clef:parse (41)" in w and "clef:head (41)" in w


def test_wrong_domain(capture):
    r = analyze(str(capture("gpu-q1c16-main")), StageConfig(domain="other")).result
    assert any("no range named" in w and "clef:transfer (282)" in w for w in r.warnings)


def test_strict_exits_2_and_json_carries_warnings(capture):
    p = run_main("analyze", capture("cpu23-inline"), "--format", "json", "--strict")
    assert p.returncode == 2
    out = json.loads(p.stdout)
    assert out["warnings"] and "CUDA was not traced" in out["warnings"][0]
    assert "--strict" in p.stderr


def test_strict_passes_a_clean_capture(capture):
    assert run_main("analyze", capture("gpu25-q1c16-pr"), "--strict", "-f", "json").returncode == 0


def test_lost_cuda_tail(capture, tmp_path):
    """CUDA records that stop before NVTX does: the batches after them are excluded and said."""
    f = tmp_path / "lost.sqlite"
    shutil.copyfile(capture("gpu-q1c16-pr"), f)
    cut = 1_000_000_000
    with sqlite3.connect(f) as con:
        for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
            con.execute(f"DELETE FROM {t} WHERE start > ?", (cut,))
        late = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'pooler %' "
                           "AND [end] > (SELECT max([end]) FROM CUPTI_ACTIVITY_KIND_RUNTIME)").fetchone()[0]
    r = analyze(str(f)).result
    assert late > 20
    assert r.batches == 276 - late
    (w,) = [w for w in r.warnings if "CUDA records stop" in w]
    assert f"{late} batches" in w
    assert r.per_request.h2d_copies == 3.0  # figures over the batches that kept their CUDA records


def test_requests_override(capture):
    r = analyze(str(capture("gpu-q1c16-main")), requests=1000).result
    assert r.requests == 1000 and r.requests_source == "--requests"
    assert r.per_request.h2d_copies == 13.68


def _with_manifest(capture, tmp_path, **manifest):
    f = tmp_path / "capture.sqlite"
    shutil.copyfile(capture("gpu-q1c16-main"), f)
    (tmp_path / "manifest.json").write_text(json.dumps({"export": "capture.sqlite", "status": "ok",
                                                        "load": {"concurrency": 16}, **manifest}))
    return analyze(str(f)).result


def test_manifest_agrees_with_client_completions(capture, truth, tmp_path):
    """The capture's own client view (its truth file): 1515 completions between the acks, 1520 requests."""
    done = truth("gpu-q1c16-main")["client"]["completed_strictly_between_start_and_stop_acks"]
    # 1515 answered inside the span, at most 16 more (the concurrency) in flight at its edges
    r = _with_manifest(capture, tmp_path, client={"window": {"completions": done},
                                                  "capture": {"requests_inside": done, "requests_overlapping": done + 16}},
                       server_counts={"requests": 1520}, window={"mode": "profiler-api"})
    assert r.manifest.endswith("manifest.json")
    assert r.warnings == cupti.check("2023.4.4.54", 13000)     # nsys 2023.4 on a CUDA 13 driver, nothing else


def test_manifest_disagreement_and_dead_server_warn(capture, tmp_path):
    # the client's bounds for the recorded span say at least 1600 requests: 1520 means lost batches
    r = _with_manifest(capture, tmp_path, client={"capture": {"requests_inside": 1600, "requests_overlapping": 1616,
                                                              "recorded_s": 1.49}})
    assert any("batch ranges count 1520 requests" in w and "were lost" in w for w in r.warnings)
    r = _with_manifest(capture, tmp_path, status="server died")
    assert any("'server died'" in w for w in r.warnings)


def test_requested_stages_with_no_range_warn(tmp_path):
    """Issue 11 item 4: none of the requested names matches: a warning, and --strict exits 2."""
    p = run_main("analyze", TRACES / "gpu25-pr-slice.sqlite", "--stages", "tokenize,forward", "-f", "json", "--strict")
    assert p.returncode == 2
    assert "stages with no range in the capture: tokenize, forward" in json.loads(p.stdout)["warnings"]
    con = sqlite3.connect(f"file:{TRACES / 'gpu25-pr-slice.sqlite'}?mode=ro", uri=True)
    (n,), = con.execute("SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                        "WHERE s.value IN ('tokenize', 'forward')").fetchall()
    con.close()
    assert n == 0


def _cut_at_the_end(capture, folder, window: dict | None):
    """The main capture with its last batch range left open, as a window closed mid-batch leaves it,
    and a record manifest beside it (with or without the window record opened)."""
    folder.mkdir()
    f = folder / "capture.sqlite"
    shutil.copyfile(capture("gpu-q1c16-main"), f)
    f.chmod(0o644)
    con = sqlite3.connect(f)
    con.execute("UPDATE NVTX_EVENTS SET [end] = NULL WHERE rowid = (SELECT rowid FROM NVTX_EVENTS "
                "WHERE text LIKE 'pooler n=%' ORDER BY start DESC LIMIT 1)")
    con.commit()
    con.close()
    (folder / "manifest.json").write_text(json.dumps({"export": "capture.sqlite", "status": "ok",
                                                      "load": {"concurrency": 16},
                                                      **({"window": window} if window else {})}))
    return f


def test_ranges_cut_at_a_window_record_opened_are_no_finding(capture, tmp_path):
    """cut-window fires (and warns) for a capture whose window nobody accounts for; for one whose
    manifest says record opened the window, the cut is expected: no finding, no warning, the count
    kept in excluded.cut_at_edges, and compare does not call it 'still there'."""
    plain = analyze(str(_cut_at_the_end(capture, tmp_path / "plain", None))).result
    assert [f.id for f in plain.findings if f.id == "cut-window"] == ["cut-window"]
    assert any("ranges cut at the capture edges" in w for w in plain.warnings)
    f = _cut_at_the_end(capture, tmp_path / "rec", {"mode": "profiler-api"})
    rec = analyze(str(f)).result
    assert rec.window_by_record and rec.excluded.cut_at_edges == plain.excluded.cut_at_edges
    assert sum(rec.excluded.cut_at_edges.values()) >= 1 and rec.batches == plain.batches
    assert "cut-window" not in [x.id for x in rec.findings]
    assert not any("ranges cut at the capture edges" in w for w in rec.warnings)
    assert rec.to_json()["window_by_record"] is True
    p = run_main("compare", "--arm", f"main={f}", "--arm", f"pr={f}", "-f", "json")
    assert "cut-window" not in [x["id"] for x in json.loads(p.stdout)["findings"]]
