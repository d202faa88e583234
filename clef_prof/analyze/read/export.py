"""Open an Nsight Systems SQLite export read-only and read columns into NumPy arrays.

Three columnar readers. The C reader (`_scan`, built at install where a C compiler and Python's
headers are) steps each query in C without the GIL and hands its integer columns to NumPy without a
copy: as fast as SQLite can decode the values, at every size. Without it, chosen by the export's
size: small exports (below ADBC_BYTES) through the standard library's `sqlite3`, each integer
column aggregated in SQLite into one comma-separated text (`group_concat`) and parsed by NumPy
in C; big ones through ADBC into Arrow when `adbc-driver-sqlite` is installed. All read on
reader threads. The file is opened with `mode=ro&immutable=1`, so SQLite never writes to it, not
even a journal or lock file.
"""
from __future__ import annotations

import os
import re
import sqlite3
import threading
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from types import NoneType
from typing import Iterable, NamedTuple

import numpy as np

from ...base.errors import CaptureError, ClefError, shown
from ...base.safeio import check_regular, readonly_uri

SQLITE_MAGIC = b"SQLite format 3\x00"
# the tables clef-prof reads (upper case): a view of such a name, in any case, is refused; a view of
# another name is the user's and never read (`tables` lists tables only)
READ_TABLES = frozenset({"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                         "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                         "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                         "ANALYSIS_DETAILS", "CLEF_WARNINGS", "COMPOSITE_EVENTS", "DIAGNOSTIC_EVENT", "EXPORT_META_DATA",
                         "META_DATA_CAPTURE", "META_DATA_EXPORT", "NVTX_EVENTS", "OSRT_API", "OSRT_CALLCHAINS",
                         "PROCESSES", "PROCESSSTREAMS", "SAMPLING_CALLCHAINS", "STRINGIDS",
                         "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_SYSTEM_ENV", "THREADNAMES"})
