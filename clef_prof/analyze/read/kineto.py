"""PyTorch profiler (Kineto) traces as captures: `.json`, `.json.gz`, `.json.xz`, `.pt.trace.json.gz`,
or a folder of them (one per process or rank, as vLLM and SGLang write them).

A trace is read once, streaming, into an SQLite file with the tables and columns of an Nsight
Systems export that analyze reads (NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME/KERNEL/MEMCPY/MEMSET,
StringIds, ThreadNames, PROCESSES), kept in the cache folder and reused while the traces are
unchanged, so that analyze, compare, report and `clef_prof.open` run the same pipeline, result
type and JSON contract on it (as for an `.nsys-rep`, exported once to SQLite):

- `user_annotation` events (torch.profiler.record_function, and what clef_prof.stage emits under
  a torch profiler) become ranges: stage and batch names, the batch message `pooler n=K rid=..`
  and request ranges `request rid=ID`; one named `enqueued rid=ID` (what clef_prof.enqueued emits
  under torch: a record_function opened and closed at once) becomes an NVTX mark at its start
  (eventType 34, end NULL), as nsys exports clef_prof.enqueued's mark, so that the journeys of
  analyze read both alike;
- `cuda_runtime`/`cuda_driver` events become API calls; `kernel`, `gpu_memcpy` and `gpu_memset`
  events become GPU records paired with them by the `correlation` arg (an `ac2g` flow's id where
  an event lacks it); H2D/D2H and pageable/pinned come from the memcpy name
  (`Memcpy HtoD (Pageable -> Device)`), bytes from its `bytes` arg;
- `python_function` events (a trace recorded `with_stack=True`) go to the table
  CLEF_PYTHON_FUNCTIONS (start, end, globalTid, nameId, pyId, parentId: their `Python id` and
  `Python parent id` args, made unique per trace file), from which analyze.figures.samples makes the
  per-stage Python view (durations, not samples; docs/sampling.md).

Reading: the decompressed text is read in chunks and the events are decoded one after another by
the standard library's C scanner (`JSONDecoder.scan_once`; an event cut by a chunk's end goes the
careful way, `raw_decode` reading more text); only the events of those categories are kept, as
compact tuples with one copy of each name, so memory is bounded by the chunk size plus the kept
events, not by the trace (benchmarks/bench_kineto.py measures it against `json.load`, ijson and
HTA's parser). Timestamps are decimal
microseconds: they are converted from their text to integer ns exactly (no float rounding), so a
trace written with three decimals (PyTorch >= 2.0) keeps ns precision; one written in whole
microseconds has 1 us precision, said in the capture facts (`source.time_precision`).
"""
from __future__ import annotations

import codecs
import gzip
import json
import lzma
import math
import os
import re
import sqlite3
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field

from ...base.errors import CaptureError

TRACE_SUFFIXES = (".json", ".json.gz", ".json.xz")
XZ_MAGIC = b"\xfd7zXZ\x00"
SOURCE = "kineto"                       # META_DATA_EXPORT CLEF_SOURCE of a converted trace
FORMAT_VERSION = "7"                    # bump when the conversion changes: cached conversions are redone
CHUNK = 4 << 20                         # bytes of decompressed text read at a time
MAX_EVENT = 64 << 20                    # one event larger than this is damage, not a slow read
SNIFF = 4096
RANGE_CATS = frozenset({"user_annotation"})
PY_CAT = "python_function"
# `<built-in method encode_batch of tokenizers.Tokenizer object at 0x7f7b5419d300>`: the address
# differs in every process, so compare would see two functions; the name keeps the type
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>$")
# user annotations that are marks, not ranges (clef_prof.annotate.api.ENQUEUED's message)
MARK_PREFIXES = ("enqueued rid=",)
NVTX_PUSH_POP, NVTX_MARK = 59, 34
API_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
            "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}     # the last three: older traces
# CUPTI's memcpy and memory kind names (as Kineto writes them) -> nsys ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8, "HtoH": 9,
              "PtoP": 10}
MEM_KINDS = {"Pageable": 0, "Pinned": 1, "Device": 2, "Array": 3, "Managed": 4, "Device Static": 5,
             "Managed Static": 6}
_KIND = {**dict.fromkeys(RANGE_CATS, 1), **dict.fromkeys(API_CATS, 2), **dict.fromkeys(GPU_CATS, 3), PY_CAT: 4}
_MEMCPY_NAME = re.compile(r"Memcpy (\w+) \(([\w ]+?) -> ([\w ]+?)\)")
# what a Kineto trace cannot give, and why (capture.source.not_available in the JSON)
NOT_AVAILABLE = {
    "nsys_version": "a PyTorch profiler trace, not an Nsight Systems capture",
    "graph_executions": "Kineto records no CUDA graph-level trace (only the kernels a graph ran)",
}


