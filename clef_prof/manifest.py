"""The manifest `clef-prof record` writes beside each export, and the check analyze makes with it.

`manifest.json` (schema "clef-prof/record/1") holds what is needed to trust and repeat a
capture: the command lines (clef-prof, nsys, the server, the window commands), the nsys and
server versions, the load settings, the window's timestamps (wall clock, ns since the epoch),
the client's completions inside the window with latency percentiles and errors, the server's
own counts when its /stop_profile reports them, the git revision of the working directory
and of clef-prof, and:

- "export": the SQLite export, relative to the manifest's folder (absolute when elsewhere);
- "report": the .nsys-rep; "status": "ok", "server died", "interrupted" or "failed";
- "arm" and "round" when `clef-prof ab` made it.

`check_manifest(result, manifest)` compares an analyze result with it (warnings only).
Standard library only.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SCHEMA = "clef-prof/record/1"
NAME = "manifest.json"
STATUS_OK = "ok"
STATUS_DIED = "server died"
STATUS_INTERRUPTED = "interrupted"
STATUS_FAILED = "failed"


def git_info(path: str) -> dict | None:
    """{"revision", "dirty", "root"} of the git work tree holding `path`, or None."""
    def git(*args):
        p = subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        return p.stdout.strip() if p.returncode == 0 else None
    try:
        rev = git("rev-parse", "HEAD")
        if not rev:
            return None
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"revision": rev, "dirty": bool(status), "root": git("rev-parse", "--show-toplevel"),
                "branch": git("rev-parse", "--abbrev-ref", "HEAD")}
    except (OSError, subprocess.SubprocessError):
        return None


def relative_to(path: str | None, folder: str) -> str | None:
    """`path` relative to `folder` when it lies inside it, else absolute."""
    if path is None:
        return None
    a, f = os.path.abspath(path), os.path.abspath(folder)
    return os.path.relpath(a, f) if a == f or a.startswith(f + os.sep) else a


def write(manifest: dict, folder: str, name: str = NAME) -> str:
    """Write atomically (a crash never leaves half a manifest); returns the path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=folder)
    with os.fdopen(fd, "w") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def read(path: str) -> dict:
    if not os.path.isfile(path):
        raise ValueError(f"{path}: not a regular file")
    with open(path) as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def find_for(export: str) -> str | None:
    """The manifest beside an export: `manifest.json` in its folder naming it (or naming nothing)."""
    folder = os.path.dirname(os.path.abspath(export))
    path = os.path.join(folder, NAME)
    if not os.path.isfile(path):
        return None
    try:
        m = read(path)
    except (OSError, ValueError):
        return None
    named = m.get("export")
    if named and os.path.normpath(os.path.join(folder, named)) != os.path.normpath(os.path.abspath(export)):
        return None
    return path


def capture_span(sqlite_path: str) -> tuple[int, int] | None:
    """(start, duration) in ns of an export's own capture: the wall-clock start of its time base
    (TARGET_INFO_SESSION_START_TIME.utcEpochNs, time 0 of every row) and the capture's length
    (ANALYSIS_DETAILS.duration). None when the export lacks them."""
    import sqlite3
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(sqlite_path)}?mode=ro", uri=True)
        try:
            t0 = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            dur = db.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    if not t0 or not dur or t0[0] is None or dur[0] is None:
        return None
    return int(t0[0]), int(dur[0])


