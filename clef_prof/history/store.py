"""The history store: one SQLite file (the standard library's sqlite3) of results and their figures.

A result is the JSON contract one `analyze`, `compare` or `bench` run printed (docs/json.md),
kept whole as its payload, with where and what it measured: commit, branch, time, host, the
capture's identity, the spec; `figures` holds the metrics read from it (clef_prof.history.figures),
one row per series and metric, so that reading a trend is one SQL query.

Safe under concurrent CI jobs: the rollback journal (SQLite's default, not WAL: a WAL store
copied or uploaded as one file without its -wal file would lose the newest results, and WAL needs
shared memory that network file systems lack), every write one `BEGIN IMMEDIATE` transaction
(the writer's lock taken first, so two writers queue instead of deadlocking) under a busy
timeout. A store is checked before anything is written to it (an SQLite file, its integrity, a
`meta` table naming this schema), and a store that fails the check is left exactly as it is.
A new store is built in a temporary file beside the path and linked into place, so that no
other process ever sees it half made.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sqlite3
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone

from ..base.errors import ClefError, shown

SCHEMA = "clef-prof/history/1"
SCHEMA_VERSION = 1
ENV_TIMEOUT = "CLEF_PROF_STORE_TIMEOUT"     # seconds a write (or read) waits for another process's lock
DEFAULT_TIMEOUT_S = 30.0
_HEADER = b"SQLite format 3\x00"

_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE results (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,                 -- ISO 8601, UTC
    time_ns INTEGER NOT NULL,           -- the same, ns since the epoch: the series' order
    commit_id TEXT, commit_source TEXT, -- where the commit came from: option, a CI variable, git rev-parse
    branch TEXT, branch_source TEXT,
    host TEXT,
    kind TEXT NOT NULL,                 -- analyze | compare | bench
    payload_schema TEXT NOT NULL,       -- the payload's "schema", e.g. clef-prof/analyze/1
    capture TEXT NOT NULL,              -- what was measured: the export, the arms' exports, the arms' commands
    spec TEXT NOT NULL,                 -- the stage config (domain, batch, stages) or bench's cases, as JSON
    digest TEXT NOT NULL UNIQUE,        -- sha256 of the payload: the same result is kept once
    source TEXT,                        -- the file it was added from, or the command that stored it
    stored_by TEXT NOT NULL,            -- the clef-prof version that stored it
    payload TEXT NOT NULL               -- the JSON contract as the command printed it
);
CREATE TABLE figures (
    result_id INTEGER NOT NULL REFERENCES results(id),
    series TEXT NOT NULL,               -- '' (analyze), 'arm=NAME' (compare), 'case=LABEL arm=NAME' (bench)
    metric TEXT NOT NULL,
    unit TEXT NOT NULL,
    value REAL NOT NULL,
    exact INTEGER NOT NULL,             -- 1: an exact count (any change of value is a change)
    PRIMARY KEY (result_id, series, metric)
);
CREATE INDEX figures_by_metric ON figures (metric, series);
"""


class StoreError(ClefError):
    """A store that cannot be read or written: said in one line, the store left as it was."""


def timeout_s() -> float:
    """The busy timeout: $CLEF_PROF_STORE_TIMEOUT seconds, else 30."""
    text = os.environ.get(ENV_TIMEOUT)
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise StoreError(f"${ENV_TIMEOUT}={text!r}: expected seconds, 0 or more")
    return value


@dataclass(frozen=True)
class Provenance:
    """Where a result comes from; each *_source names what gave the value (None: absent)."""

    commit: str | None
    commit_source: str | None
    branch: str | None
    branch_source: str | None
    host: str
    time: datetime

    def describe(self) -> str:
        c = f"commit {self.commit[:12]} (from {self.commit_source})" if self.commit else "no commit (none found)"
        b = f"branch {self.branch} (from {self.branch_source})" if self.branch else "no branch"
        return f"{c}, {b}"


# clef-prof's own, then CI variables, in the order they are tried (GitHub Actions, GitLab, Buildkite,
# CircleCI, Jenkins)
COMMIT_VARS = ("CLEF_PROF_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1", "GIT_COMMIT")
# GITHUB_HEAD_REF: a pull request's own branch (GITHUB_REF_NAME is then "N/merge")
BRANCH_VARS = ("CLEF_PROF_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH", "CIRCLE_BRANCH",
               "GIT_BRANCH")