class TraceError(CaptureError):
    """A Kineto trace that cannot be read: truncated, not JSON, or not a trace."""


# --- what is a trace -------------------------------------------------------------------
def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name != "manifest.json"


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SNIFF)
        if raw[:2] == b"\x1f\x8b":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, SNIFF)
        if raw[:6] == XZ_MAGIC:
            return lzma.LZMADecompressor().decompress(raw, SNIFF)
        return raw
    except (OSError, zlib.error, lzma.LZMAError):
        return b""


def is_trace_file(path: str) -> bool:
    """A `.json`/`.json.gz`/`.json.xz` file that looks like a Chrome/Kineto trace (not a record manifest)."""
    if not (os.path.isfile(path) and _is_trace_name(os.path.basename(path))):
        return False
    if path.endswith((".gz", ".xz")):
        return True
    head = _head(path).lstrip()
    return head.startswith(b"[") or b'"traceEvents"' in head or b'"schemaVersion"' in head or \
        b'"deviceProperties"' in head


def trace_files(path: str) -> list[str]:
    """The trace files a path names: itself, or a folder's `*.json(.gz|.xz)` traces (not recursive)."""
    if os.path.isdir(path):
        found = sorted(os.path.join(path, f) for f in os.listdir(path) if _is_trace_name(f))
        return [f for f in found if is_trace_file(f)]
    return [path] if is_trace_file(path) else []


def is_trace(path: str) -> bool:
    return bool(trace_files(os.fspath(path)))


# --- streaming reader -------------------------------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_SEP = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
_decoder = json.JSONDecoder(parse_float=str)      # decimals stay text: converted to ns exactly


