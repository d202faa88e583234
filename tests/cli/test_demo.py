"""`clef-prof demo`, the guided path, end to end with the project's nsys and short windows: both
captures recorded, analyzed, compared, the report written; the machine's story told before the
first figure; the request counts it prints are analyze's for each capture."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clicheck import run_main
from conftest import ROOT, nsys_bin


def _requests(export) -> int:
    """analyze's request count of the export (its own tests hold it against SQL over the exports)."""
    p = run_main("analyze", export, "-f", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["requests"]


@pytest.mark.nsys("2023.4")
def test_demo_records_analyzes_compares_and_reports(tmp_path):
    out = tmp_path / "tour"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "PATH": os.environ.get("PATH", "")}
    # --out as a user gives it (the default is runs/demo): a path relative to the working folder
    p = subprocess.run([sys.executable, "-m", "clef_prof", "demo", "--out", "tour", "--warmup", "0.5",
                        "--duration", "1.5", "--nsys", str(nsys_bin("2023.4"))],
                       capture_output=True, text=True, env=env, timeout=400, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    text = p.stdout
    # every line within COLUMNS=80 (the `$ clef-prof record ...` lines ran to 200 and more), and
    # each printed command, its `\` continuations joined, is the one that ran
    long = [ln for ln in (p.stdout + p.stderr).splitlines() if len(ln) > 80]
    assert long == [], "\n".join(long)
    joined = text.replace(" \\\n    ", " ")
    assert "$ clef-prof analyze tour/main\n" in joined and "--out tour/pr --quiet --nsys" in joined
    for variant in ("main", "pr"):
        assert (out / variant / "capture.sqlite").is_file() and (out / variant / "manifest.json").is_file()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "capture.sqlite" in html
    device = json.loads((out / "pr" / "manifest.json").read_text())["server"]["info"]["device"]
    story = "has a CUDA GPU" if device == "cuda" else "has no CUDA GPU"
    first_figures = text.index("== analyze main")
    assert 0 < text.index(story) < first_figures
    assert text.index("How to read analyze") < text.index("How to read compare") < text.index("== report")
    # analyze's and compare's request counts are the batch ranges' n=K, summed by SQL
    for variant in ("main", "pr"):
        n = _requests(out / variant / "capture.sqlite")
        assert f"{n:,} requests in" in text
        assert f"{variant}{' (baseline)' if variant == 'main' else ''}: 1 capture, " in text
        assert f"batches, {n:,} requests" in text
    assert "Open tour/report.html in a browser" in " ".join(text.split())


def test_demo_without_nsys_says_how_to_get_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLEF_PROF_NSYS": str(tmp_path / "none" / "nsys")}
    p = subprocess.run([sys.executable, "-m", "clef_prof", "demo", "--out", str(tmp_path / "t")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 1 and p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert line.startswith("clef-prof: error: nsys not found at") and "Nsight Systems" in line
    assert not (tmp_path / "t").exists()
