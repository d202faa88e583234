"""A table of named NumPy columns of one length: what the analyze path uses instead of pandas
(pandas costs 0.2 s to import; the data model builds its frames from these with `frame()`)."""
from __future__ import annotations

import numpy as np


class Table:
    """`t["col"]` is a NumPy array, `t[mask or index]` the selected rows, `len(t)` the rows."""

    __slots__ = ("cols",)

    def __init__(self, cols: dict[str, np.ndarray] | None = None, **more: np.ndarray):
        self.cols = {**(cols or {}), **more}

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.cols[key]
        return Table({k: v[key] for k, v in self.cols.items()})

    def __setitem__(self, key: str, value) -> None:
        self.cols[key] = np.broadcast_to(value, (len(self),)).copy() if np.ndim(value) == 0 else np.asarray(value)

    def __contains__(self, key: str) -> bool:
        return key in self.cols

    def __len__(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.cols)})"

    @property
    def columns(self) -> list[str]:
        return list(self.cols)

    def equals(self, other: "Table") -> bool:
        """The same columns, in order, with the same dtypes and values."""
        return self.columns == other.columns and all(
            a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(self.cols.values(), other.cols.values()))

    def assign(self, **more) -> "Table":
        out = Table(dict(self.cols))
        for k, v in more.items():
            out[k] = v
        return out

    def select(self, names) -> "Table":
        return Table({k: self.cols[k] for k in names})

    @staticmethod
    def concat(parts: list["Table"]) -> "Table":
        """Rows of `parts` one after another (the columns of the first)."""
        names = parts[0].columns
        return Table({k: np.concatenate([p.cols[k] for p in parts]) for k in names})

    def frame(self):
        """The same columns as a pandas DataFrame (imports pandas)."""
        import pandas as pd

        return pd.DataFrame(dict(self.cols))


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in order of appearance, code of each value), as pandas.factorize: for
    work done once per distinct value. The loops run in C (dict, map)."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    return np.array(list(index), dtype=object), codes
