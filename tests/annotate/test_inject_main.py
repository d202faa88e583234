"""clef-prof inject on targets of the main module and on third-party code, never silent.

tests/programs/embedsrv/server.py defines its batch (`Embedder.run`) and head in the main module
and runs as `python -m embedsrv.server` or `python embedsrv/server.py`, with a spawn or
forkserver worker that re-runs it as `__mp_main__`; its other stages are `json`'s
JSONDecoder.decode / JSONEncoder.encode and `rich.markup.escape`. Recorded under nsys 2023.4
through `clef-prof inject`, every range is counted per stage and per process with plain SQL.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from clicheck import assert_one_line
from test_inject import PROGRAMS, ROOT, clean_env, injected_env, record, run_cli

SPEC = PROGRAMS / "embedsrv.toml"
FILE_SPEC = PROGRAMS / "embedsrv-file.toml"
LAUNCH = {"module": ["-m", "embedsrv.server"], "script": ["embedsrv/server.py"]}
BATCHES = 6


def run_injected(spec, launch, tmp_path, *args, inject_cli=True):
    out = tmp_path / "facts.json"
    argv = [sys.executable, *LAUNCH[launch], "--out", out, *args]
    if inject_cli:
        p = run_cli("inject", "--spec", spec, "--", *argv, cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    else:
        p = subprocess.run(argv, cwd=PROGRAMS, env=injected_env(spec), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text()), p.stderr


@pytest.mark.parametrize("spec, launch, start", [
    (SPEC, "module", "spawn"), (SPEC, "module", "forkserver"), (SPEC, "script", "spawn"),
    (FILE_SPEC, "script", "forkserver")])
def test_main_module_targets_wrapped_in_process_and_workers(tmp_path, spec, launch, start):
    facts, _ = run_injected(spec, launch, tmp_path, "--start", start, "--batches", "2")
    assert facts["worker_name"] == "__mp_main__" and facts["worker_exit"] == 0
    assert all(facts["parent_wrapped"].values()), facts
    assert all(facts["worker_wrapped"].values()), facts


def test_never_wrapped_targets_reported_at_exit(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.read_text() + 'unused = "embedsrv.unused:never_called"\n'
                                       'late = "embedsrv.server:NotDefined"\n')
    facts, err = run_injected(spec, "module", tmp_path, "--batches", "1", inject_cli=False)
    lines = err.splitlines()
    for pid in (facts["parent_pid"], facts["worker_pid"]):
        mine = sorted(line for line in lines if line.startswith(f"clef-prof inject[{pid}]: "))
        assert mine == sorted([
            f"clef-prof inject[{pid}]: warning: [stages].unused embedsrv.unused:never_called was never wrapped "
            f"in this process: module embedsrv.unused was never imported",
            f"clef-prof inject[{pid}]: warning: [stages].late embedsrv.server:NotDefined was never wrapped in this "
            f"process: {PROGRAMS / 'embedsrv' / 'server.py'} ran, but defined no NotDefined at its top level"]), err
    assert "Traceback" not in err


def test_check_follows_the_command(tmp_path):
    p = run_cli("inject", "--spec", SPEC, "--check", "--", sys.executable, "embedsrv/server.py", cwd=PROGRAMS,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    assert "6 of 6 targets import and wrap" in p.stderr and "(3 in the main module" in p.stderr
    p = run_cli("inject", "--spec", FILE_SPEC, "--check", "--", sys.executable, "-m", "embedsrv.server",
                cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    lines = p.stderr.splitlines()               # one line per target, then the count
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert [line.split(": ")[2].split()[-1] for line in lines[:-1]] == [
        "[batch].target", "[stages].head", "[stages].encode"], p.stderr
    assert all("the command runs -m embedsrv.server, not this file" in line for line in lines[:-1]), p.stderr
    assert lines[-1] == f"clef-prof: error: spec {FILE_SPEC}: 3 of 6 targets cannot be wrapped (one line each above)"
    p = run_cli("inject", "--spec", SPEC, "--", sys.executable, "-I", "embedsrv/server.py", cwd=PROGRAMS,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert_one_line(p, 1, "runs Python with -I", "no target would be wrapped")


@pytest.mark.parametrize("source, target, needles", [
    ("raise ValueError('boom')\n", "bad:f", ["[stages].parse: bad:f", "importing bad raised ValueError: boom"]),
    ("import sys\nsys.exit(3)\n", "bad:f", ["importing bad exited (SystemExit: 3)"]),
    ("import os\nos._exit(4)\n", "bad:f", ["[stages].parse: bad:f: importing bad", "exit code 4"]),
    ("import time\ntime.sleep(600)\n", "bad:f", ["[stages].parse: bad:f: importing bad", "did not finish within 3 s"]),
    ("", "math:sqrt", ["math:sqrt", "is implemented in C (a builtin_function_or_method)"]),
    ("", "builtins:dict.get", ["builtins:dict.get", "is implemented in C (a method_descriptor)"]),
    ("", "json:__version__", ["json:__version__", "is not callable (a str)"]),
])
def test_check_refuses_what_would_not_wrap(tmp_path, source, target, needles):
    (tmp_path / "bad.py").write_text(source)
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[stages]\nparse = "{target}"\n')
    marker = tmp_path / "launched"
    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    p = run_cli("inject", "--spec", spec, "--check-timeout", "3", "--", *cmd, cwd=tmp_path,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert_one_line(p, 1, "clef-prof: error:", *needles)
    assert not marker.exists()
    p = run_cli("inject", "--spec", spec, "--check-timeout", "3", "--lenient", "--", *cmd, cwd=tmp_path,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 0 and marker.exists(), p.stderr
    assert "skipped (--lenient)" in p.stderr


# ---------------------------------------------------------------------------------------------
# under nsys 2023.4, counted with SQL

def ranges_per_process(db: Path) -> dict[tuple[int, str], int]:
    """{(pid, range name): count} of the complete push/pop and start/end ranges of domain clef;
    batch ranges ("pooler n=K") counted under "pooler"."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("""SELECT e.globalTid >> 24 & 16777215, COALESCE(s.value, e.text)
                          FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                          WHERE e.eventType IN (59, 60) AND e."end" IS NOT NULL AND e.domainId IN
                                (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'clef')""").fetchall()
    sizes = con.execute("""SELECT globalTid >> 24 & 16777215, text FROM NVTX_EVENTS
                           WHERE eventType = 59 AND text LIKE 'pooler n=%' ORDER BY start""").fetchall()
    con.close()
    out: dict = {}
    for pid, name in rows:
        key = (pid, "pooler" if name.startswith("pooler") else name)
        out[key] = out.get(key, 0) + 1
    return out, sizes


@pytest.mark.nsys("2023.4")
@pytest.mark.parametrize("spec, launch", [(SPEC, "module"), (FILE_SPEC, "script")])
def test_nsys_counts_every_range_per_stage_and_process(tmp_path, spec, launch):
    facts_path = tmp_path / "facts.json"
    argv = [sys.executable, "-m", "clef_prof", "inject", "--spec", spec, "--", sys.executable, *LAUNCH[launch],
            "--start", "spawn", "--batches", str(BATCHES), "--out", facts_path]
    db = record("2023.4", tmp_path, "embed", argv, clean_env(PYTHONPATH=str(ROOT)))
    facts = json.loads(facts_path.read_text())
    counts, sizes = ranges_per_process(db)
    parent, worker, n = facts["parent_pid"], facts["worker_pid"], sum(facts["sizes"])
    assert facts["sizes"] == [1, 2, 3, 1, 2, 3] and n == 12
    assert counts == {
        # the worker (the main module re-run as __mp_main__): one batch range per batch
        (worker, "pooler"): BATCHES, (worker, "parse"): n, (worker, "index"): BATCHES, (worker, "head"): BATCHES,
        # the main process: the warm-up batch of one request, respond() per answer, and
        # JSONEncoder.encode per json.dumps: in make_batch (n + 1 requests) and respond (n)
        (parent, "pooler"): 1, (parent, "parse"): 1, (parent, "index"): 1, (parent, "head"): 1,
        (parent, "encode"): n, (parent, "transfer"): 2 * n + 1}, counts
    assert [t for p, t in sizes if p == worker] == [f"pooler n={k}" for k in facts["sizes"]]
    assert [t for p, t in sizes if p == parent] == ["pooler n=1"]
