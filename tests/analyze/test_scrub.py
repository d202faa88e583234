"""clef_prof.capture.scrub on copies of real captures: what nsys itself writes (the exports in
tests/data still hold the profiled command's arguments and working folder, the host name, the
export's paths, the target's system environment, process output streams and kernel-thread names),
and secrets planted with sqlite3 into a GPU slice in each place nsys puts text (NUL-separated
environment blocks and command lines in StringIds, arguments and environment rows in
META_DATA_CAPTURE, TARGET_INFO_SYSTEM_ENV, PROCESSES, NVTX messages). Each is removed, what is
benign (kernel, NVTX and API names, every other row) stays byte for byte, a second scrub removes
nothing, analyze's figures do not move, and the input is only read."""
from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import pytest

from clef_prof.analyze.pipeline import analyze
from clef_prof.capture.scrub import check_file_for_secrets, rewrite, scrub_file
from clef_prof.capture.slicing import _cut, slice_capture
from clef_prof.base.errors import ClefError
from clicheck import run_main
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


# --------------------------------------------------------------------------------------------
# every class of secret, in every place nsys writes text (issue 21 item 4)

MATRIX_SRC = TRACES / "gpu25-pr-slice.sqlite"       # nsys 2025.3: NVTX jsonText and binaryData columns
# (rule in free text, text, the secret that must leave the file)
CLASSES = [
    ("header", "curl -H 'Authorization: Bearer bearerTok3n42' http://x", "bearerTok3n42"),
    ("header", "Authorization: Basic YmFzaWNBdXRoNDI6cHc", "YmFzaWNBdXRoNDI6cHc"),
    ("header", "X-Api-Key: xApiKeyVal42", "xApiKeyVal42"),
    ("url-password", "dsn postgres://app:pgDsnPw42@db:5432/main", "pgDsnPw42"),
    ("url-password", "cache redis://:redisDsnPw42@cache:6379/0", "redisDsnPw42"),
    ("url-password", "git https://alice:httpsUrlPw42@example.org/r.git", "httpsUrlPw42"),
    ("signature", "https://a.blob.core.windows.net/c/b?sv=2020-08-04&sig=azureSasSig42%3D&se=2030", "azureSasSig42"),
    ("key-token", "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("key-token", "runner glrt-2CR8_eVxiioB1QmzPZwa", "glrt-2CR8_eVxiioB1QmzPZwa"),
    ("key-token", "short hf_ab12cd34", "hf_ab12cd34"),
    ("key-token", "slack xoxb-1234567890-slackTok42", "xoxb-1234567890-slackTok42"),
    ("key-value", '{"password": "jsonPassw42"}', "jsonPassw42"),
    ("key-value", "password: yamlPassw42", "yamlPassw42"),
    ("mysql-password", "mysql -u root -pMysqlCliPw42 shop", "MysqlCliPw42"),
    ("curl-user", "curl -u alice:curlUserPw42 https://x", "curlUserPw42"),
    ("assignment", "aws_secret_access_key = awsIniSecret42", "awsIniSecret42"),
    ("secret-flag", "serve --password -dashPassw42 --port 80", "-dashPassw42"),
    ("secret-flag", "curl --cookie cookieFlagVal42 http://x", "cookieFlagVal42"),
    ("url-encoded", "GET /cb?next=%2Fa&access_token%3DurlEncTok42%26x%3D1", "urlEncTok42"),
    ("private-key", "Zm9vYmFyQmF6pemLastLine42==\n-----END PRIVATE KEY-----", "pemLastLine42"),
    ("user-path", "/home/aliceUser42/venv/lib/python3.12/site-packages/torch/nn/modules/module.py:1751", "aliceUser42"),
    ("user-path", "File /Users/bobUser42/src/serve.py, line 3", "bobUser42"),
]


def plant_everywhere(path) -> dict[tuple[str, str, int], str]:
    """Each class once in each place nsys writes text: StringIds (text and BLOB), NVTX_EVENTS text,
    jsonText and binaryData (a BLOB with non-UTF-8 bytes around the text), TARGET_INFO_SYSTEM_ENV
    (a kept row's value), META_DATA_CAPTURE (argument rows), PROCESSES names.
    {(table, column, rowid): the rule --check must name}."""
    con = sqlite3.connect(path)
    planted = {}
    with con:
        sid = con.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
        start, tid = con.execute("SELECT start, globalTid FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1").fetchone()
        gpid = con.execute("SELECT max(globalPid) FROM PROCESSES").fetchone()[0]
        for i, (rule, text, _) in enumerate(CLASSES):
            for j, value in enumerate((text, text.encode())):
                con.execute("INSERT INTO StringIds VALUES (?, ?)", (sid + 2 * i + j, value))
                planted[("StringIds", "value", sid + 2 * i + j)] = rule
            for col, value in (("text", text), ("jsonText", text),
                               ("binaryData", b"\x00\x00\x00\x2a\xff" + text.encode() + b"\xfe\x00")):
                rowid = con.execute(f"INSERT INTO NVTX_EVENTS (start, eventType, {col}, globalTid) VALUES (?, 34, ?, ?)",
                                    (start, value, tid)).lastrowid
                planted[("NVTX_EVENTS", col, rowid)] = rule
            rowid = con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV SELECT globalVid, devStateName, name, nameEnum, ? "
                                "FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'OsDescription' LIMIT 1", (text,)).lastrowid
            planted[("TARGET_INFO_SYSTEM_ENV", "value", rowid)] = rule
            rowid = con.execute("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", (f"PROCESS_0:ARGUMENT_{9 + i}", text)).lastrowid
            planted[("META_DATA_CAPTURE", "value", rowid)] = "argument-or-env"
            rowid = con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)",
                                (gpid + ((i + 1) << 24), 900000 + i, f"python3 {text}")).lastrowid
            planted[("PROCESSES", "name", rowid)] = "process-name"
    con.close()
    return planted


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    d = tmp_path_factory.mktemp("matrix")
    src, out = d / "planted.sqlite", d / "shared.sqlite"
    shutil.copyfile(MATRIX_SRC, src)
    planted = plant_everywhere(src)
    found = check_file_for_secrets(str(src))
    digest = sha256(src)
    report = scrub_file(str(src), str(out))
    assert sha256(src) == digest
    return src, out, planted, found, report


