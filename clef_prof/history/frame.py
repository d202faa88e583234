"""A history store as a pandas DataFrame, for notebooks: `clef_prof.history_frame(DB)`.

One row per result and metric (long form: `df.pivot_table(index="time", columns="metric",
values="value")` widens it), in time order: `id`, `time` (UTC Timestamp), `commit`, `branch`,
`host`, `kind`, `series`, `metric`, `unit`, `value`, `exact`, and the change points as trends finds
them: `segment` (0 before the first change point of the series, 1 after it, ...), `level` (the
segment's level) and `change_point` (True at the first result after a change point).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import store, trends

COLUMNS = ["id", "time", "commit", "branch", "host", "kind", "series", "metric", "unit", "value", "exact", "segment",
           "level", "change_point"]


def history_frame(path, *, branch: str | None = None, host: str | None = None, kind: str | None = None,
                  metrics: list[str] | None = None, last: int = trends.LAST, sig_level: float = trends.SIG_LEVEL,
                  seed: int = 0) -> pd.DataFrame:
    """The store at `path` as one long DataFrame (see the module), change points included."""
    rows = store.read_rows(path, branch=branch, host=host, kind=kind)
    h = trends.analyse(str(path), rows, 0, last=last, metrics=metrics, sig_level=sig_level, seed=seed)
    out = []
    for s in h.series:
        bounds = [c.index for c in s.changes]
        levels = ([c.before for c in s.changes] + [s.changes[-1].after]) if s.changes else [None]
        if not s.changes:
            v = s.values
            levels = [float(np.exp(np.log(v).mean())) if s.scale == "log" else float(v.mean())]
        seg = 0
        for i, p in enumerate(s.points):
            start = seg < len(bounds) and i == bounds[seg]
            seg += start
            out.append((p.id, p.time, p.commit, p.branch, p.host, s.kind, s.series, s.metric, s.unit, p.value, s.exact,
                        seg, levels[seg], start))
    df = pd.DataFrame(out, columns=COLUMNS)
    df["time"] = pd.to_datetime(df["time"], utc=True, format="ISO8601")
    return df.sort_values(["time", "id", "metric"], kind="stable").reset_index(drop=True)
