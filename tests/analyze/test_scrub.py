"""clef_prof.analyze.scrub on copies of real captures: what nsys itself writes (the exports in
tests/data still hold the profiled command's arguments and working folder, the host name, the
export's paths, the target's system environment, process output streams and kernel-thread names),
and secrets planted with sqlite3 into a GPU slice in each place nsys puts text (NUL-separated
environment blocks and command lines in StringIds, arguments and environment rows in
META_DATA_CAPTURE, TARGET_INFO_SYSTEM_ENV, PROCESSES, NVTX messages). Each is removed, what is
benign (kernel, NVTX and API names, every other row) stays byte for byte, a second scrub removes
nothing, analyze's figures do not move, and the input is only read."""
from __future__ import annotations

import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest

from clef_prof.analyze.result import analyze
from clef_prof.analyze.scrub import check_file_for_secrets, scrub_file
from clef_prof.errors import ClefError
from conftest import sha256

TRACES = Path(__file__).resolve().parents[2] / "traces"
PLANTED = "planted-gpu-main-slice"
R = "[removed]"

# one secret per place, each a distinct string so that each can be looked for in the output's bytes
S = {"env_hf": "hf_EnvBlockQwErTyUiOpAsD", "env_aws": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYENVBLOCKKY",
     "home": "alice-home-folder", "openai": "sk-proj-AssignAbCdEfGhIjKlMn", "flag": "sk-FlagValueAbCdEfGhIjKlMnOp",
     "ghp": "ghp_0123456789abcdefghijABCDEFGHIJ", "pw": "hunter2-inner-pw", "aws": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "capture_env": "hf_CaptureEnvRowQwErTyUiOp", "capture_arg": "hf_CaptureArgQwErTyUiOpAs", "venv": "alice-venv-folder",
     "sys_aws": "sysenv-aws-secret-value", "sys_hf": "sysenv-lowercase-hf-token", "sys_flag": "sysenv-not-a-flag",
     "process": "hf_ProcessNameQwErTyUiOpA", "nvtx": "nvtx-mark-token-value"}
# StringIds planted, and what the scrub must make of each
STRINGS = [(f"HF_TOKEN={S['env_hf']}\0AWS_SECRET_ACCESS_KEY={S['env_aws']}\0PATH=/usr/bin", R),
           (f"python3\0-m\0vllm.entrypoints.openai.api_server\0HOME=/home/{S['home']}", R),
           (f"OPENAI_API_KEY={S['openai']}", R),
           (f"vllm serve m --api-key {S['flag']} --port 8000", f"vllm serve m --api-key {R} --port 8000"),
           (f"worker {S['ghp']}", f"worker {R}"),
           (f"login password={S['pw']} ok", f"login password={R} ok"),
           (f"aws configure set aws_secret_access_key {S['aws']}", f"aws configure set aws_secret_access_key {R}")]
RULES = {"env-block", "assignment", "secret-flag", "key-token", "long-base64", "argument-or-env", "command-line",
         "system-env", "process-name"}


class Scrubbed(NamedTuple):
    src: Path            # the input (a writable copy)
    out: Path            # its scrub, in another folder
    report: dict         # scrub_file's answer
    before: tuple        # the input's sha256, mtime and folder listing before the scrub