class _Text:
    """Decompressed UTF-8 text of one file, read in chunks; `buf[pos:]` is what is not yet parsed."""

    def __init__(self, path: str):
        self.path = path
        raw = open(path, "rb")
        magic = raw.read(6)
        raw.seek(0)
        self.kind = "gzip" if magic[:2] == b"\x1f\x8b" else "xz" if magic == XZ_MAGIC else None
        if self.kind == "xz":
            self.fh = lzma.LZMAFile(raw, mode="rb")
        else:
            self.fh = gzip.GzipFile(fileobj=raw, mode="rb") if self.kind == "gzip" else raw
        self.raw = raw
        self.dec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.consumed = 0          # characters dropped from the front of buf

    def close(self) -> None:
        self.fh.close()
        self.raw.close()

    def fill(self) -> bool:
        """Read one more chunk; False at the end of the file."""
        if self.eof:
            return False
        try:
            data = self.fh.read(CHUNK)
        except EOFError:
            raise TraceError(f"{self.path}: truncated {self.kind} (the compressed stream ends early): the trace was "
                             "cut off while being written or copied") from None
        except (OSError, zlib.error, lzma.LZMAError) as exc:
            raise TraceError(f"{self.path}: not a readable {self.kind} file ({exc})") from None
        try:
            text = self.dec.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise TraceError(f"{self.path}: not UTF-8 text ({exc.reason} at byte {self.consumed + exc.start})") from None
        if not data:
            self.eof = True
        self.consumed += self.pos
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        return bool(data)

    def skip(self) -> str:
        """Skip white space; the next character ('' at the end)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str, where: str) -> str:
        c = self.skip()
        if c == "" or c not in chars:
            got = "the end of the file" if c == "" else repr(c)
            cut = " (the JSON is cut off)" if c == "" else ""
            raise TraceError(f"{self.path}: expected {' or '.join(map(repr, chars))} {where} at character "
                             f"{self.consumed + self.pos}, found {got}{cut}")
        self.pos += 1
        return c

    def value(self):
        """Decode the JSON value at pos, reading more text while it is incomplete."""
        self.skip()
        while True:
            try:
                v, end = _decoder.raw_decode(self.buf, self.pos)
                if end == len(self.buf) and not self.eof and isinstance(v, (int, str)) and not isinstance(v, bool):
                    raise ValueError        # a number may go on in the next chunk
                self.pos = end
                return v
            except ValueError as exc:
                if self.eof:
                    raise TraceError(f"{self.path}: the JSON is cut off or invalid at character "
                                     f"{self.consumed + self.pos} ({str(exc).split(':')[0]}): a truncated or damaged "
                                     "trace") from None
                if len(self.buf) - self.pos > MAX_EVENT:
                    raise TraceError(f"{self.path}: invalid JSON at character {self.consumed + self.pos} "
                                     f"({str(exc).split(':')[0]})") from None
                self.fill()


def read_events(path: str, on_meta=None):
    """Yield the events of one trace file, streaming. Top-level keys other than traceEvents go to
    `on_meta(key, value)`; a top-level array is the Chrome JSON array format."""
    t = _Text(path)
    try:
        c = t.expect("{[", "at the start of a trace")
        if c == "[":
            yield from _array(t, allow_open=True)
            return
        if t.skip() == "}":
            return
        while True:
            key = t.value()
            if not isinstance(key, str):
                raise TraceError(f"{path}: a top-level key that is not a string at character {t.consumed + t.pos}")
            t.expect(":", f"after the key {key!r}")
            if key == "traceEvents":
                t.expect("[", "to open traceEvents")
                yield from _array(t, allow_open=False)
            else:
                v = t.value()
                if on_meta is not None:
                    on_meta(key, v)
            if t.expect(",}", "between top-level keys") == "}":
                break
        if t.skip() != "":
            raise TraceError(f"{path}: text after the end of the trace at character {t.consumed + t.pos}")
    finally:
        t.close()


def _array(t: _Text, allow_open: bool):
    if t.skip() == "]":
        t.pos += 1
        return
    scan, sep = _decoder.scan_once, _SEP.match
    while True:
        # fast path: events followed by ',' or ']' and more text in the buffer are whole; the C
        # scanner decodes them one after another with no other Python call per event
        t.skip()
        buf, pos, n = t.buf, t.pos, len(t.buf)
        try:
            while True:
                v, end = scan(buf, pos)
                m = sep(buf, end)
                if m is None or m.end() == n:
                    break
                if m.group(1) == "]":
                    t.pos = m.end()
                    yield v
                    return
                pos = m.end()
                yield v
        except (StopIteration, ValueError):     # no value here, or a cut or damaged one
            pass
        # an event cut by the chunk's end, the array's end, or damage: the careful path
        t.pos = pos
        yield t.value()
        c = t.skip()
        if c == "" and allow_open:
            # the Chrome array format may leave the array open; a cut inside an event fails above
            return
        c = t.expect(",]", "between events")
        if c == "]":
            return
        if allow_open and t.skip() == "":
            return


# --- conversion -------------------------------------------------------------------------
_LIMIT = 1 << 62       # beyond it a value is no time, id or size (and sums of two would leave int64)


def _ns(v) -> int | None:
    """Microseconds (int, or the decimal text of a float) to integer ns, exactly; None for what is
    not a finite number of microseconds within int64's reach."""
    ns = _us_to_ns(v)
    return ns if ns is not None and -_LIMIT < ns < _LIMIT else None


def _us_to_ns(v) -> int | None:
    if type(v) is str:
        whole, _, frac = v.partition(".")
        if len(frac) == 3 and frac.isdecimal() and whole.isdecimal():     # Kineto's "123.456": the common case
            return int(whole + frac)
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v * 1000
    if isinstance(v, str):
        whole, dot, frac = v.partition(".")
        if "e" in v or "E" in v:
            from decimal import Decimal, InvalidOperation
            try:
                return int((Decimal(v) * 1000).to_integral_value())
            except (InvalidOperation, ValueError, OverflowError):      # nan, inf
                return None
        try:
            if not dot:
                return int(whole) * 1000
            neg = whole.startswith("-")
            f = (frac + "000")[:3]
            ns = abs(int(whole or "0")) * 1000 + int(f)
            if len(frac) > 3 and frac[3] >= "5":
                ns += 1
            return -ns if neg else ns
        except ValueError:
            return None
    if isinstance(v, float):
        return round(v * 1000) if math.isfinite(v * 1000) else None
    return None


def _frac(v) -> bool:
    return isinstance(v, str) and "." in v


