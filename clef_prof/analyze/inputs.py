"""What a user names as a capture, to the SQLite export to read. Shared by analyze, report
and compare. Standard library only (the CLI imports it to build its parser).

- an nsys SQLite export (`*.sqlite`): used as it is (analyze checks it);
- a record manifest (`*.json`): its key "export" names the export, relative to the manifest's
  folder or absolute (or, recorded with --no-export, "report" names the `.nsys-rep`);
- a folder: its `manifest.json`, else its only capture (an `.nsys-rep`, or a `*.sqlite` export
  that is not one's export); several candidates are named in the error;
- a PyTorch profiler (Kineto) trace, `.json`/`.json.gz`, or a folder of them with no manifest:
  read once into an export of the same tables (analyze.kineto), cached;
- an `.nsys-rep` report: exported once with nsys (found as `record` finds it), beside the
  report, or under `$XDG_CACHE_HOME/clef-prof` when that folder is not writable; the export is
  reused while it is newer than the report.
"""
from __future__ import annotations

import glob
import os
import sys

from ..config import MANIFEST
from ..errors import ClefError
from . import kineto
from .manifest import read as read_manifest

REPORT_EXT = ".nsys-rep"


class InputError(ClefError):
    """A path that names no capture: missing manifest or export, an ambiguous folder, a failed export."""


def from_manifest(path: str) -> tuple[str, dict]:
    """(export, manifest) of a record manifest."""
    data = read_manifest(path)
    folder = os.path.dirname(os.path.abspath(path))
    export, report = data.get("export"), data.get("report")
    if not (isinstance(export, str) and export) and isinstance(report, str) and report.endswith(REPORT_EXT):
        return export_report(os.path.normpath(os.path.join(folder, report))), data
    if not isinstance(export, str) or not export:
        raise InputError(f"{path}: the manifest has no \"export\" key naming its SQLite export")
    export = os.path.join(folder, export)
    if not os.path.exists(export):
        raise InputError(f"{path}: its export {export} does not exist")
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
            raise InputError(f"{path}: a folder with {len(found)} candidate captures ({names}); name one")
        raise InputError(f"{path}: a folder with no {MANIFEST}, .sqlite export, {REPORT_EXT} report or PyTorch "
                         "profiler trace in it")
    if path.endswith(kineto.TRACE_SUFFIXES) and kineto.is_trace_file(path):
        return kineto.to_export(path), None
    if path.endswith(".json"):
        return from_manifest(path)
    if path.endswith(REPORT_EXT):
        return export_report(path), None
    return path, None


def cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "clef-prof")


def _fresh(export: str, report: str) -> bool:
    return os.path.isfile(export) and os.path.getmtime(export) >= os.path.getmtime(report)


def export_report(report: str) -> str:
    """The SQLite export of an `.nsys-rep`: an up-to-date one beside it or in the cache, else a
    new one made with `nsys export` (said in one line on stderr)."""
    import hashlib
    import shlex
    import subprocess

    from ..nsys import NsysMissing, locate

    if not os.path.isfile(report):
        raise InputError(f"{report}: no such file")
    stem = os.path.basename(report)[: -len(REPORT_EXT)]
    folder = os.path.dirname(os.path.abspath(report))
    beside = os.path.join(folder, stem + ".sqlite")
    key = hashlib.sha256(os.path.abspath(report).encode()).hexdigest()[:12]
    cached = os.path.join(cache_dir(), f"{stem}-{key}.sqlite")
    for export in (beside, cached):
        if _fresh(export, report):
            return export
    writable = os.access(folder, os.W_OK) and (not os.path.exists(beside) or os.access(beside, os.W_OK))
    out = beside if writable else cached
    try:
        nsys = locate()
    except NsysMissing as exc:
        raise InputError(f"{report}: a report must be exported to SQLite first, and {str(exc).split(';')[0]}: run "
                         f"`nsys export --type sqlite -o {shlex.quote(out)} {shlex.quote(report)}`") from None
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = os.path.join(os.path.dirname(out), f".{stem}.{os.getpid()}.tmp.sqlite")
    try:
        p = subprocess.run([nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={tmp}", report],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
        if p.returncode != 0 or not os.path.isfile(tmp):
            lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
            raise InputError(f"{report}: nsys export failed (exit code {p.returncode}): "
                             f"{lines[-1] if lines else 'no output'}")
        os.replace(tmp, out)
        print(f"clef-prof: exported {report} to {out} with {nsys} (reused while newer than the report)",
              file=sys.stderr)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out
