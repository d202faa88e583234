"""The history store (clef_prof.history.store) through `clef-prof history add` and the --store hook:
results kept with their provenance, two CI jobs writing at once (both kept), and bad stores (corrupt,
locked, another schema, not a store): one line, a non-zero exit, the store's bytes unchanged."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clicheck import assert_one_line, run_main

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "traces"
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
for v in ("CLEF_PROF_COMMIT", "CLEF_PROF_BRANCH", "GITHUB_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_SHA",
          "CI_COMMIT_REF_NAME", "BUILDKITE_COMMIT", "BUILDKITE_BRANCH", "CIRCLE_SHA1", "CIRCLE_BRANCH", "GIT_COMMIT",
          "GIT_BRANCH"):
    ENV.pop(v, None)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Path]:
    """analyze -f json of two real captures (main and pr of the GPU slices), written once."""
    out = tmp_path_factory.mktemp("results")
    files = {}
    for name in ("gpu-main-slice", "gpu-pr-slice"):
        f = out / f"{name}.json"
        p = run_main("analyze", TRACES / f"{name}.sqlite", "-f", "json", "-o", f)
        assert p.returncode == 0, p.stderr
        files[name] = f
    return files


def variant(src: Path, out: Path, tag: str) -> Path:
    """`src` as another result (its path renamed): another payload of the same figures."""
    doc = json.loads(src.read_text())
    doc["path"] = f"{doc['path']}#{tag}"
    out.write_text(json.dumps(doc))
    return out


def clef(*args, env=None, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], cwd=cwd or ROOT, env=env or ENV,
                          capture_output=True, text=True, timeout=timeout)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(db: Path, sql: str = "SELECT id, commit_id, commit_source, branch, branch_source, kind FROM results"):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# --------------------------------------------------------------------------------------------
# keeping results


def test_add_keeps_the_payload_figures_and_provenance(tmp_path, results):
    db = tmp_path / "h.db"
    p = clef("history", "add", db, results["gpu-main-slice"], "--commit", "abc123", "--branch", "main",
             "--time", "2025-06-01T12:00:00Z", "--host", "runner-1")
    assert p.returncode == 0, p.stderr
    assert "stored 1 result(s)" in p.stdout and "commit abc123 (from --commit)" in p.stdout, p.stdout
    (rid, time_s, host, kind, schema, payload), = rows(db, "SELECT id, time, host, kind, payload_schema, payload "
                                                           "FROM results")
    assert (time_s, host, kind, schema) == ("2025-06-01T12:00:00+00:00", "runner-1", "analyze", "clef-prof/analyze/1")
    assert json.loads(payload) == json.loads(results["gpu-main-slice"].read_text())      # the contract, whole
    figures = dict(rows(db, "SELECT metric, value FROM figures"))
    doc = json.loads(results["gpu-main-slice"].read_text())
    assert figures["per_request.h2d_copies"] == doc["per_request"]["h2d_copies"]
    assert figures["stages.transfer.host_ms_per_request"] == doc["stages"]["transfer"]["host_ms_per_request"]
    exact = dict(rows(db, "SELECT metric, exact FROM figures"))
    assert exact["per_request.h2d_copies"] == 1 and exact["stages.transfer.host_ms_per_request"] == 0
    assert rows(db, "SELECT key, value FROM meta WHERE key = 'schema'") == [("schema", "clef-prof/history/1")]
    # the same payload again: not added again, said
    p = clef("history", "add", db, results["gpu-main-slice"], "--commit", "abc124")
    assert p.returncode == 0 and "0 result(s)" in p.stdout and "1 already stored (#1): not added again" in p.stdout
    assert len(rows(db)) == 1


def test_commit_and_branch_from_options_ci_variables_git_or_absent(tmp_path, results):
    f = results["gpu-pr-slice"]
    db = tmp_path / "h.db"
    env = dict(ENV, GITHUB_SHA="f" * 40, GITHUB_REF_NAME="7/merge", GITHUB_HEAD_REF="feature-x")
    assert clef("history", "add", db, f, env=env).returncode == 0
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "trunk"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert clef("history", "add", db, variant(f, tmp_path / "b.json", "b"), cwd=repo).returncode == 0
    bare = tmp_path / "nowhere"
    bare.mkdir()
    env = dict(ENV, GIT_CEILING_DIRECTORIES=str(tmp_path))
    p = clef("history", "add", db, variant(f, tmp_path / "c.json", "c"), env=env, cwd=bare)
    assert p.returncode == 0 and "no commit (none found), no branch" in p.stdout, p.stdout
    env = dict(ENV, CLEF_PROF_COMMIT="c0ffee", GITHUB_SHA="f" * 40)
    assert clef("history", "add", db, variant(f, tmp_path / "d.json", "d"), "--branch", "rel", env=env).returncode == 0
    assert [r[1:5] for r in rows(db)] == [
        ("f" * 40, "GITHUB_SHA", "feature-x", "GITHUB_HEAD_REF"),
        (head, "git rev-parse", "trunk", "git rev-parse"),
        (None, None, None, None),
        ("c0ffee", "CLEF_PROF_COMMIT", "rel", "--branch")]


def test_analyze_store_hook_and_a_list_of_results(tmp_path, results):
    db = tmp_path / "h.db"
    p = run_main("analyze", TRACES / "gpu-main-slice.sqlite", TRACES / "gpu-pr-slice.sqlite", "-f", "json", "-o",
                 tmp_path / "both.json", "--store", db)
    assert p.returncode == 0, p.stderr
    assert "stored 2 result(s)" in p.stderr and "analyze" in rows(db)[0][5]
    # the list analyze wrote for two captures is two results; both already stored
    p = run_main("history", "add", db, tmp_path / "both.json")
    assert p.returncode == 0 and "2 already stored (#1, #2)" in p.stdout, p.stdout


def test_two_ci_jobs_writing_at_once_are_both_kept(tmp_path, results):
    """Eight `history add` processes into one new store, held back by a writer's lock until all
    wait on it and then let go at once: all eight results are kept, none lost or doubled."""
    db = tmp_path / "ci.db"
    files = [variant(results["gpu-main-slice"], tmp_path / f"job{i}.json", f"job{i}") for i in range(8)]
    assert clef("history", "add", db, files[0], "--commit", "c0").returncode == 0
    hold = sqlite3.connect(db, isolation_level=None, timeout=30)
    hold.execute("BEGIN IMMEDIATE")
    procs = [subprocess.Popen([sys.executable, "-m", "clef_prof", "history", "add", db, f, "--commit", f"c{i + 1}"],
                              cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, f in enumerate(files[1:])]
    time.sleep(1.5)
    hold.execute("COMMIT")
    hold.close()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sorted(r[1] for r in rows(db)) == sorted(f"c{i}" for i in range(8))
    assert rows(db, "SELECT count(DISTINCT result_id) FROM figures") == [(8,)]


def test_two_jobs_making_a_new_store_at_once(tmp_path, results):
    db = tmp_path / "new.db"
    files = [variant(results["gpu-pr-slice"], tmp_path / f"n{i}.json", f"n{i}") for i in range(4)]
    procs = [subprocess.Popen([sys.executable, "-m", "clef_prof", "history", "add", db, f], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in files]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(rows(db)) == 4 and not [f for f in os.listdir(tmp_path) if f.endswith(".new")]


# --------------------------------------------------------------------------------------------
# bad stores: one line, nothing lost


def _store_with(tmp_path, results) -> Path:
    db = tmp_path / "h.db"
    assert clef("history", "add", db, results["gpu-main-slice"]).returncode == 0
    return db


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated", "pages", "not-a-store", "newer-schema"])
def test_a_store_that_cannot_be_read_is_left_as_it_is(tmp_path, results, damage):
    db = _store_with(tmp_path, results)
    data = db.read_bytes()
    if damage == "garbage":
        db.write_bytes(os.urandom(4096))
    elif damage == "empty":
        db.write_bytes(b"")
    elif damage == "truncated":
        db.write_bytes(data[:len(data) // 3])
    elif damage == "pages":
        db.write_bytes(data[:4096] + bytes(b ^ 0x5A for b in data[4096:]))
    elif damage == "not-a-store":
        db.unlink()
        with sqlite3.connect(db) as con:
            con.execute("CREATE TABLE t (x)")
    else:
        with sqlite3.connect(db) as con:
            con.execute("UPDATE meta SET value = 'clef-prof/history/2' WHERE key = 'schema'")
    before = digest(db)
    needles = {"garbage": "not an SQLite file", "empty": "an empty file", "truncated": "damaged",
               "pages": "damaged", "not-a-store": "not a clef-prof history store",
               "newer-schema": "schema clef-prof/history/2"}[damage]
    for args in (("history", "add", db, variant(results["gpu-pr-slice"], tmp_path / "x.json", "x")),
                 ("history", db), ("analyze", TRACES / "gpu-pr-slice.sqlite", "--store", db)):
        p = clef(*args)
        assert_one_line(p, 1, needles)
        assert digest(db) == before, args
    assert sorted(os.listdir(tmp_path)) == sorted(["h.db", "x.json"])     # no journal or temporary file left


def test_a_locked_store_is_said_and_nothing_is_lost(tmp_path, results):
    """Another process holds the store's exclusive lock (a write in progress): adding waits the
    busy timeout, then says so in one line; both that write and the store survive."""
    db = _store_with(tmp_path, results)
    ready, done = threading.Event(), threading.Event()

    def holder():
        con = sqlite3.connect(db, isolation_level=None, timeout=5)
        con.execute("BEGIN EXCLUSIVE")
        con.execute("INSERT INTO meta (key, value) VALUES ('held', 'yes')")
        ready.set()
        done.wait(60)
        con.execute("COMMIT")
        con.close()

    t = threading.Thread(target=holder)
    t.start()
    ready.wait(10)
    try:
        env = dict(ENV, CLEF_PROF_STORE_TIMEOUT="0.5")
        p = clef("history", "add", db, variant(results["gpu-pr-slice"], tmp_path / "y.json", "y"), env=env)
        assert_one_line(p, 1, "locked by another process", "CLEF_PROF_STORE_TIMEOUT")
        p = clef("history", db, env=env)
        assert_one_line(p, 1, "locked by another process")
    finally:
        done.set()
        t.join()
    assert len(rows(db)) == 1 and rows(db, "SELECT value FROM meta WHERE key = 'held'") == [("yes",)]
    assert clef("history", "add", db, tmp_path / "y.json").returncode == 0 and len(rows(db)) == 2


@pytest.mark.parametrize("doc,needle", [
    ({"schema": "clef-prof/analyze/2", "path": "x"}, "schema clef-prof/analyze/2, which this clef-prof does not store"),
    ({"schema": "clef-prof/bench/2", "status": "failed"}, "did not finish"),
    ({"schema": "something/else"}, "not a clef-prof result"),
    ([1, 2], "not a clef-prof result"),
])
def test_results_of_another_schema_are_refused_and_nothing_is_stored(tmp_path, results, doc, needle):
    db = _store_with(tmp_path, results)
    before = digest(db)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    good = variant(results["gpu-pr-slice"], tmp_path / "good.json", "g")
    assert_one_line(clef("history", "add", db, good, bad), 1, needle, "nothing stored")
    assert digest(db) == before
    fresh = tmp_path / "fresh.db"
    assert_one_line(clef("history", "add", fresh, bad), 1, needle)
    assert not fresh.exists()


def test_bad_command_lines(tmp_path, results):
    db = _store_with(tmp_path, results)
    assert_one_line(run_main("history", "add", db), 1, "at least one result file")
    assert_one_line(run_main("history", db, "x"), 1, "one store to read")
    assert_one_line(run_main("history", db, "--commit", "x"), 1, "--commit")
    assert_one_line(run_main("history", tmp_path / "none.db"), 1, "no such file")
    assert_one_line(run_main("history", "add", db, tmp_path / "none.json"), 1, "no such file")
    (tmp_path / "t.txt").write_text("{nope")
    assert_one_line(run_main("history", "add", db, tmp_path / "t.txt"), 1, "not JSON", "nothing stored")
    assert_one_line(run_main("history", "add", db, results["gpu-pr-slice"], "--time", "yesterday"), 1, "ISO 8601")
    assert_one_line(run_main("analyze", TRACES / "gpu-pr-slice.sqlite", "-o", db, "--store", db), 1,
                    "both -o and --store")
    assert_one_line(run_main("analyze", TRACES / "gpu-pr-slice.sqlite", "--store", tmp_path / "no" / "h.db"), 1,
                    "does not exist")
    assert_one_line(run_main("history", db, "--sig-level", "0.7"), 1, "--sig-level")
    assert_one_line(run_main("history", db, "-o", db), 1, "is an input")


def test_compare_store_hook_keeps_each_arms_figures(tmp_path):
    """`compare --store`: the stored figures are compare's own JSON, arm by arm (json.load of the
    same command's -o output), exact counts flagged as compare says."""
    db, out = tmp_path / "h.db", tmp_path / "c.json"
    p = run_main("compare", "--arm", f"main={TRACES / 'gpu-main-slice.sqlite'}", "--arm", f"pr={TRACES / 'gpu-pr-slice.sqlite'}",
                 "-f", "json", "-o", out, "--store", db)
    assert p.returncode == 0, p.stderr
    assert "stored 1 result(s)" in p.stderr and rows(db)[0][5] == "compare"
    doc = json.loads(out.read_text())
    want = {(f"arm={arm}", m["metric"], a["mean"], int(bool(m.get("deterministic"))))
            for m in doc["metrics"] for arm, a in m["arms"].items() if a and a.get("mean") is not None}
    got = set(rows(db, "SELECT series, metric, value, exact FROM figures"))
    assert got == want and {s for s, *_ in got} == {"arm=main", "arm=pr"}
    assert any(e for *_, e in got) and not all(e for *_, e in got)
