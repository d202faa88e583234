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
  wall clock; see collected_span and place_span), the completions inside it, and the client's
  bounds on the requests the server handled in it ("requests_inside", "requests_overlapping");
  "clock": how the span was placed on record's clock, and why there are no bounds when the
  placement failed its check.

clef_prof.analyze.read.manifest reads it and holds an analyze result against it (warnings only).
Standard library only.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

from ..base.config import CLOCK_MARK_MESSAGE, MANIFEST as NAME, MANIFEST_SCHEMA as SCHEMA, STATUS_DIED, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_OK  # noqa: F401 - record's names


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


RANGE_TYPES = "59, 60, 70, 71"       # NVTX push/pop and start/end ranges (and their NVTXT forms)


def collected_span(sqlite_path: str) -> tuple[int, int, int, int] | None:
    """(session start, first, last, duration): the wall-clock time of the export's time 0
    (TARGET_INFO_SESSION_START_TIME.utcEpochNs), the start of the first and the end of the last
    NVTX range recorded (within the session), and the session length (ANALYSIS_DETAILS.duration),
    in ns from time 0.

    nsys opens the session (time 0) before the profiled process's NVTX ranges are collected: the
    first came 0.3-10 ms later in 7 recordings on a loaded 2-core machine, and OS-runtime rows
    began up to 6 ms before NVTX ranges did. The batch ranges, which the request count comes
    from, can only be judged over the span in which NVTX ranges were collected: [first, last].
    A request sent after `first` is batched after it, so its batch range was collected unless
    it was lost. None when the export lacks these tables or has no NVTX range."""
    rows = _first_rows(sqlite_path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
                       "SELECT duration FROM ANALYSIS_DETAILS",
                       f'SELECT min(start), max(COALESCE("end", start)) FROM NVTX_EVENTS '
                       f"WHERE start >= 0 AND eventType IN ({RANGE_TYPES})")
    if rows is None:
        return None
    t0, dur, (first, last) = rows
    if not t0 or not dur or t0[0] is None or dur[0] is None or first is None:
        return None
    duration = int(dur[0])
    return int(t0[0]), int(first), min(int(last), duration), duration


CLOCK_NEAR_NS = 1_000_000_000   # the clock marks that place an edge of the span: those this near it
CLOCK_SLACK_NS = 2_000_000      # how far a placed span may cross record's own window before it is refused


def clock_marks(sqlite_path: str) -> list[tuple[int, int]]:
    """(start, wall-clock ns) of each of clef-prof's clock marks in the export (annotate.clock),
    by start; [] when there is none or the export cannot be read."""
    sql = ("SELECT e.start, e.int64Value FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
           "WHERE e.eventType = 34 AND e.start >= 0 AND e.int64Value IS NOT NULL "
           "AND COALESCE(e.text, s.value) = ? ORDER BY e.start")
    rows = _on_export(sqlite_path, lambda db: db.execute(sql, (CLOCK_MARK_MESSAGE,)).fetchall())
    return [(int(a), int(b)) for a, b in rows or ()]


def place_span(t0: int, first: int, last: int, marks: list[tuple[int, int]], lower: int | None,
               upper: int | None) -> tuple[int | None, int | None, dict]:
    """The span [first, last] of the export's clock on this machine's wall clock: (a, b, how).

    With clock marks, each edge is placed by the marks within CLOCK_NEAR_NS of it (all of them
    when none is that near): a mark's
    (wall - start) is the offset of the two clocks less the delay between its two reads, so the
    largest is kept. Without them, by nsys' session start `t0`, a pairing nsys takes once.
    Either way the placed span must lie between `lower` (when record asked for the window) and
    `upper` (when nsys confirmed it had stopped), within CLOCK_SLACK_NS: a span placed outside
    cannot be the one recorded, and (None, None, how) says by how much it missed. The lower edge
    is tight (nsys starts collecting within a fraction of a second of being asked); the upper one
    is seconds loose (nsys confirms after writing its buffers)."""
    if marks:
        def offset(t: int) -> int:
            near = [w - s for s, w in marks if abs(s - t) <= CLOCK_NEAR_NS]
            return max(near or [w - s for s, w in marks])
        oa, ob = offset(first), offset(last)
        a, b = first + oa, last + ob
        how = {"source": "clef-prof clock marks", "marks": len(marks),
               "session_start_error_ms": round((t0 - oa) / 1e6, 3)}
    else:
        a, b = t0 + first, t0 + last
        how = {"source": "nsys session start", "marks": 0}
    early = lower - a if lower is not None else 0
    late = b - upper if upper is not None else 0
    if max(early, late) > CLOCK_SLACK_NS:
        where = (f"begins {early / 1e6:.1f} ms before record asked for the window" if early >= late
                 else f"ends {late / 1e6:.1f} ms after nsys confirmed the window closed")
        how["refused"] = (f"the recorded span, placed on this machine's clock by the {how['source']}, {where}: "
                          "the placement is off by at least that much, so the client's requests are not "
                          "counted inside it")
        return None, None, how
    return a, b, how


def count_rows(sqlite_path: str, table: str) -> int | None:
    """Rows of `table` in an export; None when the table is missing or the file unreadable."""
    rows = _first_rows(sqlite_path, f'SELECT count(*) FROM "{table}"')
    return None if rows is None else int(rows[0][0])


def _first_rows(sqlite_path: str, *queries: str) -> list | None:
    """The first row of each query on the export; None when a table is missing or the file
    unreadable."""
    return _on_export(sqlite_path, lambda db: [db.execute(q).fetchone() for q in queries])


def _on_export(sqlite_path: str, read):
    """read(connection) on the export, opened read-only; None when a table is missing or the
    file unreadable."""
    import sqlite3

    from ..base.safeio import readonly_uri
    try:
        db = sqlite3.connect(readonly_uri(sqlite_path), uri=True)
        try:
            return read(db)
        finally:
            db.close()
    except sqlite3.Error:
        return None


def python_info() -> dict:
    return {"executable": sys.executable, "version": sys.version.split()[0]}


# --------------------------------------------------------------------------------------------
# the check analyze makes
