"""The record manifest's checks on real results: the client check's allowance at its edges (the
journeys' mean end-to-end of the H200 recording gpu25-journey against client latencies worked out
here) and the warning when record asked for Python samples that the capture does not hold."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from clef_prof.analyze.judge.manifest import client_check, sampling_check
from clef_prof.analyze.pipeline import analyze
from clicheck import run_main


@pytest.fixture(scope="module")
def journeys(capture):
    return analyze(str(capture("gpu25-journey"))).result


def _with_e2e(result, ms):
    return dataclasses.replace(result, journey=dataclasses.replace(result.journey, e2e_ms_mean=ms))


def _client(ms, completions=400):
    return {"client": {"capture": {"latency_ms_mean": ms, "completions": completions}}}


def test_the_allowance_is_2_ms_and_a_quarter_of_the_clients_latency(journeys):
    r = _with_e2e(journeys, 4.0)
    # client 8 ms: allowed 2 + 8/4 = 4 ms above the journeys' 4 ms, exactly the gap: agrees
    check, warn = client_check(r, _client(8.0))
    assert (check.allowance_ms, check.gap_ms, check.agrees, warn) == (4.0, 4.0, True, [])
    assert (check.journey_e2e_ms_mean, check.client_latency_ms_mean, check.client_completions) == (4.0, 8.0, 400)
    # journeys of 20 ms and a client of 12.8 ms: allowed 2 + 3.2 = 5.2 either way, and the gap is -7.2
    check, warn = client_check(_with_e2e(journeys, 20.0), _client(12.8))
    assert check.allowance_ms == pytest.approx(5.2) and check.gap_ms == pytest.approx(-7.2) and not check.agrees
    assert "the request ranges last longer than the client's requests" in warn[0]
    # below by exactly the allowance: client 16 ms, allowed 6, journeys 22 ms
    check, warn = client_check(_with_e2e(journeys, 22.0), _client(16.0))
    assert (check.allowance_ms, check.gap_ms, check.agrees, warn) == (6.0, -6.0, True, [])


@pytest.mark.parametrize("client, agrees", [(7.99, True), (8.0, True), (8.01, False), (20.0, False), (4.0, True),
                                            (1.61, True), (1.59, False), (0.5, False)])
def test_the_client_check_either_side_of_its_edges(journeys, client, agrees):
    # journeys of 4 ms: the client may be higher by up to 2 + client/4, lower by as much (edges at 8
    # and 1.6 ms)
    check, warn = client_check(_with_e2e(journeys, 4.0), _client(client))
    allowance = 2.0 + client / 4
    assert check.allowance_ms == pytest.approx(allowance, rel=1e-12)
    assert check.gap_ms == pytest.approx(client - 4.0, rel=1e-12)
    assert check.agrees is agrees and bool(warn) is not agrees
    if warn:
        side = "the client waited longer" if client > 4.0 else "the request ranges last longer"
        assert side in warn[0] and f"the gap of {client - 4.0:.3f} ms is beyond the {allowance:.3f} ms" in warn[0]


def test_no_client_check_without_both_figures(journeys):
    assert client_check(journeys, {}) == (None, [])
    assert client_check(journeys, _client("8")) == (None, [])
    assert client_check(dataclasses.replace(journeys, journey=None), _client(8.0)) == (None, [])
    assert client_check(_with_e2e(journeys, None), _client(8.0)) == (None, [])
    check, _ = client_check(journeys, _client(8, completions="many"))
    assert check.client_completions is None and check.client_latency_ms_mean == 8.0


def test_python_samples_asked_for_and_missing(capture, journeys):
    assert journeys.samples is None or not journeys.samples.samples
    ours = {"trace": {"python_sampler": "clef-prof", "python_sampling_hz": 100}}
    (w,) = sampling_check(journeys, ours)
    assert w.startswith("record asked for Python samples at 100 Hz (clef-prof's sampler)")
    nsys = {"trace": {"nsys_python_sampling_hz": 1000}}
    (w,) = sampling_check(journeys, nsys)
    assert w.startswith("record asked nsys for Python samples at 1000 Hz")
    # a manifest from before clef-prof's sampler: python_sampling_hz was nsys' rate
    (w,) = sampling_check(journeys, {"trace": {"python_sampling_hz": 250.5}})
    assert w.startswith("record asked nsys for Python samples at 250.5 Hz")
    # both asked: one warning, the one about clef-prof's sampler
    both = {"trace": {"python_sampler": "clef-prof", "python_sampling_hz": 100, "nsys_python_sampling_hz": 1000}}
    (w,) = sampling_check(journeys, both)
    assert "clef-prof's sampler" in w
    # clef-prof's sampler named with no rate, and no nsys rate: nothing was asked of nsys
    assert sampling_check(journeys, {"trace": {"python_sampler": "clef-prof", "python_sampling_hz": 0}}) == []
    assert sampling_check(journeys, {"trace": {"python_sampling_hz": 100, "nsys_python_sampling_hz": 0}}) == []
    (w,) = sampling_check(journeys, {"trace": {"nsys_python_sampling_hz": 0.5}})       # any positive rate
    assert w.startswith("record asked nsys for Python samples at 0.5 Hz")
    for bad in (True, "100", -5, 0, None):
        assert sampling_check(journeys, {"trace": {"nsys_python_sampling_hz": bad}}) == [], bad
    assert sampling_check(journeys, {}) == sampling_check(journeys, {"trace": None}) == []


def test_no_warning_when_the_samples_are_there(capture):
    sampled = analyze(str(capture("cpu23-sampled"))).result
    assert sampled.samples is not None and sampled.samples.samples > 0
    asked = {"trace": {"python_sampler": "clef-prof", "python_sampling_hz": 100, "nsys_python_sampling_hz": 1000}}
    assert sampling_check(sampled, asked) == []
    # samples read, but none of them: as good as none
    empty = dataclasses.replace(sampled, samples=dataclasses.replace(sampled.samples, samples=0))
    assert len(sampling_check(empty, asked)) == 1


@pytest.mark.parametrize("manifest", [
    '{"export": 5}', '{"export": "capture.sqlite", "window": 5}', '{"trace": 7}', '{"nsys": 5}',
    '{"nsys": {"messages": [1, 2]}}', '{"client": 5}', '{"status": "partial", "status_detail": 5}',
    '{"load": 5, "server_counts": {"requests": 5}}', '{"load": {"concurrency": 1e400}, "server_counts": {"requests": 5}}',
    '{"client": {"capture": {"latency_ms_mean": "x"}}}', "[" * 100000 + "]" * 100000])
def test_a_manifest_of_other_types_beside_a_good_export(capture, tmp_path, manifest):
    """Hand-made or damaged: a manifest whose values are of other types, or nested beyond the JSON
    reader, costs the export its manifest checks, never its analysis (one warning at most)."""
    shutil.copy(capture("gpu25-journey"), tmp_path / "capture.sqlite")
    (tmp_path / "manifest.json").write_text(manifest)
    p = run_main("analyze", tmp_path / "capture.sqlite", "-f", "json")
    assert p.returncode == 0 and "internal error" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    assert doc["requests"] == 2224 and doc["batches"] == 149
    said = [w for w in doc["warnings"] if "manifest" in w]
    assert len(said) <= 1 and all("not used" in w or "cannot be read" in w or "marks this capture" in w for w in said)


def test_the_clients_measured_loop_lag_widens_the_allowance(journeys):
    """A client whose own loop lagged (record measures it: `loop_lag_ms_mean`) adds that wait
    twice, at the send and at the answer: journeys of 4 ms against a client of 8.4 ms are 0.4 ms
    beyond 2 + 8.4/4 with no lag measured (said so), and agree with a lag of 0.25 ms a wake-up."""
    r = _with_e2e(journeys, 4.0)
    check, warn = client_check(r, _client(8.4))
    assert not check.agrees and check.client_loop_lag_ms is None
    assert "no measure of the client loop's lag" in warn[0]
    lagged = _client(8.4)
    lagged["client"]["capture"]["loop_lag_ms_mean"] = 0.25
    check, warn = client_check(r, lagged)
    assert check.agrees and warn == [] and check.client_loop_lag_ms == 0.25
    assert check.allowance_ms == pytest.approx(2.0 + 8.4 / 4 + 0.5, rel=1e-12)
    lagged["client"]["capture"]["loop_lag_ms_mean"] = 0.15           # 0.3 ms: still 0.1 ms short
    check, warn = client_check(r, lagged)
    assert not check.agrees and "with its loop's measured lag, 0.150 ms a wake-up, twice" in warn[0]
    for bad in ("0.25", True, -1.0, float("nan")):                  # not a measurement: as if absent
        lagged["client"]["capture"]["loop_lag_ms_mean"] = bad
        check, _ = client_check(r, lagged)
        assert check.client_loop_lag_ms is None and not check.agrees
