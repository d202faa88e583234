"""A report's export is keyed on the report's identity, not on mtime order; what happens when the
export cannot go beside the report or into the cache; error lines that name odd paths.

Two real reports recorded here with nsys 2023.4 (an older one with one batch of 2 requests, a
newer one with two batches of 3): the newer is analyzed, then replaced by the older with its mtime
kept (`cp -p`, `tar`), which must give the older one's figures."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from clef_prof.cli.app import main
from recording import record

ROOT = Path(__file__).resolve().parents[2]

OLD = """
import time
import clef_prof
with clef_prof.batch(n=2):
    with clef_prof.stage("parse"):
        time.sleep(0.01)
"""
NEW = """
import time
import clef_prof
for _ in range(2):
    with clef_prof.batch(n=3):
        with clef_prof.stage("parse"):
            time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """(older report, newer report): recorded in that order, the older one's mtime set a day back."""
    old = record(OLD, tmp_path_factory.mktemp("old")).parent / "cap.nsys-rep"
    new = record(NEW, tmp_path_factory.mktemp("new")).parent / "cap.nsys-rep"
    day_ago = time.time() - 86400
    os.utime(old, (day_ago, day_ago))
    return old, new


def analyze_json(path, capsys) -> tuple[int, dict | None, str]:
    rc = main(["analyze", str(path), "-f", "json"])
    out, err = capsys.readouterr()
    return rc, json.loads(out) if rc == 0 else None, err


def replace_with(src: Path, dst: Path, how: str) -> None:
    """Put `src` at `dst` the way a user would, keeping src's (older) mtime."""
    if how == "cp -p":
        subprocess.run(["cp", "-p", src, dst], check=True)
    else:                       # tar: packed under dst's name, unpacked over dst
        stage = dst.parent / ".stage"
        stage.mkdir()
        shutil.copy2(src, stage / dst.name)
        tar = dst.parent.parent / "r.tar"
        subprocess.run(["tar", "-cf", tar, "-C", stage, dst.name], check=True)
        subprocess.run(["tar", "-xf", tar, "-C", dst.parent], check=True)
        shutil.rmtree(stage)
    assert int(dst.stat().st_mtime) == int(src.stat().st_mtime)     # tar keeps whole seconds


@pytest.mark.nsys("2023.4")
@pytest.mark.parametrize("how", ["cp -p", "tar"])
def test_a_report_replaced_by_an_older_one_is_exported_again(reports, tmp_path, capsys, how, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old, new = reports
    d = tmp_path / "run"
    d.mkdir()
    rep = d / "capture.nsys-rep"
    shutil.copy2(new, rep)
    rc, r, err = analyze_json(rep, capsys)
    assert rc == 0 and (r["requests"], r["batches"]) == (6, 2) and "exported" in err
    export = Path(r["path"])
    assert export == d / "capture.sqlite" and export.stat().st_mtime_ns > old.stat().st_mtime_ns
    replace_with(old, rep, how)
    assert export.stat().st_mtime > rep.stat().st_mtime + 3600    # the export looks fresh by mtime
    rc, r, err = analyze_json(rep, capsys)
    assert rc == 0 and (r["requests"], r["batches"]) == (2, 1), r and r["requests"]
    assert err.startswith(f"clef-prof: exported {rep} to {export}") and err.count("\n") == 1
    rc, r, err = analyze_json(rep, capsys)      # the same report again: reused, nothing said
    assert rc == 0 and r["requests"] == 2 and err == ""


@pytest.mark.nsys("2023.4")
def test_an_export_not_made_by_clef_prof_is_not_trusted(reports, tmp_path, capsys, monkeypatch):
    """A NAME.sqlite beside the report that nsys or another tool wrote (newer than the report, from
    another report) is left alone: the report is exported to the cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old, new = reports
    d = tmp_path / "run"
    d.mkdir()
    rep = d / "capture.nsys-rep"
    shutil.copy2(old, rep)
    foreign = d / "capture.sqlite"
    shutil.copyfile(new.with_suffix(".sqlite"), foreign)    # the newer report's export, by nsys
    before = foreign.read_bytes()
    rc, r, err = analyze_json(rep, capsys)
    assert rc == 0 and r["requests"] == 2
    assert Path(r["path"]).parent == tmp_path / "cache" / "clef-prof"
    assert foreign.read_bytes() == before


@pytest.mark.nsys("2023.4")
def test_a_folder_named_like_the_export(reports, tmp_path, capsys, monkeypatch):
    """A folder NAME.sqlite beside the report: the export goes to the cache, the folder is kept;
    with no cache to write either, one line and exit 1 (no internal error)."""
    old, _ = reports
    d = tmp_path / "run"
    d.mkdir()
    rep = d / "capture.nsys-rep"
    shutil.copy2(old, rep)
    (d / "capture.sqlite").mkdir()
    (d / "capture.sqlite" / "keep").write_text("x")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))       # the cache would be a folder under a file
    rc, r, err = analyze_json(rep, capsys)
    assert rc == 1 and err.count("\n") == 1 and "internal error" not in err
    assert err.startswith(f"clef-prof: error: {rep}: no place to write its SQLite export: {d / 'capture.sqlite'} "
                          "is not an export clef-prof made, and the cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rc, r, err = analyze_json(rep, capsys)
    assert rc == 0 and r["requests"] == 2 and Path(r["path"]).parent == tmp_path / "cache" / "clef-prof"
    assert (d / "capture.sqlite" / "keep").read_text() == "x"


@pytest.mark.nsys("2023.4")
def test_an_unwritable_cache_with_a_read_only_folder_is_one_line(reports, tmp_path):
    """The report's folder read-only and the cache not creatable: one line, exit 1."""
    from test_cli_inputs import run_in_read_only

    old, _ = reports
    d = tmp_path / "run"
    d.mkdir()
    rep = d / "capture.nsys-rep"
    shutil.copy2(old, rep)
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, "XDG_CACHE_HOME": str(blocker), "PYTHONPATH": str(ROOT)}
    p = run_in_read_only(d, "analyze", rep, env=env)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert "is not writable, and the cache" in p.stderr and "internal error" not in p.stderr
    assert os.listdir(d) == ["capture.nsys-rep"]


def test_a_newline_in_a_path_does_not_split_the_error_line(tmp_path, capsys):
    d = tmp_path / "two\nlines"
    d.mkdir()
    bad = d / "x.sqlite"
    bad.write_bytes(b"not sqlite at all" * 10)
    assert main(["analyze", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err == f"clef-prof: error: '{tmp_path}/two\\nlines/x.sqlite': not an SQLite database\n"
    # a missing report, and an output in a folder that does not exist, likewise
    assert main(["analyze", str(d / "gone.nsys-rep")]) == 1
    assert capsys.readouterr().err == f"clef-prof: error: '{tmp_path}/two\\nlines/gone.nsys-rep': no such file\n"
    out = tmp_path / "no\nsuch" / "r.json"
    assert main(["analyze", str(ROOT / "traces" / "gpu-main-slice.sqlite"), "-f", "json", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{tmp_path}/no\\nsuch/r.json'" in err


def test_internal_error_lines_are_one_line(capsys):
    """What no check foresaw still ends in one line, control characters escaped."""
    from clef_prof.cli.app import run_command

    def boom(_args):
        raise RuntimeError("first\nsecond")
    assert run_command(boom, None) == 1
    assert capsys.readouterr().err == ("clef-prof: internal error: RuntimeError: first\\nsecond "
                                       "(rerun with --debug for a traceback)\n")
