"""The HTML report's icicle per stage (clef_prof.explore.svg.flame) and the samples frame
(`Capture.samples`), on a real capture of tests/programs/sampled_split.py (nsys 2023.4, clef-prof's
sampler): every box against the stack prefixes SQL finds in the export's head samples, widths
proportional to their samples, tooltips naming function, file, samples and share; the page stays
well-formed HTML with well-formed SVG."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser

import pytest

import clef_prof
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.stages import StageConfig
from clef_prof.cli.app import main
from clef_prof.explore import svg
from conftest import sql

NAME = "cpu23-samples-main-1"
SVG = "{http://www.w3.org/2000/svg}"
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "area", "base", "source", "track", "embed"}

# head samples by (pid, stack id), the marks joined to a head range of the thread their message names
HEAD_STACKS = """
SELECT CAST(substr(t.value, 3, instr(substr(t.value, 3), ' ') - 1) AS INTEGER), m.int64Value, count(*)
FROM NVTX_EVENTS m JOIN StringIds t ON t.id = m.textId
JOIN NVTX_EVENTS h ON h.eventType = 59 AND h.start <= m.start AND m.start <= h."end"
     AND (h.globalTid >> 24) = (m.globalTid >> 24)
     AND (h.globalTid & 16777215) = CAST(substr(t.value, instr(substr(t.value, 3), ' ') + 3) AS INTEGER)
JOIN StringIds hn ON hn.id = h.textId AND hn.value = 'head'
WHERE m.eventType = 34 AND t.value LIKE 't %' GROUP BY 1, 2"""


def _oracle_nodes(path) -> tuple[Counter, int]:
    """{(depth, function, file, inclusive samples): how many nodes}, total head samples: the
    stack prefixes (outermost frame first) of the head samples, from the export's strings."""
    frames = {}
    for (v,) in sql(path, "SELECT value FROM StringIds WHERE value LIKE 'clef-prof frame %'"):
        key, name, file, _ = v[len("clef-prof frame "):].split("\t")
        frames[key] = (name, file)
    stacks = {}
    for (v,) in sql(path, "SELECT value FROM StringIds WHERE value LIKE 'clef-prof stack %'"):
        key, ids = v[len("clef-prof stack "):].split("\t")
        pid = key.split(":")[0]
        stacks[key] = [frames[f"{pid}:{f}"] for f in ids.split()][::-1]
    incl: Counter = Counter()
    total = 0
    for pid, sid, n in sql(path, HEAD_STACKS):
        st = stacks[f"{pid}:{sid}"]
        total += n
        for d in range(1, len(st) + 1):
            incl[tuple(st[:d])] += n
    return Counter((len(p), p[-1][0], p[-1][1], n) for p, n in incl.items()), total


class _Balance(HTMLParser):
    """Every element closed in order (void elements aside)."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append((tag, list(self.stack[-3:])))
        else:
            self.stack.pop()


@pytest.fixture(scope="module")
def page(capture, tmp_path_factory):
    path = capture(NAME)
    out = tmp_path_factory.mktemp("flame") / "r.html"
    assert main(["report", str(path), "--stages", "head", "--html", str(out)]) == 0
    return path, out.read_text(encoding="utf-8")


def test_icicle_boxes_are_the_stack_prefixes_of_the_stage(page):
    path, text = page
    pictures = [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", text, flags=re.S)]
    head = next(p for p in pictures if p.find(f".//{SVG}g[@data-stage='head']") is not None)
    g = head.find(f".//{SVG}g[@data-stage='head']")
    want, total = _oracle_nodes(path)
    assert int(g.get("data-total")) == total and total > 100 and g.get("data-hidden") == "0"
    got = Counter()
    plot_w = svg.WIDTH - 20
    for r in g.iter(f"{SVG}rect"):
        tip = r.find(f"{SVG}title").text
        m = re.fullmatch(r"(.+) \((.+)\): ([\d,]+) samples \(([\d.]+)% of head\), self ([\d,]+) samples \(([\d.]+)%\)", tip)
        assert m, tip
        n = int(r.get("data-samples"))
        assert int(m[3].replace(",", "")) == n and float(m[4]) == pytest.approx(100 * n / total, abs=0.05)
        assert float(r.get("width")) == pytest.approx(n / total * plot_w, abs=0.06)      # widths ∝ inclusive samples
        got[(int(r.get("data-depth")), m[1], m[2], n)] += 1
    assert got == want
    # children lie inside their parent: the boxes of each depth sum to at most the row above
    by_depth = Counter()
    for (d, _, _, n), k in got.items():
        by_depth[d] += n * k
    assert by_depth[1] == total and all(by_depth[d + 1] <= by_depth[d] for d in range(1, max(by_depth)))


def test_page_stays_well_formed_html(page):
    _, text = page
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    p = _Balance()
    p.feed(text)
    p.close()
    assert not p.errors and p.stack == [], (p.errors[:3], p.stack)
    assert "Python functions per stage (sampled)" in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[A-Za-z][\w-]*", i) for i in ids)


def test_samples_frame_rows_are_the_exports_stacks(capture):
    path = capture(NAME)
    cap = clef_prof.open(str(path), config=StageConfig(stages=("head",)))
    df = cap.samples
    r = analyze(str(path), StageConfig(stages=("head",))).result
    by_stage = df.groupby("stage", observed=True)["samples"].sum()
    for stage, st in r.samples.stages.items():
        assert by_stage.get(stage, 0) == st.samples
    head = df[df["stage"] == "head"]
    want, _ = _oracle_nodes(path)
    leaves = Counter()
    for row in head.itertuples():
        leaves[(row.depth, row.function)] += row.samples
        assert row.stack[-1].startswith(row.function + " (") and len(row.stack) == row.depth
    # a stack's own samples are the self samples of its innermost frame: three's equal analyze's
    three = next(f for f in r.samples.stages["head"].top_self if f.function == "three")
    assert sum(n for (d, f), n in leaves.items() if f == "three") == three.self_samples
    assert head["ms_per_request"].sum() == pytest.approx(r.samples.stages["head"].ms_per_request)
    assert want                             # the oracle saw the same capture
