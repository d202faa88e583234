"""Record real CPU captures with the project's Nsight Systems (scripts/install-nsys.sh)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import NSYS_DIR, nsys_bin


def nsys_path(version: str) -> Path:
    """The nsys CLI of a version. Tests that call it carry @pytest.mark.nsys(version), which skips
    them (fails them under CI=true) before they run when that version is not installed."""
    p = nsys_bin(version)
    if not p.exists():
        pytest.fail(f"Nsight Systems {version} is not installed and this test lacks @pytest.mark.nsys({version!r})")
    return p


def nvtx_python(version: str) -> Path:
    """A venv python with the `nvtx` package at `version` (made once, under .nsys/)."""
    venv = NSYS_DIR / f"venv-nvtx-{version}"
    py = venv / "bin" / "python"
    if not py.exists() or subprocess.run([py, "-c", "import nvtx"], capture_output=True).returncode:
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"nvtx=={version}"],
                       check=True)
    return py


def record(program: str, out: Path, version: str = "2023.4", python: Path | str = sys.executable,
           nsys_args: tuple[str, ...] = (), env: dict | None = None, timeout: int = 180,
           trace: str = "nvtx,osrt") -> Path:
    """Run `program` (Python source) under `nsys profile -t TRACE` (nvtx,osrt) and export it to SQLite.

    Recorded again (3 tries) when the export holds nothing at all from the target's injection,
    no NVTX_EVENTS and no OSRT_API: nsys 2022.4/2023.4 do that now and then (seen about 1 run in
    10 here, more on a busy machine), for the `nvtx` package's programs as much as clef_prof's.
    A capture with OS-runtime rows and no NVTX is never retried.
    """
    for attempt in range(3):
        db = _record_once(program, out / f"try{attempt}", version, python, nsys_args, env, timeout, trace)
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        con.close()
        if tables & {"NVTX_EVENTS", "OSRT_API"}:
            break
    return db


def _record_once(program, out, version, python, nsys_args, env, timeout, trace) -> Path:
    nsys = nsys_path(version)
    out.mkdir(parents=True, exist_ok=True)
    src = out / "prog.py"
    src.write_text(textwrap.dedent(program))
    rep = out / "cap"
    run_env = {**os.environ, **(env or {})}
    p = subprocess.run([nsys, "profile", "-t", trace, "--sample=none", "--cpuctxsw=none", *nsys_args,
                        "-o", rep, "--force-overwrite", "true", python, src],
                       capture_output=True, text=True, timeout=timeout, env=run_env, cwd=out)
    # with --duration nsys ends the app and passes on its signal exit: the report is what counts
    assert (out / "cap.nsys-rep").exists(), p.stdout[-2000:] + p.stderr[-2000:]
    sqlite = out / "cap.sqlite"
    p = subprocess.run([nsys, "export", "--type", "sqlite", "-o", sqlite, "--force-overwrite", "true",
                        out / "cap.nsys-rep"], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0 and sqlite.exists(), p.stdout[-2000:] + p.stderr[-2000:]
    return sqlite
