"""The output of analyze and compare at 80 columns, piped: ASCII, no line wider in bytes, nothing cut ('…'),
every figure whole. The host ms per request of each stage is checked against plain SQL over the
export (Σ range duration / Σ n=K of the batch ranges), as printed at 80 columns."""
from __future__ import annotations

import sqlite3

import pytest

from clicheck import run_main
from conftest import ROOT

TRACES = sorted((ROOT / "traces").glob("*.sqlite"))


def _fits(text: str, width: int = 80) -> None:
    # a line may be wider only where it is a path, which is never split (a checkout in a deep folder)
    wide = [line for line in text.splitlines() if len(line.encode()) > width and not
            (" " not in line.strip() and "/" in line)]
    assert not wide, wide
    assert "…" not in text and text.isascii()


def _sql_host_ms_per_request(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("SELECT COALESCE(e.text, s.value), e.[end] - e.start FROM NVTX_EVENTS e "
                       "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) "
                       "AND e.[end] IS NOT NULL").fetchall()
    con.close()
    requests = sum(int(name.split("n=")[1].split()[0]) for name, _ in rows if name.startswith("pooler n="))
    totals: dict[str, int] = {}
    for name, ns in rows:
        key = "pooler (batch)" if name.startswith("pooler n=") else name
        totals[key] = totals.get(key, 0) + ns
    return {k: v / requests / 1e6 for k, v in totals.items()}


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
@pytest.mark.parametrize("wide", [False, True], ids=["default", "wide"])
def test_analyze_fits_80_columns(trace, wide, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    p = run_main("analyze", trace, *(["--wide"] if wide else []))
    assert p.returncode == 0, p.stderr
    _fits(p.stdout)
    lines = p.stdout.splitlines()
    # key figures first: requests, then the stage table, then the findings, then the details
    assert "requests in" in lines[1]
    order = [lines.index(h) for h in ("Details",)] + [next(i for i, x in enumerate(lines) if x.startswith("Findings"))]
    assert order[1] < order[0]
    rule = next(i for i, x in enumerate(lines) if x.startswith("--"))
    key = lines[rule + 1:lines.index("", rule)]
    assert lines[rule - 1].split()[:3] == ["stage", "/request", "span"]      # host ms /request, % of batch span
    for stage, ms in _sql_host_ms_per_request(trace).items():
        row = next(line for line in key if line.startswith(stage + "  "))
        assert row[len(stage):].split()[0] == f"{ms:.3f}", (stage, row, ms)


@pytest.mark.parametrize("wide", [False, True], ids=["default", "wide"])
def test_compare_fits_80_columns(wide, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    p = run_main("compare", "--arm", f"main={ROOT / 'traces/gpu-main-slice.sqlite'}",
                 "--arm", f"pr={ROOT / 'traces/gpu-pr-slice.sqlite'}", *(["--wide"] if wide else []))
    assert p.returncode == 0, p.stderr
    _fits(p.stdout)
    # the H2D copies per request, whole: 9 -> 3 on the row of the batch-wide figure
    text = p.stdout.splitlines()
    label = ["per_request.h2d_copies"] if wide else ["pooler", "h2d_copies"]        # --wide: the metric's name
    i = next(i for i, x in enumerate(text) if x.split()[:len(label)] == label)
    figures = (text[i] + " " + text[i + 1]).split()
    assert "9" in figures and "3" in figures and "-66.7%" in figures


def test_a_narrow_terminal_stacks_rows_and_still_cuts_nothing(monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    p = run_main("analyze", ROOT / "traces/gpu25-pr-slice.sqlite", "--wide")
    assert p.returncode == 0, p.stderr
    _fits(p.stdout, 50)


def test_wide_markdown_and_html_hold_every_count_per_stage(monkeypatch, tmp_path):
    """Every CUDA count of a stage's JSON block is in --wide, in the Markdown table and in the HTML
    report: the figures the per-request tables leave out (D2H bytes, GPU kernels, graph
    executions, memcpy/memset/sync calls, device syncs) per capture, as the JSON has them."""
    import dataclasses
    import json

    from clef_prof.analyze.model import CudaCounts

    trace = ROOT / "traces/gpu25-pr-slice.sqlite"
    doc = json.loads(run_main("analyze", trace, "-f", "json").stdout)
    monkeypatch.setenv("COLUMNS", "200")
    wide = run_main("analyze", trace, "--wide").stdout.splitlines()
    at = wide.index("CUDA calls and GPU records per stage, per capture")
    keys = ["d2h_bytes", "gpu_kernels", "graph_executions", "memcpy_calls", "memset_calls", "sync_calls",
            "device_syncs", "sync_memcpy_calls"]
    assert set(keys) | {"h2d_copies", "h2d_bytes", "h2d_pageable", "h2d_pinned", "d2h_copies", "kernel_launches",
                        "graph_launches", "graph_kernels"} == {f.name for f in dataclasses.fields(CudaCounts)}
    md = run_main("analyze", trace, "-f", "markdown").stdout.splitlines()
    assert run_main("report", trace, "--html", tmp_path / "r.html").returncode == 0
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    for stage in ("transfer", "head"):
        want = [f"{doc['stages'][stage][k]:,}" for k in keys]
        row = next(line for line in wide[at:] if line.startswith(stage + " "))
        assert row.split()[1:] == want, (stage, row)
        counts = md.index("**CUDA counts per capture**")       # the markdown's third stage table
        md_row = next(line for line in md[counts:] if line.startswith(f"| {stage} |")).split(" | ")
        assert md_row[-len(keys):-1] == want[:-1] and md_row[-1] == want[-1] + " |"
        assert "".join(f"<td>{v}</td>" for v in want) in html.replace('<td class="num">', "<td>"), stage