def test_check_flags_every_class_in_every_place(matrix):
    src, _, planted, found, _ = matrix
    got = {(f.table, f.column, f.rowid): f.rule for f in found}
    missed = {k: v for k, v in planted.items() if k not in got}
    assert not missed
    assert {k: got[k] for k in planted} == planted
    # and nothing else than before the plants: the export itself is scrubbed
    assert check_file_for_secrets(str(MATRIX_SRC)) == [] and len(found) == len(planted) == 8 * len(CLASSES)


def test_scrub_removes_every_class_from_every_place(matrix):
    src, out, _, _, report = matrix
    raw_in, raw_out = src.read_bytes(), out.read_bytes()
    assert all(s.encode() in raw_in for *_, s in CLASSES)
    assert [s for *_, s in CLASSES if s.encode() in raw_out] == []       # gone, free pages included
    assert check_file_for_secrets(str(out)) == []
    assert sum(sum(r.values()) for r in report["scrubbed"].values()) == 8 * len(CLASSES)
    # the non-UTF-8 bytes of a binary payload stay around what was removed
    with db(out) as con:
        blobs = [v for (v,) in con.execute("SELECT binaryData FROM NVTX_EVENTS WHERE binaryData IS NOT NULL")]
    assert len(blobs) == len(CLASSES) and all(isinstance(b, bytes) and b.startswith(b"\x00\x00\x00\x2a\xff")
                                               and b.endswith(b"\xfe\x00") for b in blobs)


def test_no_false_positive_moves_a_name_or_a_figure(matrix):
    """Stage, NVTX domain, kernel, API and thread names are the same strings after the scrub, and
    every figure of analyze is the same."""
    src, out, *_ = matrix
    for sql in ("SELECT textId FROM NVTX_EVENTS", "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION "
                "SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL", "SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
                "SELECT nameId FROM ThreadNames"):
        names = referenced_strings(src, sql)
        assert names and referenced_strings(out, sql) == names, sql
    q = "SELECT text FROM NVTX_EVENTS WHERE eventType = 75 OR (eventType = 59 AND text IS NOT NULL)"
    assert {t for (t,) in rows(out, q)} == {t for (t,) in rows(src, q)} >= {"clef", "Python Periodic Sampling"}
    a, b = (analyze(str(p)).result.to_json() for p in (src, out))
    a.pop("path"), b.pop("path")
    with db(src) as con:
        n = con.execute("SELECT sum(CAST(substr(text, 10) AS INTEGER)) FROM NVTX_EVENTS WHERE eventType = 59 "
                        "AND text LIKE 'pooler n=%'").fetchone()[0]
    assert a == b and a["requests"] == n == 290


# --------------------------------------------------------------------------------------------
# every figure the same after scrub and slice, on every real capture (issue 21 item 4)

DATA_NAMES = sorted(p.name[:-len(".sqlite.xz")] for p in (TRACES.parent / "tests" / "data").glob("*.sqlite.xz"))
TRACE_NAMES = sorted(p.stem for p in TRACES.glob("*.sqlite"))
DP = "cpu23-dp-rids"
# the batches of each process: count, requests (the n= of the message), independent of analyze
BATCHES = ("SELECT (globalTid >> 24) & 16777215 AS pid, count(*), sum(CAST(substr(text, 10, instr(text, ' rid=') - 10) AS INTEGER)) "
           "FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND text LIKE 'pooler n=% rid=%' {} GROUP BY pid ORDER BY pid")


