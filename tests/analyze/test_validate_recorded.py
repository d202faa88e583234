"""Validation warnings on real captures recorded here with Nsight Systems (CPU only)."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from clef_prof.analyze.pipeline import analyze
from recording import nvtx_python, record

pytestmark = pytest.mark.nsys("2023.4")

POOLER = """
import threading, time, nvtx
def pooler(n):
    with nvtx.annotate(f"pooler n={n}", domain="clef"):
        for s in ("parse", "index", "transfer", "head", "encode"):
            with nvtx.annotate(s, domain="clef"):
                time.sleep(0.001)
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("rec")


def test_no_nvtx_at_all(out):
    """Python sampling leaves NVTX rows, but no user range, mark or domain."""
    cap = record("import time\nt = time.time()\nwhile time.time() - t < 1.0:\n    sum(range(1000))\n",
                 out / "none", nsys_args=("--python-sampling=true", "--python-sampling-frequency=100"))
    r = analyze(str(cap)).result
    assert r.batches == 0
    assert any(w.startswith("no NVTX at all") for w in r.warnings), r.warnings


def test_domains_but_no_ranges_with_new_nvtx(out):
    """nsys 2023.4 drops every range of Python nvtx >= 0.2.12: only the domain-create row is left."""
    py = nvtx_python("0.2.16")
    cap = record(POOLER + "for n in (1, 2, 3):\n    pooler(n)\n", out / "new-nvtx", python=py)
    r = analyze(str(cap)).result
    (w,) = [w for w in r.warnings if "no range was recorded" in w]
    assert "'clef'" in w and "0.2.12" in w and "nvtx==0.2.11" in w


def test_stages_on_two_threads(out):
    py = nvtx_python("0.2.11")
    prog = POOLER + """
ts = [threading.Thread(target=lambda: [pooler(n) for n in (1, 2, 3, 4)], name=f"worker{i}") for i in range(2)]
[t.start() for t in ts]
[t.join() for t in ts]
"""
    r = analyze(str(record(prog, out / "threads", python=py))).result
    assert (r.batches, r.requests) == (8, 20)
    assert {t.batches for t in r.capture.threads} == {4}
    assert len(r.capture.threads) == 2
    assert any("2 threads in 1 processes" in w for w in r.warnings)
    assert r.stages["head"].instances == 8


def test_ranges_cut_by_the_capture_window(out):
    """A 1 s window (--delay/--duration) inside a 3 s loop of 50 ms batches cuts ranges at both edges."""
    py = nvtx_python("0.2.11")
    prog = """
import time, nvtx
t0 = time.time()
while time.time() - t0 < 3.0:
    with nvtx.annotate("pooler n=2", domain="clef"):
        for s in ("parse", "index", "transfer", "head", "encode"):
            with nvtx.annotate(s, domain="clef"):
                time.sleep(0.01)
"""
    cap = record(prog, out / "cut", python=py, nsys_args=("--delay=1", "--duration=1"))
    a = analyze(str(cap))
    r = a.result
    assert 10 <= r.batches <= 22
    # every batch kept is whole: all five stages in it
    inst = a.stages.instances
    per = np.unique(inst["batch"][inst["batch"] >= 0], return_counts=True)[1]
    assert (per == 5).all() and len(per) == r.batches
    # nsys records nothing of a range already open when the window starts (that batch, and the
    # stage then running) but keeps the stages of it that begin later: analyze counts them as cut
    # at the edge (not as stages outside every batch), as it does the batch open when the window
    # ends (nsys closes it at the session's end) and its stages. So every range not inside a whole
    # batch range of its thread is cut (SQL), and no stage instance is left outside the batches.
    con = sqlite3.connect(f"file:{cap}?mode=ro", uri=True)
    expected = dict(con.execute(
        "WITH r AS (SELECT e.globalTid AS g, e.start AS s, e.\"end\" AS en, COALESCE(t.value, e.text) AS n "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds t ON t.id = e.textId WHERE e.eventType IN (59, 60)), "
        "whole AS (SELECT * FROM r WHERE n = 'pooler n=2' AND en < (SELECT duration FROM ANALYSIS_DETAILS)) "
        "SELECT CASE n WHEN 'pooler n=2' THEN 'pooler' ELSE n END, count(*) FROM r WHERE NOT EXISTS "
        "(SELECT 1 FROM whole w WHERE w.g = r.g AND w.s <= r.s AND r.en <= w.en) GROUP BY 1"))
    (whole,), = con.execute("SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds t ON t.id = e.textId "
                            "WHERE COALESCE(t.value, e.text) = 'pooler n=2' AND e.\"end\" < "
                            "(SELECT duration FROM ANALYSIS_DETAILS)")
    con.close()
    assert r.batches == whole
    assert r.excluded.cut_at_edges == expected and expected.get("pooler", 0) >= 1, (r.excluded, expected)
    assert (inst["batch"] >= 0).all() and r.excluded.outside_batch_instances == 0
    assert r.requests == 2 * r.batches
    assert any("cut at the capture edges" in w for w in r.warnings)
