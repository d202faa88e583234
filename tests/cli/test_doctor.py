"""clef-prof doctor: the nsys and Python nvtx found, whether their ranges are recorded, what to do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from recording import nsys_path, nvtx_python

from clef_prof.base import cupti
from clef_prof.cli import doctor
from clicheck import run_main

ROOT = Path(__file__).resolve().parents[2]


def fake_nvtx(tmp_path, version: str, package: bool = True) -> Path:
    """A folder that makes importlib.metadata report `nvtx==version` when on PYTHONPATH, and
    holds an importable (empty) nvtx package, as pip leaves it, unless `package` is False."""
    d = tmp_path / f"nvtx-site-{version}"
    info = d / f"nvtx-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvtx\nVersion: {version}\n")
    if package:
        (d / "nvtx").mkdir()
        (d / "nvtx" / "__init__.py").write_text("")
    return d


def fake_nsys(tmp_path, version_line: str, code: int = 0) -> Path:
    p = tmp_path / f"nsys-{abs(hash(version_line))}"
    p.write_text(f"#!/bin/sh\necho '{version_line}'\nexit {code}\n")
    p.chmod(0o755)
    return p


def run_doctor(*args, pythonpath=None, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CLEF_PROF_NSYS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([str(pythonpath)] if pythonpath else [])])
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "clef_prof", "doctor", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("nsys, nvtx, ok", [
    ((2022, 4, 2), (0, 2, 11), True), ((2023, 4, 4), (0, 2, 11), True),
    ((2022, 4, 2), (0, 2, 12), False), ((2023, 4, 4, 54), (0, 2, 17), False),
    ((2024, 1, 1), (0, 2, 17), True), ((2025, 3, 2), (0, 2, 12), True),
    (None, (0, 2, 17), None), ((2023, 4), None, None),
])
def test_rule(nsys, nvtx, ok):
    assert doctor.records_python_nvtx(nsys, nvtx) is ok


def test_version_parsing():
    assert doctor.nsys_version("NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0") == (2023, 4, 4, 54)
    assert doctor.nsys_version("nothing") is None
    assert doctor.parse_version("0.2.11") == (0, 2, 11) and doctor.parse_version("0.2.13rc1") == (0, 2, 13)


@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.nsys(v)) for v in ("2022.4", "2023.4")])
def test_real_nsys_with_old_nvtx_is_fine(tmp_path, version):
    nsys = nsys_path(version)
    p = run_doctor("--nsys", nsys, pythonpath=fake_nvtx(tmp_path, "0.2.11"))
    assert p.returncode == 0, p.stdout + p.stderr
    words = " ".join(p.stdout.split())          # lines wrap at the width
    assert f"{version}." in words and "records Python nvtx ranges" in words and "nvtx 0.2.11" in words
    assert "verdict:  ok" in p.stdout and p.stderr == ""


@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.nsys(v)) for v in ("2022.4", "2023.4")])
def test_real_nsys_with_new_nvtx_is_a_problem(tmp_path, version):
    nsys = nsys_path(version)
    p = run_doctor("--nsys", nsys, pythonpath=fake_nvtx(tmp_path, "0.2.13"))
    assert p.returncode == 1
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "will not record ranges from Python nvtx 0.2.13" in err[0], p.stderr
    assert "pip install 'nvtx==0.2.11'" in p.stdout          # what to do
    assert "clef_prof's own ranges" in p.stdout and "recorded regardless" in p.stdout


def test_newer_nsys_records_new_nvtx(tmp_path):
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2025.3.2.474-253236389321v0")
    p = run_doctor("--nsys", nsys, "--json", pythonpath=fake_nvtx(tmp_path, "0.2.17"))
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout)
    assert r["ok"] and r["nvtx"] == "0.2.17" and r["nsys"][0]["records_python_nvtx"] is True


def test_nvtx_metadata_without_the_package_is_not_installed(tmp_path):
    """Only an importable nvtx can emit ranges: metadata left behind by a removed package is none."""
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0")
    p = run_doctor("--nsys", nsys, "--json", pythonpath=fake_nvtx(tmp_path, "0.2.17", package=False))
    r = json.loads(p.stdout)
    assert p.returncode == 0 and r["ok"] and r["nvtx"] is None, p.stdout + p.stderr


def test_no_nvtx_installed_is_fine(tmp_path, monkeypatch):
    """Without the nvtx package only clef_prof's own ranges exist, and every nsys records them."""
    monkeypatch.setattr(doctor, "probe_python", lambda python=None: ("3.11.7", None, None))
    monkeypatch.setenv("COLUMNS", "200")
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0")
    r = doctor.check([str(nsys)], env={})
    assert r.ok and r.nvtx is None and r.nsys[0].records_python_nvtx is None
    assert "nvtx not installed" in doctor.render(r)


