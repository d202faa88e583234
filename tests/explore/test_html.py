"""`clef-prof report CAPTURE --html OUT`: a self-contained page that headless Chromium renders."""
from __future__ import annotations

import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from clef_prof.cli.app import main
from conftest import chromium

TRACES = Path(__file__).resolve().parents[2] / "traces"
PR = TRACES / "gpu-pr-slice.sqlite"
CPU = TRACES / "cpu23-inline.sqlite"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def pr_html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "pr report.html"      # a space in the name, on purpose
    assert main(["report", str(PR), "--html", str(out)]) == 0
    return out


def svgs(text: str) -> list[ET.Element]:
    """The page's inline SVG pictures, parsed as XML (each must be well-formed)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", text, flags=re.S)]


def test_report_is_self_contained(pr_html):
    text = pr_html.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<script" not in text and "<link" not in text and "@import" not in text and "<img" not in text
    refs = re.findall(r'''(?:src|href)\s*=\s*["']([^"']*)''', text) + re.findall(r"url\(([^)]*)\)", text)
    assert not refs, [r[:40] for r in refs]               # nothing to fetch, not even a data: URL
    pictures = svgs(text)
    # timeline, its zoom, stage durations: each named and described for screen readers
    assert [p.get("aria-labelledby") for p in pictures] == [
        "timeline-t timeline-d", "zoom-t zoom-d", "durations-t durations-d"]
    for p in pictures:
        assert p.get("role") == "img" and p.find(f"{SVG}title").text and p.find(f"{SVG}desc").text
    for needle in ("Host time per stage", "CUDA work per stage", "Timeline", "436", "3.00",
                   "78 H2D = 3.00 per request"):
        assert needle in text


def test_report_cpu_capture_and_errors(tmp_path, capsys):
    out = tmp_path / "cpu.html"
    assert main(["report", str(CPU), "--html", str(out)]) == 0
    text = out.read_text()
    assert "CUDA work per stage" not in text and len(svgs(text)) == 2       # timeline (no zoom), durations
    assert main(["report", str(tmp_path / "missing.sqlite"), "--html", str(out)]) == 1
    assert main(["report", str(PR), "--html", str(tmp_path / "no" / "dir.html")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2].startswith("clef-prof: error: ") and "no such file" in err[-2]
    assert err[-1].startswith("clef-prof: error: ") and "does not exist" in err[-1]
    with pytest.raises(SystemExit) as exc:
        main(["report", str(PR)])                      # --html is required
    assert exc.value.code == 2


@pytest.mark.chromium
def test_report_renders_in_headless_chromium(pr_html, tmp_path):
    exe = chromium()
    shot = tmp_path / "out.png"
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1280,2000",
             pr_html.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert shot.exists(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    assert shot.stat().st_size > 50_000
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1280)
    rgb = (img[..., :3] * 255).astype(np.uint32).reshape(-1, 3)
    colours = len(np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]))
    assert colours > 200, f"only {colours} distinct colours: a blank or unstyled page?"
    ink = (rgb < 200).any(axis=1).mean()
    assert ink > 0.03, f"{ink:.1%} of the page is not near-white"
    # the SVG pictures are drawn: the stage colours of the timeline appear (parse blue: its four bars
    # and the legend's swatch, 0.1% of this page; transfer green, also the H2D copies from pinned memory)
    for colour, share in (((0x4c, 0x72, 0xb0), 0.0005), ((0x55, 0xa8, 0x68), 0.005)):
        near = (np.abs(rgb.astype(int) - np.array(colour)).sum(axis=1) < 30).mean()
        assert near > share, f"colour {colour} not rendered ({near:.3%} of the page)"


def _batch_durations(path) -> list[int]:
    """The batch ranges' durations in time order, by plain SQL (one thread holds them all here)."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("SELECT e.[end] - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                       "WHERE COALESCE(e.text, s.value) LIKE 'pooler n=%' AND e.[end] IS NOT NULL "
                       "ORDER BY e.start").fetchall()
    con.close()
    return [r[0] for r in rows]


@pytest.mark.parametrize("which", ["slowest", "p99"])
def test_timeline_jumps_to_the_slowest_or_p99_batch(which, tmp_path):
    dur = _batch_durations(PR)
    ranked = sorted(range(len(dur)), key=lambda i: dur[i])          # nearest rank: ceil(0.99 n)-th smallest
    want = ranked[-1] if which == "slowest" else ranked[-(-99 * len(dur) // 100) - 1]
    out = tmp_path / "r.html"
    assert main(["report", str(PR), "--html", str(out), "--first-batch", which, "--batches", "2"]) == 0
    assert re.search(rf"consecutive batches \(#{want}–#", out.read_text(encoding="utf-8")), want


def test_a_first_batch_past_the_end_is_one_line_and_no_file(tmp_path):
    from clicheck import assert_one_line, run_main

    out = tmp_path / "r.html"
    n = len(_batch_durations(PR))
    for first in ("9999", str(-n - 1)):
        assert_one_line(run_main("report", PR, "--html", out, "--first-batch", first), 1,
                        f"batch {first} is past the last batch ({n} on the busiest thread")
        assert not out.exists()