def figures(path) -> dict:
    """analyze's whole result, less the path and the request ids the journey lists by name (scrub
    turns them into pseudonyms: their number is kept, in the counts beside them)."""
    r = analyze(str(path)).result.to_json()
    assert r.pop("path") == str(path)
    if r.get("journey"):
        listed = r["journey"].pop("listed")
        r["journey"]["listed_counts"] = {k: len(v) for k, v in listed.items()}
    return r


@pytest.mark.parametrize("name", [f"data/{n}" for n in DATA_NAMES] + [f"traces/{n}" for n in TRACE_NAMES])
def test_scrub_and_slice_keep_every_figure(capture, tmp_path, name):
    """scrub, and a slice over the whole session (which scrubs), give analyze's result unchanged."""
    where, stem = name.split("/")
    src = capture(stem) if where == "data" else TRACES / f"{stem}.sqlite"
    before = figures(src)
    scrubbed, sliced = tmp_path / "scrubbed.sqlite", tmp_path / "sliced.sqlite"
    scrub_file(str(src), str(scrubbed))
    slice_capture(str(src), str(sliced), 0, 10 ** 15)
    assert before["requests"] > 0
    assert figures(scrubbed) == before
    assert figures(sliced) == before


def test_data_parallel_ranks_with_request_ids_stay_apart(capture, tmp_path):
    """Two data-parallel ranks with the same batch sizes at the same times: only their request ids
    tell them apart. Before and after scrub (and slice), each counts its own requests; the ids
    become pseudonyms, one per distinct id across the capture."""
    src = capture(DP)
    with db(src) as con:
        per_pid = con.execute(BATCHES.format("")).fetchall()
    assert len(per_pid) == 2 and [r[1:] for r in per_pid] == [(12, 94), (12, 94)]
    out = tmp_path / "scrubbed.sqlite"
    scrub_file(str(src), str(out))
    for path in (src, out):
        r = analyze(str(path)).result
        assert (r.requests, r.batches) == (188, 24)
        assert sorted((x.pid, x.counted, x.first_rank_pid == x.pid, x.requests) for x in r.ranks) == \
            [(pid, True, True, n) for pid, _, n in per_pid]
    # the ids: pseudonyms in the same places, the same id always the same pseudonym, distinct ids distinct
    q = "SELECT globalTid, start, substr(text, instr(text, ' rid=') + 5) FROM NVTX_EVENTS WHERE text LIKE 'pooler n=% rid=%'"
    a = {(g, s): ids.split(",") for g, s, ids in rows(src, q)}
    b = {(g, s): ids.split(",") for g, s, ids in rows(out, q)}
    assert a.keys() == b.keys() and all(len(a[k]) == len(b[k]) for k in a)
    pairs = {(x, y) for k in a for x, y in zip(a[k], b[k])}
    ids = {x for x, _ in pairs if x != "..."}
    # each batch message shows its first 5 ids (200 characters), then ",...": 50 per rank
    assert len(ids) == 100 and all(x.startswith("embd-") for x in ids)
    assert ("...", "...") in pairs and all((x == "...") == (y == "...") for x, y in pairs)
    assert len({x for x, _ in pairs}) == len({y for _, y in pairs}) == len(pairs)          # one to one
    assert all(re.fullmatch(r"\[rid-[0-9]+\]", y) for x, y in pairs if x != "...")
    assert b"embd-" not in out.read_bytes()


def test_a_slice_of_a_window_keeps_its_figures(capture, tmp_path):
    """A window of the data-parallel capture: slice (which scrubs) gives the same result as the
    same cut without the scrub, and counts the batches that lie wholly inside the window."""
    src = capture(DP)
    with db(src) as con:
        t0, t1 = con.execute("SELECT min(start), max(\"end\") FROM NVTX_EVENTS WHERE text LIKE 'pooler n=%'").fetchone()
        a, b = t0 + (t1 - t0) // 3, t0 + 2 * (t1 - t0) // 3
        inside = con.execute(BATCHES.format(f'AND start >= {a} AND "end" <= {b}')).fetchall()
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert len(inside) == 2 and 0 < sum(n for *_, n in inside) < 188
    sliced, cut = tmp_path / "sliced.sqlite", tmp_path / "cut.sqlite"
    slice_capture(str(src), str(sliced), a, b)
    rewrite(str(src), str(cut), lambda d: _cut(d, tables, a, b), "slice")
    assert figures(sliced) == figures(cut)
    r = analyze(str(sliced)).result
    assert (r.requests, r.batches) == (sum(n for *_, n in inside), sum(k for _, k, _ in inside))
    assert len(r.ranks) == 2 and all(x.counted for x in r.ranks)