def db(path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def rows(path, sql) -> list[tuple]:
    """The rows of a query, in rowid order (VACUUM renumbers the rowids of a table that lost rows)."""
    with db(path) as con:
        return con.execute(sql + " ORDER BY rowid").fetchall()


def plant(path) -> dict:
    """Plant the secrets; {StringIds id: the scrubbed value expected}."""
    con = sqlite3.connect(path)
    with con:
        base = con.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(base + i, v) for i, (v, _) in enumerate(STRINGS)])
        con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",           # as nsys 2025.3 writes them
                        [("PROCESS_0:ENVIRONMENT_VARIABLE", f"HF_TOKEN={S['capture_env']}"),
                         ("PROCESS_0:ARGUMENT_2", "--hf-token"), ("PROCESS_0:ARGUMENT_3", S["capture_arg"])])
        con.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name = 'PROCESS_0:COMMAND'",
                    (f"/home/{S['venv']}/bin/python3",))
        con.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV SELECT globalVid, devStateName, ?, nameEnum, ? "
                        "FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'",
                        [("AWS_SECRET_ACCESS_KEY", S["sys_aws"]), ("hf_token", S["sys_hf"]), ("HasToken", S["sys_flag"])])
        con.execute("UPDATE PROCESSES SET name = ? WHERE name = 'python3'", (f"python3 --hf-token {S['process']}",))
        start, tid = con.execute("SELECT start, globalTid FROM NVTX_EVENTS ORDER BY start LIMIT 1").fetchone()
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid) VALUES (?, 34, ?, ?)",
                    (start, f"request from user token={S['nvtx']}", tid))
    con.close()
    return {base + i: fixed for i, (_, fixed) in enumerate(STRINGS)}


@pytest.fixture(scope="module")
def scrubbed(capture, tmp_path_factory):
    """scrubbed(name) -> Scrubbed: a copy of the capture from tests/data (or, for PLANTED, of
    traces/gpu-main-slice.sqlite with the secrets planted) scrubbed into another folder, once."""
    done: dict[str, Scrubbed] = {}

    def make(name: str) -> Scrubbed:
        if name not in done:
            d = tmp_path_factory.mktemp(name)
            (d / "in").mkdir()
            (d / "out").mkdir()
            src = d / "in" / "capture.sqlite"
            shutil.copyfile(TRACES / "gpu-main-slice.sqlite" if name == PLANTED else capture(name), src)
            if name == PLANTED:
                plant(src)
            before = (sha256(src), src.stat().st_mtime_ns, sorted(os.listdir(src.parent)))
            out = d / "out" / "shared.sqlite"
            done[name] = Scrubbed(src, out, scrub_file(str(src), str(out)), before)
        return done[name]
    return make


def strings(path) -> dict[int, str]:
    with db(path) as con:
        return dict(con.execute("SELECT id, value FROM StringIds"))


def referenced_strings(path, sql) -> list[str]:
    with db(path) as con:
        return [v for (v,) in con.execute(f"SELECT s.value FROM StringIds s WHERE s.id IN ({sql}) ORDER BY s.id")]


# --------------------------------------------------------------------------------------------
# what nsys writes


@pytest.mark.parametrize("name", sorted(p.stem for p in TRACES.glob("*.sqlite")))
def test_shipped_traces_are_clean(name):
    """What traces/ ships was scrubbed (the slices by `slice` itself): nothing left to find (and
    the baseline of the planted test)."""
    assert check_file_for_secrets(str(TRACES / f"{name}.sqlite")) == []


@pytest.mark.parametrize("name, command", [("cpu23-inline", ("/var/tmp/vnv-0.2.11/bin/python", "python")),
                                           ("gpu-q1c16-main", ("python3", "python3"))])
