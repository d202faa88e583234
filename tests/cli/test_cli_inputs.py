"""What analyze, report and compare take as a capture (exports, manifests, folders, .nsys-rep
reports), the messages on what a recording traced, and warnings that name their capture.
Captures recorded here with the project's nsys, or the samples in traces/."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.compare.arm import collect
from clef_prof.cli.app import main
from clicheck import run_cli
from recording import record

ROOT = Path(__file__).resolve().parents[2]
SLICE_MAIN = ROOT / "traces" / "gpu-main-slice.sqlite"
SLICE_PR = ROOT / "traces" / "gpu-pr-slice.sqlite"

ANNOTATED = """
import time
import clef_prof
with clef_prof.batch(n=2):
    with clef_prof.stage("parse"):
        time.sleep(0.01)
"""
NO_NVTX = """
import time
time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """recorded(program, trace, version) -> the SQLite export, recorded once per module."""
    done = {}

    def get(program: str, trace: str, version: str = "2023.4") -> Path:
        key = (program, trace, version)
        if key not in done:
            done[key] = record(program, tmp_path_factory.mktemp("rec"), version=version, trace=trace)
        return done[key]
    return get


def analyze_json(path, capsys) -> tuple[int, dict | None, str]:
    rc = main(["analyze", str(path), "-f", "json"])
    out, err = capsys.readouterr()
    return rc, json.loads(out) if rc == 0 else None, err


# ---------------------------------------------------------------------------------------------
# what the recording traced

@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.nsys(v)) for v in ("2022.4", "2023.4")])
def test_cuda_traced_but_unused_vs_not_traced(recorded, version, capsys):
    _, r, _ = analyze_json(recorded(ANNOTATED, "cuda,nvtx,osrt", version), capsys)
    assert r["requests"] == 2 and r["stages"]["parse"]["instances"] == 1
    assert r["capture"]["cuda_traced"] is False and r["per_request"]["h2d_copies"] is None
    assert any(w.startswith("CUDA was traced but the program made no CUDA calls") for w in r["warnings"])
    assert not any("-t cuda" in w for w in r["warnings"])

    _, r, _ = analyze_json(recorded(ANNOTATED, "nvtx,osrt", version), capsys)
    assert r["requests"] == 2
    assert any(w.startswith("CUDA was not traced (record with -t cuda") for w in r["warnings"])


@pytest.mark.nsys("2023.4")
def test_nvtx_traced_but_unused_vs_not_traced(recorded, capsys):
    rc, _, err = analyze_json(recorded(NO_NVTX, "cuda,nvtx,osrt"), capsys)
    assert rc == 1 and err.count("\n") == 1
    assert "NVTX was traced but the program emitted no NVTX" in err and "-t nvtx" not in err
    rc, _, err = analyze_json(recorded(NO_NVTX, "osrt"), capsys)
    assert rc == 1 and err.count("\n") == 1 and "NVTX was not traced" in err and "-t nvtx" in err


@pytest.mark.nsys("2023.4")
def test_export_without_trace_settings_says_it_cannot_tell(recorded, tmp_path, capsys):
    """An export stripped of META_DATA_CAPTURE and nsys's diagnostics does not say what was traced."""
    f = tmp_path / "stripped.sqlite"
    shutil.copyfile(recorded(ANNOTATED, "cuda,nvtx,osrt"), f)
    with sqlite3.connect(f) as con:
        con.execute("DROP TABLE META_DATA_CAPTURE")
        con.execute("DELETE FROM StringIds WHERE value LIKE 'Profiling has%' OR value LIKE '%CUDA%'")
    _, r, _ = analyze_json(f, capsys)
    assert r["requests"] == 2
    assert any("could not tell" in w for w in r["warnings"])
    # the record manifest beside it says what `record` asked for
    (tmp_path / "manifest.json").write_text(json.dumps({"export": "stripped.sqlite",
                                                        "trace": {"trace": "cuda,nvtx,osrt"}}))
    _, r, _ = analyze_json(f, capsys)
    assert any(w.startswith("CUDA was traced but the program made no CUDA calls") for w in r["warnings"])


# ---------------------------------------------------------------------------------------------
# .nsys-rep reports

@pytest.fixture
def report(recorded, tmp_path):
    """A real .nsys-rep (the annotated program, nsys 2023.4) alone in a fresh folder."""
    d = tmp_path / "rep"
    d.mkdir()
    rep = d / "run.nsys-rep"
    shutil.copyfile(recorded(ANNOTATED, "nvtx,osrt").parent / "cap.nsys-rep", rep)
    return rep


