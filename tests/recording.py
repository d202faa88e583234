"""Record real CPU captures with the project's Nsight Systems (scripts/install-nsys.sh)."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from clef_prof.record import procs
from clef_prof.record.session import AGENT_EXIT_S, nsys_crash
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
    """Run `program` (Python source) under `nsys profile -t TRACE` (nvtx,osrt) and export it to SQLite."""
    out.mkdir(parents=True, exist_ok=True)
    src = out / "prog.py"
    src.write_text(textwrap.dedent(program))
    return profile([python, src], out / "cap", version, {**os.environ, **(env or {})}, out, nsys_args, timeout, trace)


def profile(argv: list, stem: Path, version: str, env: dict, cwd: Path, nsys_args=(), timeout: int = 180,
            trace: str = "nvtx,osrt") -> Path:
    """`nsys profile -t TRACE` of argv in cwd, exported to tryN/NAME.sqlite beside STEM (= .../NAME),
    N the attempt; nothing of nsys outlives it.

    nsys runs in a TMPDIR of its own, as record's does (clef_prof.record.plan.nsys_tmpdir): in the
    shared one another nsys on the machine may remove the session's event files, and the export
    then held nothing at all from the target (no NVTX_EVENTS, no OSRT_API).

    Recorded again (3 tries) on known nsys failures under load, with no report, and on nothing
    else: nsys failing at start-up (its agent's sem_open ENOENT race with nsys-launcher, 2022.4's
    "Failed to probe the process (sync)") or losing its agent (2022.4's "Connection to the Agent
    lost."): see clef_prof.record.session.nsys_crash.
    """
    nsys = nsys_path(version)
    db = None
    for attempt in range(3):
        try_dir = stem.parent / f"try{attempt}"
        try_dir.mkdir(parents=True, exist_ok=True)
        db = _profile_once(nsys, argv, try_dir / stem.name, env, cwd, nsys_args, timeout, trace)
        if db is not None:
            break
    assert db is not None, f"nsys {version} crashed at start-up 3 times"
    return db


def _profile_once(nsys, argv, stem, env, cwd, nsys_args, timeout, trace) -> Path | None:
    """One `nsys profile` and export: the export, or None when nsys crashed at start-up. Its
    processes carry a marker; its agent (which calls setsid, so a timeout's kill misses it) gets
    a while to exit, then is ended."""
    token = secrets.token_hex(8)
    tmp = tempfile.mkdtemp(prefix="clef-test-nsys-")
    cmd = [nsys, "profile", "-t", trace, "--sample=none", "--cpuctxsw=none", *nsys_args, "-o", stem,
           "--force-overwrite", "true", *argv]
    try:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**env, procs.ENV_MARK: token, "TMPDIR": tmp}, cwd=cwd) as p:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                hung = "; ".join(f"{q.pid} {q.state} {_wchan(q.pid)} {q.cmdline[:100]}" for q in procs.marked(token))
                raise AssertionError(f"nsys profile ran past {timeout} s; its processes: {hung}") from None
    finally:
        procs.wait_gone(lambda: not procs.marked(token), AGENT_EXIT_S)
        left = procs.terminate_marked(token)
        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, f"could not end nsys' processes: {procs.describe(left)}"
    rep = stem.parent / f"{stem.name}.nsys-rep"
    if not rep.exists() and nsys_crash(out + err):
        return None
    # with --duration nsys ends the app and passes on its signal exit: the report is what counts
    assert rep.exists(), out[-2000:] + err[-2000:]
    sqlite = stem.parent / f"{stem.name}.sqlite"
    p = subprocess.run([nsys, "export", "--type", "sqlite", "-o", sqlite, "--force-overwrite", "true", rep],
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode and nsys_crash(p.stdout + p.stderr):      # a report cut by the agent's loss
        return None
    assert p.returncode == 0 and sqlite.exists(), p.stdout[-2000:] + p.stderr[-2000:]
    return sqlite


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text() or "-"
    except OSError:
        return "?"