def test_what_nsys_writes_about_the_run(scrubbed, name, command):
    s = scrubbed(name)
    # META_DATA_CAPTURE: arguments, working folder and host name go; the command keeps its base name;
    # the capture settings analyze reads stay
    q = "SELECT name, value FROM META_DATA_CAPTURE"
    a, b = rows(s.src, q), rows(s.out, q)
    assert [r[0] for r in a] == [r[0] for r in b]
    changed = {x[0]: (x[1], y[1]) for x, y in zip(a, b) if x != y}
    assert changed.pop("PROCESS_0:COMMAND", command) == command
    assert set(changed) == {"PROCESS_0:ARGUMENT_0", "PROCESS_0:ARGUMENT_1", "PROCESS_0:WORKING_DIR", "DEVICE_DISPLAY_NAME"}
    assert all(new == R and old for old, new in changed.values())
    kept = dict(b)
    assert kept["PROCESS_0:COLLECT_CUDA_TRACE"] == ("true" if name.startswith("gpu") else "false")
    # TARGET_INFO_SYSTEM_ENV: the rows naming the host, its paths, kernel and GPU (its UUID) go; the
    # versions and capability flags stay, unchanged
    q = "SELECT globalVid, devStateName, name, nameEnum, value FROM TARGET_INFO_SYSTEM_ENV"
    a, b = rows(s.src, q), rows(s.out, q)
    assert [r for r in a if r in b] == b and len(b) < len(a)          # rows left out, the others as they were
    gone = {r[2] for r in a if r not in b}
    assert {"Hostname", "TargetInstallDir", "InjectionFilesStoragePath", "KernelVersion", "SoftwareReleaseVersion",
            "GpuInfo", "CpuInfo"} <= gone
    kept = {r[2]: r[4] for r in b}
    assert {"NvDriverVersion", "OsDescription", "CpuCores", "CpuArchitecture", "HasCudaEvents", "SupportsVulkan"} <= \
        kept.keys() and kept.get("CudaDriverVersion") == ("13000" if name.startswith("gpu") else None)
    assert all(v in ("0", "1") for n, v in kept.items() if n.startswith(("Has", "Supports", "Is")))
    # META_DATA_EXPORT: the exporting host and the report's paths go; the versions analyze reads stay
    q = "SELECT name, value FROM META_DATA_EXPORT"
    a, b = rows(s.src, q), rows(s.out, q)
    assert [r[0] for r in a] == [r[0] for r in b]
    changed = {x[0] for x, y in zip(a, b) if x != y}
    assert changed == {"EXPORT_HOST", "EXPORT_PARAM_INPUT_FILE", "EXPORT_PARAM_OUTUPT_FILE", "EXPORT_PARAM_INPUT_PATH",
                       "EXPORT_PARAM_OUTUPT_PATH", "EXPORT_PARAM_INPUT_PATH_ABS", "EXPORT_PARAM_OUTUPT_PATH_ABS"}
    assert {v for n, v in b if n in changed} == {R}
    assert dict(b)["EXPORT_SCHEMA_VERSION"] == dict(a)["EXPORT_SCHEMA_VERSION"]
    # the process output streams go; every other string stays
    with db(s.src) as con:
        streams = {i for (i,) in con.execute("SELECT contentId FROM ProcessStreams")}
    a, b = strings(s.src), strings(s.out)
    assert a.keys() == b.keys() and {k for k in a if a[k] != b[k]} <= streams
    assert all(b[k] == R for k in streams)
    # PROCESSES: base names (kernel threads' '/' forms are not paths to keep), the pids stay
    q = "SELECT globalPid, pid, name FROM PROCESSES"
    a, b = rows(s.src, q), rows(s.out, q)
    assert [r[:2] for r in a] == [r[:2] for r in b]
    assert not any("/" in r[2] or " " in r[2] for r in b)
    assert [r for r in a if r[2] == "python3"] == [r for r in b if r[2] == "python3"]


