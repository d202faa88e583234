"""`clef-prof scrub`: remove what can carry a secret from an export before it is shared.

Rules cover classes, not instances, and apply to every text and BLOB value of every table
(clef_prof.base.redact has them; docs/scrub.md lists them):
- an environment block (NUL-separated `A=b\\0C=d`, even one assignment) or a value that is an
  environment-style or secret-named assignment is removed whole; inside free text, assignments,
  secret-named flags, headers (`Authorization: Bearer ...`), key-value pairs, URL and DSN
  passwords, `curl -u` and `mysql -p` passwords, signed-URL signatures, private keys and tokens
  that look like keys lose their values;
- request ids (`rid=...`) and the user names of home folders become pseudonyms that are stable
  across the whole export (`[rid-1]`, `[user-1]`), so that what analysis compares keeps its
  answer: data-parallel ranks differ only by their request ids;
- `META_DATA_CAPTURE` arguments, environment, working folder, user and host rows are removed and
  the command keeps its executable's base name; `TARGET_INFO_SYSTEM_ENV` keeps only an allow-list
  of harmless facts (driver versions, CPU, OS, capability flags); `PROCESSES.name` keeps only its
  executable's base name (pids stay); process output streams and the exporting host, user and
  paths are removed.
clef-prof reads none of what is removed (it reads names of ranges, API calls and threads, the
capture settings COLLECT_CUDA_TRACE and CUDA_GRAPH_TRACE_OPTIONS:MODE, and the export version),
so every figure of analyze is the same after the scrub. Standard library only.
"""
from __future__ import annotations

import os
import re
import sqlite3
import sys
from collections import Counter
from typing import Iterator, NamedTuple

from ..base.errors import CaptureError, ClefError
from ..base.redact import REMOVED, Pseudonyms, exe_name, redact_text

# META_DATA_CAPTURE rows that hold arguments, environment or who/where ran it
_CAPTURE_ROW = re.compile(r"ARGUMENT|(?:^|[:_])ENV|ENVIRONMENT|WORKING_DIR|USER|HOST|DISPLAY_NAME", re.I)
_EXPORT_ROW = re.compile(r"HOST|USER|PATH|FILE", re.I)
# TARGET_INFO_SYSTEM_ENV: harmless facts kept; capability flags (Has*/Supports*/Is*) with 0/1 values
SYSTEM_ENV_KEEP = frozenset({"CpuCores", "CpuSpeedMhz", "CpuArchitecture", "CpuDescription", "CudaDriverVersion",
                             "NvDriverVersion", "HardwarePlatform", "SoftwarePlatform", "OsDescription",
                             "SupportedABIs", "Supported64BitABIs"})
_FLAG_FACT = re.compile(r"^(?:Has|Supports|Is)[A-Za-z0-9]+$")
# bytes of a BLOB that are not UTF-8, as surrogateescape decodes them
_NOT_UTF8 = re.compile("([\udc80-\udcff]+)")


class Finding(NamedTuple):
    """One value that looks like it can carry a secret; `fix` is the new value (bytes for a BLOB),
    None to delete the row."""

    table: str
    column: str
    rowid: int
    rule: str
    fix: str | bytes | None


# an nsys export has at least one of these (a plain SQLite file is refused, not "scrubbed")
EXPORT_TABLES = frozenset({"NVTX_EVENTS", "StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA"})


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]


