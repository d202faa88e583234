"""The analyze path stays light: what a fresh `clef-prof analyze` / `report` / `--help` / `doctor` imports
(the guard on start-up cost; speed itself is measured by bench/bench_small.py, not here).
Modules named with a dot are checked by full name (numpy.ma: NumPy imports it lazily)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "pyarrow", "adbc_driver_sqlite", "adbc_driver_manager", "rich")
LAZY = ("numpy.ma", "pyarrow.compute", "pyarrow.dataset",      # 20, 90 and 300 ms (the last imports pandas)
        "clef_prof.annotate.spec")                              # 3 ms: only with --spec

# runs the CLI in-process in a fresh interpreter, then prints the top-level packages it imported
_PROBE = ("import json, sys\n"
          "from clef_prof.cli.app import main\n"
          "try:\n"
          "    rc = main(sys.argv[1:])\n"
          "except SystemExit as exc:  # --help\n"
          "    rc = exc.code\n"
          "print(json.dumps({'rc': rc, 'modules': sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))}))\n")


def imported(*argv: str, reader: str | None = None) -> tuple[int, set[str]]:
    """Exit code and modules imported: top-level packages, and every module by its full name."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CLEF_PROF_READER", None)
    if reader:
        env["CLEF_PROF_READER"] = reader
    p = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=120)
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    return doc["rc"], set(doc["modules"])


def test_analyze_of_a_small_export_imports_no_pandas_matplotlib_arrow(capture, tmp_path):
    rc, mods = imported("analyze", str(capture("gpu-q1c16-main")), "-f", "json", "-o", str(tmp_path / "a.json"))
    assert rc == 0 and json.loads((tmp_path / "a.json").read_text())["requests"]
    assert "numpy" in mods and not mods & {*HEAVY, *LAZY}, sorted(mods & {*HEAVY, *LAZY})


def test_analyze_through_adbc_imports_pyarrow_but_not_pandas(capture, tmp_path):
    """The big-export reader: the ADBC driver's low-level API and pyarrow's core, without
    its DB-API module (which imports pyarrow.dataset and pandas) or pyarrow.compute."""
    rc, mods = imported("analyze", str(capture("gpu-q1c16-main")), "-f", "json", "-o", str(tmp_path / "a.json"),
                        reader="adbc")
    assert rc == 0 and json.loads((tmp_path / "a.json").read_text())["requests"]
    assert {"pyarrow", "adbc_driver_sqlite"} <= mods and not mods & {"pandas", "matplotlib", *LAZY}, \
        sorted(mods & {"pandas", "matplotlib", *LAZY})


@pytest.mark.parametrize("argv", [("analyze", "--help"), ("doctor",)], ids=["analyze-help", "doctor"])
def test_help_and_doctor_import_no_numpy(argv):
    rc, mods = imported(*argv)
    assert rc in (0, 1) and not mods & {"numpy", *HEAVY}, sorted(mods & {"numpy", *HEAVY})


def test_report_imports_no_pandas_matplotlib_arrow(capture, tmp_path):
    """The HTML report streams like analyze (one pass, then its timeline's window) and draws SVG."""
    out = tmp_path / "r.html"
    rc, mods = imported("report", str(capture("gpu-q1c16-main")), "--html", str(out))
    assert rc == 0 and out.read_text().count("<svg") == 3
    assert "numpy" in mods and not mods & (set(HEAVY) - {"rich"}), sorted(mods & set(HEAVY))
