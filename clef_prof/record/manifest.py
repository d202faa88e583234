"""The manifest `clef-prof record` writes beside each export, and the check analyze makes with it.

`manifest.json` (schema "clef-prof/record/1") holds what is needed to trust and repeat a
capture: the command lines (clef-prof, nsys, the server, the window commands), the nsys and
server versions, the load settings, the window's timestamps (wall clock, ns since the epoch),
the client's completions inside the window with latency percentiles and errors, the server's
own counts when its /stop_profile reports them, the git revision of the working directory
and of clef-prof, and:

- "export": the SQLite export, relative to the manifest's folder (absolute when elsewhere);
- "report": the .nsys-rep; "status": "ok", "server died", "interrupted" or "failed";
- "arm" and "round" when `clef-prof ab` made it;
- "client"/"capture": the span of the export in which the server was recorded ("recorded_ns",
  wall clock; see collected_span), the completions inside it, and the client's bounds on the
  requests the server handled in it ("requests_inside", "requests_overlapping").

`check_manifest(result, manifest)` compares an analyze result with it (warnings only).
Standard library only.
"""
from __future__ import annotations

import json
import os
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
    import subprocess

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


RANGE_TYPES = "59, 60, 70, 71"       # NVTX push/pop and start/end ranges (and their NVTXT forms)


def collected_span(sqlite_path: str) -> tuple[int, int, int, int] | None:
    """(session start, first, last, duration): the wall-clock time of the export's time 0
    (TARGET_INFO_SESSION_START_TIME.utcEpochNs), the first and last timestamps recorded from the
    processes that hold NVTX ranges (NVTX ranges, OS-runtime and CUDA API rows, within the
    session), and the session length (ANALYSIS_DETAILS.duration), in ns from time 0.

    nsys opens the session (time 0) before the profiled process starts collecting: its first
    record came 0.3-10 ms later in 7 recordings on a loaded 2-core machine, and what the server
    did in between is not in the export. [first, last] is the part of the session that the
    server was recorded in.
    None when the export lacks these tables or has no NVTX range."""
    import sqlite3
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(sqlite_path)}?mode=ro", uri=True)
        try:
            t0 = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            dur = db.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()
            pids = [r[0] for r in db.execute(f"SELECT DISTINCT globalTid >> 24 FROM NVTX_EVENTS "
                                             f"WHERE eventType IN ({RANGE_TYPES}) AND globalTid IS NOT NULL")]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not t0 or not dur or t0[0] is None or dur[0] is None or not pids:
                return None
            inlist = ",".join(str(int(p)) for p in pids)
            first, last = [], []
            for table, extra in (("NVTX_EVENTS", f" AND eventType IN ({RANGE_TYPES})"), ("OSRT_API", ""),
                                 ("CUPTI_ACTIVITY_KIND_RUNTIME", "")):
                if table in tables:
                    lo, hi = db.execute(f'SELECT min(start), max("end") FROM {table} WHERE start >= 0 '
                                        f"AND globalTid >> 24 IN ({inlist}){extra}").fetchone()
                    if lo is not None:
                        first.append(lo)
                        last.append(hi if hi is not None else lo)
        finally:
            db.close()
    except sqlite3.Error:
        return None
    if not first:
        return None
    duration = int(dur[0])
    return int(t0[0]), min(first), min(max(last), duration), duration


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
    - the requests counted from batch ranges lie outside the client's bounds for the span in
      which the server was recorded: at least the requests sent and answered inside it, at most
      those whose send-to-answer span meets it (no batch lost, none from another client); the span
      comes from the export, so a window that ended by itself (vLLM's max_iterations) needs no
      special case;
    - the server's own count of its profiling window disagrees;
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
    req = result.get("requests")
    src = str(result.get("requests_source") or "")
    if req is None or status != STATUS_OK or src == "--requests":
        return out          # nothing counted, a partial capture, or a count given by hand
    cap = (manifest.get("client") or {}).get("capture") or {}
    lo, hi = cap.get("requests_inside"), cap.get("requests_overlapping")
    if isinstance(lo, int) and isinstance(hi, int) and not lo <= req <= hi:
        span = cap.get("recorded_s")
        where = f"the {span:.3f} s the server was recorded" if isinstance(span, (int, float)) else "the capture"
        out.append(f"batch ranges count {req} requests, outside the client's bounds for {where}: {lo} requests "
                   f"sent and answered inside it, {hi} in flight during it; " +
                   ("batch ranges were lost (NVTX ranges dropped, or batches not annotated)" if req < lo else
                    "the batch ranges hold requests this client did not send (another client, or a wrong n=K)"))
    server = manifest.get("server_counts") or {}
    sreq = server.get("requests") if isinstance(server, dict) else None
    mode = (manifest.get("window") or {}).get("mode")
    if isinstance(sreq, int):
        # the server counts between its own start and stop calls: the capture holds at least that
        # much, and with a cudaProfilerApi window exactly that, up to the batches on the edges
        tol = edge_tolerance(manifest)
        if req < sreq - 2 * tol or (mode == "profiler-api" and req > sreq + 2 * tol):
            out.append(f"batch ranges count {req} requests, but the server counted {sreq} inside its profiling "
                       "window")
    return out
