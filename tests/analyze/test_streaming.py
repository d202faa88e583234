"""The streamed analysis gives the same figures whatever the window size, reader threads or
table order, its lazy row frames equal the ones read at once, and analyze_many keeps order;
--jobs and $CLEF_PROF_READERS below 1 or not a number are refused in one line."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from clef_prof.analyze.figures import cuda_pass as analysis
from clef_prof.analyze.read import export as capture_mod
from clef_prof.analyze.model import Result
from clef_prof.analyze.pipeline import analyze
from clef_prof.base.errors import CaptureError
from clef_prof.analyze import parallel
from clef_prof.analyze.parallel import analyze_many
from clicheck import assert_one_line, run_main

GPU = ("gpu-q1c16-main", "gpu25-q1c16-pr")


def _without_path(r: Result) -> Result:
    return dataclasses.replace(r, path="")


@pytest.mark.parametrize("name", GPU)
def test_small_windows_and_one_reader_change_nothing(capture, monkeypatch, name):
    path = str(capture(name))
    ref = analyze(path)
    monkeypatch.setattr(capture_mod, "CHUNK_ROWS", 997)
    monkeypatch.setattr(analysis, "GPU_WINDOW", 1013)
    for readers in (1, 3):
        monkeypatch.setattr(capture_mod, "READERS", readers)
        a = analyze(path)
        assert a.result == ref.result
        pd.testing.assert_frame_equal(a.per_batch, ref.per_batch)


@pytest.mark.parametrize("name", GPU)
def test_lazy_row_frames_equal_rows_read_at_once(capture, name):
    lazy = analyze(str(capture(name)))
    assert not lazy.rows_loaded
    eager = analyze(str(capture(name)), rows=True)
    assert eager.rows_loaded and eager.result == lazy.result
    for frame in ("calls", "transfers", "kernels", "gpu_busy"):
        pd.testing.assert_frame_equal(getattr(lazy, frame), getattr(eager, frame), check_exact=True)
    assert lazy.rows_loaded
    t = lazy.transfers
    assert int(t.loc[t["copyKind"] == 1, "copies"].sum()) == lazy.result.totals.h2d_copies
    assert len(lazy.kernels) == lazy.result.totals.gpu_kernels


def test_gpu_table_out_of_time_order_falls_back(capture, reversed_kernels):
    """A GPU table not in start order cannot be merged early: the pass starts over holding all."""
    f, modes = reversed_kernels
    r = analyze(str(f)).result
    assert modes == [True, False]
    assert _without_path(r) == _without_path(analyze(str(capture("gpu-q1c16-main"))).result)


def test_analyze_many_keeps_input_order_and_names_failures(capture):
    paths = [str(capture("gpu-q1c16-pr")), str(capture("cpu23-inline")), "/nonexistent/x.sqlite",
             str(capture("gpu25-q1c16-pr"))]
    out = analyze_many(paths, jobs=2, errors="return")
    assert isinstance(out[2], CaptureError) and str(out[2]).startswith("/nonexistent/x.sqlite")
    for p, r in zip(paths, out):
        if p != paths[2]:
            assert r == analyze(p).result
    with pytest.raises(CaptureError, match="/nonexistent/x.sqlite"):
        analyze_many(paths, jobs=2)
    assert analyze_many([]) == []
    assert [r.requests for r in analyze_many(paths[:2], jobs=1)] == [1517, 400]


def test_worker_count_policy(tmp_path, monkeypatch):
    """By default one process per `export.READERS` CPUs (an analysis keeps that many busy), none
    below 64 MB of input, never more than one per capture; --jobs is taken as given."""
    def sparse(name, size):
        f = tmp_path / name
        with open(f, "wb") as fh:
            fh.truncate(size)
        return str(f)
    small = [sparse(f"s{i}", 10 << 20) for i in range(3)]
    big = [sparse(f"b{i}", 40 << 20) for i in range(6)]
    monkeypatch.setattr(capture_mod, "usable_cpus", lambda: 8)
    monkeypatch.setattr(capture_mod, "READERS", 2)
    assert parallel.worker_count(small, None) == 1
    assert parallel.worker_count(big, None) == 4
    assert parallel.worker_count(big[:2], None) == 2
    assert parallel.worker_count(small, 3) == 3
    assert parallel.worker_count(big, 16) == 6
    monkeypatch.setattr(capture_mod, "usable_cpus", lambda: 2)
    assert parallel.worker_count(big, None) == 1
    monkeypatch.setattr(capture_mod, "READERS", 1)
    assert parallel.worker_count(big, None) == 2


@pytest.mark.parametrize("command", ["analyze", "compare"])
@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_refused(capture, command, jobs):
    """--jobs 0 or -3 quietly analyzed in one process (and with one capture was not looked at)."""
    a, b = capture("gpu-q1c16-main"), capture("gpu-q1c16-pr")
    argv = ["analyze", a, b] if command == "analyze" else ["compare", "--arm", f"main={a}", "--arm", f"pr={b}"]
    for captures in ((argv,) if command == "compare" else (argv, argv[:2])):
        p = run_main(*captures, "--jobs", jobs)
        assert_one_line(p, 1, f"--jobs {jobs}: expected at least 1 capture at a time")
        assert p.stdout == ""


def _analyze_with_readers(path, value) -> subprocess.CompletedProcess:
    """analyze in a fresh process, since export reads $CLEF_PROF_READERS when it is imported."""
    env = {k: v for k, v in os.environ.items() if k != "CLEF_PROF_READERS"}
    if value is not None:
        env["CLEF_PROF_READERS"] = value
    return subprocess.run([sys.executable, "-m", "clef_prof", "analyze", str(path), "-f", "json"], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_readers_variable_below_one_or_not_a_number_is_refused(capture, value):
    """'abc' was an internal ValueError at import; 0 and below quietly read on one thread."""
    p = _analyze_with_readers(capture("gpu-q1c16-main"), value)
    assert_one_line(p, 1, f"CLEF_PROF_READERS={value!r}: expected a whole number of reader threads, at least 1")
    assert "internal error" not in p.stderr and p.stdout == ""


def test_readers_variable_changes_no_figure(capture):
    path = capture("gpu-q1c16-main")
    default, three = _analyze_with_readers(path, None), _analyze_with_readers(path, " 3 ")
    assert default.returncode == three.returncode == 0, default.stderr + three.stderr
    assert json.loads(three.stdout) == json.loads(default.stdout)