def _git(args: list[str], cwd) -> str | None:
    try:
        p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    out = p.stdout.strip()
    return out if p.returncode == 0 and out and "\n" not in out else None


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (a time without a zone is UTC)."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise StoreError(f"--time {text!r}: expected an ISO 8601 time, e.g. 2025-06-01T12:00:00Z") from None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def provenance(commit: str | None = None, branch: str | None = None, host: str | None = None,
               time: str | None = None, env=None, cwd=None) -> Provenance:
    """Commit and branch from the options, else the CI's variables, else `git rev-parse` in `cwd`
    (the working folder), else absent; the host from the option, else the host name; the time
    from the option, else now."""
    env = os.environ if env is None else env
    c_src = b_src = None
    if commit:
        c_src = "--commit"
    else:
        var = next((v for v in COMMIT_VARS if env.get(v, "").strip()), None)
        if var:
            commit, c_src = env[var].strip(), var
        else:
            commit = _git(["rev-parse", "HEAD"], cwd)
            c_src = "git rev-parse" if commit else None
    if branch:
        b_src = "--branch"
    else:
        var = next((v for v in BRANCH_VARS if env.get(v, "").strip()), None)
        if var:
            branch, b_src = env[var].strip(), var
        else:
            branch = _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
            branch = None if branch == "HEAD" else branch           # a detached HEAD names no branch
            b_src = "git rev-parse" if branch else None
    when = parse_time(time) if time else datetime.now(timezone.utc)
    return Provenance(commit, c_src, branch, b_src, host or socket.gethostname(), when)


# ---------------------------------------------------------------------------------------------
# opening


def _check_file(path: str) -> None:
    """An existing store must be a regular, non-empty SQLite file."""
    from ..base.safeio import check_regular

    check_regular(path, "store")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_HEADER))
    except OSError as exc:
        raise StoreError(f"{shown(path)}: cannot read the store ({exc.strerror or exc})") from None
    if head != _HEADER:
        what = "an empty file" if not head else "not an SQLite file"
        raise StoreError(f"{shown(path)}: {what}, not a clef-prof history store; left as it is")


def _connect(path: str, readonly: bool) -> sqlite3.Connection:
    import urllib.parse

    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + ("?mode=ro" if readonly else "?mode=rw")
    try:
        con = sqlite3.connect(uri, uri=True, timeout=timeout_s(), isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"{shown(path)}: cannot open the store ({exc})") from None
    return con


def _sql_error(path: str, exc: sqlite3.Error, doing: str) -> StoreError:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return StoreError(f"{shown(path)}: the store is locked by another process (waited {timeout_s():g} s, "
                          f"${ENV_TIMEOUT}); {doing}")
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return StoreError(f"{shown(path)}: the store is damaged ({text}); {doing}; left as it is")
    return StoreError(f"{shown(path)}: {text}; {doing}")


def _check_schema(con: sqlite3.Connection, path: str, doing: str) -> None:
    """The store's integrity and its schema: this version's, or refused in one line."""
    try:
        check = con.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise StoreError(f"{shown(path)}: the store is damaged (integrity check: {check[0][0]}); {doing}; "
                             "left as it is")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            raise StoreError(f"{shown(path)}: an SQLite file that is not a clef-prof history store (no meta table); "
                             f"{doing}; left as it is")
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error as exc:
        raise _sql_error(path, exc, doing) from None
    schema = meta.get("schema")
    if schema != SCHEMA:
        if isinstance(schema, str) and schema.startswith("clef-prof/history/"):
            raise StoreError(f"{shown(path)}: a history store of schema {schema} (this clef-prof reads and writes "
                             f"{SCHEMA} only); {doing}; left as it is")
        raise StoreError(f"{shown(path)}: an SQLite file that is not a clef-prof history store (meta names schema "
                         f"{schema!r}); {doing}; left as it is")
    missing = {"results", "figures"} - tables
    if missing:
        raise StoreError(f"{shown(path)}: the store lacks its table(s) {', '.join(sorted(missing))}; {doing}; "
                         "left as it is")


def open_read(path) -> sqlite3.Connection:
    """A read-only connection to an existing, checked store."""
    path = os.fspath(path)
    _check_file(path)
    con = _connect(path, readonly=True)
    _check_schema(con, path, "nothing read")
    return con


