"""Hostile inputs, built from the real captures (copies edited with sqlite3): secrets, destroyed
files, FIFOs, huge names, rich markup, Markdown injection, slice windows. Each case: one clear
line on stderr and a non-zero exit, or correct and safe output; never a changed input."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys

import pytest

from clef_prof.record.plan import redact_commands
from clicheck import run_main
from conftest import sha256, sql

MAIN = "gpu-q1c16-main"
SECRETS = ["hf_QwErTyUiOpAsDfGhJkLz", "sk-proj-AbCdEfGhIjKlMnOpQrSt", "AKIAIOSFODNN7EXAMPLE",
           "ghp_0123456789abcdefghijABCDEFGHIJ", "hunter2-secret-pw", "lowercase-env-secret",
           "0123456789abcdef0123456789abcdef0123", "alice-home-dir"]


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


def one_line(p, *needles, code=1):
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert p.returncode == code and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def copy_of(capture, tmp_path):
    def make(name=MAIN, dst=None):
        dst = dst or tmp_path / f"{name}.sqlite"
        shutil.copyfile(capture(name), dst)
        os.chmod(dst, 0o644)
        return dst
    return make


def plant_secrets(path) -> None:
    """Every class of secret the scrub must remove, in the places nsys puts them."""
    db = sqlite3.connect(path)
    pid = db.execute("SELECT globalPid FROM PROCESSES WHERE name = 'python3' ORDER BY pid DESC").fetchone()[0]
    base = db.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
    strings = [f"HF_TOKEN={SECRETS[0]}\0AWS_SECRET_ACCESS_KEY=x",                # environment block
               "OPENAI_API_KEY=" + SECRETS[1],                                     # a single assignment
               f"serve model --api-key {SECRETS[2]} --port 8000",                  # a secret flag
               f"worker {SECRETS[3]}",                                             # a key-like token
               f"login password={SECRETS[4]} ok",                                  # an assignment in text
               f"digest {SECRETS[6]}"]                                             # a long hex run
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings, base)))
    db.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)",
                   [("PROCESS_0:ARGUMENT_2", "--hf-token"), ("PROCESS_0:ARGUMENT_3", SECRETS[0]),
                    ("PROCESS_0:ENV_HF_TOKEN", SECRETS[0]), ("PROCESS_0:ENVIRONMENT", f"HOME=/{SECRETS[7]}")])
    db.execute("UPDATE META_DATA_CAPTURE SET value = '/usr/bin/python3 --token x' WHERE name = 'PROCESS_0:COMMAND'")
    db.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV SELECT globalVid, devStateName, ?, nameEnum, ? "
                   "FROM TARGET_INFO_SYSTEM_ENV LIMIT 1",
                   [("hf_token", SECRETS[5]), ("Path", f"/home/{SECRETS[7]}"), ("CudaDriverVersion", "13000")])
    db.execute("UPDATE PROCESSES SET name = ? WHERE globalPid = ?", (f"python3 --hf-token {SECRETS[0]}", pid))
    db.commit()
    db.close()


def assert_no_secret(path) -> None:
    data = open(path, "rb").read()
    for s in SECRETS:
        assert s.encode() not in data, s


# --- secrets -------------------------------------------------------------------------------

def test_scrub_removes_every_class_and_keeps_the_figures(copy_of, tmp_path):
    src = copy_of()
    plant_secrets(src)
    before = sha256(src)
    chk = run_main("scrub", "--check", src)
    assert chk.returncode == 1 and "rowid" in chk.stdout
    for rule in ("env-block", "assignment", "secret-flag", "key-token", "long-hex", "argument-or-env",
                 "system-env", "process-name", "command-line"):
        assert rule in chk.stdout, rule
    assert not any(s in chk.stdout + chk.stderr for s in SECRETS)
    out = tmp_path / "shared.sqlite"
    p = run_main("scrub", src, out)
    assert p.returncode == 0 and "StringIds" in p.stderr and not any(s in p.stderr + p.stdout for s in SECRETS)
    assert_no_secret(out)
    assert run_main("scrub", "--check", out).returncode == 0
    assert sha256(src) == before
    db = sqlite3.connect(out)
    assert db.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'").fetchone() == ("13000",)
    assert db.execute("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:COMMAND'").fetchone() == ("python3",)
    a, b = (json.loads(run_main("analyze", f, "-f", "json").stdout) for f in (src, out))
    assert a["per_request"] == b["per_request"] and a["stages"] == b["stages"] and a["overlap"] == b["overlap"]
    assert b["capture"]["threads"][0]["process"] == "python3"


def test_slice_scrubs_with_the_same_rules(copy_of, tmp_path):
    src = copy_of()
    plant_secrets(src)
    out = tmp_path / "slice.sqlite"
    p = run_main("slice", src, out, "--from", "0.4", "--to", "0.7")
    assert p.returncode == 0, p.stderr
    assert_no_secret(out)
    assert run_main("scrub", "--check", out).returncode == 0


def test_analyze_prints_only_the_executables_base_name(copy_of):
    src = copy_of()
    plant_secrets(src)
    for fmt in ("json", "markdown", "table"):
        p = run_main("analyze", src, "-f", fmt)
        assert p.returncode == 0 and "python3" in p.stdout
        assert not any(s in p.stdout + p.stderr for s in SECRETS), fmt


def test_manifest_commands_are_redacted_unless_kept():
    cmds = {"clef_prof": ["clef-prof", "record", "--env", f"HF_TOKEN={SECRETS[0]}", "--", "vllm", "serve"],
            "server": ["vllm", "serve", "m", "--hf-token", SECRETS[0], f"--api-key={SECRETS[1]}", "--port", "8000"],
            "env": {"HF_TOKEN": SECRETS[0]}, "client": f"curl -H 'Authorization: Bearer {SECRETS[1]}'", "cwd": "/x"}
    red = json.dumps(redact_commands(cmds))
    assert not any(s in red for s in SECRETS)
    assert '"--port", "8000"' in red and '"HF_TOKEN"' in red


# --- files destroyed ---------------------------------------------------------------------------

def test_outputs_never_replace_an_input(copy_of, tmp_path):
    (tmp_path / "data").mkdir()
    src = copy_of(dst=tmp_path / "data" / "cap.sqlite")
    (tmp_path / "link").symlink_to(tmp_path / "data")
    hard = tmp_path / "hard.sqlite"
    os.link(src, hard)
    before = sha256(src)
    link = tmp_path / "link" / "cap.sqlite"
    for args in (("slice", link, src, "--from", "0", "--to", "1"), ("scrub", link, hard),
                 ("analyze", src, "-f", "json", "-o", link), ("report", src, "--html", hard),
                 ("compare", "--arm", f"a={src}", "--arm", f"b={src}", "-f", "json", "-o", link)):
        one_line(run_cli(*args), "input")
        assert sha256(src) == before and src.is_file() and not src.is_symlink()


@pytest.mark.parametrize("device", ["/dev/full", "/dev/null"])
def test_outputs_never_replace_a_device(copy_of, device):
    src = copy_of()
    for args in (("slice", src, device, "--from", "0", "--to", "1"), ("scrub", src, device),
                 ("analyze", src, "-f", "csv", "-o", device)):
        one_line(run_main(*args), "not a regular file")
        assert stat.S_ISCHR(os.stat(device).st_mode)


def test_failed_slice_leaves_nothing(copy_of, tmp_path):
    src = copy_of()
    db = sqlite3.connect(src)
    db.execute("ALTER TABLE NVTX_EVENTS RENAME COLUMN start TO begin")
    db.commit()
    db.close()
    out = tmp_path / "out" / "slice.sqlite"
    out.parent.mkdir()
    one_line(run_main("slice", src, out, "--from", "0.4", "--to", "0.7"), "cannot slice")
    assert os.listdir(out.parent) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_slice_leaves_nothing(copy_of, tmp_path, sig):
    """Ctrl-C or SIGTERM while slice writes: nothing is left. The child gets SIGINT's default
    action back: a shell without job control starts background commands (pytest ... &) with
    SIGINT ignored, which Python and its children inherit, and the signal would go unseen."""
    src = copy_of()
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "slice.sqlite"
    interrupted = 0
    for _ in range(5):
        # the signal's default disposition in the child: a shell that ignores SIGINT (a background
        # job, nohup) passes SIG_IGN down, and Python then never raises KeyboardInterrupt
        p = subprocess.Popen([sys.executable, "-m", "clef_prof", "slice", str(src), str(out), "--from", "0",
                              "--to", "1.4"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                             preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
        while p.poll() is None and not any(n.endswith(".tmp") for n in os.listdir(folder)):
            pass
        if p.poll() is None:
            p.send_signal(sig)
        err = p.communicate(timeout=300)[1]
        if p.returncode == 0:          # finished before the signal: try again
            out.unlink()
            continue
        interrupted += 1
        assert "Traceback" not in err and "interrupted" in err
        assert os.listdir(folder) == []
    assert interrupted


# --- hangs and crashes ---------------------------------------------------------------------------

def test_fifo_inputs_are_refused(copy_of, tmp_path):
    fifo = tmp_path / "cap.sqlite"
    os.mkfifo(fifo)
    src = copy_of()
    for args in (("analyze", fifo), ("slice", fifo, tmp_path / "o.sqlite", "--from", "0", "--to", "1"),
                 ("scrub", "--check", fifo), ("report", fifo, "--html", tmp_path / "o.html"),
                 ("compare", "--arm", f"a={fifo}", "--arm", f"b={src}"), ("analyze", src, "--spec", fifo)):
        one_line(run_cli(*args), "not a regular file")


def test_a_schema_that_is_not_utf8(copy_of, tmp_path):
    """A byte of the schema's SQL made 0xCD (no UTF-8): SQLite's message quotes it, and every command
    says in one line that the file cannot be read, instead of failing to decode the message."""
    src = copy_of()
    data = bytearray(src.read_bytes())
    at = data.find(b"CREATE TABLE TARGET_INFO_GPU")
    assert at > 0
    data[at + 10] = 0xCD
    bad = tmp_path / "schema.sqlite"
    bad.write_bytes(bytes(data))
    before = sha256(bad)
    for args in (("analyze", bad), ("slice", bad, tmp_path / "o.sqlite", "--from", "0", "--to", "1"),
                 ("scrub", "--check", bad), ("scrub", bad, tmp_path / "o2.sqlite"),
                 ("report", bad, "--html", tmp_path / "o.html")):
        one_line(run_cli(*args), "not UTF-8")
    assert sha256(bad) == before and not list(tmp_path.glob("o*"))


@pytest.mark.parametrize("reader", ["native", "adbc", "sqlite"])
def test_an_export_in_wal_mode_gets_no_files_beside_it(copy_of, tmp_path, reader):
    """An export switched to WAL mode (its WAL checkpointed and gone): analyzed through each
    reader and reported, nothing is made beside it (no -wal, no -shm), and it is not changed."""
    if reader == "native":
        pytest.importorskip("clef_prof.analyze.read._scan")
    src = copy_of()
    con = sqlite3.connect(src)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()
    before, names = sha256(src), sorted(p.name for p in tmp_path.iterdir())
    env = {**os.environ, "CLEF_PROF_READER": reader}
    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", src, "-f", "json"], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["requests"] == 1520, p.stderr
    assert run_cli("report", src, "--html", tmp_path / "r.html").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "r.html"]) and sha256(src) == before


def test_huge_names_are_cut(copy_of, tmp_path):
    src = copy_of()
    db = sqlite3.connect(src)
    huge = "N" * 10_000_000
    gtid = db.execute("SELECT globalTid FROM NVTX_EVENTS WHERE text LIKE 'pooler %' LIMIT 1").fetchone()[0]
    db.execute("UPDATE StringIds SET value = ? WHERE id = (SELECT nameId FROM ThreadNames WHERE globalTid = ?)",
               (huge + "t", gtid))
    db.execute("UPDATE StringIds SET value = ? || value WHERE value = 'index'", (huge,))
    db.execute("UPDATE PROCESSES SET name = ? WHERE globalPid = ?", (huge + "p", (gtid >> 24) << 24))
    db.commit()
    db.close()
    for fmt in ("json", "markdown", "table"):
        p = run_main("analyze", src, "-f", fmt)
        assert p.returncode == 0 and len(p.stdout) < 100_000 and len(p.stderr) < 100_000, fmt
    p = run_main("report", src, "--html", tmp_path / "r.html")
    assert p.returncode == 0 and os.path.getsize(tmp_path / "r.html") < 5_000_000


HOSTILE = "a\n# pwned | x [/bold] <img src=x onerror=alert(1)> [x](javascript:alert(1))"


@pytest.fixture
def hostile_names(copy_of, tmp_path):
    """A copy whose stage thread and process carry markup, and whose path has `[/bold]`."""
    folder = tmp_path / "x["
    folder.mkdir()
    src = copy_of(dst=folder / "bold]cap.sqlite")
    db = sqlite3.connect(src)
    gtid = db.execute("SELECT globalTid FROM NVTX_EVENTS WHERE text LIKE 'pooler %' LIMIT 1").fetchone()[0]
    db.execute("UPDATE StringIds SET value = ? WHERE id = (SELECT nameId FROM ThreadNames WHERE globalTid = ?)",
               (HOSTILE, gtid))
    db.execute("UPDATE PROCESSES SET name = ? WHERE globalPid = ?", (HOSTILE, (gtid >> 24) << 24))
    db.commit()
    db.close()
    return src


def test_rich_markup_in_names_and_paths(hostile_names):
    p = run_main("analyze", hostile_names)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "[/bold] <img" in p.stdout and "x[/bold]cap.sqlite" in p.stdout
    p = run_main("compare", "--arm", f"[/bold]={hostile_names}", "--arm", f"b[red]={hostile_names}", "-B", "100")
    assert p.returncode == 0 and "[/bold]" in p.stdout, p.stderr


def test_markdown_escapes_names_and_paths(hostile_names):
    for args in (("analyze", hostile_names, "-f", "markdown"),
                 ("compare", "--arm", f"a|b\n# x={hostile_names}", "--arm", f"<b>={hostile_names}", "-f", "markdown",
                  "-B", "100")):
        p = run_main(*args)
        assert p.returncode == 0, p.stderr
        md = p.stdout
        assert "<img" not in md and "<b>" not in md and not re.search(r"(?<!\\)\]\(javascript", md)
        lines = md.splitlines()
        assert not [x for x in lines if x.lstrip().startswith("#")
                    and x not in ("#### Findings",) and not x.startswith("### clef-prof compare")]
        table: list[int] = []
        for line in lines + [""]:
            if line.startswith("|"):
                table.append(len(re.findall(r"(?<!\\)\|", line)))
            elif table:
                assert len(set(table)) == 1, md
                table = []


def test_html_report_escapes_names(hostile_names, tmp_path):
    out = tmp_path / "r.html"
    p = run_main("report", hostile_names, "--html", out)
    assert p.returncode == 0, p.stderr
    assert "<img src=x onerror" not in out.read_text()


# --- slice windows (issue 10) ----------------------------------------------------------------------

def test_slice_outside_the_session_is_an_error(capture, tmp_path):
    out = tmp_path / "s.sqlite"
    for a, b in (("5", "7"), ("-3", "-1")):
        one_line(run_main("slice", capture(MAIN), out, "--from", a, "--to", b), "outside the session", "1.49201 s")
        assert not out.exists()


def test_a_slice_is_its_own_session(capture, tmp_path):
    out = tmp_path / "s.sqlite"
    assert run_main("slice", capture(MAIN), out, "--from", "0.4", "--to", "0.7").returncode == 0
    r = json.loads(run_main("analyze", out, "-f", "json").stdout)
    assert r["capture"]["duration_s"] == pytest.approx(0.3)
    assert (r["requests"], r["batches"]) == (256, 48)
    # the capture was recorded with nsys' Python sampler; its frames are in no file beside the slice
    marks = sql(out, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34")[0][0]
    assert [w for w in r["warnings"] if "ships CUPTI 12.4" not in w] == [
        w for w in r["warnings"] if w.startswith(f"Python samples: the capture holds {marks:,} samples of nsys' Python "
                                                 "sampler, not read")] and marks > 0
