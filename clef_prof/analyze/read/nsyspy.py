"""nsys' own Python samples (`nsys profile --python-sampling=true`, 2023.4 and later), read from
a JSON export of the report (docs/sampling.md, "nsys' own samples").

The SQLite export holds one NVTX mark per sample (eventType 34, no text) and no table with its
frames (2025.3's NVTX_EVENTS.binaryData column stays NULL for them). `nsys export --type json` of
the same report carries them: each mark's `Payload.BinaryData[0].Data` (base64) is a 16-byte
header, then count x (uint64 function string id, uint64 file string id, uint64 line), innermost
first, the ids indexing the export's string table (its first line, `{"data": [...]}`). Two
layouts, told apart by the domain's name (seen on real recordings, docs/sampling.md):

- 2023.4, domain "Python Backtrace": header uint32 flags, uint32 1, uint32 count, 4 bytes
  padding; the marks lie on nsys' `NSys PySampling` thread and each mark's `Category` is a
  per-Python-thread ordinal (1, 2, ...) that names no OS thread.
- 2025.3, domain "Python Periodic Sampling": header uint32 flags, uint32 0, uint32 kind, uint32
  count; each mark lies on the sampled OS thread itself (its globalTid), with no `Category`.

Where the JSON comes from, for a capture `X.sqlite`: `X.json` beside it when that is an nsys JSON
export (a user's `nsys export --type json`), else a cache of the decoded samples beside it
(`X.nsys-python.npz`, else under $XDG_CACHE_HOME/clef-prof), else an export of the report (`X.nsys-rep`
beside it, or the report that `clef-prof analyze X.nsys-rep` exported it from) made here with nsys,
streamed line by line (only the Type 34 events and their strings kept) and then deleted. A JSON or
a cache is used only when its sample times are the SQLite export's, one for one.
"""
from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from ...base.errors import ClefError, shown
from .export import Export
from .nvtx import MARK_TYPES, domains

DOMAIN = "Python Backtrace"                 # 2023.4: frame count at header word 2, thread by ordinal
DOMAIN_2025 = "Python Periodic Sampling"    # 2025.3: frame count at header word 3, the mark's own thread
COUNT_WORD = {DOMAIN: 2, DOMAIN_2025: 3}
DOMAIN_CREATE = 75
SOURCE = "nsys python sampling"
CACHE_SUFFIX = ".nsys-python.npz"
HEADER = 16                 # bytes before the frames
FRAME = 24                  # bytes per frame
CACHE_VERSION = 2
# statuses of a payload
OK, TRUNCATED, OVERRUN = 0, 1, 2
_STATUS = {TRUNCATED: "shorter than its 16-byte header", OVERRUN: "with a frame count that overruns it"}


class NsysPythonError(ClefError):
    """A JSON export that cannot be read as nsys' (one line, for the user)."""