def _create(path: str) -> None:
    """Make a new, empty store at `path`: built beside it, then linked into place (another
    process that made it first wins, and this one uses that store)."""
    from ..base.defaults import VERSION

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StoreError(f"{shown(path)}: the folder {shown(os.path.dirname(path) or '.')} does not exist")
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.urandom(4).hex()}.new")
    try:
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.executescript("BEGIN;" + _TABLES + "COMMIT;")
            con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                            [("schema", SCHEMA), ("version", str(SCHEMA_VERSION)), ("created_by", f"clef-prof {VERSION}"),
                             ("created", datetime.now(timezone.utc).isoformat())])
        finally:
            con.close()
        os.chmod(tmp, 0o644)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    except OSError as exc:
        raise StoreError(f"{shown(path)}: cannot create the store ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def open_write(path) -> sqlite3.Connection:
    """A read-write connection to a checked store, made first when `path` does not exist."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        _create(path)
    _check_file(path)
    with contextlib.closing(_connect(path, readonly=True)) as ro:
        _check_schema(ro, path, "nothing written")
    return _connect(path, readonly=False)


# ---------------------------------------------------------------------------------------------
# writing


@dataclass(frozen=True)
class Added:
    """What `add` did with one payload: its result id, and whether it was already stored."""

    id: int
    duplicate: bool
    figures: int


def add(path, payloads: list[tuple[dict, str]], prov: Provenance) -> list[Added]:
    """Store each (payload, source) with `prov`, all in one transaction: every one or none. A
    payload already stored (the same digest) is not added again."""
    from ..base.defaults import VERSION
    from .figures import describe

    rows = []
    for payload, source in payloads:
        d = describe(payload)             # refuses a payload it cannot read, before anything is written
        text = json.dumps(payload, sort_keys=False, separators=(",", ":"))
        rows.append((d, text, hashlib.sha256(text.encode()).hexdigest(), source))
    path = os.fspath(path)
    con = open_write(path)
    out: list[Added] = []
    t_ns = int(prov.time.timestamp() * 1e9)
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            for i, (d, text, digest, source) in enumerate(rows):
                old = con.execute("SELECT id FROM results WHERE digest = ?", (digest,)).fetchone()
                if old:
                    out.append(Added(old[0], True, 0))
                    continue
                cur = con.execute(
                    "INSERT INTO results (time, time_ns, commit_id, commit_source, branch, branch_source, host, kind, "
                    "payload_schema, capture, spec, digest, source, stored_by, payload) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (prov.time.isoformat(), t_ns + i, prov.commit, prov.commit_source, prov.branch,
                     prov.branch_source, prov.host, d.kind, d.schema, d.capture, d.spec, digest, source,
                     f"clef-prof {VERSION}", text))
                rid = cur.lastrowid
                con.executemany("INSERT INTO figures (result_id, series, metric, unit, value, exact) "
                                "VALUES (?, ?, ?, ?, ?, ?)",
                                [(rid, f.series, f.metric, f.unit, f.value, int(f.exact)) for f in d.figures])
                out.append(Added(rid, False, len(d.figures)))
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise _sql_error(path, exc, "nothing written") from None
    finally:
        con.close()
    return out


# ---------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class Row:
    """One figure of one result, as the series reader gets it."""

    id: int
    time: str
    time_ns: int
    commit: str | None
    branch: str | None
    host: str | None
    kind: str
    series: str
    metric: str
    unit: str
    value: float
    exact: bool


def read_rows(path, *, branch: str | None = None, host: str | None = None, kind: str | None = None) -> list[Row]:
    """Every figure of the store's results (optionally of one branch, host or kind), in time order."""
    path = os.fspath(path)
    con = open_read(path)
    where, args = [], []
    for col, value in (("r.branch", branch), ("r.host", host), ("r.kind", kind)):
        if value is not None:
            where.append(f"{col} = ?")
            args.append(value)
    sql = ("SELECT r.id, r.time, r.time_ns, r.commit_id, r.branch, r.host, r.kind, f.series, f.metric, f.unit, "
           "f.value, f.exact FROM figures f JOIN results r ON r.id = f.result_id"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.time_ns, r.id")
    try:
        rows = [Row(*r[:11], bool(r[11])) for r in con.execute(sql, args)]
    except sqlite3.Error as exc:
        raise _sql_error(path, exc, "nothing read") from None
    finally:
        con.close()
    return rows


def count_results(path) -> int:
    con = open_read(path)
    try:
        return con.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.Error as exc:
        raise _sql_error(os.fspath(path), exc, "nothing read") from None
    finally:
        con.close()
