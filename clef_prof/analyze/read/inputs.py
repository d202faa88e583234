"""What a user names as a capture, to the SQLite export to read. Shared by analyze, report
and compare. Standard library only (the CLI imports it to build its parser).

- an nsys SQLite export (`*.sqlite`): used as it is (analyze checks it);
- a record manifest (`*.json`): its key "export" names the export, relative to the manifest's
  folder or absolute (or, recorded with --no-export, "report" names the `.nsys-rep`);
- a folder: its `manifest.json`, else its only capture (an `.nsys-rep`, or a `*.sqlite` export
  that is not one's export); several candidates are named in the error;
- a PyTorch profiler (Kineto) trace, `.json`/`.json.gz`/`.json.xz`, or a folder of them with no manifest:
  read once into an export of the same tables (analyze.read.kineto), cached;
- an `.nsys-rep` report: exported once with nsys (found as `record` finds it), beside the
  report, or under `$XDG_CACHE_HOME/clef-prof` when that folder is not writable (or holds a
  NAME.sqlite that clef-prof did not make, or something else of that name). The export carries
  the report's identity (its size and a SHA-256 of its first and last MiB, in a table
  CLEF_PROF_REPORT), and is reused only while the report has that identity: a report replaced by
  another, older one (`cp -p`, `rsync -a`, `tar`) is exported again, whatever the mtimes say.
"""
from __future__ import annotations

import glob
import os
import sqlite3
import stat
import sys

from ...base.config import MANIFEST
from ...base.errors import ClefError, shown
from . import kineto
from .identity import report_identity
from .manifest import read as read_manifest

REPORT_EXT = ".nsys-rep"


class InputError(ClefError):
    """A path that names no capture: missing manifest or export, an ambiguous folder, a failed export."""


def from_manifest(path: str) -> tuple[str, dict]:
    """(export, manifest) of a record manifest."""
    data = read_manifest(path)
    folder = os.path.dirname(path)          # relative where the manifest was named so: shown shorter
    export, report = data.get("export"), data.get("report")
    if not (isinstance(export, str) and export) and isinstance(report, str) and report.endswith(REPORT_EXT):
        return export_report(os.path.normpath(os.path.join(folder, report))), data
    if not isinstance(export, str) or not export:
        raise InputError(f"{shown(path)}: the manifest has no \"export\" key naming its SQLite export")
    export = os.path.join(folder, export)
    if not os.path.exists(export):
        raise InputError(f"{shown(path)}: its export {shown(export)} does not exist")
    if kineto.is_trace(export):
        return kineto.to_export(export), data
    return os.path.normpath(export), data


def resolve(path: str) -> tuple[str, dict | None]:
    """(export, manifest or None) of what the user named: export, manifest, folder or report."""
    path = os.fspath(path)
    if os.path.isdir(path):
        m = os.path.join(path, MANIFEST)
        if os.path.isfile(m):
            return from_manifest(m)
        reports = glob.glob(os.path.join(glob.escape(path), "*" + REPORT_EXT))
        found = sorted(reports + [e for e in glob.glob(os.path.join(glob.escape(path), "*.sqlite"))
                                  if e[: -len(".sqlite")] + REPORT_EXT not in reports])
        if len(found) == 1:
            return resolve(found[0])
        if not found and kineto.is_trace(path):
            return kineto.to_export(path), None
        if found:
            names = ", ".join(os.path.basename(f) for f in found)
            raise InputError(f"{shown(path)}: a folder with {len(found)} candidate captures ({names}); name one")
        raise InputError(f"{shown(path)}: a folder with no {MANIFEST}, .sqlite export, {REPORT_EXT} report or "
                         "PyTorch profiler trace in it")
    if path.endswith(kineto.TRACE_SUFFIXES) and kineto.is_trace_file(path):
        return kineto.to_export(path), None
    if path.endswith(".json"):
        return from_manifest(path)
    if path.endswith(REPORT_EXT):
        return export_report(path), None
    return path, None


def cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "clef-prof")


IDENTITY_TABLE = "CLEF_PROF_REPORT"