@pytest.mark.nsys("2023.4")
def test_report_is_exported_beside_it_once(report, capsys):
    rc, r, err = analyze_json(report, capsys)
    export = report.with_name("run.sqlite")
    assert rc == 0 and r["path"] == str(export) and r["requests"] == 2
    assert err.count("\n") == 1 and err.startswith(f"clef-prof: exported {report} to {export}")
    mtime = export.stat().st_mtime_ns
    rc, r, err = analyze_json(report, capsys)                  # reused: no export, no line
    assert rc == 0 and r["requests"] == 2 and err == "" and export.stat().st_mtime_ns == mtime
    os.utime(export, (1, 1))                 # older than the report, but made from this report: reused
    rc, r, err = analyze_json(report, capsys)
    assert rc == 0 and err == "" and export.stat().st_mtime_ns == 1_000_000_000


def run_in_read_only(folder: Path, *args, env: dict) -> subprocess.CompletedProcess:
    """`python -m clef_prof ARGS` with `folder` not writable: mode 555, or for root (whom modes do
    not stop) a read-only bind mount in a private mount namespace."""
    cmd = [sys.executable, "-m", "clef_prof", *map(str, args)]
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        finally:
            folder.chmod(0o755)
    d = shlex.quote(str(folder))
    script = f"mount --bind {d} {d} && mount -o remount,bind,ro {d} {d} && exec {shlex.join(cmd)}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.nsys("2023.4")