@dataclass
class Decoded:
    """nsys' Python samples of one capture, decoded: per sample its time (ns, the session's clock),
    Python thread ordinal, flags, status and frames (`first`, `depth` rows of `frames`: function
    and file string ids and line, innermost first); `strings`: the text of every id a frame names."""

    t: np.ndarray               # int64
    category: np.ndarray        # int64: 2023.4's Python-thread ordinal; 2025.3: the sampled thread's globalTid
    flags: np.ndarray           # int64
    status: np.ndarray          # int64: OK, TRUNCATED, OVERRUN
    first: np.ndarray           # int64: the sample's first row in frames
    depth: np.ndarray           # int64: frames stated (a payload that overruns: 0 kept)
    frames: np.ndarray          # int64 (m, 3)
    string_ids: np.ndarray      # int64, sorted
    string_text: list[str]
    sampler_gtid: int
    os_threads: bool = False    # category is the OS thread (2025.3), not an ordinal

    def text(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in string_text, known) of string ids."""
        if not len(self.string_ids):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
        pos = np.minimum(np.searchsorted(self.string_ids, ids), len(self.string_ids) - 1)
        return pos, self.string_ids[pos] == ids


def marks(cap: Export) -> tuple[np.ndarray, int] | None:
    """(sorted times of the sampler's marks, its thread's globalTid) of a capture that holds nsys'
    Python samples; None without them."""
    keys = [(d, p) for d, p, name in domains(cap) if name in COUNT_WORD]
    if not keys:
        return None
    cond = " OR ".join(f"(domainId = {int(d)} AND (globalTid >> 24) = {int(p)})" for d, p in keys if d is not None
                       and p is not None)
    if not cond:
        return None
    types = ", ".join(str(t) for t in MARK_TYPES)
    rows = cap.rows(f"SELECT start, globalTid FROM NVTX_EVENTS WHERE eventType IN ({types}) AND ({cond}) ORDER BY start")
    if not rows:
        return None
    return np.array([r[0] for r in rows], dtype=np.int64), int(rows[0][1])


def asked_hz(cap: Export) -> float | None:
    """The rate asked of nsys' sampler (META_DATA_CAPTURE), None when the export does not say."""
    if not cap.has("META_DATA_CAPTURE"):
        return None
    rows = cap.rows("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PYTHON_BACKTRACE_SAMPLING_OPTIONS:SAMPLING_RATE'")
    try:
        return float(rows[0][0]) if rows else None
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------- the JSON export, streamed

_TYPE34 = re.compile(r'^\{\s*"Type"\s*:\s*34\s*,')
_TYPE75 = re.compile(r'^\{\s*"Type"\s*:\s*75\s*,')


def is_json_export(path: str) -> bool:
    """Whether `path` is a regular file that starts like an nsys JSON export (its string table)."""
    try:
        with open(path, "rb") as fh:
            return os.fstat(fh.fileno()).st_size > 0 and fh.read(16).lstrip().startswith(b'{"data"')
    except OSError:
        return False