def require_export(path: str, tables) -> None:
    """Refuse an SQLite file that is not an nsys export."""
    if not EXPORT_TABLES & set(tables):
        raise CaptureError(f"{path}: not an Nsight Systems export (no NVTX_EVENTS, StringIds or export metadata)")


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def findings(conn: sqlite3.Connection) -> Iterator[Finding]:
    """Every value the scrub removes or changes, table by table (the values are never kept).
    Request ids and home-folder user names get pseudonyms that are stable across the whole export."""
    names = Pseudonyms()
    tables = _tables(conn)
    structured: set[tuple[str, str]] = set()
    if "META_DATA_CAPTURE" in tables:
        structured.add(("META_DATA_CAPTURE", "value"))
        for rowid, name, value in conn.execute("SELECT rowid, name, value FROM META_DATA_CAPTURE"):
            name = str(name or "")
            if name.endswith("COMMAND") and ":" in name and value not in (None, REMOVED) and exe_name(value) != value:
                yield Finding("META_DATA_CAPTURE", "value", rowid, "command-line", exe_name(value))
            elif _CAPTURE_ROW.search(name) and value not in (None, "", REMOVED):
                yield Finding("META_DATA_CAPTURE", "value", rowid, "argument-or-env", REMOVED)
            else:
                yield from _text("META_DATA_CAPTURE", "value", rowid, value, names)
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        structured.add(("TARGET_INFO_SYSTEM_ENV", "name"))
        structured.add(("TARGET_INFO_SYSTEM_ENV", "value"))
        for rowid, name, value in conn.execute("SELECT rowid, name, value FROM TARGET_INFO_SYSTEM_ENV"):
            keep = name in SYSTEM_ENV_KEEP or (isinstance(name, str) and _FLAG_FACT.match(name)
                                               and str(value) in ("0", "1"))
            if not keep:
                yield Finding("TARGET_INFO_SYSTEM_ENV", "name", rowid, "system-env", None)
            else:
                yield from _text("TARGET_INFO_SYSTEM_ENV", "value", rowid, value, names)
    for table, rule, pattern in (("META_DATA_EXPORT", "export-host-path", _EXPORT_ROW),
                                 ("EXPORT_META_DATA", "export-host-path", _EXPORT_ROW)):
        if table in tables:
            structured.add((table, "value"))
            for rowid, name, value in conn.execute(f"SELECT rowid, name, value FROM {table}"):
                if pattern.search(str(name or "")) and value not in (None, "", REMOVED):
                    yield Finding(table, "value", rowid, rule, REMOVED)
                else:
                    yield from _text(table, "value", rowid, value, names)
    if "PROCESSES" in tables and "name" in _columns(conn, "PROCESSES"):
        structured.add(("PROCESSES", "name"))
        for rowid, name in conn.execute("SELECT rowid, name FROM PROCESSES"):
            if name is not None and exe_name(name) != name:
                yield Finding("PROCESSES", "name", rowid, "process-name", exe_name(name))
    streams = set()
    if "ProcessStreams" in tables and "StringIds" in tables and "contentId" in _columns(conn, "ProcessStreams"):
        for (rowid,) in conn.execute("SELECT s.id FROM StringIds s WHERE s.id IN (SELECT contentId FROM ProcessStreams) "
                                     "AND s.value IS NOT ?", (REMOVED,)):
            streams.add(rowid)
            yield Finding("StringIds", "value", rowid, "process-stream", REMOVED)
    for table in tables:
        if table.startswith("ENUM_"):
            continue
        cols = [c for c in _columns(conn, table) if (table, c) not in structured]
        if not cols:
            continue
        q = ", ".join(f'"{c}"' for c in cols)
        cond = " OR ".join(f"typeof(\"{c}\") IN ('text', 'blob')" for c in cols)
        try:
            cur = conn.execute(f'SELECT rowid, {q} FROM "{table}" WHERE {cond}')
        except sqlite3.OperationalError:     # a table without rowid: nsys makes none
            continue
        for row in cur:
            for c, v in zip(cols, row[1:]):
                if not (table == "StringIds" and row[0] in streams):
                    yield from _text(table, c, row[0], v, names)


def _text(table: str, column: str, rowid: int, value, names: Pseudonyms) -> Iterator[Finding]:
    """The finding for one value, if a rule fires: text as it is; a BLOB (a string nsys stored as
    bytes, an NVTX binary payload) read as UTF-8, each run of text on its own: the bytes that are
    not UTF-8 end a value and stay as they are."""
    if isinstance(value, bytes):
        parts = _NOT_UTF8.split(value.decode("utf-8", "surrogateescape"))
        rules: list[str] = []
        for i in range(0, len(parts), 2):
            parts[i], fired = redact_text(parts[i], names)
            rules += fired
        if rules:
            yield Finding(table, column, rowid, rules[0], "".join(parts).encode("utf-8", "surrogateescape"))
    elif isinstance(value, str):
        new, rules = redact_text(value, names)
        if rules:
            yield Finding(table, column, rowid, rules[0], new)