@pytest.mark.parametrize("make, needle", [
    (lambda t: t / "missing-nsys", "no nsys there"),
    (lambda t: fake_nsys(t, "Segmentation fault", code=139), "`nsys --version` failed"),
])
def test_broken_nsys_one_line(tmp_path, make, needle):
    p = run_doctor("--nsys", make(tmp_path))
    assert p.returncode == 1
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in p.stderr


def test_env_variable_is_used(tmp_path):
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2024.6.1.90-246134209036v0")
    p = run_doctor("--json", env_extra={"CLEF_PROF_NSYS": str(nsys)})
    r = json.loads(p.stdout)
    assert [(n["path"], n["source"]) for n in r["nsys"]] == [(str(nsys), "$CLEF_PROF_NSYS")]


def test_no_nsys_anywhere(monkeypatch):
    monkeypatch.setattr(doctor, "_project_nsys", lambda: [])
    r = doctor.check(env={"PATH": ""})
    assert not r.ok and "no nsys found" in r.problems[0]
    assert any("scripts/install-nsys.sh" in a for a in r.advice)


def test_other_python(tmp_path):
    """--python looks for nvtx in the server's interpreter, not clef-prof's."""
    venv = nvtx_python("0.2.11")
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0")
    p = run_doctor("--nsys", nsys, "--python", venv, "--json")
    r = json.loads(p.stdout)
    assert r["nvtx"] == "0.2.11" and r["ok"], p.stdout
    p = run_doctor("--python", tmp_path / "no-python")
    assert p.returncode == 1 and "no such interpreter" in p.stderr


def test_doctor_says_no_driver_on_this_machine():
    if cupti.local_driver_version()[0] is not None:
        pytest.skip("this machine has an NVIDIA driver")
    p = run_main("doctor")
    assert "driver    no NVIDIA driver" in p.stdout and "Traceback" not in p.stderr


@pytest.mark.native
def test_says_how_analyze_reads_exports(tmp_path, monkeypatch):
    """The C reader's line names the SQLite it was built against; without it, why analyze is
    slower and how to build it. Neither is a problem: the verdict does not change."""
    import sqlite3

    monkeypatch.setattr(doctor, "probe_python", lambda python=None: ("3.11.7", None, None))
    monkeypatch.setenv("COLUMNS", "200")
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0")
    r = doctor.check([str(nsys)], env={})
    from clef_prof.analyze.read import _scan

    assert f"\nanalyze   C reader (SQLite {_scan.sqlite_version}): exports read at SQLite's own speed\n" \
        in doctor.render(r) and _scan.sqlite_version.split(".")[0] == sqlite3.sqlite_version.split(".")[0] == "3"
    import clef_prof.analyze

    monkeypatch.setitem(sys.modules, "clef_prof.analyze.read._scan", None)      # import fails as if never built
    monkeypatch.delattr(clef_prof.analyze.read, "_scan")
    without = doctor.check([str(nsys)], env={})
    text = doctor.render(without)
    line = " ".join(text[text.index("\nanalyze"):text.index("\ndriver")].split())      # wrapped at the width
    assert without.problems == r.problems and line.startswith("analyze no C reader: exports are read through ADBC or sqlite3, slower") \
        and "a C compiler" in line


@pytest.mark.parametrize("cols", [50, 80])
def test_lines_fit_the_width(tmp_path, monkeypatch, cols):
    """Each line wraps under its label at $COLUMNS (a path wider than the width stays whole)."""
    monkeypatch.setattr(doctor, "probe_python", lambda python=None: ("3.11.7", None, None))
    monkeypatch.setenv("COLUMNS", str(cols))
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0")
    text = doctor.render(doctor.check([str(nsys)], env={}))
    lines = text.splitlines()
    assert all(len(x) <= cols or str(nsys) in x for x in lines), text
    assert all(x[:10].strip() or x.startswith(" " * 10) for x in lines) and lines[-1].startswith("verdict:  ")
    monkeypatch.setenv("COLUMNS", "1000")
    assert " ".join(doctor.render(doctor.check([str(nsys)], env={})).split()) == " ".join(text.split())