def test_report_in_a_read_only_folder_goes_to_the_cache(report, tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    p = run_in_read_only(report.parent, "analyze", report, "-f", "json", env=env)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    export = Path(r["path"])
    assert export.parent == tmp_path / "cache" / "clef-prof" and export.name.startswith("run-")
    assert r["requests"] == 2 and f"to {export}" in p.stderr
    assert os.listdir(report.parent) == ["run.nsys-rep"]
    mtime = export.stat().st_mtime_ns
    p = run_in_read_only(report.parent, "analyze", report, "-f", "json", env=env)
    assert p.returncode == 0 and p.stderr == "" and json.loads(p.stdout)["path"] == str(export)
    assert export.stat().st_mtime_ns == mtime


@pytest.mark.nsys("2023.4")
def test_report_without_nsys_names_the_command(report, monkeypatch, capsys):
    monkeypatch.setenv("CLEF_PROF_NSYS", str(report.parent / "no-nsys-here"))
    rc = main(["analyze", str(report)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1
    assert f"`nsys export --type sqlite -o {report.with_name('run.sqlite')} {report}`" in err
    assert os.listdir(report.parent) == ["run.nsys-rep"]


@pytest.mark.nsys("2023.4")
def test_report_and_compare_take_reports(report, tmp_path, capsys):
    html = tmp_path / "r.html"
    assert main(["report", str(report), "--html", str(html)]) == 0
    assert "1 batches" in capsys.readouterr().err and html.stat().st_size > 1000
    other = tmp_path / "other.nsys-rep"
    shutil.copyfile(report, other)
    arms = collect([], [f"a={report}", f"b={other}"])
    assert [r.export for r in arms.captures["a"]] == [str(report.with_name("run.sqlite"))]
    assert [r.export for r in arms.captures["b"]] == [str(tmp_path / "other.sqlite")]
    assert "exported" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# folders and manifests

def test_record_folder_and_manifest(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    (d / "capture.sqlite").symlink_to(SLICE_MAIN)
    (d / "manifest.json").write_text(json.dumps({"export": "capture.sqlite"}))
    for named in (d, d / "manifest.json"):
        rc, r, _ = analyze_json(named, capsys)
        assert rc == 0 and r["path"] == str(d / "capture.sqlite") and r["manifest"] == str(d / "manifest.json")
        assert (r["requests"], r["batches"]) == (256, 48)


def test_folder_without_manifest(tmp_path, capsys):
    (tmp_path / "a.sqlite").symlink_to(SLICE_MAIN)
    rc, r, _ = analyze_json(tmp_path, capsys)
    assert rc == 0 and r["requests"] == 256
    (tmp_path / "b.sqlite").symlink_to(SLICE_PR)
    assert main(["analyze", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2 candidate captures (a.sqlite, b.sqlite); name one" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["analyze", str(empty)]) == 1
    assert "no manifest.json, .sqlite export, .nsys-rep report or PyTorch profiler trace" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# several captures: warnings name their capture

def test_warnings_on_stderr_name_their_capture(capsys):
    cpu = SLICE_MAIN.parent / "cpu23-inline.sqlite"
    assert main(["analyze", str(SLICE_MAIN), str(cpu), "-f", "csv", "--jobs", "1"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines and all(ln.startswith((f"warning: {SLICE_MAIN}: ", f"warning: {cpu}: ")) for ln in lines)
    assert any(ln.startswith(f"warning: {SLICE_MAIN}: nsys 2023.4.4.54 ships CUPTI 12.4") for ln in lines)
    assert f"warning: {cpu}: CUDA was not traced (record with -t cuda,nvtx): H2D, kernel and overlap figures " \
           "are not shown" in lines
    assert {row.split(",")[0] for row in out.splitlines()[1:]} == {str(SLICE_MAIN), str(cpu)}


# ---------------------------------------------------------------------------------------------
# help

def help_of(*command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command, example", [
    ("analyze", "clef-prof analyze traces/gpu25-pr-slice.sqlite"),
    ("demo-server", "clef-prof demo-server --variant main --port 8000"),
    ("load", "clef-prof load --url http://127.0.0.1:8000 --duration 10 --concurrency 16"),
    ("whatif", "clef-prof whatif --from runs/head.json -f markdown")])
def test_help_has_a_description_and_an_example(command, example, capsys):
    text = help_of(command, capsys=capsys)
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: clef-prof {command}") and len(description.split()) > 20
    assert "examples:" in text and example in text


def test_every_format_option_has_help(capsys):
    import argparse

    from clef_prof.cli.app import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    with_format = {name: next(a for a in p._actions if "--format" in a.option_strings)
                   for name, p in sub.choices.items() if "--format" in p._option_string_actions}
    assert {"analyze", "compare", "inject"} <= set(with_format)
    assert all(len((a.help or "").split()) >= 5 for a in with_format.values()), with_format
    out = " ".join(help_of("ab", capsys=capsys).split())
    assert "--out OUT, -o OUT folder of the ab run: one capture folder per arm and round" in out


@pytest.mark.parametrize("cols", [80, 100])
def test_every_help_fits_the_width(cols, capsys, monkeypatch):
    """Every command's --help, descriptions and epilogs filled to $COLUMNS: no line wider, but an
    example's own line (indented, kept as written, at most 80); paragraphs keep their words."""
    import argparse

    from clef_prof.cli.app import build_parser

    monkeypatch.setenv("COLUMNS", str(cols))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ["", *sub.choices]:
        text = help_of(*([command] if command else []), capsys=capsys)
        examples = text.split("\nexamples:\n")[1] if "\nexamples:\n" in text else ""
        wide = [line for line in text.splitlines() if len(line) > cols and not (line in examples and len(line) <= 80)]
        assert not wide, (command, wide)
        p = sub.choices.get(command)
        if p is not None and p.description:
            assert " ".join(p.description.split()) in " ".join(text.split()), command


@pytest.mark.parametrize("args, needle", [
    ((), "the following arguments are required: COMMAND"),
    (("nosuch",), "invalid choice: 'nosuch'"),
    (("analyze", "traces/gpu25-pr-slice.sqlite", "-f", "yaml"), "argument --format/-f: invalid choice: 'yaml'"),
    (("analyze", "traces/gpu25-pr-slice.sqlite", "--requests", "abc"), "argument --requests: invalid int value"),
    (("report", "traces/gpu25-pr-slice.sqlite"), "the following arguments are required: --html"),
    (("demo-server", "--port", "abc"), "argument --port"),
    (("analyze", "traces/gpu25-pr-slice.sqlite", "--json"), "unrecognized arguments: --json"),
    (("doctor", "--bogus"), "unrecognized arguments: --bogus"),
    (("--bogus", "analyze", "traces/gpu25-pr-slice.sqlite"), "unrecognized arguments: --bogus")])
def test_a_usage_error_is_one_line(args, needle):
    """A wrong flag or value is said in one line naming the command and where its help is, exit 2
    (argparse's own would print the usage block first)."""
    p = run_cli(*args, cwd=ROOT)
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and p.stdout == "" and len(lines) == 1, p.stderr
    command = "clef-prof" + (f" {args[0]}" if args and args[0] not in ("nosuch", "--bogus") else "")
    assert lines[0].startswith(f"{command}: error: ") and needle in lines[0], lines
    assert lines[0].endswith(f"(see {command} --help)")


def test_a_parser_that_fails_is_one_line(monkeypatch, capsys):
    """A bug while building the parser (a command module that fails to import, say) is said in
    one line, as one in a command is; --debug still shows the traceback."""
    from clef_prof.cli import app

    def broken(argv=None):
        raise ImportError("no module named 'clef_prof.cli.nosuch'")

    monkeypatch.setattr(app, "build_parser", broken)
    assert app.main(["analyze", "x"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["clef-prof: internal error: ImportError: no module named 'clef_prof.cli.nosuch' "
                   "(rerun with --debug for a traceback)"]
    with pytest.raises(ImportError):
        app.main(["--debug", "analyze", "x"])


@pytest.mark.parametrize("flag, what, n", [("--stages", "stage", 100_000), ("--batch", "batch range", 100_000),
                                           ("--domain", "domain", 100_000), ("--batch", "batch range", 290)])
def test_a_name_longer_than_names_are_read_is_refused(flag, what, n):
    """A 100,000-character name could match no range (names are read cut to 300 characters) and
    was blamed on the capture ('LIKE or GLOB pattern too complex; the capture may be truncated');
    a batch name of 290 left no room for its n=K (read as n=1 when cut after its first digit)."""
    p = run_cli("analyze", SLICE_MAIN, flag, "x" * n)
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith(f"clef-prof: error: {what} name 'xxxx") and f"of {n:,} characters" in lines[0]
    assert "capture" not in lines[0] and "corrupt" not in lines[0]