def _stamp(export: str, identity: tuple[int, str], report: str | None = None) -> None:
    """Record the report's identity (and its path: analyze.read.nsyspy exports nsys' Python samples
    from it) in its export (a table of one row)."""
    con = sqlite3.connect(export)
    try:
        with con:
            con.execute(f"CREATE TABLE IF NOT EXISTS {IDENTITY_TABLE} (size INTEGER, sha256 TEXT, path TEXT)")
            con.execute(f"DELETE FROM {IDENTITY_TABLE}")
            con.execute(f"INSERT INTO {IDENTITY_TABLE} (size, sha256, path) VALUES (?, ?, ?)", (*identity, report))
    finally:
        con.close()


def _stamped(export: str) -> tuple[int, str] | None:
    """The report identity an export carries; None for an export clef-prof did not make (or not
    a readable SQLite file)."""
    from ...base.safeio import readonly_uri

    try:
        if not stat.S_ISREG(os.stat(export).st_mode):
            return None
        con = sqlite3.connect(readonly_uri(export), uri=True)
        try:
            row = con.execute(f"SELECT size, sha256 FROM {IDENTITY_TABLE}").fetchone()
        finally:
            con.close()
    except (OSError, sqlite3.Error):
        return None
    return (int(row[0]), str(row[1])) if row else None


def _writable_file(path: str) -> bool:
    """Can `path` be (re)written by renaming a new file onto it: absent, or a regular file, in a
    writable folder."""
    folder = os.path.dirname(path)
    if not os.access(folder, os.W_OK):
        return False
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def export_report(report: str) -> str:
    """The SQLite export of an `.nsys-rep`: one beside it or in the cache that carries the
    report's identity, else a new one made with `nsys export` (said in one line on stderr),
    beside the report when clef-prof may write there, else in the cache."""
    import hashlib
    import shlex

    from ...base.nsys import NsysMissing, locate, run_export

    if not os.path.isfile(report):
        raise InputError(f"{shown(report)}: no such file")
    try:
        identity = report_identity(report)
    except OSError as exc:
        raise InputError(f"{shown(report)}: cannot read the report ({exc.strerror or exc})") from None
    stem = os.path.basename(report)[: -len(REPORT_EXT)]
    folder = os.path.dirname(os.path.abspath(report))
    beside = os.path.join(folder, stem + ".sqlite")
    key = hashlib.sha256(os.path.abspath(report).encode()).hexdigest()[:12]
    cached = os.path.join(cache_dir(), f"{stem}-{key}.sqlite")
    for export in (beside, cached):
        if _stamped(export) == identity:
            return export
    # beside the report unless something there is not clef-prof's own export (a user's or
    # record's NAME.sqlite, a folder of that name) or the folder is read-only
    ours = not os.path.lexists(beside) or _stamped(beside) is not None
    out = beside if ours and _writable_file(beside) else cached
    try:
        nsys = locate()
    except NsysMissing as exc:
        raise InputError(f"{shown(report)}: a report must be exported to SQLite first, and "
                         f"{str(exc).split(';')[0]}: run "
                         f"`nsys export --type sqlite -o {shlex.quote(out)} {shlex.quote(report)}`") from None
    try:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if not _writable_file(out):
            raise PermissionError(0, "not writable, or not a regular file")
    except OSError as exc:
        raise InputError(f"{shown(report)}: no place to write its SQLite export: {shown(beside)} "
                         f"{'is not writable' if ours else 'is not an export clef-prof made'}, and the cache "
                         f"{shown(out)} cannot be written ({exc.strerror or exc}); run `nsys export --type sqlite "
                         f"-o OTHER.sqlite {shlex.quote(report)}` and analyze OTHER.sqlite") from None
    tmp = os.path.join(os.path.dirname(out), f".{stem}.{os.getpid()}.tmp.sqlite")
    try:
        failed = run_export(nsys, report, "sqlite", tmp)
        if failed:
            raise InputError(f"{shown(report)}: nsys export failed {failed}")
        try:
            _stamp(tmp, identity, os.path.abspath(report))
            os.replace(tmp, out)
        except (OSError, sqlite3.Error) as exc:
            raise InputError(f"{shown(report)}: cannot write its SQLite export {shown(out)} ({exc})") from None
        print(f"clef-prof: exported {shown(report)} to {shown(out)} with {nsys} (reused while the report is the same file)",
              file=sys.stderr)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out