def test_planted_secrets_are_removed_and_benign_strings_stay(scrubbed):
    s = scrubbed(PLANTED)
    raw_in, raw_out = s.src.read_bytes(), s.out.read_bytes()
    assert all(v.encode() in raw_in for v in S.values())                  # planted
    assert [k for k, v in S.items() if v.encode() in raw_out] == []       # gone, free pages included
    # StringIds: exactly the planted values changed, to what the rules say
    a, b = strings(s.src), strings(s.out)
    with db(s.src) as con:
        base = con.execute("SELECT max(id) FROM StringIds").fetchone()[0] - len(STRINGS) + 1
    assert a.keys() == b.keys()
    assert {k: b[k] for k in a if a[k] != b[k]} == {base + i: fixed for i, (_, fixed) in enumerate(STRINGS)}
    # kernel, NVTX and CUDA API names: the same strings
    for sql in ("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT shortName FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT mangledName FROM CUPTI_ACTIVITY_KIND_KERNEL",
                "SELECT textId FROM NVTX_EVENTS", "SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        names = referenced_strings(s.src, sql)
        assert names and referenced_strings(s.out, sql) == names
    assert {"parse", "index", "transfer", "head", "encode"} <= set(referenced_strings(s.out, "SELECT textId FROM NVTX_EVENTS"))
    # META_DATA_CAPTURE: the environment row and the argument after --hf-token go, the command keeps python3
    with db(s.out) as con:
        rows = dict(con.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name IN ('PROCESS_0:COMMAND', "
                                "'PROCESS_0:ENVIRONMENT_VARIABLE', 'PROCESS_0:ARGUMENT_2', 'PROCESS_0:ARGUMENT_3')"))
        sysenv = {n for (n,) in con.execute("SELECT name FROM TARGET_INFO_SYSTEM_ENV")}
        procs = {n for (n,) in con.execute("SELECT name FROM PROCESSES WHERE pid = 615")}
        marks = [t for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'request from %'")]
    assert rows == {"PROCESS_0:COMMAND": "python3", "PROCESS_0:ENVIRONMENT_VARIABLE": R, "PROCESS_0:ARGUMENT_2": R,
                    "PROCESS_0:ARGUMENT_3": R}
    # TARGET_INFO_SYSTEM_ENV: secret-named rows go whatever their case, a 'flag' that is not 0/1 too
    assert not {"AWS_SECRET_ACCESS_KEY", "hf_token", "HasToken"} & sysenv and "CudaDriverVersion" in sysenv
    assert procs == {"python3"} and marks == [f"request from user token={R}"]


@pytest.mark.parametrize("name", ["cpu23-inline", "gpu-q1c16-main", PLANTED])
def test_the_report_counts_what_the_check_finds(scrubbed, name):
    s = scrubbed(name)
    found = check_file_for_secrets(str(s.src))
    assert s.report["scrubbed"] == {t: dict(Counter(f.rule for f in found if f.table == t))
                                    for t in sorted({f.table for f in found})}
    assert s.report["bytes"] == s.out.stat().st_size
    if name == PLANTED:
        assert {f.rule for f in found} == RULES


@pytest.mark.parametrize("name", ["cpu23-inline", "gpu-q1c16-main", PLANTED])
def test_a_second_scrub_removes_nothing(scrubbed, tmp_path, name):
    s = scrubbed(name)
    assert check_file_for_secrets(str(s.out)) == []
    again = tmp_path / "again.sqlite"
    assert scrub_file(str(s.out), str(again))["scrubbed"] == {}
    with db(s.out) as a, db(again) as b:
        assert list(a.iterdump()) == list(b.iterdump())


@pytest.mark.parametrize("name", ["cpu23-inline", "gpu-q1c16-main", PLANTED])
def test_analyze_figures_are_unchanged(scrubbed, name):
    s = scrubbed(name)
    a, b = (analyze(str(p)).result.to_json() for p in (s.src, s.out))
    assert a.pop("path") == str(s.src) and b.pop("path") == str(s.out)
    assert a == b and a["requests"]


def test_the_input_is_only_read(scrubbed, tmp_path):
    s = scrubbed(PLANTED)
    state = (sha256(s.src), s.src.stat().st_mtime_ns, sorted(os.listdir(s.src.parent)))
    assert state == s.before == (s.before[0], s.before[1], ["capture.sqlite"])
    assert check_file_for_secrets(str(s.src)) and (sha256(s.src), sorted(os.listdir(s.src.parent))) == \
        (s.before[0], ["capture.sqlite"])
    with pytest.raises(ClefError, match="is an input of this command"):
        scrub_file(str(s.src), str(s.src))
    assert sha256(s.src) == s.before[0]
    bad = tmp_path / "not-an-export.sqlite"
    bad.write_bytes(b"not an SQLite file\n" * 100)
    with pytest.raises(ClefError, match="not an SQLite database"):
        scrub_file(str(bad), str(tmp_path / "out.sqlite"))
    assert sorted(os.listdir(tmp_path)) == ["not-an-export.sqlite"]