@dataclass
class _File:
    """What one trace file holds of interest, as rows (ts and dur in ns, on the file's clock)."""

    path: str
    meta: dict = field(default_factory=dict)
    ranges: list = field(default_factory=list)      # (ts, end, pid, tid, name)
    calls: list = field(default_factory=list)       # (ts, end, pid, tid, corr, name)
    pyfuncs: list = field(default_factory=list)     # (ts, end, pid, tid, name, python id, python parent id)
    gpu: dict = field(default_factory=lambda: {"kernel": [], "memcpy": [], "memset": []})
    flows_s: dict = field(default_factory=dict)     # (pid, tid, ts) -> flow id: runtime side of ac2g
    flows_f: dict = field(default_factory=dict)     # (pid, tid, ts) -> flow id: GPU side
    threads: dict = field(default_factory=dict)     # (pid, tid) -> name
    processes: dict = field(default_factory=dict)   # pid -> name
    no_ts: int = 0
    no_dur: int = 0
    no_thread: int = 0      # ranges and runtime calls without an integer pid and tid, or a string name
    fractional: bool = False
    events: int = 0
    first: int | None = None
    last: int | None = None
    host_last: int | None = None    # the last end of a host event (range, runtime call, Python function)
    stop: int | None = None         # the end of the profiler's own span, where the trace has one

    @property
    def final(self) -> int | None:
        """The trace's last timestamp, where the profiler's stop closed the ranges still open; None
        in a trace without the profiler's own span (written by hand or by another tool), whose
        last range may well have ended there."""
        if self.stop is None:
            return None
        last = self.host_last if self.host_last is not None else self.last
        return last if last is not None and last >= self.stop else self.stop


def _int(v):
    # the decoder makes no int subclass but bool
    return v if type(v) is int and -_LIMIT < v < _LIMIT else None


def read_file(path: str) -> _File:
    """One trace file's events of interest (streaming)."""
    f = _File(path)
    keep_meta = ("baseTimeNanoseconds", "cuda_driver_version", "cuda_runtime_version", "cupti_version",
                 "schemaVersion", "distributedInfo", "displayTimeUnit")

    def on_meta(key, v):
        if key in keep_meta:
            f.meta[key] = v

    ranges, calls, gpu = f.ranges, f.calls, f.gpu
    names: dict[str, str] = {}
    bare: dict[str, str] = {}       # python_function names without a bound object's address
    for ev in read_events(path, on_meta):
        f.events += 1
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        cat = ev.get("cat")
        if ph == "X":
            kind = _KIND.get(cat, 0) if type(cat) is str else 0
            if not kind:
                if cat == "Trace":          # the profiler's own span ("PyTorch Profiler (0)"): up to its stop
                    ts, dur = _ns(ev.get("ts")), _ns(ev.get("dur"))
                    if ts is not None and dur is not None and dur >= 0 and (f.stop is None or ts + dur > f.stop):
                        f.stop = ts + dur
                continue
            raw_ts = ev.get("ts")
            ts, dur = _ns(raw_ts), _ns(ev.get("dur"))
            if ts is None:
                f.no_ts += 1
                continue
            if dur is None:
                f.no_dur += 1
                continue
            f.fractional = f.fractional or _frac(raw_ts)
            end = ts + dur
            f.first = ts if f.first is None or ts < f.first else f.first
            f.last = end if f.last is None or end > f.last else f.last
            if kind != 3 and (f.host_last is None or end > f.host_last):    # a GPU record's end is no host time
                f.host_last = end
            pid, tid = _int(ev.get("pid")), _int(ev.get("tid"))
            name = ev.get("name")
            name = names.setdefault(name, name) if type(name) is str else ""   # one copy of each name
            args = ev.get("args")
            args = args if isinstance(args, dict) else {}
            if kind in (1, 2) and (pid is None or tid is None or not name):
                f.no_thread += 1
            elif kind == 1:
                ranges.append((ts, end, pid, tid, name))
            elif kind == 2:
                calls.append((ts, end, pid, tid, _int(args.get("correlation")), name))
            elif kind == 4:
                py = _int(args.get("Python id"))
                if pid is not None and tid is not None and py is not None:
                    if " at 0x" in name:        # a built-in's bound object address: one name across processes
                        if name not in bare:
                            bare[name] = _ADDRESS.sub(">", name)
                        name = bare[name]
                    f.pyfuncs.append((ts, end, pid, tid, name, py, _int(args.get("Python parent id"))))
            else:
                table = GPU_CATS[cat]
                dev = _int(args.get("device"))
                dev = dev if dev is not None else pid
                stream = _int(args.get("stream"))
                stream = stream if stream is not None else tid if isinstance(tid, int) else None
                row = (ts, end, dev, stream, _int(args.get("correlation")), pid, tid, name,
                       _int(args.get("bytes")), _int(args.get("graph node id")))
                gpu[table].append(row)
        elif ph in ("s", "f") and cat == "ac2g":
            ts, fid = _ns(ev.get("ts")), _int(ev.get("id"))
            if ts is not None and fid is not None:
                key = (_int(ev.get("pid")), _int(ev.get("tid")), ts)
                (f.flows_s if ph == "s" else f.flows_f)[key] = fid
        elif ph == "M":
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            nm = args.get("name")
            pid, tid = _int(ev.get("pid")), _int(ev.get("tid"))
            if isinstance(nm, str) and pid is not None:
                if ev.get("name") == "thread_name" and tid is not None:
                    f.threads[(pid, tid)] = nm
                elif ev.get("name") == "process_name":
                    f.processes[pid] = nm
    return f


