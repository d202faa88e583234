"""The row-level tables of one time window of a capture: what a timeline of a few batches draws.

`Analysis.rows` reads every CUDA row of the capture; a picture of a few batches needs the
few hundred rows of their time span. Here the window (rows that overlap [t0, t1]) and the
processes are filtered in SQL, and the rows are placed and paired as `analyze` places and
pairs them, so each row carries the same stage, batch and API kind as in `Analysis.rows`.
"""
from __future__ import annotations

import numpy as np

from . import cuda as cu
from .attribute import Placer
from ..read.columns import Table
from ..read.export import Export
from .stages import Stages

CALL_TABLE = "calls"


def _overlap(t0: int, t1: int) -> str:
    return f'"end" >= {int(t0)} AND start <= {int(t1)}'


def _in(expr: str, values) -> str:
    return f"{expr} IN ({','.join(str(int(v)) for v in values) or 'NULL'})"


def window_rows(cap: Export, stages: Stages, t0: int, t1: int, pks=None) -> dict[str, Table]:
    """`calls`, `transfers`, `kernels` and `gpu_busy` (the columns of `Analysis.rows`) of the rows
    that overlap [t0, t1] ns, of the processes `pks` (process keys, `globalTid >> 24`; None: all;
    a GPU table that records no process is not filtered by process), in table order.

    A GPU row's `slot`, `batch` and `api_kind` come from its launching call wherever that call
    lies (one more query finds the calls that started before the window); its `call` is the
    row of that call in the window's `calls`, -1 when the call lies outside the window or is
    not in the capture."""
    n_slots = len(stages.config.stages) + 2
    lookup, wanted = cu.kind_lut(cap)
    where = _overlap(t0, t1)
    pid = {t: cu.has_pid(cap, t) for t in cu.GPU_TABLES}

    def by_process(cond: str, column: str, has: bool = True) -> str:
        return cond if pks is None or not has else f"{cond} AND {_in(f'({column} >> 24)', pks)}"

    queries = cu.call_queries(cap, wanted, by_process(where, "globalTid"))
    for t in cu.GPU_TABLES:
        queries += cu.gpu_queries(cap, t, device=True, where=by_process(where, "globalPid", pid[t]))
    read = _read(cap, queries)
    place = Placer(stages)
    window = _Calls(read(CALL_TABLE, cu.CALL_COLUMNS), place, lookup)
    gpu = {t: read(t, ["start", "end", "gpid", "corr", "device", *(n for n, _, _ in cu.GPU_TABLES[t])])
           for t in cu.GPU_TABLES}
    found = {t: window.lookup(g, pid[t]) for t, g in gpu.items()}
    # GPU rows whose call started before the window: those calls, read by correlationId
    early = np.unique(np.concatenate([g["corr"][found[t] < 0] for t, g in gpu.items()]))
    queries = cu.call_queries(cap, wanted, _in("correlationId", early)) if len(early) else []
    before = _Calls(_read(cap, queries)(CALL_TABLE, cu.CALL_COLUMNS), place, lookup)

    for t, g in gpu.items():
        call = found[t]
        elsewhere = np.where(call >= 0, -1, before.lookup(g, pid[t]))
        g["call"] = call
        for col, fill, dtype in (("slot", n_slots - 1, np.int64), ("batch", -1, np.int64), ("kind", 0, np.int8)):
            v = np.where(call >= 0, window.of(col, call, fill), before.of(col, elsewhere, fill))
            g["api_kind" if col == "kind" else col] = v.astype(dtype)
    return row_tables(window.table, gpu)


def row_tables(calls: Table, gpu: dict[str, Table]) -> dict[str, Table]:
    """The tables of `Analysis.rows` from the placed calls and the paired GPU tables (by name):
    `kernels` gain `from_graph`, and `gpu_busy` holds every GPU interval with its kind."""
    transfers, kernels, memset, graphs = (gpu[t] for t in (cu.MEMCPY, cu.KERNEL, cu.MEMSET, cu.GRAPH_TRACE))
    kernels["from_graph"] = kernels["api_kind"] == cu.GRAPH
    busy_cols = ("gpid", "start", "end", "slot", "batch")
    parts = [d.select(busy_cols).assign(kind=np.full(len(d), k, dtype=object)) for d, k in
             ((kernels, "kernel"), (transfers, "memcpy"), (memset, "memset"), (graphs, "graph")) if len(d)]
    busy = Table.concat(parts) if parts else Table({**{c: np.zeros(0, np.int64) for c in busy_cols},
                                                    "kind": np.zeros(0, dtype=object)})
    return {CALL_TABLE: calls, "transfers": transfers, "kernels": kernels, "gpu_busy": busy}


def _read(cap: Export, queries: list):
    """Read `queries` on the reader threads; returns `table(name, cols)`: the rows of one table
    (tag "calls" or the GPU table's name), in query order, as a Table of `cols`."""
    chunks: dict[str, list[dict]] = {}
    with cap.stream(queries) as stream:
        for tag, r in stream:
            chunks.setdefault(tag[0], []).append(r)

    def table(name: str, cols: list[str]) -> Table:
        parts = chunks.get(name, [])
        return Table({c: np.concatenate([p[c] for p in parts]) if parts else np.zeros(0, np.int64) for c in cols})
    return table


class _Calls:
    """API calls placed in stages (`table`: calls' columns), indexed on (process, correlationId)."""

    def __init__(self, rows: Table, place: Placer, lookup):
        slot, batch = place(rows["gtid"], rows["start"], rows["end"])
        self.table = Table(start=rows["start"], end=rows["end"], gtid=rows["gtid"], corr=rows["corr"],
                           kind=lookup(rows["nameId"]), slot=slot.astype(np.int64), batch=batch.astype(np.int64))
        self.index = cu.CallIndex()
        self.index.add(rows["corr"], rows["gtid"] >> 24)
        self.index.freeze()

    def lookup(self, gpu: Table, has_pid: bool) -> np.ndarray:
        """The call of each GPU row, -1 when none here."""
        return self.index.lookup(gpu["corr"], gpu["gpid"] >> 24 if has_pid else None)

    def of(self, col: str, call: np.ndarray, fill) -> np.ndarray:
        """Column `col` of each row's call, `fill` where call is -1."""
        v = self.table[col]
        return np.where(call >= 0, v[np.maximum(call, 0)] if len(v) else fill, fill)
