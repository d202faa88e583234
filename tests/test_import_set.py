"""The analyze path stays light: what a fresh `clef-prof analyze` / `report` / `--help` / `doctor` imports
(the guard on start-up cost; speed itself is measured by benchmarks/bench_small.py, not here).
Modules named with a dot are checked by full name (numpy.ma: NumPy imports it lazily).
The record path (record, ab, load, demo-server: what runs on GPU machines beside the server) imports
no pandas, NumPy, rich or pyarrow at all, and runs with them blocked."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from httpcheck import call, free_port, REQ

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
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


def test_entry_points_run_without_pandas_numpy_rich(tmp_path):
    block = tmp_path / "block"
    for m in ("pandas", "numpy", "rich", "pyarrow", "adbc_driver_sqlite", "torch", "aiohttp"):
        (block / m).mkdir(parents=True)
        (block / m / "__init__.py").write_text(f"raise ImportError('{m} is blocked in this test')\n")
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(block), str(ROOT)]))
    code = ("import sys; import clef_prof, clef_prof.record.session, clef_prof.record.demo_server, clef_prof.record.ab, clef_prof.record.load, "
            "clef_prof.record.manifest, clef_prof.base.nsys, clef_prof.record.procs, clef_prof.cli.app, clef_prof.cli.record, clef_prof.cli.ab, "
            "clef_prof.cli.demo_server, clef_prof.cli.load; clef_prof.cli.app.build_parser(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas','numpy','rich','pyarrow')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr
    for argv in (["-m", "clef_prof", "record", "--out", str(tmp_path / "o"), "--dry-run", "--", "srv"],
                 ["-m", "clef_prof", "ab", "--arm", "a=x", "--arm", "b=y", "--out", str(tmp_path / "o"), "--dry-run"]):
        p = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "--trace=cuda,nvtx,osrt" in p.stdout, p.stderr
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "clef_prof", "demo-server", "--port", str(port), "--device", "auto"],
                           cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            try:
                if call("GET", f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        assert call("POST", f"http://127.0.0.1:{port}/v1/systemone", REQ)[0] == 200
    finally:
        srv.send_signal(signal.SIGINT)
        assert srv.wait(15) == 0, srv.stderr.read()