def read_json(path: str) -> Decoded:
    """Decode the Python samples of an nsys JSON export, streamed line by line: the string table,
    the domain-create events (Type 75) and the marks (Type 34) with a binary payload; every other
    line is skipped unparsed. Payloads are decoded together (decode)."""
    table: list | None = None
    domain_keys: dict[tuple[int, int], str] = {}
    t, cat, gtid, dom, payloads = [], [], [], [], []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if table is None and line.startswith('{"data"'):
                    table = json.loads(line).get("data")
                    if not isinstance(table, list):
                        raise NsysPythonError(f"{shown(path)}: line {n}: the string table is not a list")
                elif _TYPE34.match(line):
                    ev = json.loads(line).get("NvtxEvent") or {}
                    data = ((ev.get("Payload") or {}).get("BinaryData") or [{}])[0].get("Data")
                    if data is None:
                        continue
                    t.append(int(ev["Timestamp"]))
                    cat.append(int(ev.get("Category", 0)))
                    gtid.append(int(ev["GlobalTid"]))
                    dom.append(int(ev.get("DomainId", 0)))
                    payloads.append(data)
                elif _TYPE75.match(line):
                    ev = json.loads(line).get("NvtxEvent") or {}
                    if ev.get("Text") in COUNT_WORD:
                        domain_keys[(int(ev["GlobalTid"]) >> 24, int(ev.get("DomainId", 0)))] = ev["Text"]
    except OSError as exc:
        raise NsysPythonError(f"{shown(path)}: cannot read the JSON export ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise NsysPythonError(f"{shown(path)}: not an nsys JSON export that can be read (line {n}: {exc})") from None
    if table is None:
        raise NsysPythonError(f"{shown(path)}: no string table (a first line {{\"data\": [...]}}): not an nsys JSON export")
    g = np.array(gtid, dtype=np.int64)
    name = [domain_keys.get((x >> 24, d)) for x, d in zip(gtid, dom)]       # once per sample: a dict lookup
    idx = np.flatnonzero(np.array([n is not None for n in name], dtype=bool)) if gtid else np.zeros(0, np.int64)
    layouts = {name[i] for i in idx.tolist()}
    if len(layouts) > 1:
        raise NsysPythonError(f"{shown(path)}: Python samples in both nsys layouts ({', '.join(sorted(layouts))}): "
                              "not one report's export")
    new = layouts == {DOMAIN_2025}
    category = g[idx] if new else np.array(cat, dtype=np.int64)[idx]
    return decode(np.array(t, dtype=np.int64)[idx], category, [payloads[i] for i in idx.tolist()], table,
                  int(g[idx[0]]) if len(idx) else 0, COUNT_WORD[DOMAIN_2025 if new else DOMAIN], new)


def decode(t: np.ndarray, category: np.ndarray, payloads: list[str], table: list, sampler_gtid: int,
           count_word: int = COUNT_WORD[DOMAIN], os_threads: bool = False) -> Decoded:
    """Decode base64 payloads (the layouts in the module docstring: the frame count at header word
    `count_word`) with NumPy over their concatenation: each payload padded to 8 bytes, headers read
    at once, frames gathered by index."""
    import html

    raw = []
    for p in payloads:              # once per sample: base64 has no vectorised decoder in the standard library
        try:
            raw.append(base64.b64decode(p, validate=False))
        except (ValueError, TypeError):
            raw.append(b"")
    length = np.array([len(r) for r in raw], dtype=np.int64)
    padded = (length + 7) // 8 * 8
    buf = b"".join(r + b"\0" * (-len(r) % 8) for r in raw)
    start = np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64) if len(raw) else np.zeros(0, np.int64)
    u32 = np.frombuffer(buf, dtype="<u4").astype(np.int64)
    u64 = np.frombuffer(buf, dtype="<u8")
    n = len(raw)
    status = np.full(n, OK, dtype=np.int64)
    status[length < HEADER] = TRUNCATED
    hdr = status == OK
    flags = np.zeros(n, np.int64)
    depth = np.zeros(n, np.int64)
    flags[hdr] = u32[start[hdr] // 4]
    depth[hdr] = u32[start[hdr] // 4 + count_word]
    over = hdr & (HEADER + FRAME * depth > length)
    status[over] = OVERRUN
    depth[status != OK] = 0
    first = np.concatenate([[0], np.cumsum(depth)[:-1]]).astype(np.int64) if n else np.zeros(0, np.int64)
    m = int(depth.sum())
    # word index of each frame's first uint64: the sample's start / 8 + 2 + 3 * k
    owner = np.repeat(np.arange(n), depth)
    k = np.arange(m) - first[owner]
    w = start[owner] // 8 + 2 + 3 * k
    frames = np.stack([u64[w], u64[w + 1], u64[w + 2]], axis=1).astype(np.int64) if m else np.zeros((0, 3), np.int64)
    ids = np.unique(frames[:, :2]) if m else np.zeros(0, np.int64)
    ids = ids[(ids >= 0) & (ids < len(table))]
    text = [html.unescape(str(table[i])) for i in ids.tolist()]     # once per distinct string
    return Decoded(t=t, category=category, flags=flags, status=status, first=first, depth=depth, frames=frames,
                   string_ids=ids.astype(np.int64), string_text=text, sampler_gtid=sampler_gtid, os_threads=os_threads)


# ---------------------------------------------------------------- where the samples come from

def _cache_paths(export: str) -> list[str]:
    import hashlib         # here: 5 ms of OpenSSL start-up that an analysis without samples does without

    from .inputs import cache_dir

    stem = os.path.splitext(os.path.basename(export))[0]
    key = hashlib.sha256(os.path.abspath(export).encode()).hexdigest()[:12]
    return [os.path.splitext(export)[0] + CACHE_SUFFIX, os.path.join(cache_dir(), f"{stem}-{key}{CACHE_SUFFIX}")]


def _save(d: Decoded, paths: list[str]) -> str | None:
    """Write the decoded samples to the first writable cache path; None when none is."""
    from .inputs import _writable_file

    for out in paths:
        try:
            os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
            if not _writable_file(out):
                continue
            fd, tmp = tempfile.mkstemp(prefix=".clef-", suffix=".npz", dir=os.path.dirname(out) or ".")
            try:
                with os.fdopen(fd, "wb") as fh:
                    np.savez(fh, version=np.int64(CACHE_VERSION), t=d.t, category=d.category, flags=d.flags,
                             status=d.status, first=d.first, depth=d.depth, frames=d.frames, string_ids=d.string_ids,
                             string_text=np.array(d.string_text, dtype=str), sampler_gtid=np.int64(d.sampler_gtid),
                             os_threads=np.bool_(d.os_threads))
                os.replace(tmp, out)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            return out
        except OSError:
            continue
    return None


def _load(path: str) -> Decoded | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["version"]) != CACHE_VERSION:
                return None
            return Decoded(t=z["t"], category=z["category"], flags=z["flags"], status=z["status"], first=z["first"],
                           depth=z["depth"], frames=z["frames"].reshape(-1, 3), string_ids=z["string_ids"],
                           string_text=[str(s) for s in z["string_text"]], sampler_gtid=int(z["sampler_gtid"]),
                           os_threads=bool(z["os_threads"]))
    except (OSError, ValueError, KeyError, EOFError):
        return None


def _matches(d: Decoded, times: np.ndarray) -> bool:
    return len(d.t) == len(times) and bool(np.array_equal(np.sort(d.t), times))


def _report_of(export: str) -> str | None:
    """The `.nsys-rep` an export came from: beside it with its stem, else the one clef-prof
    exported it from (inputs.export_report records its path)."""
    from .inputs import IDENTITY_TABLE, REPORT_EXT
    from ...base.safeio import readonly_uri

    beside = os.path.splitext(export)[0] + REPORT_EXT
    if os.path.isfile(beside):
        return beside
    try:
        con = sqlite3.connect(readonly_uri(export), uri=True)
        try:
            row = con.execute(f"SELECT path FROM {IDENTITY_TABLE}").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return row[0] if row and isinstance(row[0], str) and os.path.isfile(row[0]) else None


def _export_json(report: str, tmpdir: str) -> str:
    """`nsys export --type json` of a report into tmpdir (the nsys that exports SQLite)."""
    from ...base.nsys import NsysMissing, locate, run_export

    try:
        nsys = locate()
    except NsysMissing as exc:
        raise NsysPythonError(f"{shown(report)}: its Python samples' frames are only in a JSON export, and "
                              f"{str(exc).split(';')[0]}") from None
    out = os.path.join(tmpdir, "report.json")
    failed = run_export(nsys, report, "json", out)
    if failed:
        raise NsysPythonError(f"{shown(report)}: nsys export --type json failed {failed}")
    print(f"clef-prof: read nsys' Python samples from a JSON export of {shown(report)} made with {nsys}",
          file=sys.stderr)
    return out


def load(export: str, times: np.ndarray) -> tuple[Decoded | None, str | None]:
    """(the decoded samples, None) of an export whose sampler marks are at `times`; (None, why)
    when a JSON export or report beside it is not this capture's; (None, None) when there is
    none to read them from (said only where record asked for them: analyze.read.manifest)."""
    beside = os.path.splitext(export)[0] + ".json"
    if is_json_export(beside):
        d = read_json(beside)
        if _matches(d, times):
            return d, None
        mismatch = f"{shown(beside)} holds {len(d.t):,} Python samples, not this capture's {len(times):,} at their times"
    else:
        mismatch = None
    caches = _cache_paths(export)
    for c in caches:
        if os.path.isfile(c):
            d = _load(c)
            if d is not None and _matches(d, times):
                return d, None
    report = _report_of(export)
    if report is None:
        return None, mismatch
    with tempfile.TemporaryDirectory(prefix="clef-nsys-json-") as tmp:
        d = read_json(_export_json(report, tmp))
    if not _matches(d, times):
        return None, f"the JSON export of {shown(report)} holds {len(d.t):,} Python samples, not the capture's {len(times):,}"
    _save(d, caches)
    return d, None