def scrub(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """Scrub an open, writable export in place; returns how many values each rule removed, per table."""
    found = list(findings(conn))
    counts: dict[str, Counter] = {}
    for f in found:
        if f.fix is None:
            conn.execute(f'DELETE FROM "{f.table}" WHERE rowid = ?', (f.rowid,))
        else:
            conn.execute(f'UPDATE "{f.table}" SET "{f.column}" = ? WHERE rowid = ?', (f.fix, f.rowid))
        counts.setdefault(f.table, Counter())[f.rule] += 1
    return {t: dict(c) for t, c in sorted(counts.items())}


def rewrite(src: str, dst: str, edit, what: str = "scrub") -> None:
    """Copy `src` into a temporary file beside `dst`, run `edit(connection)` on the copy in one
    transaction, VACUUM it and rename it to `dst` (nothing appears there on failure). The input is
    only read; an SQLite error names it."""
    from ..base.safeio import atomic_output, readonly_uri

    with atomic_output(dst, [src]) as tmp:
        s = sqlite3.connect(readonly_uri(src), uri=True)
        d = sqlite3.connect(tmp)
        try:
            try:
                s.backup(d)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                raise ClefError(f"{src}: cannot read ({_why(exc)})") from None
            try:
                with d:
                    edit(d)
                d.execute("VACUUM")
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                raise ClefError(f"{src}: cannot {what} ({_why(exc)}); is it an nsys export?") from None
        finally:
            s.close()
            d.close()


def _why(exc: Exception) -> str:
    """SQLite's reason, or what a UnicodeDecodeError means here: the damaged schema's or a text
    column's bytes are not UTF-8 (SQLite's own message may quote them)."""
    return "text that is not UTF-8 in the database or its schema" if isinstance(exc, UnicodeDecodeError) else str(exc)


def scrub_file(src: str, dst: str) -> dict:
    """Copy `src` to a new file `dst` (through a temporary file), scrubbed; the input is only read.
    A PyTorch profiler trace is scrubbed as its conversion (analyze.read.kineto): an SQLite file of
    what analyze reads, without the JSON's args, device and distributed facts, and its file names
    (Kineto names them HOST_PID.TIME...) made `trace-N`; a JSON output is refused, since the
    trace's own JSON is not rewritten."""
    from ..analyze.read import kineto
    from ..analyze.read.export import check_file

    trace = kineto.is_trace(src)
    if trace:
        from ..base.safeio import check_output

        if dst.endswith(kineto.TRACE_SUFFIXES):
            raise ClefError(f"{src}: a PyTorch profiler trace; scrub does not rewrite its JSON (it carries host "
                            "names, paths, arguments and environment in free-form args): give OUT.sqlite to "
                            "write its scrubbed conversion, which analyze, compare and report read with the "
                            "same figures")
        check_output(dst, [src])
        src = kineto.to_export(src)
    check_file(src)
    removed: dict = {}

    def edit(d: sqlite3.Connection) -> None:
        require_export(src, _tables(d))
        removed.update(scrub(d))
        if trace:
            for table, counts in _trace_names(d).items():
                removed.setdefault(table, {}).update(counts)

    rewrite(src, dst, edit)
    return {"scrubbed": removed, "bytes": os.path.getsize(dst)}


def _trace_names(d: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """A converted trace's file names (in META_DATA_EXPORT's CLEF_SOURCE_FACTS) made trace-1,
    trace-2, ... with their suffixes kept."""
    import json

    from ..analyze.read.kineto import TRACE_SUFFIXES

    row = d.execute("SELECT rowid, value FROM META_DATA_EXPORT WHERE name = 'CLEF_SOURCE_FACTS'").fetchone()
    facts = json.loads(row[1]) if row else {}
    names = facts.get("file_names") or []
    if not names:
        return {}
    facts["file_names"] = [f"trace-{i}" + next((x for x in sorted(TRACE_SUFFIXES, key=len, reverse=True)
                                                 if str(n).endswith(x)), "") for i, n in enumerate(names, 1)]
    d.execute("UPDATE META_DATA_EXPORT SET value = ? WHERE rowid = ?", (json.dumps(facts), row[0]))
    return {"META_DATA_EXPORT": {"trace-file-name": len(names)}}


def check_file_for_secrets(path: str) -> list[Finding]:
    """What the scrub would remove from `path` (read only)."""
    from ..base.safeio import readonly_uri
    from ..analyze.read import kineto
    from ..analyze.read.export import check_file

    if kineto.is_trace(path):
        raise ClefError(f"{path}: a PyTorch profiler trace; --check reads SQLite exports, and a trace's JSON "
                        "carries host names, paths and arguments that it does not read: `clef-prof scrub "
                        f"{path} OUT.sqlite` writes a scrubbed conversion, and --check OUT.sqlite checks it")
    check_file(path)
    conn = sqlite3.connect(readonly_uri(path), uri=True)
    try:
        require_export(path, _tables(conn))
        return list(findings(conn))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise ClefError(f"{path}: cannot read ({_why(exc)})") from None
    finally:
        conn.close()


class Group(NamedTuple):
    """The findings of one rule in one place (table.column): how many, and the first rowids."""

    rule: str
    place: str
    count: int
    rowids: list[int]


def grouped(found: list[Finding], examples: int = 3) -> list[Group]:
    """Findings grouped by rule and place, the largest group first (`scrub --check`'s summary)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for f in found:
        groups.setdefault((f.rule, f"{f.table}.{f.column}"), []).append(f.rowid)
    return sorted((Group(rule, place, len(ids), sorted(ids)[:examples]) for (rule, place), ids in groups.items()),
                  key=lambda g: (-g.count, g.rule, g.place))


def print_report(removed: dict[str, dict[str, int]]) -> None:
    """One line per table on stderr: how many values each rule removed (never the values)."""
    if not removed:
        print("scrub: nothing to remove", file=sys.stderr)
    for table, rules in removed.items():
        print(f"scrub: {table}: " + ", ".join(f"{rule} {n}" for rule, n in sorted(rules.items())), file=sys.stderr)