# --------------------------------------------------------------------------------------------
# scrub --check: findings grouped by rule and place (issue 25 item 9)

def test_check_groups_its_findings(capture, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")        # one line a group (the report wraps at the width)
    src = capture("gpu-q1c16-main")
    grouped_run = run_main("scrub", "--check", src)
    each = run_main("scrub", "--check", src, "--all")
    assert grouped_run.returncode == each.returncode == 1
    per_value = Counter()
    for line in each.stdout.splitlines():
        place, rule = re.fullmatch(rf"{re.escape(str(src))}: (\S+) rowid [0-9]+: (\S+)", line).groups()
        per_value[(rule, place)] += 1
    assert sum(per_value.values()) == 187
    head, *lines = grouped_run.stdout.splitlines()
    assert head == f"{src}: 187 value(s) by rule and place (rule, table.column, values, first rowids):"
    got = {}
    for line in lines:
        rule, place, count, _, rowids = line.split(None, 4)
        got[(rule, place)] = int(count)
        assert len(rowids.split(", ")) <= 4
    assert got == {(rule, place): n for (rule, place), n in per_value.items()}
    assert len(lines) == 5 and got[("process-name", "PROCESSES.name")] == 156
    assert "187 value(s) may carry secrets" in grouped_run.stderr
    bad = run_main("scrub", src, "x.sqlite", "--all")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "--all" in bad.stderr


def test_a_plain_sqlite_file_is_refused(tmp_path):
    """An SQLite file that is not an nsys export: one line and exit 1 from scrub, --check and
    slice; nothing written, the input as it was."""
    src = tmp_path / "notes.sqlite"
    con = sqlite3.connect(src)
    with con:
        con.execute("CREATE TABLE t (x TEXT)")
        con.execute("INSERT INTO t VALUES ('HF_TOKEN=hf_QwErTyUiOpAsDfGhJkLz')")
    con.close()
    digest = sha256(src)
    for args in (("scrub", src, tmp_path / "o.sqlite"), ("scrub", "--check", src),
                 ("slice", src, tmp_path / "s.sqlite", "--from", "0", "--to", "1")):
        p = run_main(*args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(lines) == 1 and "not an Nsight Systems export" in lines[0], p.stderr
        assert p.stdout == ""
    assert sha256(src) == digest and sorted(os.listdir(tmp_path)) == ["notes.sqlite"]


def test_a_kineto_trace_is_scrubbed_as_its_conversion(tmp_path, monkeypatch):
    """A PyTorch profiler trace (tests/data's demo trace, renamed as Kineto names its files,
    HOST_PID.TIME.pt.trace.json.xz, and given a home-folder python path in a range name) is
    scrubbed into an SQLite conversion holding neither the host name nor the user name, that
    --check finds clean and that analyze reads with the trace's own figures; a JSON output and
    --check of the trace are refused in one line saying why (not "not an SQLite database")."""
    import json
    import lzma

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = Path(__file__).resolve().parents[1] / "data" / "kineto-demo-main.pt.trace.json.xz"
    doc = json.load(lzma.open(src))
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "user_annotation")
    planted = dict(first, name="/home/alice-home-folder/serve.py(12): warmup", dur=0)
    doc["traceEvents"].append(planted)
    trace = tmp_path / "gpuhost-77.1700000000123.pt.trace.json.xz"
    with lzma.open(trace, "wt") as fh:
        json.dump(doc, fh)
    before = sha256(trace)
    out = tmp_path / "shared.sqlite"
    p = run_main("scrub", trace, out)
    assert p.returncode == 0, p.stderr
    assert "export-host-path 1, trace-file-name 1" in p.stderr and "user-path 1" in p.stderr, p.stderr
    raw = out.read_bytes()
    assert b"gpuhost" not in raw and b"alice-home-folder" not in raw and str(tmp_path).encode() not in raw
    assert run_main("scrub", "--check", out).returncode == 0
    want = json.loads(run_main("analyze", "--format", "json", trace).stdout)
    got = json.loads(run_main("analyze", "--format", "json", out).stdout)
    assert got["totals"] == want["totals"] and got["totals"]["h2d_copies"] > 0
    assert sha256(trace) == before
    for args, says in (((trace, tmp_path / "shared.json"), "give OUT.sqlite"),
                       (("--check", trace), "writes a scrubbed conversion")):
        p = run_main("scrub", *args)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 1 and len(lines) == 1 and says in lines[0], p.stderr
        assert "SQLite database" not in p.stderr
    assert not (tmp_path / "shared.json").exists() and sha256(trace) == before