def count_rows(sqlite_path: str, table: str) -> int | None:
    """Rows of `table` in an export; None when the table is missing or the file unreadable."""
    import sqlite3
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(sqlite_path)}?mode=ro", uri=True)
        try:
            return int(db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return None


def python_info() -> dict:
    return {"executable": sys.executable, "version": sys.version.split()[0]}


# --------------------------------------------------------------------------------------------
# the check analyze makes

def edge_tolerance(manifest: dict) -> int:
    """Requests that may be in flight at one window edge: the load's concurrency (at least 1)."""
    load = manifest.get("load") or {}
    c = load.get("concurrency")
    return max(1, int(c)) if isinstance(c, (int, float)) and c else 16


def check_manifest(result: dict, manifest: dict) -> list[str]:
    """Warnings from comparing an analyze result with the capture's record manifest.

    - the capture is not marked "ok" (the server died, the run was interrupted or failed);
    - the requests counted from batch ranges disagree with the client's completions inside the
      window by more than the requests in flight at the two edges (the load's concurrency on
      each edge, the window's opening and closing latency included); when the window ended by
      itself after `max_iterations` engine steps (vLLM's start body or --profiler-config), the
      wall-clock window overstates it, so only the export's own span, or an upper bound, is used;
    - the manifest's export is another file;
    - nsys said, while recording, importing or exporting, that records were lost or misread.
    """
    out: list[str] = []
    said = (manifest.get("nsys") or {}).get("messages") or []
    if said:
        out.append(f"nsys reported while recording or exporting: {' | '.join(said[:5])}"
                   f"{f' (+{len(said) - 5} more)' if len(said) > 5 else ''}; records may be missing")
    status = manifest.get("status", STATUS_OK)
    if status != STATUS_OK:
        why = manifest.get("status_detail") or ""
        out.append(f"the record manifest marks this capture {status!r}{': ' + why if why else ''}; "
                   "its figures cover a partial window")
    exp = manifest.get("export")
    path = result.get("path")
    if exp and path and os.path.basename(str(exp)) != os.path.basename(str(path)):
        out.append(f"the record manifest describes {os.path.basename(str(exp))}, not {os.path.basename(str(path))}")
    client = manifest.get("client") or {}
    inner = (client.get("window") or {}).get("completions")
    outer = (client.get("window_outer") or {}).get("completions", inner)
    in_capture = (client.get("capture") or {}).get("completions")
    req = result.get("requests")
    src = str(result.get("requests_source") or "")
    if req is None or status != STATUS_OK or src == "--requests":
        return out          # nothing counted, a partial capture, or a count given by hand
    tol = edge_tolerance(manifest)
    steps = (manifest.get("window") or {}).get("max_iterations")
    if in_capture is not None:
        # completions inside the export's own time span: off by the requests in flight at each edge
        if abs(req - in_capture) > 2 * tol:
            out.append(f"batch ranges count {req} requests, but the client completed {in_capture} inside the "
                       f"capture's time span: more than the {tol} requests in flight allowed at each edge "
                       "(lost NVTX ranges or CUDA records, or batches not annotated)")
    elif inner is not None and steps:
        hi = (outer if outer is not None else inner) + 2 * tol
        if req > hi:
            out.append(f"batch ranges count {req} requests, but the client completed only {inner} inside the window "
                       f"({outer} counting the window's opening and closing calls), which the profiler's "
                       f"max_iterations={steps} may only shorten: lost client records, or a window that is not the one "
                       "recorded")
    elif inner is not None:
        lo, hi = inner - 2 * tol, (outer if outer is not None else inner) + 2 * tol
        if not lo <= req <= hi:
            out.append(f"batch ranges count {req} requests, but the client completed {inner} inside the window "
                       f"({outer} counting the window's opening and closing calls); more than the {tol} requests "
                       "in flight allowed at each edge: lost NVTX ranges, or a window that is not the one recorded")
    server = manifest.get("server_counts") or {}
    sreq = server.get("requests") if isinstance(server, dict) else None
    mode = (manifest.get("window") or {}).get("mode")
    if isinstance(sreq, int):
        # the server counts between its own start and stop calls: the capture holds at least that
        # much, and with a cudaProfilerApi window exactly that, up to the batches on the edges
        if req < sreq - 2 * tol or (mode == "profiler-api" and req > sreq + 2 * tol):
            out.append(f"batch ranges count {req} requests, but the server counted {sreq} inside its profiling "
                       "window")
    return out