NAME_CHARS = 300            # names (strings, ranges, processes) are cut to this many characters when read
CHUNK_ROWS = 1 << 19        # rowids per window of a streamed table: 4 MB per int64 column at most
BATCH_ROWS = 1 << 19        # rows per Arrow record batch from the ADBC SQLite driver (default 1024)


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (taskset, a container's cpuset), not the
    machine's count, which os.cpu_count() gives (16 on a 16-core host pinned to 2)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):        # no affinity on this platform
        return os.cpu_count() or 1


def _readers() -> int:
    """Reader threads (SQLite runs without the GIL under both readers): $CLEF_PROF_READERS, else
    two (one on one CPU)."""
    raw = os.environ.get("CLEF_PROF_READERS", "").strip()
    if not raw:
        return max(1, min(2, usable_cpus()))
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ClefError(f"CLEF_PROF_READERS={raw!r}: expected a whole number of reader threads, at least 1")
    return n


READERS = _readers()


class Task:
    """What the analyses run on threads of one `parallel.map_captures` call read with: their
    reader threads, and `cancel`, which stops them when the call ends early (a failure, Ctrl-C):
    the reads running on their exports are interrupted, and each analysis raises `Cancelled` at
    its next read."""

    def __init__(self, readers: int):
        self.readers = readers
        self.stop = threading.Event()
        self._open: dict[int, Export] = {}          # id -> export (a dataclass: not hashable)
        self._lock = threading.Lock()

    def opened(self, cap: "Export") -> None:
        with self._lock:
            self._open[id(cap)] = cap
        if self.stop.is_set():
            cap.interrupt_all()

    def closed(self, cap: "Export") -> None:
        with self._lock:
            self._open.pop(id(cap), None)

    def cancel(self) -> None:
        self.stop.set()
        with self._lock:
            caps = list(self._open.values())
        for cap in caps:
            cap.interrupt_all()


TASK: ContextVar[Task | None] = ContextVar("clef_prof_task", default=None)


class Cancelled(ClefError):
    """An analysis stopped because the run it belongs to is ending."""


def readers() -> int:
    """Reader threads for an analysis on this thread: its task's share of the CPUs, else READERS."""
    task = TASK.get()
    return READERS if task is None else task.readers


def check_stopped() -> None:
    """Raise `Cancelled` when this thread's task was told to stop (checked before each read)."""
    task = TASK.get()
    if task is not None and task.stop.is_set():
        raise Cancelled("stopped: the run ended before this capture's analysis")


# exports of this size and more are read through ADBC (its import costs more than it saves below)
ADBC_BYTES = 256 << 20
READER = os.environ.get("CLEF_PROF_READER", "")     # "native", "adbc" or "sqlite" forces one (benchmarks)


class Query(NamedTuple):
    """One columnar read: `tag` travels with the result, for the caller's bookkeeping; `fill`
    names columns the table lacks, each one value for every row (made here, not selected: a
    constant column costs as much to fetch as a real one)."""

    tag: object
    sql: str
    names: list[str]
    dtypes: dict[str, str] | None = None
    fill: dict[str, int] | None = None

    def complete(self, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`cols` with the `fill` columns added."""
        if self.fill:
            n = len(cols[self.names[0]]) if self.names else 0
            for name, value in self.fill.items():
                cols[name] = np.full(n, value, dtype=(self.dtypes or {}).get(name, "int64"))
        return cols

def _native_module():
    """The C reader's module when it was built, else None."""
    try:
        from . import _scan
    except ImportError:
        return None
    return _scan


def _adbc_module():
    """`AdbcConnection` when adbc-driver-sqlite and pyarrow are installed, else None (their
    modules are imported here, on first use: 0.07 s)."""
    try:
        import adbc_driver_manager  # noqa: F401
        import adbc_driver_sqlite  # noqa: F401
        import pyarrow  # noqa: F401
    except Exception:  # pragma: no cover - exercised only without the wheels
        return None
    return AdbcConnection


class AdbcConnection:
    """One ADBC SQLite connection through the driver manager's low-level API. Not the driver's
    DB-API module: that imports pyarrow.dataset, and with it pandas (0.35 s of start-up
    instead of 0.07 s); the statement and Arrow stream calls are the same ones it makes."""

    def __init__(self, uri: str):
        import adbc_driver_manager
        import adbc_driver_sqlite

        self._db = adbc_driver_sqlite.connect(uri)
        self._conn = adbc_driver_manager.AdbcConnection(self._db)

    def arrow_table(self, sql: str):
        """The result of `sql` as one pyarrow Table, in big record batches (a window arrives as
        one batch, and converts without a copy)."""
        import adbc_driver_manager
        import pyarrow as pa

        stmt = adbc_driver_manager.AdbcStatement(self._conn)
        try:
            try:
                stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            except adbc_driver_manager.Error:  # pragma: no cover - an older driver without the option
                pass
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            # the C stream interface, as the driver's DB-API module imports it
            return pa.RecordBatchReader._import_from_c(handle.address).read_all()
        finally:
            stmt.close()

    def close(self) -> None:
        self._conn.close()
        self._db.close()


def check_file(path: str) -> None:
    """Refuse a path that is missing, not SQLite, or shorter than its header says."""
    if not os.path.exists(path):
        raise CaptureError(f"{shown(path)}: no such file")
    if os.path.isdir(path):
        raise CaptureError(f"{shown(path)}: is a directory, not an nsys SQLite export")
    check_regular(path, "nsys SQLite export")
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise CaptureError(f"{shown(path)}: cannot be read ({exc.strerror or exc})") from None
    if len(header) < 100 or header[:16] != SQLITE_MAGIC:
        hint = " (an .nsys-rep? export it with: nsys export --type sqlite FILE)" if path.endswith(".nsys-rep") else ""
        raise CaptureError(f"{shown(path)}: not an SQLite database{hint}")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    change_counter = header[24:28]
    valid_for = header[92:96]
    if pages and change_counter == valid_for and size < pages * page_size:
        raise CaptureError(
            f"{shown(path)}: truncated SQLite file ({size} of {pages * page_size} bytes): "
            "the export or copy did not finish")
    for suffix in ("-journal", "-wal"):
        side = path + suffix
        if os.path.isfile(side) and os.path.getsize(side) > 0:
            raise CaptureError(
                f"{shown(path)}: another process is writing it ({os.path.basename(side)} beside it); read it once that "
                "process has finished, or analyze a copy made after it finished")


@dataclass
class Export:
    """A read-only handle on one export: tables, columns, metadata and columnar queries."""

    path: str
    _conn: sqlite3.Connection = field(repr=False, default=None)
    _adbc: object = field(repr=False, default=None)       # AdbcConnection when ADBC reads this export
    _native: object = field(repr=False, default=None)     # the C reader's module when it reads this export
    _main_conn: object = field(repr=False, default=None)  # the C reader's or ADBC's on the caller's thread
    _local: threading.local = field(repr=False, default_factory=threading.local)
    _pool_conns: list = field(repr=False, default_factory=list)
    _rowid_ranges: dict = field(repr=False, default_factory=dict)
    _task: Task | None = field(repr=False, default=None)   # the map_captures task this export is read for
    memo: dict = field(repr=False, default_factory=dict)     # per-export results of small queries

    def require(self, table: str, columns: Iterable[str], why: str) -> None:
        """Refuse an export whose `table` lacks one of `columns` (renamed or dropped)."""
        have = set(self.columns(table))
        missing = [c for c in columns if c not in have]
        if missing:
            raise CaptureError(f"{self.path}: {table} has no column {', '.join(missing)}: {why}; "
                               "a damaged or edited export")

    @classmethod
    def open(cls, path: str) -> "Export":
        path = os.fspath(path)
        check_file(path)
        try:
            conn = sqlite3.connect(readonly_uri(path), uri=True)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            views = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")
                     if r[0].upper() in READ_TABLES]
        except sqlite3.DatabaseError as exc:
            raise CaptureError(f"{shown(path)}: not a readable SQLite database ({exc})") from None
        except UnicodeDecodeError:      # SQLite's message quotes the damaged schema's bytes
            raise CaptureError(f"{shown(path)}: not a readable SQLite database (malformed schema: bytes that are "
                               "not UTF-8)") from None
        if views:
            conn.close()
            raise CaptureError(f"{shown(path)}: {', '.join(sorted(views)[:3])} "
                               f"{'is a view, not a table' if len(views) == 1 else 'are views, not tables'}: an edited export "
                               "(a view runs whatever query it holds; clef-prof reads tables only)")
        native = _native_module() if READER in ("", "native") else None
        if READER == "native" and native is None:
            conn.close()
            raise ClefError("CLEF_PROF_READER=native: the C reader is not built (pip install needs a C compiler "
                            "and Python's headers)")
        big = native is None and (READER == "adbc" or (READER != "sqlite" and os.path.getsize(path) >= ADBC_BYTES))
        cap = cls(path=path, _conn=conn, _adbc=_adbc_module() if big else None, _native=native, _task=TASK.get())
        if cap._task is not None:
            cap._task.opened(cap)
        return cap

    def close(self) -> None:
        if self._task is not None:
            self._task.closed(self)
        self.interrupt()
        for conn in self._pool_conns:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a C reader connection still reading closes when freed
                pass
        self._pool_conns.clear()
        if self._main_conn is not None:
            self._main_conn.close()
            self._main_conn = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- schema -----------------------------------------------------------------------
    @cached_property
    def tables(self) -> frozenset[str]:
        """The export's tables. A view is not one: nsys writes none, and a view in a table's place
        runs whatever query it holds (an endless recursive one would hang every read)."""
        rows = self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
        return frozenset(r[0] for r in rows)

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        """The table's column names; [] for an absent table (PRAGMA table_info returns no row)."""
        return [r[1] for r in self.rows(f'PRAGMA table_info("{table}")')]

    def rowid_range(self, table: str) -> tuple[int, int] | None:
        """(min, max) rowid of a table, None when empty or absent. Two queries: SQLite answers
        a lone min() or max() of the rowid with one B-tree seek, but both at once with a scan."""
        if table not in self.tables:
            return None
        if table not in self._rowid_ranges:
            lo = self.rows(f'SELECT min(rowid) FROM "{table}"')[0][0]
            hi = self.rows(f'SELECT max(rowid) FROM "{table}"')[0][0]
            self._rowid_ranges[table] = None if lo is None else (int(lo), int(hi))
        return self._rowid_ranges[table]

    def rowid_windows(self, table: str, rows: int | None = None, parts: int | None = None) -> list[str]:
        """WHERE conditions that split a table into consecutive rowid windows (in rowid order,
        which is time order in nsys exports), `rows` rowids each or `parts` windows; by default at
        least one window per reader thread, so that they share even a small table."""
        rng = self.rowid_range(table)
        if rng is None:
            return []
        lo, hi = rng
        n = hi - lo + 1
        parts = max(1, parts if parts is not None else max(readers(), -(-n // (rows or CHUNK_ROWS))))
        step = -(-n // parts)
        return [f"rowid >= {a} AND rowid < {min(a + step, hi + 1)}" for a in range(lo, hi + 1, step)]

    def count(self, table: str, where: str = "") -> int:
        if table not in self.tables:
            return 0
        return int(self.rows(f'SELECT count(*) FROM "{table}" {where}')[0][0])

    # --- metadata ---------------------------------------------------------------------
    @cached_property
    def export_meta(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table):
                return {k: v for k, v in self.rows(f"SELECT name, value FROM {table}")}
        return {}

    @cached_property
    def capture_meta(self) -> dict[str, list[str]]:
        """META_DATA_CAPTURE keys without the `PROCESS_N:` prefix; values in order."""
        out: dict[str, list[str]] = {}
        if self.has("META_DATA_CAPTURE"):
            for k, v in self.rows("SELECT name, value FROM META_DATA_CAPTURE"):
                key = k.split(":", 1)[1] if k.startswith("PROCESS_") and ":" in k else k
                out.setdefault(key, []).append(v)
        return out

    def capture_flag(self, key: str) -> bool | None:
        vals = self.capture_meta.get(key)
        if not vals:
            return None
        return any(str(v).lower() == "true" for v in vals)

    @cached_property
    def nsys_version(self) -> str | None:
        return self.export_meta.get("EXPORT_PRODUCT_VERSION")

    @cached_property
    def schema_version(self) -> str | None:
        return self.export_meta.get("EXPORT_SCHEMA_VERSION")

    @cached_property
    def cuda_driver_version(self) -> int | None:
        """The driver's CUDA version as cuDriverGetVersion encodes it (13000 = 13.0), from
        TARGET_INFO_SYSTEM_ENV `CudaDriverVersion`; None when the export does not hold it."""
        if not (self.has("TARGET_INFO_SYSTEM_ENV") and "name" in self.columns("TARGET_INFO_SYSTEM_ENV")):
            return None
        rows = self.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CudaDriverVersion'")
        vals = [int(v) for (v,) in rows if str(v).strip().isdigit() and int(v) > 0]
        return max(vals) if vals else None

    @cached_property
    def duration_ns(self) -> int | None:
        """Session length (ns from t=0): ANALYSIS_DETAILS.duration."""
        if self.has("ANALYSIS_DETAILS") and "duration" in self.columns("ANALYSIS_DETAILS"):
            row = self.rows("SELECT max(duration) FROM ANALYSIS_DETAILS")
            if row and row[0][0] is not None:
                value = row[0][0]
                if type(value) is not int or value < 0:
                    raise CaptureError(f"{shown(self.path)}: ANALYSIS_DETAILS.duration holds {str(value)[:40]!r}, "
                                       "not a length in ns: a damaged or edited export")
                return value
        return None

    @cached_property
    def strings(self) -> dict[int, str]:
        """StringIds, each cut to NAME_CHARS characters (a hostile export can hold huge names); a
        value stored as a BLOB is read as UTF-8 (bytes that are not become U+FFFD)."""
        if not self.has("StringIds"):
            return {}
        return {int(i): (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v))
                for i, v in self.rows(f"SELECT id, substr(value, 1, {NAME_CHARS}) FROM StringIds")}

    # --- queries ------------------------------------------------------------------------
    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Small queries (metadata, names): plain rows."""
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise CaptureError(f"{self.path}: cannot read ({exc}); the capture may be truncated or corrupt") from None

    def read(self, sql: str, names: list[str], dtypes: dict[str, str] | None = None,
             threaded: bool = False) -> dict[str, np.ndarray]:
        """Run one query and return its columns as NumPy arrays (NULL read as 0 / '').

        Every selected column must be named in `names`, in order. Integer columns should be
        wrapped in COALESCE(..., 0) in `sql` so the Arrow type is stable across batches.
        """
        dtypes = dtypes or {}
        if not threaded:
            check_stopped()
        try:
            return self._read(sql, names, dtypes, threaded)
        except _NotInteger as exc:
            m = re.search(r'\bFROM\s+"?(\w+)', sql)
            raise CaptureError(f"{self.path}: {m.group(1) if m else 'a table'} holds {exc.args[1]} values in integer "
                               f"column {exc.args[0]!r}: a damaged or edited export") from None

    def _read(self, sql: str, names: list[str], dtypes: dict[str, str], threaded: bool) -> dict[str, np.ndarray]:
        if self._native is not None:
            return self._native_read(sql, names, dtypes, threaded)
        try:
            if self._adbc is not None:
                try:
                    table = self._reader_conn(threaded).arrow_table(sql)
                except OSError as exc:
                    # the driver types each column from the first record batch of a query: a
                    # value of another type in a later batch is this error
                    m = _MISMATCH.search(str(exc))
                    if m is None or int(m.group(1)) >= len(names):
                        raise CaptureError(f"{self.path}: cannot read ({_one_line(exc)}); the capture may be "
                                           "truncated or corrupt") from None
                    raise _NotInteger(names[int(m.group(1))], m.group(2).lower()) from None
                out = {}
                for i, name in enumerate(names):
                    col = table.column(i)
                    out[name] = _to_numpy(col, dtypes.get(name), name)
                return out
            conn = self._reader_conn(threaded)
            if not any(dtypes.get(n) == "str" for n in names):
                cols = _concat_read(conn, sql, names, dtypes)
                if cols is not None:
                    return cols
            rows = conn.execute(sql).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:   # the latter: text that is not UTF-8, in Arrow
            raise CaptureError(f"{self.path}: cannot read ({_one_line(exc)}); the capture may be truncated or "
                               "corrupt") from None
        except Exception as exc:
            if type(exc).__module__.startswith(("adbc", "pyarrow")):
                raise CaptureError(f"{self.path}: cannot read ({_one_line(exc)}); the capture may be truncated or corrupt") from None
            raise
        out = {}
        # columns as tuples, and each column's set of value types, made in C
        for name, col in zip(names, zip(*rows) if rows else [()] * len(names)):
            dt = dtypes.get(name, "int64")
            types = set(map(type, col))
            if dt == "str":
                out[name] = np.array(col if types <= {str} else [_text(v) for v in col], dtype=object)
                continue
            if types - {int, NoneType}:
                bad = next((type(v).__name__ for v in col if not isinstance(v, (int, NoneType))), None)
                if bad is not None:
                    raise _NotInteger(name, bad)
            out[name] = np.fromiter([0 if v is None else v for v in col] if NoneType in types else col,
                                    dtype=dt, count=len(col))
        return out

    def _native_read(self, sql: str, names: list[str], dtypes: dict[str, str], threaded: bool) -> dict[str, np.ndarray]:
        scan = self._native
        kinds = "".join("s" if dtypes.get(n) == "str" else "i" for n in names)
        try:
            _, cols = self._reader_conn(threaded).read(sql, kinds, not threaded)
        except scan.Mismatch as exc:
            raise _NotInteger(names[exc.args[0]], exc.args[1]) from None
        except (scan.Error, ValueError) as exc:        # ValueError: a NUL in the SQL text
            raise CaptureError(f"{self.path}: cannot read ({_one_line(exc)}); the capture may be truncated or "
                               "corrupt") from None
        return {name: (np.array(col, dtype=object) if kind == "s" else
                       np.frombuffer(col, dtype=np.int64).astype(dtypes.get(name) or "int64", copy=False))
                for name, kind, col in zip(names, kinds, cols)}

    def interrupt(self) -> None:
        """Stop the reads running on reader threads now (the C reader's and sqlite3's; an ADBC
        read finishes its window)."""
        _interrupt(list(self._pool_conns))

    def interrupt_all(self) -> None:
        """Stop every read running on this export now, the opening thread's too (from another
        thread: `Task.cancel`); an ADBC read on the opening thread finishes its query."""
        _interrupt([*self._pool_conns, self._main_conn, self._conn])

    def stream(self, queries: Iterable[Query], workers: int | None = None) -> "Stream":
        """Read `queries` in order on reader threads, starting now; iterate for (tag, columns)."""
        return Stream(self, queries, readers() if workers is None else workers)

    def _new_conn(self):
        uri = readonly_uri(self.path)
        return (self._native.Conn(uri) if self._native is not None else self._adbc(uri) if self._adbc is not None
                else sqlite3.connect(uri, uri=True, check_same_thread=False))

    def _reader_conn(self, threaded: bool):
        """The connection a columnar read runs on: a reader thread's own (kept per thread, for
        close and interrupt), else the caller's: the C reader's or ADBC's, made on first use, or
        the metadata connection under sqlite3."""
        if threaded:
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = self._new_conn()
                self._pool_conns.append(conn)
            return conn
        if self._native is None and self._adbc is None:
            return self._conn
        if self._main_conn is None:
            self._main_conn = self._new_conn()
        return self._main_conn


def _interrupt(conns: list) -> None:
    """Interrupt each connection that can be (C reader, sqlite3; ADBC's and None cannot)."""
    for conn in conns:
        stop = getattr(conn, "interrupt", None)
        if stop is not None:
            try:
                stop()
            except Exception:  # noqa: BLE001 - closed meanwhile by the thread that owns it: nothing to stop
                pass


class Stream:
    """(tag, columns) of a list of queries, in order, read ahead on `workers` threads (each with
    its own connection) while the caller works on the previous result. Reading starts when the
    stream is made, so the caller can do other work first. At most workers + 1 results wait at
    a time: memory is bounded by the window size whatever the capture size."""

    def __init__(self, cap: Export, queries: Iterable[Query], workers: int):
        self.cap = cap
        self.queries = iter(queries)
        self.workers = workers
        self.pending: deque = deque()
        self.back: list = []
        self.pool = None
        if workers > 1:
            self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="clef-read")
            self._fill()

    def _fill(self) -> None:
        while len(self.pending) <= self.workers:
            q = next(self.queries, None)
            if q is None:
                return
            self.pending.append((q, self.pool.submit(self.cap.read, q.sql, q.names, q.dtypes, True)))

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> tuple[object, dict[str, np.ndarray]]:
        try:
            check_stopped()
        except Cancelled:
            self.close()
            raise
        if self.back:
            return self.back.pop()
        if self.pool is None:
            q = next(self.queries)
            return q.tag, q.complete(self.cap.read(q.sql, q.names, q.dtypes))
        if not self.pending:
            self.close()
            raise StopIteration
        q, fut = self.pending.popleft()
        try:
            res = fut.result()
        except BaseException:
            self.close()
            raise
        self._fill()
        return q.tag, q.complete(res)

    def push_back(self, tag, columns) -> None:
        """Return one result to the front of the stream (read one too many)."""
        self.back.append((tag, columns))

    def close(self) -> None:
        running = [fut for _, fut in self.pending if not fut.cancel()]
        self.pending.clear()
        # reads no one will take: stopped, not waited for (again until they end: a read can start
        # just after an interrupt, which SQLite forgets when no statement runs)
        while self.pool is not None and not all(fut.done() for fut in running):
            self.cap.interrupt()
            wait(running, timeout=0.05)
        self.back.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _concat_read(conn: sqlite3.Connection, sql: str, names: list[str], dtypes: dict[str, str]) -> dict | None:
    """The integer columns of `sql`, each aggregated by SQLite into one text of comma-separated
    values and parsed by NumPy; None when a value is not a plain integer (REAL, text, blob:
    the caller then reads rows, and says which column holds what)."""
    cols = ", ".join(f"c{i}" for i in range(len(names)))
    aggs = ", ".join(f"CAST(group_concat(ifnull(c{i}, 0)) AS BLOB)" for i in range(len(names)))
    n, *texts = conn.execute(f"WITH clef_cols({cols}) AS ({sql}) SELECT count(*), {aggs} FROM clef_cols").fetchone()
    out = {}
    for name, text in zip(names, texts):
        dt = dtypes.get(name) or "int64"
        if n == 0:
            out[name] = np.zeros(0, dtype=dt)
            continue
        # one token per row, digits with at most a leading minus: nothing else parses as a number
        if text.count(b",") != n - 1 or text.translate(None, b"0123456789,-"):
            return None
        if b"-" in text and (b"-," in text or text.endswith(b"-")
                             or text.count(b"-") != text.count(b",-") + text.startswith(b"-")):
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                arr = np.fromstring(text, dtype=np.int64, sep=",")
        except ValueError:
            return None
        if len(arr) != n:
            return None
        out[name] = arr.astype(dt, copy=False)
    return out


_MISMATCH = re.compile(r"Type mismatch in column (\d+): expected \w+ but got ([\w/]+)")


def _text(v) -> str:
    """A value of a text column as the C reader reads it: NULL as '', a blob's bytes as UTF-8
    (U+FFFD where they are not), a number as text."""
    return "" if v is None else v if isinstance(v, str) else v.decode("utf-8", "replace") \
        if isinstance(v, bytes) else str(v)


class _NotInteger(Exception):
    """(column, type): a column read as integers holds other values."""


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def _to_numpy(col, dtype: str | None, name: str = "") -> np.ndarray:
    """An Arrow column as NumPy, NULL as 0 or ''. Read from the Arrow buffers: pyarrow's
    to_numpy() imports pandas (0.3 s), its fill_null() pyarrow.compute."""
    import pyarrow as pa

    if dtype == "str":
        # a null-typed column casts to string as Nones, read as ''
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = col.cast(pa.string())
        return np.array(["" if v is None else v for v in col.to_pylist()], dtype=object)
    target = dtype or "int64"
    if pa.types.is_null(col.type):
        return np.zeros(len(col), dtype=target)
    if not pa.types.is_integer(col.type):       # text or REAL stored in an integer column
        raise _NotInteger(name, str(col.type))
    parts = [_int_values(c) for c in col.chunks]
    arr = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, target)
    return arr.astype(target, copy=False)


def _int_values(chunk) -> np.ndarray:
    """An Arrow integer array's values, NULL as 0 (its data buffer, not copied when it has no NULL)."""
    import pyarrow as pa

    n, off = len(chunk), chunk.offset
    dt = np.dtype(f"{'' if pa.types.is_signed_integer(chunk.type) else 'u'}int{chunk.type.bit_width}")
    validity, data = chunk.buffers()[:2]
    if data is None:
        return np.zeros(n, dt)
    vals = np.frombuffer(data, dtype=dt, count=off + n)[off:]
    if chunk.null_count:
        valid = np.unpackbits(np.frombuffer(validity, np.uint8), count=off + n, bitorder="little")[off:]
        vals = np.where(valid.astype(bool), vals, 0).astype(dt)
    return vals
