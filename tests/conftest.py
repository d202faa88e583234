"""Fixtures: the real captures committed in tests/data (xz, scrubbed), decompressed once per
session into a temporary folder as read-only files.

Markers name what a test needs from outside Python (registered in pyproject.toml): `nsys(*versions)`
Nsight Systems under .nsys/ (2023.4 when no version is given), `chromium` a headless browser,
`jupyter` a python3 Jupyter kernel, `native` the C reader (clef_prof.analyze.read._scan). A test whose requirement is missing is skipped with the
install command, except under CI=true, where it fails; under CI=true no test may be skipped at all.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
if str(DATA.parent) not in sys.path:      # tests/ (conftest, recording, clicheck) for the tests in its folders
    sys.path.insert(0, str(DATA.parent))
NSYS_DIR = ROOT / ".nsys"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def sql(path, query, *args):
    """The rows of `query` over the export at `path`, opened read-only: the tests' independent oracle."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def edited_copy(src, out, *statements):
    """`out`, a writable copy of the export `src` with each SQL statement run on it (a statement
    given as a tuple is (sql, parameters)): a capture damaged or changed the way the test says."""
    shutil.copyfile(src, out)
    Path(out).chmod(0o644)
    con = sqlite3.connect(out)
    try:
        with con:
            for st in statements:
                con.execute(*st) if isinstance(st, tuple) else con.execute(st)
    finally:
        con.close()
    return out


# clef-prof sampler marks (`t PID TID`) inside a `head` range of the thread the mark names, by SQL
SAMPLES_IN_HEAD = """
    SELECT count(*) FROM NVTX_EVENTS m JOIN StringIds t ON t.id = m.textId
    JOIN NVTX_EVENTS h ON h.eventType = 59 AND h.start <= m.start AND m.start <= h."end"
         AND (h.globalTid >> 24) = (m.globalTid >> 24)
         AND (h.globalTid & 16777215) = CAST(substr(t.value, instr(substr(t.value, 3), ' ') + 3) AS INTEGER)
    JOIN StringIds hn ON hn.id = h.textId AND hn.value = 'head'
    WHERE m.eventType = 34 AND t.value LIKE 't %'"""


def loop_union(s, e) -> list[list[int]]:
    """The union of intervals [s, e] by a plain loop over them in start order: the tests' oracle
    for the vectorised unions."""
    out: list[list[int]] = []
    for a, b in sorted(zip(s, e)):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def nsys_bin(version: str = "2023.4") -> Path:
    return NSYS_DIR / version / "nsys"


def chromium() -> str | None:
    return next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)


def _python3_kernel() -> bool:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        return False
    return True


def _missing(mark: pytest.Mark) -> str | None:
    """Why the requirement of a marker is not met, naming the install command; None when it is."""
    if mark.name == "nsys":
        absent = [v for v in mark.args or ("2023.4",) if not nsys_bin(v).exists()]
        if absent:
            return f"Nsight Systems {', '.join(absent)} is not installed in .nsys/ (run: bash scripts/install-nsys.sh)"
    elif mark.name == "chromium":
        if chromium() is None:
            return "Chromium is not installed (run: apt-get update && apt-get install -y chromium)"
    elif mark.name == "native":
        from clef_prof.analyze.read.export import _native_module
        if _native_module() is None:
            return ("the C reader is not built (run: apt-get install -y gcc, and python3-dev for Debian's Python, then "
                    "python3 -m pip install -e '.[test]')")
    elif mark.name == "jupyter":
        if not _python3_kernel():
            return "no python3 Jupyter kernel (run: python3 -m pip install -e '.[test]', which installs ipykernel)"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for mark in item.iter_markers():
        why = _missing(mark)
        if why and in_ci():
            pytest.fail(f"CI=true: {why}", pytrace=False)
        if why:
            pytest.skip(why)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skip, from a marker or anywhere else, is a failure."""
    outcome = yield
    rep = outcome.get_result()
    if in_ci() and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome, rep.longrepr = "failed", f"CI=true, so this test may not be skipped: {reason}"


@pytest.fixture(scope="session")
def captures_dir(tmp_path_factory) -> Path:
    """Where the captures are decompressed: a fresh folder, or CLEF_TEST_CAPTURES (an existing folder
    that many sessions share, e.g. the runs of benchmarks/mutate.py; the files in it are read-only)."""
    shared = os.environ.get("CLEF_TEST_CAPTURES")
    if shared:
        assert Path(shared).is_dir(), f"CLEF_TEST_CAPTURES={shared}: not a folder"
        return Path(shared)
    return tmp_path_factory.mktemp("captures")


def _unpack(captures_dir: Path, name: str) -> Path:
    out = captures_dir / f"{name}.sqlite"
    if not out.exists():
        part = out.with_name(f".{out.name}.{os.getpid()}.part")    # whole or absent, in a shared folder too
        with lzma.open(DATA / f"{name}.sqlite.xz") as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst)
        part.chmod(0o444)
        os.replace(part, out)
    return out


@pytest.fixture(scope="session")
def capture(captures_dir):
    """capture('gpu-q1c16-main') -> Path of the decompressed, read-only export from tests/data."""
    return lambda name: _unpack(captures_dir, name)


@pytest.fixture(scope="session")
def truth():
    """truth('gpu-q1c16-main') -> the ground-truth JSON recorded with that capture."""
    return lambda name: json.loads((DATA / f"{name}.truth.json").read_text())


@pytest.fixture(scope="session")
def slice_result():
    """analyze's result on traces/gpu-main-slice.sqlite (256 requests, 48 batches), for tests that hold
    a variant of it (`dataclasses.replace`) against something else, e.g. a record manifest."""
    from clef_prof.analyze.pipeline import analyze

    return analyze(str(ROOT / "traces" / "gpu-main-slice.sqlite")).result


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def reversed_kernels(capture, tmp_path, monkeypatch):
    """gpu-q1c16-main with its kernel table stored in reverse start order, and the list that
    collects the `ordered` mode of each GPU pass analyze runs (GPU windows of 4096 rows): a
    table out of time order cannot be merged early, so the pass starts over holding all."""
    from clef_prof.analyze.figures import cuda_pass as analysis

    f = tmp_path / "reversed.sqlite"
    shutil.copyfile(capture("gpu-q1c16-main"), f)
    f.chmod(0o644)
    with sqlite3.connect(f) as con:
        con.execute("CREATE TEMP TABLE k AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid DESC")
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM k")
    modes = []
    stream = analysis.gpu_stream

    def spy(*args, ordered, **kw):
        modes.append(ordered)
        return stream(*args, ordered=ordered, **kw)

    monkeypatch.setattr(analysis, "gpu_stream", spy)
    monkeypatch.setattr(analysis, "GPU_WINDOW", 4096)
    return f, modes
