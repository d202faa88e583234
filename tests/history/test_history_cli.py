"""`clef-prof history DB`: series, change points (exact counts on real GPU captures; noisy figures by
e-divisive), the gate's exit codes and lines, 80 columns, Markdown, JSON, the trend page and the
pandas frame."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from clef_prof.history import store
from clicheck import run_main

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"


def analyzed(tmp: Path, name: str) -> dict:
    f = tmp / f"{name}.json"
    if not f.exists():
        p = run_main("analyze", TRACES / f"{name}.sqlite", "-f", "json", "-o", f)
        assert p.returncode == 0, p.stderr
    return json.loads(f.read_text())


@pytest.fixture(scope="module")
def gpu_db(tmp_path_factory) -> tuple[Path, dict, dict]:
    """6 results of the real main slice, then 4 of the pr slice (each a distinct payload), one commit each."""
    tmp = tmp_path_factory.mktemp("gpu")
    main, pr = analyzed(tmp, "gpu-main-slice"), analyzed(tmp, "gpu-pr-slice")
    db = tmp / "h.db"
    for i, (doc, commit) in enumerate([(main, f"m{i}") for i in range(6)] + [(pr, f"p{i}") for i in range(4)]):
        d = dict(doc, path=f"{doc['path']}#{i}")
        prov = store.provenance(commit, "main", "gpu-host", f"2025-06-01T12:{i:02d}:00Z")
        store.add(db, [(d, "test")], prov)
    return db, main, pr


def test_exact_counts_change_exactly_between_the_two_commits(gpu_db):
    db, main, pr = gpu_db
    p = run_main("history", db, "-f", "json", "--metric", "per_request.*", "--metric", "stages.transfer.*")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    by = {s["metric"]: s for s in doc["series"]}
    copies = by["per_request.h2d_copies"]
    assert copies["exact"] and copies["scale"] == "exact"
    assert [v["value"] for v in copies["points"]] == [main["per_request"]["h2d_copies"]] * 6 + \
        [pr["per_request"]["h2d_copies"]] * 4
    (c,) = copies["changes"]
    assert (c["index"], c["from_commit"], c["to_commit"], c["commit_range"]) == (6, "m5", "p0", "m5..p0")
    assert (c["before"], c["after"], c["exact"], c["p"], c["ci"]) == (main["per_request"]["h2d_copies"],
                                                                    pr["per_request"]["h2d_copies"], True, None, None)
    assert c["change_pct"] == pytest.approx(100 * (pr["per_request"]["h2d_copies"] / main["per_request"]["h2d_copies"]
                                                   - 1))
    assert c["direction"] == "down" and not c["regression"]
    # a count equal in both captures has no change point; host times repeated exactly are constant: none
    for name, s in by.items():
        values = {v["value"] for v in s["points"]}
        assert (len(s["changes"]) > 0) == (len(values) > 1 and s["exact"]) or not s["exact"], name


def test_gate_fires_on_the_newest_commits_exact_change_only(tmp_path, gpu_db):
    db, main, pr = gpu_db
    p = run_main("history", db, "--fail-if-new-change", "per_request.h2d_copies")
    assert p.returncode == 0, p.stderr           # the change came 4 commits ago: not new
    assert "history gate: per_request.h2d_copies: passed (10 results" in p.stderr
    # one more commit whose copies went back to main's: new
    d = dict(main, path="again")
    store.add(db, [(d, "test")], store.provenance("x1", "main", "gpu-host", "2025-06-01T13:00:00Z"))
    p = run_main("history", db, "--fail-if-new-change", "per_request.h2d_copies,per_request.kernel_launches")
    assert p.returncode == 1, p.stderr
    line = next(ln for ln in p.stderr.splitlines() if "h2d_copies" in ln)
    assert "fired: new change point" in line and "exact change" in line and "commits p3..x1" in line, line
    assert "regression" in line
    p = run_main("history", db, "--fail-if-new-change", "no.such.metric")
    assert p.returncode == 3 and "no series matches no.such.metric: not judged" in p.stderr


def _series_db(tmp: Path, values, metric="stages.head.host_ms_per_request", commits=None) -> Path:
    """A store whose results are synthetic analyze payloads holding `values` (host ms per request)."""
    db = tmp / "s.db"
    for i, v in enumerate(values):
        doc = {"schema": "clef-prof/analyze/1", "path": f"cap{i}", "config": {"stages": ["head"]},
               "per_request": {"pooler_host_ms": float(v) * 2},
               "stages": {"head": {"host_ms_per_request": float(v)}}}
        prov = store.provenance(commits[i] if commits else f"c{i:02d}", "main", "h", f"2025-06-01T00:{i:02d}:00Z")
        store.add(db, [(doc, "test")], prov)
    return db


def test_a_noisy_shift_found_with_its_size_interval_and_commits(tmp_path):
    rng = np.random.default_rng(4)
    v = 0.1 * np.exp(rng.normal(0, 0.02, 24))
    v[16:] *= 1.2
    db = _series_db(tmp_path, v)
    doc = json.loads(run_main("history", db, "-f", "json", "--metric", "stages.head.*").stdout)
    (s,) = doc["series"]
    (c,) = s["changes"]
    assert (c["index"], c["commit_range"], s["scale"]) == (16, "c15..c16", "log")
    geo = [float(np.exp(np.log(v[a:b]).mean())) for a, b in ((0, 16), (16, 24))]
    assert (c["before"], c["after"]) == pytest.approx(geo)
    assert c["change_pct"] == pytest.approx(100 * (geo[1] / geo[0] - 1))
    assert c["ci_pct"][0] < 20 < c["ci_pct"][1] and c["ci_pct"][0] > 10
    assert c["p"] <= 0.01 and c["regression"]
    # the gate: the change is 8 results old, not new; it was new when its third result came
    assert run_main("history", db, "--fail-if-new-change", "stages.head.*").returncode == 0
    (tmp_path / "early").mkdir()
    early = _series_db(tmp_path / "early", v[:19])
    p = run_main("history", early, "--fail-if-new-change", "stages.head.host_ms_per_request")
    assert p.returncode == 1 and "fired: new change point +" in p.stderr, p.stderr
    assert "1 noisy series judged at 1% each: family-wise false-alarm rate at most 1%" in p.stderr


def test_gate_on_a_short_series_is_not_judged(tmp_path):
    db = _series_db(tmp_path, [0.1, 0.11, 0.1, 0.12, 0.1])
    p = run_main("history", db, "--fail-if-new-change", "stages.head.host_ms_per_request")
    assert p.returncode == 3, p.stderr
    assert "not judged: 5 result(s): at least 8 are needed" in p.stderr


def test_terminal_report_fits_80_columns_and_cuts_no_number(tmp_path, gpu_db):
    db, _, _ = gpu_db
    p = run_main("history", db)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    assert "per_request.h2d_copies" in p.stdout and "Change points" in p.stdout
    # every figure of the JSON's change points is printed whole on one line
    doc = json.loads(run_main("history", db, "-f", "json").stdout)
    text = p.stdout
    for s in doc["series"]:
        for c in s["changes"]:
            assert f"{c['change_pct']:+.1f}%" in text and c["commit_range"] in text


def test_markdown_and_json_contract(tmp_path, gpu_db):
    db, _, _ = gpu_db
    md = run_main("history", db, "-f", "markdown").stdout
    assert md.startswith("### clef-prof history") and "| series | results | newest | unit | change points |" in md
    doc = json.loads(run_main("history", db, "-f", "json").stdout)
    assert doc["schema"] == "clef-prof/history-report/1" and doc["results"] >= 10
    assert set(doc) == {"schema", "store", "results", "filters", "method", "series", "gate", "notes"}
    assert set(doc["method"]) >= {"method", "sig_level", "permutations", "min_size", "alpha", "seed", "last"}
    s = doc["series"][0]
    assert set(s) == {"name", "kind", "series", "metric", "unit", "exact", "scale", "dropped", "points", "changes"}
    assert set(s["points"][0]) == {"id", "time", "commit", "branch", "host", "value"}
    empty = json.loads(run_main("history", db, "-f", "json", "--branch", "nope").stdout)
    assert empty["series"] == []


def test_trend_page_one_chart_per_series_change_points_marked(tmp_path, gpu_db):
    db, _, _ = gpu_db
    out = tmp_path / "trends.html"
    p = run_main("history", db, "--html", out, "--metric", "per_request.*")
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    doc = json.loads(run_main("history", db, "-f", "json", "--metric", "per_request.*").stdout)
    charts = re.findall(r'<figure data-series="([^"]+)">', page)
    assert len(charts) == len(doc["series"]) and page.count("<svg") == len(doc["series"])
    marks = re.findall(r'<g class="change" data-index="(\d+)"><title>([^<]+)</title>', page)
    want = [(str(c["index"]), c["commit_range"]) for s in doc["series"] for c in s["changes"]]
    assert [(i, re.search(r"commits (\S+)", t).group(1)) for i, t in marks] == want and want
    assert page.count("<circle") == sum(len(s["points"]) for s in doc["series"])
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")     # self-contained


def test_pandas_frame_in_the_notebook_api(gpu_db):
    import clef_prof

    db, main, pr = gpu_db
    df = clef_prof.history_frame(db, metrics=["per_request.h2d_copies"])
    assert list(df.columns) == ["id", "time", "commit", "branch", "host", "kind", "series", "metric", "unit", "value",
                                "exact", "segment", "level", "change_point"]
    assert df["commit"].tolist()[:10] == [f"m{i}" for i in range(6)] + [f"p{i}" for i in range(4)]
    assert df.loc[df.change_point, "commit"].tolist()[0] == "p0"
    assert df["segment"].tolist()[:10] == [0] * 6 + [1] * 4
    assert df["level"].iloc[0] == main["per_request"]["h2d_copies"]
    assert str(df["time"].dtype).startswith("datetime64")