def _base(f: _File) -> int:
    b = f.meta.get("baseTimeNanoseconds")
    return b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else 0


def _runs(files: list[_File]) -> list[list[_File]]:
    """Files grouped by overlapping time windows (on the absolute clock): one group per run."""
    spans = sorted(((_base(f) + f.first, _base(f) + f.last, f) for f in files if f.first is not None),
                   key=lambda s: s[0])
    groups: list[list] = []
    top = None
    for a, b, f in spans:
        if top is None or a > top:
            groups.append([])
            top = b
        groups[-1].append(f)
        top = max(top, b)
    return groups


def convert(paths: list[str], out: str, source: str) -> list[str]:
    """Read the trace files `paths` into a new nsys-schema SQLite file `out`; returns the warnings
    (also stored in the file, table CLEF_WARNINGS, and read by analyze)."""
    files = []
    for p in paths:
        try:
            files.append(read_file(p))
        except RecursionError:          # the JSON decoder recurses per nesting level
            raise TraceError(f"{p}: JSON nested too deeply to be a PyTorch profiler trace") from None
    warnings: list[str] = []
    runs = _runs(files)
    if len(runs) > 1:
        desc = "; ".join(", ".join(os.path.basename(f.path) for f in g) for g in runs)
        raise TraceError(f"{source}: traces of {len(runs)} different runs (their time windows do not overlap: {desc}); "
                         "analyze each run's traces apart")
    empty = [os.path.basename(f.path) for f in files if f.first is None]
    if empty and len(empty) == len(files):
        raise TraceError(f"{source}: no user_annotation, CUDA runtime or GPU event in "
                         f"{len(files)} trace file(s): not a PyTorch profiler trace of a server, or an empty one")
    t0 = min(_base(f) + f.first for f in files if f.first is not None)

    no_ts = sum(f.no_ts for f in files)
    no_dur = sum(f.no_dur for f in files)
    if no_ts:
        warnings.append(f"{no_ts} trace events of interest have no ts (or one that is no finite number of µs "
                        "within int64 ns): a damaged trace; they are left out")
    if no_dur:
        warnings.append(f"{no_dur} complete ('X') trace events of interest have no dur (or one that is no finite "
                        "number of µs within int64 ns): a damaged trace; they are left out")
    no_thread = sum(f.no_thread for f in files)
    if no_thread:
        warnings.append(f"{no_thread} user_annotation or CUDA runtime events have no integer pid and tid, or no "
                        "name: a damaged trace; they are left out")

    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        return _sid(strings, s)

    nvtx, marks, runtime, pyfuncs = [], [], [], []
    gpu = {"kernel": [], "memcpy": [], "memset": []}
    threads, processes = {}, {}
    dup_corr = cut_at_stop = 0
    unknown_copies = unknown_bytes = 0
    fractional = any(f.fractional for f in files)
    for n_file, f in enumerate(files):
        off = _base(f) - t0
        key = n_file << 40           # a trace file's python ids are its own

        def gt(pid, tid):
            return ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)

        final = f.final
        for ts, end, pid, tid, name in f.ranges:
            if name.startswith(MARK_PREFIXES):
                marks.append((ts + off, None, NVTX_MARK, name[:4096], gt(pid, tid)))
            else:
                # a range that ends at the trace's last timestamp was open when the profiler stopped,
                # which closed it there: written open (no end), as nsys exports a range open at the
                # capture's end, so that analyze counts it cut (and its missing stages with it)
                # torch writes an event still open at the stop with dur -1 µs (pytorch#150131), or,
                # before it, with end -1 ns (a dur of minus its start): open, not reversed
                unended = end - ts == -1000 or end < 0
                stopped = final is not None and end >= final and end > ts
                cut_at_stop += stopped or unended
                nvtx.append((ts + off, None if stopped or unended else end + off, NVTX_PUSH_POP, name[:4096],
                             gt(pid, tid)))
        for ts, end, pid, tid, name, py, parent in f.pyfuncs:
            pyfuncs.append((ts + off, end + off, gt(pid, tid), sid(name[:4096]), key | (py & 0xFFFFFFFFFF),
                            None if parent is None else key | (parent & 0xFFFFFFFFFF)))
        # correlation from the ac2g flows where an event lacks the arg
        host_pids = Counter()
        seen: Counter = Counter()
        for ts, end, pid, tid, corr, name in f.calls:
            if corr is None:
                corr = f.flows_s.get((pid, tid, ts))
            host_pids[pid] += 1
            if corr is not None:
                seen[(pid, corr)] += 1
            runtime.append((ts + off, end + off, gt(pid, tid), corr, sid(name)))
        dup_corr += sum(n - 1 for n in seen.values() if n > 1)
        # GPU rows carry the host process of the file (one per trace file, as Kineto writes them)
        gpid = (list(host_pids)[0] & 0xFFFFFF) << 24 if len(host_pids) == 1 else 0
        for table, rows in f.gpu.items():
            for ts, end, dev, stream, corr, pid, tid, name, nbytes, node in rows:
                if corr is None:
                    corr = f.flows_f.get((pid, tid, ts))
                base = (ts + off, end + off, dev, stream, corr, gpid)
                if table == "kernel":
                    gpu[table].append(base + (sid(name), node))
                elif table == "memcpy":
                    m = _MEMCPY_NAME.match(name)
                    if m is None:
                        unknown_copies += 1
                        kind, src, dst = 0, 7, 7
                    else:
                        kind = COPY_KINDS.get(m.group(1), 0)
                        src, dst = MEM_KINDS.get(m.group(2), 7), MEM_KINDS.get(m.group(3), 7)
                    if nbytes is None or nbytes < 0:
                        unknown_bytes += 1
                        nbytes = None
                    gpu[table].append(base + (nbytes, kind, src, dst))
                else:
                    gpu[table].append(base + (nbytes,))
        for (pid, tid), name in f.threads.items():
            threads[gt(pid, tid)] = name
        for pid, name in f.processes.items():
            processes[pid] = name
    if dup_corr:
        warnings.append(f"{dup_corr} CUDA runtime events repeat the (process, correlation) of another: a damaged or "
                        "merged trace; GPU records pair with the first")
    if unknown_copies:
        warnings.append(f"{unknown_copies} gpu_memcpy events have a name that does not say the copy's direction "
                        "('Memcpy HtoD (Pageable -> Device)'): counted as copies of unknown kind")
    if unknown_bytes:
        warnings.append(f"{unknown_bytes} gpu_memcpy events have no valid 'bytes' arg (missing, null, not an "
                        "integer, negative or too large): their bytes are unknown, left out of byte figures")
    if not nvtx:
        warnings.append("the trace holds no user_annotation range: the stages were not annotated for the torch "
                        "profiler (clef_prof.stage/batch emit record_function ranges when torch is imported and its "
                        "profiler is on) or the profiler did not record them; per-stage figures are empty")
    cuda_seen = bool(runtime or any(gpu.values()))
    if not cuda_seen:
        warnings.append("the trace holds no CUDA event: profile with activities=[ProfilerActivity.CPU, "
                        "ProfilerActivity.CUDA] (vLLM and SGLang do)")
    _threads_warning(nvtx, runtime, warnings)

    drv = next((f.meta.get("cuda_driver_version") for f in files if _int(f.meta.get("cuda_driver_version"))), None)
    # the session: the host events and the profiler's own span. A GPU record's end is left out, so
    # that one of absurd length (a damaged trace) lies outside the session and is said, as in nsys
    host = ([e for _, e, *_ in nvtx + runtime + pyfuncs if e is not None] + [t for t, *_ in nvtx + marks] +
            [f.final + _base(f) - t0 for f in files if f.final is not None])
    duration = max(host or [r[1] for v in gpu.values() for r in v]) + 1
    facts = {"format": "kineto", "files": len(files), "file_names": [os.path.basename(f.path) for f in files],
             "events": sum(f.events for f in files),
             "time_precision": "1 ns (decimal microseconds)" if fractional else
             "1 us (the trace holds whole microseconds)",
             "not_available": NOT_AVAILABLE}
    facts["python_functions"] = len(pyfuncs)
    facts["ranges_open_at_stop"] = cut_at_stop
    _write(out, strings, nvtx + marks, runtime, gpu, threads, processes, warnings, facts, drv, duration, cuda_seen,
           source, pyfuncs)
    return warnings


