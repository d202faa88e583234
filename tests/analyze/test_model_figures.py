"""Figures of the result model that only its JSON and renderers show: the pinned share of H2D
copies, the capture's stage window, the source block of a Kineto trace, and `Result.figure`
(compare's metric lookup), on real captures against SQL."""
from __future__ import annotations

import pytest

from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from conftest import DATA, sql

STAGE_RANGES = """SELECT min(e.start), max(e."end") FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                  WHERE e.eventType = 59 AND (COALESCE(e.text, s.value) IN ('parse', 'index', 'transfer', 'head', 'encode')
                                             OR COALESCE(e.text, s.value) LIKE 'pooler n=%')"""


@pytest.fixture(scope="module")
def pinned(capture):
    path = capture("gpu25-q1c16-pr")
    return path, analyze(str(path)).result


def test_pinned_share_of_h2d_copies(pinned):
    path, r = pinned
    (pin, total), = sql(path, "SELECT sum(srcKind = 1), count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1")
    t = r.stages["transfer"].cuda
    assert (t.h2d_pinned, t.h2d_copies) == (pin, total) and pin > 0
    assert t.h2d_pinned_pct == pytest.approx(100.0 * pin / total) == r.totals.h2d_pinned_pct
    assert r.stages["parse"].cuda.h2d_pinned_pct is None               # no copies: no share


def test_stage_window_in_the_capture_facts(pinned):
    path, r = pinned
    (lo, hi), = sql(path, STAGE_RANGES)
    assert r.capture.stage_window_s == (lo / 1e9, hi / 1e9)
    j = r.to_json()["capture"]
    assert j["stage_window_s"] == [lo / 1e9, hi / 1e9] and "source" not in j


def test_a_kineto_trace_says_where_it_came_from(tmp_path):
    import lzma
    path = tmp_path / "demo.pt.trace.json"
    path.write_bytes(lzma.decompress((DATA / "kineto-demo-main.pt.trace.json.xz").read_bytes()))
    j = analyze(resolve(str(path))[0]).result.to_json()["capture"]
    assert j["source"]["format"] and j["stage_window_s"][0] < j["stage_window_s"][1]


def test_figure_by_its_dotted_name(pinned):
    path, r = pinned
    assert r.figure("per_request.h2d_copies") == r.per_request.h2d_copies == 3.0
    assert r.figure("stages.head.host_ms_per_request") == r.stages["head"].host_ms_per_request
    assert r.figure("requests") == r.requests
    for missing in ("nope", "per_request.nope", "requests.more", "path.p", "capture.threads.0", "stages.head.instances.x"):
        assert r.figure(missing) is None, missing


def test_journey_and_samples_blocks_of_the_json(capture):
    j = analyze(str(capture("gpu25-journey"))).result
    block = j.to_json()["journey"]
    assert block["client"] is None and block["complete"] == j.journey.complete > 0
    assert set(block["segments"]) == set(j.journey.segments) and block["listed"].keys() == j.journey.listed.keys()
    s = analyze(str(capture("cpu23-sampled"))).result
    block = s.to_json()["samples"]
    assert block["samples"] == s.samples.samples > 0 and block["stages"]["head"] == s.samples.stages["head"].to_json()


def test_no_kernel_of_a_launch_call_is_counted_from_a_graph(pinned):
    """gpu25-q1c16-pr launches its kernels with cudaLaunchKernel (graphs are traced whole, not by
    node): no kernel row is marked as a graph's, in the rows and in any window."""
    path, _ = pinned
    a = analyze(str(path), rows=True)
    (launched,), = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                             "ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = r.nameId "
                             "WHERE s.value LIKE 'cudaLaunchKernel%'")
    k = a.rows("kernels")
    assert launched == len(k) > 0 and not k["from_graph"].any()
    assert not a.window(0, 1 << 62)["kernels"]["from_graph"].any()
