"""Bad input: one clear line on stderr, a non-zero exit, no traceback, the input untouched."""
from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from clef_prof.cli.app import main
from clicheck import assert_one_line, run_cli, run_main
from conftest import sha256

EXIT_INPUT = 1
SLICE_MAIN = Path(__file__).resolve().parents[2] / "traces" / "gpu-main-slice.sqlite"


@pytest.fixture
def copy_of(capture, tmp_path):
    def make(name):
        dst = tmp_path / f"{name}.sqlite"
        shutil.copyfile(capture(name), dst)
        return dst
    return make


def test_missing_path(tmp_path):
    assert_one_line(run_main("analyze", tmp_path / "nope.sqlite"), EXIT_INPUT, "no such file")


def test_directory(tmp_path):
    assert_one_line(run_main("analyze", tmp_path), EXIT_INPUT, "a folder with no manifest.json, .sqlite export")


def test_not_sqlite(tmp_path):
    f = tmp_path / "trace.sqlite"
    f.write_bytes(b"\x00NSYS-REP" + os.urandom(4000))
    assert_one_line(run_main("analyze", f), EXIT_INPUT, "not an SQLite database")


@pytest.mark.nsys("2023.4")
def test_not_a_report(tmp_path):
    """A broken .nsys-rep: nsys export fails, one line, nothing written beside it (without nsys:
    test_cli_inputs.py::test_report_without_nsys_names_the_command)."""
    f = tmp_path / "trace.nsys-rep"
    f.write_bytes(b"\x00NSYS-REP" + os.urandom(4000))
    assert_one_line(run_cli("analyze", f), EXIT_INPUT, "trace.nsys-rep", "nsys export")
    assert os.listdir(tmp_path) == ["trace.nsys-rep"]


def test_truncated_capture(copy_of, tmp_path):
    src = copy_of("gpu-q1c16-pr")
    cut = tmp_path / "cut.sqlite"
    data = src.read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    before = sha256(cut)
    assert_one_line(run_main("analyze", cut), EXIT_INPUT, "truncated")
    assert sha256(cut) == before


def test_corrupt_pages(copy_of):
    f = copy_of("gpu-q1c16-pr")
    size = f.stat().st_size
    with open(f, "r+b") as fh:  # garbage over the middle of the file, header intact
        fh.seek(size // 2)
        fh.write(b"\xde\xad\xbe\xef" * (size // 16))
    before = sha256(f)
    p = run_cli("analyze", f)
    assert_one_line(p, EXIT_INPUT, "cannot read")
    assert sha256(f) == before


def test_export_without_nvtx_table(copy_of):
    f = copy_of("cpu23-inline")
    with sqlite3.connect(f) as con:
        con.execute("DROP TABLE NVTX_EVENTS")
    f.chmod(0o444)
    assert_one_line(run_main("analyze", f), EXIT_INPUT, "no NVTX_EVENTS table")


def test_sqlite_but_not_an_export(tmp_path):
    f = tmp_path / "other.sqlite"
    with sqlite3.connect(f) as con:
        con.execute("CREATE TABLE t(x)")
    assert_one_line(run_main("analyze", f), EXIT_INPUT, "not an Nsight Systems export")


def test_input_never_written(capture, tmp_path):
    """Analyze a read-only export in a read-only folder: no journal, no change."""
    d = tmp_path / "ro"
    d.mkdir()
    f = d / "main.sqlite"
    shutil.copyfile(capture("gpu-q1c16-main"), f)
    f.chmod(0o444)
    before = sha256(f)
    d.chmod(0o555)
    try:
        p = run_main("analyze", f, "--format", "json")
        assert p.returncode == 0, p.stderr
        assert sorted(os.listdir(d)) == ["main.sqlite"]
        assert sha256(f) == before
    finally:
        d.chmod(0o755)


def test_bad_spec_path(capture):
    assert_one_line(run_main("analyze", capture("cpu23-inline"), "--spec", "/nonexistent.toml"), EXIT_INPUT,
                    "no such stage spec")


@pytest.mark.parametrize("stages, column", [("parse,host", "host_ns"), ("gpu_busy,head", "gpu_busy_ns"),
                                            ("parse,parse", "parse_ns")])
def test_analyze_refuses_stage_names_that_would_overwrite_a_per_batch_column(capsys, stages, column):
    """A stage named `host` would write its host time over the batch's `host_ns`: figures that look
    fine but are not, in the data model and in compare; refused in one line instead."""
    rc = main(["analyze", str(SLICE_MAIN), "--stages", stages])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and f"per-batch column {column!r}" in err