def _threads_warning(nvtx: list, runtime: list, warnings: list[str]) -> None:
    """CUDA work on threads with no range while other threads have ranges: a torch profiler that
    recorded the ranges of some threads only (started after the worker threads, without
    profile_all_threads), so the stage figures would be silently short."""
    if not nvtx or not runtime:
        return
    ranged = {r[4] for r in nvtx}
    by_thread = Counter(r[2] for r in runtime)
    bare = {g: n for g, n in by_thread.items() if g not in ranged}
    if not bare:
        return
    calls = sum(bare.values())
    warnings.append(f"{calls} CUDA runtime calls on {len(bare)} threads with no user_annotation range, while "
                    f"{len(ranged)} other threads have ranges: the torch profiler may have recorded the ranges of "
                    "some threads only (profile with experimental_config=torch.profiler._ExperimentalConfig("
                    "profile_all_threads=True)); the stage figures may be short")


def _write(out, strings, nvtx, runtime, gpu, threads, processes, warnings, facts, drv, duration, cuda_seen,
           source, pyfuncs=()) -> None:
    conn = sqlite3.connect(out)
    try:
        c = conn.cursor()
        c.executescript("""
            PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
            CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
            CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT);
            CREATE TABLE ANALYSIS_DETAILS (duration INTEGER);
            CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL,
                text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER,
                int64Value INTEGER);
            CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
            CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
            CREATE TABLE CLEF_WARNINGS (message TEXT);
        """)
        if cuda_seen:       # no CUDA tables without CUDA events: figures are null, as for a CPU-only capture
            c.executescript("""
            CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
                demangledName INTEGER, shortName INTEGER, graphNodeId INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER,
                copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER);
            """)
        tn = [(_sid(strings, name), g) for g, name in threads.items()]     # names first: StringIds holds them
        c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
        c.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                      [("CLEF_SOURCE", SOURCE), ("CLEF_SOURCE_PATH", source), ("CLEF_FORMAT_VERSION", FORMAT_VERSION),
                       ("CLEF_SOURCE_FACTS", json.dumps(facts))])
        c.execute("INSERT INTO META_DATA_CAPTURE VALUES ('COLLECT_CUDA_TRACE', ?)", ("true" if cuda_seen else "false",))
        c.execute("INSERT INTO META_DATA_CAPTURE VALUES ('COLLECT_NVTX_TRACE', 'true')")
        if drv:
            c.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('CudaDriverVersion', ?)", (str(drv),))
        c.execute("INSERT INTO ANALYSIS_DETAILS VALUES (?)", (duration,))
        nvtx.sort(key=lambda r: r[0])
        c.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                      "VALUES (?, ?, ?, ?, ?, 0)", nvtx)
        runtime.sort(key=lambda r: r[0])
        if cuda_seen:
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)", runtime)
        for table, n in (("kernel", 9), ("memcpy", 10), ("memset", 7)) if cuda_seen else ():
            rows = sorted(gpu[table], key=lambda r: r[0])
            if table == "kernel":
                rows = [r[:6] + (r[6], r[6], r[7]) for r in rows]
            c.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_{table.upper()} VALUES ({', '.join('?' * n)})", rows)
        if pyfuncs:
            c.execute('CREATE TABLE CLEF_PYTHON_FUNCTIONS (start INTEGER NOT NULL, "end" INTEGER NOT NULL, '
                      "globalTid INTEGER, nameId INTEGER, pyId INTEGER, parentId INTEGER)")
            c.executemany("INSERT INTO CLEF_PYTHON_FUNCTIONS VALUES (?, ?, ?, ?, ?, ?)", pyfuncs)
        c.executemany("INSERT INTO ThreadNames VALUES (?, 0, ?)", tn)
        c.executemany("INSERT INTO PROCESSES VALUES (?, ?, ?)",
                      [((p & 0xFFFFFF) << 24, p, name) for p, name in processes.items()])
        c.executemany("INSERT INTO CLEF_WARNINGS VALUES (?)", [(w,) for w in warnings])
        conn.commit()
    finally:
        conn.close()


