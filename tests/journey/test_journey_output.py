"""The journey in analyze's outputs (terminal within 80 columns, Markdown, JSON), the CSV of
`clef-prof export --csv`, Capture.requests and the report's waterfall, on the GPU recording."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import clef_prof
from clef_prof.analyze.pipeline import analyze
from clef_prof.explore import svg, text
from clef_prof.explore.html import render_html
from conftest import ROOT
from journey_oracle import compute

NAME = "gpu25-journey"


@pytest.fixture(scope="module")
def gpu(capture):
    return analyze(str(capture(NAME)))


def test_terminal_section_fits_80_columns(capture):
    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", str(capture(NAME))], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin",
                                                                         "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    out = p.stdout
    start = out.index("request journey:")
    section = out[start:out.index("Findings", start)].splitlines()
    assert len(section) >= 16 and all(len(line) <= 80 for line in section), max(section, key=len)
    row = next(line for line in section if line.startswith("queue "))
    assert row.split()[1] == "2.779"          # mean ms per request


def test_markdown_and_json(gpu):
    md = text.render_markdown(gpu.result)
    assert "**request journey**" in md and "| ↳ head |" in md and "| unattributed |" in md
    doc = json.loads(text.render_json(gpu.result))
    j = doc["journey"]
    assert list(j["segments"]) == ["receive", "queue", "batch", "after_batch", "encode", "send", "unattributed"]
    assert set(j["segments"]["queue"]) == {"mean_ms", "p50_ms", "p99_ms", "share_pct", "tail_mean_ms",
                                          "tail_share_pct"}
    assert j["request_ranges"] == 2225 and j["listed"]["cut_by_window"]


def test_csv_rows_against_sql(capture, tmp_path):
    out = tmp_path / "j.csv"
    p = subprocess.run([sys.executable, "-m", "clef_prof", "export", "--csv", str(out), str(capture(NAME))], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == text.JOURNEY_CSV and len(rows) == 2225
    oracle = compute(capture(NAME))
    for r in rows:
        if r["cut"] == "True":
            assert r["rid"] in oracle.cut
            continue
        gtid = next(g for g, s in oracle.requests if s == int(r["start_ns"]) and (g >> 24) & 0xFFFFFF == int(r["pid"]))
        want = oracle.requests[(gtid, int(r["start_ns"]))]
        assert (gtid & 0xFFFFFF) == int(r["tid"]) and r["rid"] == want["rid"]
        assert {s: int(r[f"{s}_ns"]) for s in ("receive", "queue", "batch", "send")} == \
            {s: want[s] for s in ("receive", "queue", "batch", "send")}
        assert sum(int(r[f"{s}_ns"]) for s in ("receive", "queue", "batch", "after_batch", "encode", "send",
                                               "unattributed")) == int(r["e2e_ns"])


def test_capture_requests_frame(capture):
    df = clef_prof.open(str(capture(NAME))).requests
    assert len(df) == 2225 and df["rid"].is_unique
    seg = [f"{s}_ns" for s in ("receive", "queue", "batch", "after_batch", "encode", "send", "unattributed")]
    assert (df[seg].sum(axis=1) == df["e2e_ns"]).all()
    ok = ~df["cut"]
    assert (df.loc[ok, "batch_size"] > 0).all() and (df.loc[ok, "batch"] >= 0).all()
    assert set(df["process"]) == {"python3"}
    assert np.allclose(df.loc[ok, "host_ms_per_request"], (df.loc[ok, "batch_end_ns"] - df.loc[ok, "batch_start_ns"])
                       / 1e6 / df.loc[ok, "batch_size"])


def test_report_waterfall(gpu):
    pic, info = svg.waterfall(gpu, "p50,p99")
    t = gpu.journeys
    ok = ~t["cut"] & (t["batch"] >= 0)
    e2e = t["e2e_ns"][ok]
    tail = int((e2e >= np.percentile(e2e, 99)).sum())
    assert info["rows"] == 1 + tail == pic.count("<g data-request=")
    drawn = {s: len(re.findall(f'data-segment="{s}"', pic)) for s in info["segments"]}
    assert drawn == info["segments"] and drawn["batch"] == info["rows"] and drawn["queue"] == info["rows"]
    page = render_html(gpu)
    assert "<h2>Request journeys</h2>" in page and page.count('aria-labelledby="waterfall-t') == 1