def _sid(strings: dict, s: str) -> int:
    i = strings.get(s)
    if i is None:
        i = strings[s] = len(strings) + 1
    return i


# --- the converted export, cached -------------------------------------------------------
def _fingerprint(paths: list[str]) -> str:
    """The cache key of a conversion: each trace's path, mtime, size and a hash of its first and
    last MiB (as a report's: a trace edited in place and given its old mtime back is read anew)."""
    import hashlib         # here: 5 ms of OpenSSL start-up that an export's analysis does without

    from .identity import report_identity

    h = hashlib.sha256(FORMAT_VERSION.encode())
    for p in paths:
        st = os.stat(p)
        size, head_tail = report_identity(p)
        h.update(f"{os.path.abspath(p)}\0{size}\0{st.st_mtime_ns}\0{head_tail}\n".encode())
    return h.hexdigest()


def cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "clef-prof", "kineto")


def to_export(path: str, quiet: bool = False) -> str:
    """The nsys-schema SQLite file of a trace or a folder of traces: a cached conversion while
    the trace files are unchanged, else a new one (said in one line on stderr). The input is
    never written to."""
    path = os.fspath(path)
    files = trace_files(path)
    if not files:
        raise TraceError(f"{path}: no PyTorch profiler trace (.json, .json.gz, .json.xz, .pt.trace.json.gz)"
                         f"{' in the folder' if os.path.isdir(path) else ''}")
    key = _fingerprint(files)
    stem = os.path.basename(os.path.normpath(path)).split(".")[0] or "trace"
    name = f"{stem}-{key[:16]}.sqlite"
    out = os.path.join(cache_dir(), name)
    if _whole(out):
        return out
    # a cached file that is not a whole conversion (cut short, overwritten, another program's) is
    # made anew; a cache folder that cannot be written gives way to a temporary folder, said once
    folder, why = os.path.dirname(out), None
    try:
        os.makedirs(folder, exist_ok=True)
        if not os.access(folder, os.W_OK) or (os.path.lexists(out) and not os.path.isfile(out)):
            raise PermissionError(0, "not writable" if os.path.isfile(out) or not os.path.lexists(out)
                                  else f"{name} in it is not a file")
    except OSError as exc:
        why = exc.strerror or str(exc)
    if why is not None:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="clef-prof-kineto-")
        atexit.register(shutil.rmtree, folder, True)
        out = os.path.join(folder, name)
    tmp = os.path.join(folder, f".{stem}.{os.getpid()}.tmp.sqlite")
    try:
        if os.path.exists(tmp):
            os.remove(tmp)
        try:
            warnings = convert(files, tmp, os.path.abspath(path))
            os.replace(tmp, out)
        except (OSError, sqlite3.Error) as exc:
            raise TraceError(f"{path}: cannot write its conversion to {out} ({exc})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    if why is not None:
        print(f"clef-prof: the cache folder {cache_dir()} cannot be written "
              f"({why}): {path} is converted into a temporary file, and read again next time", file=sys.stderr)
    if not quiet:
        print(f"clef-prof: read {len(files)} PyTorch profiler trace file(s) of {path} into {out}"
              f"{f' ({len(warnings)} warning(s))' if warnings else ''}", file=sys.stderr)
    return out


def _whole(out: str) -> bool:
    """Is `out` a whole conversion of this format: a regular file as long as its SQLite header
    says (page size x page count: a file cut short is not), whose META_DATA_EXPORT names this
    source and format version (written by _write, so a file another program left under the name
    is not)."""
    from ...base.safeio import readonly_uri

    try:
        with open(out, "rb") as fh:
            if not os.path.isfile(out):
                return False
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
        if len(head) < 100 or head[:16] != b"SQLite format 3\x00":
            return False
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        if size != page * int.from_bytes(head[28:32], "big"):
            return False
        conn = sqlite3.connect(readonly_uri(out), uri=True)
        try:
            meta = dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT "
                                     "WHERE name IN ('CLEF_SOURCE', 'CLEF_FORMAT_VERSION')").fetchall())
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False
    return meta == {"CLEF_SOURCE": SOURCE, "CLEF_FORMAT_VERSION": FORMAT_VERSION}


def source_facts(cap) -> dict | None:
    """The facts a converted trace stores of itself (format, files, time precision, what is not
    available and why); None for an nsys export. `cap` is an analyze Export."""
    meta = cap.export_meta
    if meta.get("CLEF_SOURCE") != SOURCE:
        return None
    try:
        facts = json.loads(meta.get("CLEF_SOURCE_FACTS") or "{}")
    except ValueError:
        facts = {}
    facts["path"] = meta.get("CLEF_SOURCE_PATH")
    return facts


def warnings_of(cap) -> list[str]:
    """The warnings the conversion raised (stored in the converted file)."""
    if cap.export_meta.get("CLEF_SOURCE") != SOURCE or not cap.has("CLEF_WARNINGS"):
        return []
    return [w for (w,) in cap.rows("SELECT message FROM CLEF_WARNINGS")]
