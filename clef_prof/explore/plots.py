"""Plots of a capture (matplotlib, Agg): a timeline of consecutive batches, per-stage duration
distributions, and main-vs-PR bars with intervals.

Figures are built with `matplotlib.figure.Figure` and rendered by the Agg canvas: no pyplot
state, no GUI backend, safe in a server or a test. In Jupyter, run `%matplotlib inline` once and
show a figure by leaving it as a cell's last value (or with `display(fig)`).

Every function takes a `clef_prof.explore.frames.Capture` or a path to an export (opened with
`clef_prof.open`, so a path is read once).
"""
from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..base.errors import ClefError
from .style import (BUSY_COLOR, D2H_COLOR, GPU_LANES, GRAPH_COLOR, KERNEL_COLOR, LANE_BATCH, LANE_BUSY,  # noqa: F401
                    LANE_D2H, LANE_GRAPHS, LANE_H2D, LANE_KERNELS, MEMORY_COLORS, OTHER_COLOR, OTHER_MEMORY_COLOR,
                    STAGE_COLORS, TimelineMarks, timeline_title)

__all__ = ["Timeline", "timeline", "stage_durations", "compare_bars", "png_bytes", "png_base64"]


def _capture(cap):
    from .frames import Capture, open as open_capture

    return cap if isinstance(cap, Capture) else open_capture(cap)


def _new_figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes (Agg)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return buf.getvalue()


def png_base64(fig: Figure, dpi: int = 110) -> str:
    return base64.b64encode(png_bytes(fig, dpi)).decode("ascii")


# ------------------------------------------------------------------------------------------
# timeline


@dataclass
class Timeline(TimelineMarks):
    """What `timeline` drew, so that a test or a notebook can check the picture against the data.

    marks: lane -> marks drawn for work launched inside the plotted batches (one mark per GPU
    record: H2D/D2H copy records, kernel records, graph executions or graph launch calls, busy
    intervals). other_marks: records in the window that belong to no plotted batch (drawn grey):
    GPU records launched elsewhere, stage instances of neighbouring batches.
    per_batch: one row per plotted batch (batch, size, h2d_marks, h2d_copies, d2h_marks, kernels).
    zoom: None, or a dict describing the zoom panel (batch, size, stage, h2d_marks).
    lane_y: the y of each lane's centre in `ax` (lanes are 1 apart, marks span +-0.35).
    """

    figure: Figure
    ax: object
    batches: list[int]
    requests: int
    t0_ns: int
    lanes: list[str]
    marks: dict[str, int]
    other_marks: dict[str, int]
    per_batch: pd.DataFrame
    h2d_copies: int = 0
    zoom_ax: object = None
    zoom: dict | None = None
    notes: list[str] = field(default_factory=list)
    lane_y: dict[str, float] = field(default_factory=dict)

    def savefig(self, path, dpi: int = 110, **kw) -> None:
        self.figure.savefig(path, dpi=dpi, facecolor="white", **kw)

    def _repr_png_(self) -> bytes:
        return png_bytes(self.figure)


def _in_window(df: pd.DataFrame, t0: int, t1: int, pids) -> pd.DataFrame:
    if len(df) == 0:
        return df
    m = (df["end_ns"].to_numpy() >= t0) & (df["start_ns"].to_numpy() <= t1)
    if pids is not None and "pid" in df:
        m &= np.isin(df["pid"].to_numpy(), list(pids))
    return df[m]


def _pick_thread(b: pd.DataFrame, thread) -> pd.DataFrame:
    if len(b) == 0:
        return b
    if thread is None:
        counts = b.groupby(["pid", "tid"]).size()
        pid, tid = counts.idxmax()
        return b[(b["pid"] == pid) & (b["tid"] == tid)]
    if isinstance(thread, str):
        sub = b[b["thread"] == thread]
    else:
        sub = b[b["tid"] == int(thread)]
    if len(sub) == 0:
        raise ClefError(f"no batch range on thread {thread!r} (threads with batches: "
                        f"{', '.join(sorted({f'{t} ({n})' for t, n in zip(b['tid'], b['thread'])}))})")
    return sub


def timeline(cap, first: int = 0, n: int = 4, *, thread=None, zoom: bool = True, width: float = 14.0,
             title: str | None = None) -> Timeline:
    """A timeline of `n` consecutive batches of one thread, from its `first` batch (0-based).

    Host lanes: the batch ranges (labelled with size and H2D copies per request), then one lane
    per stage. GPU lanes (with CUDA): H2D copies and D2H copies (one tick per copy record,
    coloured by host memory kind: pageable red, pinned green), kernels, graphs (GRAPH_TRACE
    executions, or the graph launch calls when the capture has no GPU record of graphs), and the
    union of all GPU work. GPU work launched outside the plotted batches is grey. Dashed lines
    mark batch boundaries. x is ms from the first plotted batch's start.

    `zoom` adds a panel under the timeline: the stage with the most H2D copies in the smallest
    plotted batch, where every copy stands apart and is numbered. `thread` picks the thread by
    tid or name (default: the one with most batches).
    """
    cap = _capture(cap)
    allb = _pick_thread(cap.batches, thread)
    if len(allb) == 0:
        raise ClefError(f"{cap.name}: no {cap.config.batch!r} batch ranges to plot")
    if first < 0:
        first = max(len(allb) + first, 0)
    sel = allb.iloc[first:first + max(int(n), 1)]
    if len(sel) == 0:
        raise ClefError(f"{cap.name}: batch {first} is past the last batch ({len(allb)} on that thread)")
    bset = set(int(x) for x in sel["batch"])
    t0, t1 = int(sel["start_ns"].min()), int(sel["end_ns"].max())
    pad = max((t1 - t0) // 50, 1000)
    w0, w1 = t0 - pad, t1 + pad
    pids = set(int(p) for p in sel["pid"])
    x = lambda t: (np.asarray(t, dtype=np.float64) - t0) / 1e6  # noqa: E731

    stages = list(cap.stage_names)
    cuda = cap.cuda_traced
    lanes = [LANE_BATCH, *stages] + (list(GPU_LANES) if cuda else [])
    y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}      # top to bottom
    h = 0.7

    height = 0.42 * len(lanes) + 1.6
    fig = _new_figure(width, height + (2.6 if zoom and cuda else 0))
    if zoom and cuda:
        gs = fig.add_gridspec(2, 1, height_ratios=[height, 2.6])
        ax = fig.add_subplot(gs[0])
        zax = fig.add_subplot(gs[1])
    else:
        ax, zax = fig.add_subplot(), None

    marks = {name: 0 for name in lanes}
    other: dict[str, int] = {name: 0 for name in GPU_LANES} if cuda else {}
    notes: list[str] = []

    # GPU rows of the window, split into the plotted batches' own work and the rest
    tr = _in_window(cap.transfers, w0, w1, pids)
    own_tr = np.isin(tr["batch"].to_numpy(), list(bset)) if len(tr) else np.zeros(0, bool)

    # host: batch ranges
    per_rows = []
    for _, r in sel.iterrows():
        b = int(r["batch"])
        m_b = (tr["batch"].to_numpy() == b) if len(tr) else np.zeros(0, bool)
        d = tr["direction"].astype(str).to_numpy() if len(tr) else np.zeros(0, object)
        h2d_rows = int((m_b & (d == "H2D")).sum())
        h2d_n = int(tr["copies"].to_numpy()[m_b & (d == "H2D")].sum()) if len(tr) else 0
        d2h_rows = int((m_b & (d == "D2H")).sum())
        size = int(r["size"])
        per_rows.append({"batch": b, "size": size, "h2d_marks": h2d_rows, "h2d_copies": h2d_n, "d2h_marks": d2h_rows})
        xs, xe = x(r["start_ns"]), x(r["end_ns"])
        ax.broken_barh([(xs, xe - xs)], (y[LANE_BATCH] - h / 2, h), facecolors="#e8e8e8", edgecolors="#444444",
                       linewidth=0.8)
        label = f"#{b}  n={size}"
        if cuda:
            per = f"{h2d_rows / size:.1f}/req" if size else "—/req"
            label += f"\n{h2d_rows} H2D ({per})"
        ax.text((xs + xe) / 2, y[LANE_BATCH], label, ha="center", va="center", fontsize=7, clip_on=True)
        marks[LANE_BATCH] += 1
        for lane_x in (xs, xe):
            ax.axvline(lane_x, color="#999999", linestyle=(0, (3, 3)), linewidth=0.6, zorder=0)

    # host: stage instances of the plotted batches (and any free instance in the window)
    st = cap.stages
    st = st[(st["end_ns"].to_numpy() >= w0) & (st["start_ns"].to_numpy() <= w1)
            & np.isin(st["pid"].to_numpy(), list(pids)) & np.isin(st["tid"].to_numpy(), list(sel["tid"]))]
    st_own = np.isin(st["batch"].to_numpy(), list(bset))
    for code, name in enumerate(stages):
        m_st = (st["stage"] == name).to_numpy()
        for sel_m, color in ((m_st & st_own, STAGE_COLORS[code % len(STAGE_COLORS)]), (m_st & ~st_own, OTHER_COLOR)):
            sub = st[sel_m]
            if len(sub):
                xs = x(sub["start_ns"].to_numpy())
                ax.broken_barh(list(zip(xs, x(sub["end_ns"].to_numpy()) - xs)), (y[name] - h / 2, h),
                               facecolors=color, edgecolors="none")
        marks[name] += int((m_st & st_own).sum())
        if (m_st & ~st_own).any():
            other[name] = other.get(name, 0) + int((m_st & ~st_own).sum())

    def ticks(df, lane, color_of, own):
        """One tick spanning the lane per record, plus a bar of the record's true length."""
        if len(df) == 0:
            return
        xs, xe = x(df["start_ns"].to_numpy()), x(df["end_ns"].to_numpy())
        cols = np.array([color_of(i) if own[i] else OTHER_COLOR for i in range(len(df))], dtype=object)
        ax.vlines(xs, y[lane] - h / 2, y[lane] + h / 2, colors=list(cols), linewidth=0.9)
        ax.broken_barh(list(zip(xs, xe - xs)), (y[lane] - h / 4, h / 2), facecolors=list(cols), edgecolors="none")
        marks[lane] += int(own.sum())
        other[lane] += int((~own).sum())

    def bars(df, lane, color):
        """GPU records as bars of their true length: the plotted batches' in `color`, others grey."""
        own = np.isin(df["batch"].to_numpy(), list(bset))
        xs, xe = x(df["start_ns"].to_numpy()), x(df["end_ns"].to_numpy())
        for sel_m, c in ((own, color), (~own, OTHER_COLOR)):
            if sel_m.any():
                ax.broken_barh(list(zip(xs[sel_m], (xe - xs)[sel_m])), (y[lane] - h / 2, h),
                               facecolors=c, edgecolors=c, linewidth=0.4)
        marks[lane] += int(own.sum())
        other[lane] += int((~own).sum())

    if cuda:
        d = tr["direction"].astype(str).to_numpy()
        mem = tr["memory"].astype(str).to_numpy()
        for lane, dname, fixed in ((LANE_H2D, "H2D", None), (LANE_D2H, "D2H", D2H_COLOR)):
            m = d == dname
            sub, mm, ow = tr[m], mem[m], own_tr[m]
            ticks(sub, lane, (lambda i, mm=mm: MEMORY_COLORS.get(mm[i], OTHER_MEMORY_COLOR)) if fixed is None
                  else (lambda i, c=fixed: c), ow)

        k = _in_window(cap.kernels, w0, w1, pids)
        if len(k):
            bars(k, LANE_KERNELS, KERNEL_COLOR)

        busy = _in_window(cap.gpu_busy, w0, w1, pids)
        g = busy[busy["kind"] == "graph"] if len(busy) else busy
        if len(g):
            bars(g, LANE_GRAPHS, GRAPH_COLOR)
        else:
            gl = _in_window(cap.launches, w0, w1, pids)
            gl = gl[gl["kind"] == "graph"] if len(gl) else gl
            if len(gl):
                own = np.isin(gl["batch"].to_numpy(), list(bset))
                xs = x(gl["start_ns"].to_numpy())
                for sel_m, color in ((own, GRAPH_COLOR), (~own, OTHER_COLOR)):
                    if sel_m.any():
                        ax.plot(xs[sel_m], np.full(int(sel_m.sum()), y[LANE_GRAPHS]), linestyle="none", marker="v",
                                markersize=6, markerfacecolor="none", markeredgecolor=color, markeredgewidth=1.0)
                marks[LANE_GRAPHS] += int(own.sum())
                other[LANE_GRAPHS] += int((~own).sum())
                notes.append("graphs: launch calls (the capture has no GPU record of graph executions)")

        if len(busy):
            from ..analyze.figures.intervals import union

            us, ue = union(np.maximum(busy["start_ns"].to_numpy(), w0), np.minimum(busy["end_ns"].to_numpy(), w1))
            xs = x(us)
            ax.broken_barh(list(zip(xs, x(ue) - xs)), (y[LANE_BUSY] - h / 2, h), facecolors=BUSY_COLOR,
                           edgecolors=BUSY_COLOR, linewidth=0.4)
            marks[LANE_BUSY] += len(us)
            del other[LANE_BUSY]

        kb = k["batch"].to_numpy() if len(k) else np.zeros(0, np.int64)
        for row in per_rows:
            row["kernels"] = int((kb == row["batch"]).sum())

    # axes
    graph_calls = any(s.startswith("graphs: launch calls") for s in notes)
    labels = []
    for name in lanes:
        if name == LANE_BATCH:
            labels.append(f"{cap.config.batch} (batch)")
        elif name == LANE_GRAPHS and graph_calls:
            labels.append("graphs (launch calls)")
        else:
            labels.append(name)
    ax.set_yticks([y[nm] for nm in lanes], labels)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    if cuda:
        ax.axhline(y[stages[-1]] - 0.5 if stages else y[LANE_BATCH] - 0.5, color="#333333", linewidth=0.8)
    ax.set_xlim(x(w0), x(w1))
    ax.set_xlabel(f"ms from the start of batch #{int(sel['batch'].iloc[0])} "
                  f"(t0 = {t0 / 1e6:.3f} ms into the session)")
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    ax.set_axisbelow(True)
    requests = int(sel["size"].sum())
    ax.set_title(timeline_title(cap.name, int(sel["batch"].iloc[0]), int(sel["batch"].iloc[-1]), len(sel), requests,
                                marks.get(LANE_H2D, 0), cuda, title), fontsize=10, loc="left")
    handles = [Patch(facecolor=STAGE_COLORS[i % len(STAGE_COLORS)], label=s) for i, s in enumerate(stages)]
    if cuda:
        handles += [Line2D([], [], color=MEMORY_COLORS["pageable"], label="H2D from pageable"),
                    Line2D([], [], color=MEMORY_COLORS["pinned"], label="H2D from pinned"),
                    Line2D([], [], color=D2H_COLOR, label="D2H"),
                    Patch(facecolor=KERNEL_COLOR, label="kernel"),
                    (Line2D([], [], color=GRAPH_COLOR, marker="v", linestyle="none", markerfacecolor="none",
                            label="graph launch call") if graph_calls else Patch(facecolor=GRAPH_COLOR,
                                                                                 label="graph execution")),
                    Patch(facecolor=OTHER_COLOR, label="other batches / outside")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
    if not cuda:
        notes.append("CUDA not traced: host lanes only")

    zinfo = None
    if zax is not None:
        zinfo = _zoom(cap, zax, sel, tr, own_tr, t0)

    per_batch = pd.DataFrame(per_rows)
    h2d_n = int(per_batch["h2d_copies"].sum()) if len(per_batch) else 0
    return Timeline(fig, ax, [int(b) for b in sel["batch"]], requests, t0, lanes, marks, other, per_batch,
                    h2d_n, zax, zinfo, notes, {k: float(v) for k, v in y.items()})


def _zoom(cap, zax, sel: pd.DataFrame, tr: pd.DataFrame, own_tr: np.ndarray, t0: int) -> dict | None:
    """Zoom on the stage holding most H2D copies in the smallest plotted batch."""
    d = tr["direction"].astype(str).to_numpy() if len(tr) else np.zeros(0, object)
    h2d = tr[(d == "H2D") & own_tr] if len(tr) else tr
    cand = sel[sel["size"] > 0]
    if len(h2d) == 0 or len(cand) == 0:
        zax.set_axis_off()
        zax.text(0.5, 0.5, "no H2D copies in the plotted batches", ha="center", va="center", transform=zax.transAxes)
        return None
    cand = cand[cand["batch"].isin(h2d["batch"])]
    if len(cand) == 0:
        zax.set_axis_off()
        return None
    row = cand.sort_values(["size", "start_ns"]).iloc[0]
    b = int(row["batch"])
    mine = h2d[h2d["batch"] == b]
    stage = mine["stage"].astype(str).value_counts().idxmax()
    inst = cap.stages
    inst = inst[(inst["batch"] == b) & (inst["stage"].astype(str) == stage)]
    if len(inst):
        z0, z1 = int(inst["start_ns"].min()), int(inst["end_ns"].max())
    else:
        z0, z1 = int(mine["call_start_ns"].min()), int(mine["end_ns"].max())
    z0, z1 = min(z0, int(mine["start_ns"].min())), max(z1, int(mine["end_ns"].max()))
    pad = max((z1 - z0) // 25, 200)
    zx = lambda t: (np.asarray(t, dtype=np.float64) - t0) / 1e6  # noqa: E731
    codes = list(cap.stage_names)
    color = STAGE_COLORS[codes.index(stage) % len(STAGE_COLORS)] if stage in codes else OTHER_COLOR
    ylab = {stage: 2, "memcpy calls": 1, LANE_H2D: 0}
    if len(inst):
        xs = zx(inst["start_ns"].to_numpy())
        zax.broken_barh(list(zip(xs, zx(inst["end_ns"].to_numpy()) - xs)), (2 - 0.35, 0.7), facecolors=color)
    calls = cap.api_calls
    calls = calls[(calls["batch"] == b) & (calls["stage"].astype(str) == stage) & (calls["kind"] == "memcpy")]
    if len(calls):
        xs = zx(calls["start_ns"].to_numpy())
        zax.broken_barh(list(zip(xs, zx(calls["end_ns"].to_numpy()) - xs)), (1 - 0.3, 0.6), facecolors="#999999")
    mine = mine.sort_values("start_ns")
    xs, xe = zx(mine["start_ns"].to_numpy()), zx(mine["end_ns"].to_numpy())
    cols = [MEMORY_COLORS.get(m, OTHER_MEMORY_COLOR) for m in mine["memory"].astype(str)]
    zax.vlines(xs, -0.35, 0.35, colors=cols, linewidth=1.4)
    zax.broken_barh(list(zip(xs, xe - xs)), (-0.2, 0.4), facecolors=cols)
    if len(mine) <= 60:
        for i, xv in enumerate(xs):
            zax.text(xv, 0.42, str(i + 1), ha="center", va="bottom", fontsize=7)
    zax.set_yticks(list(ylab.values()), [f"{stage} (host)", "memcpy calls (host)", "H2D copies (GPU)"])
    zax.set_ylim(-0.6, 2.6)
    zax.set_xlim(zx(z0 - pad), zx(z1 + pad))
    zax.set_xlabel("ms (same origin as above)")
    size = int(row["size"])
    kinds = ", ".join(sorted(set(mine["memory"].astype(str))))
    zax.set_title(f"zoom: batch #{b} (n={size}), stage {stage}: {len(mine)} H2D copies ({kinds}) = "
                  f"{len(mine) / size:.1f} per request", fontsize=9, loc="left")
    zax.grid(axis="x", color="#eeeeee", linewidth=0.6)
    zax.set_axisbelow(True)
    return {"batch": b, "size": size, "stage": stage, "h2d_marks": int(len(mine))}


# ------------------------------------------------------------------------------------------
# distributions


def stage_durations(cap, *, per_request: bool = False, log: bool = True, width: float = 10.0) -> Figure:
    """Per-stage host time per batch (each stage's instances in a batch summed), as box plots
    with every batch as a point; the batch range itself last. `per_request` divides each batch's
    figure by its size. Without batch ranges, stage instances are plotted one by one."""
    cap = _capture(cap)
    b = cap.batches
    stages = list(cap.stage_names)
    series: list[tuple[str, np.ndarray]] = []
    if len(b) and all(f"{s}_ns" in b for s in stages):
        size = b["size"].to_numpy().astype(np.float64)
        div = np.where(size > 0, size, np.nan) if per_request else np.ones(len(b))
        for s in stages:
            series.append((s, b[f"{s}_ns"].to_numpy() / 1e6 / div))
        series.append((f"{cap.config.batch} (batch)", b["duration_ns"].to_numpy() / 1e6 / div))
        unit = "ms per request (batch figure / batch size)" if per_request else "ms per batch"
    else:
        st = cap.stages
        for s in stages:
            series.append((s, st.loc[st["stage"] == s, "duration_ms"].to_numpy()))
        unit = "ms per stage instance"
    series = [(n, v[np.isfinite(v) & (v > 0 if log else np.isfinite(v))]) for n, v in series]
    fig = _new_figure(width, 0.5 * len(series) + 1.4)
    ax = fig.add_subplot()
    data = [v if len(v) else np.array([np.nan]) for _, v in series]
    pos = np.arange(len(series))[::-1]
    bp = ax.boxplot(data, positions=pos, orientation="horizontal", widths=0.6, showfliers=False,
                    patch_artist=True, medianprops={"color": "black"})
    for i, patch in enumerate(bp["boxes"]):
        patch.set_facecolor(STAGE_COLORS[i % len(STAGE_COLORS)] if i < len(stages) else "#dddddd")
        patch.set_alpha(0.55)
    rng = np.random.default_rng(0)
    for p, v in zip(pos, data):
        ax.plot(v, p + rng.uniform(-0.18, 0.18, len(v)), linestyle="none", marker="o", markersize=2.2,
                color="#333333", alpha=0.6)
    labels = []
    for n, v in series:
        med = f"p50 {np.median(v):.3g}" if len(v) else "none"
        labels.append(f"{n}\n{med}")
    ax.set_yticks(pos, labels, fontsize=8)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(unit)
    ax.set_title(f"{cap.name}: host time per stage ({len(b)} batches)", fontsize=10, loc="left")
    ax.grid(axis="x", color="#eeeeee", linewidth=0.6, which="both")
    ax.set_axisbelow(True)
    return fig


# ------------------------------------------------------------------------------------------
# comparison


def _metrics_of(data) -> tuple[list[dict], str | None]:
    if isinstance(data, dict):
        return list(data.get("metrics", [])), data.get("baseline")
    return list(data), None


def compare_bars(data, metrics: list[str] | None = None, *, baseline: str | None = None, ci_of: str = "change",
                 ncols: int = 3, panel_width: float = 3.6, panel_height: float = 2.6) -> Figure:
    """Bars of each arm's mean per metric, with intervals, from compare's JSON shape:
    `{"metrics": [{"metric": name, "unit"?: str, "arms": {arm: {"mean": x, "ci"?: [lo, hi]}},
    "ci": [lo, hi] or null}]}` (a bare list of such entries works too).

    One panel per metric (units differ). The first arm (or `baseline`) is the baseline. With
    `ci_of="change"` (compare's meaning), an interval is that of (arm - baseline): it is drawn on
    each other arm's bar as baseline mean + [lo, hi]; with `ci_of="mean"` it is the arm mean's
    own interval. An arm's own "ci" wins over the metric's, which applies to the first other arm.
    A null interval is printed as "exact" (compare's deterministic counts) or "no interval".
    `metrics` picks metric names (default: all).
    """
    if ci_of not in ("change", "mean"):
        raise ValueError("ci_of must be 'change' or 'mean'")
    entries, base_name = _metrics_of(data)
    if metrics is not None:
        by = {e["metric"]: e for e in entries}
        missing = [m for m in metrics if m not in by]
        if missing:
            raise ClefError(f"no such metric in the comparison: {', '.join(missing)}")
        entries = [by[m] for m in metrics]
    if not entries:
        raise ClefError("nothing to plot: the comparison has no metrics")
    base_name = baseline or base_name
    ncols = max(1, min(ncols, len(entries)))
    nrows = int(np.ceil(len(entries) / ncols))
    fig = _new_figure(panel_width * ncols, panel_height * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[len(entries):]:
        ax.set_axis_off()
    for ax, e in zip(axes.flat, entries):
        arms = list(e["arms"].keys())
        base = base_name if base_name in e["arms"] else arms[0]
        arms = [base] + [a for a in arms if a != base]
        means = [e["arms"][a].get("mean") for a in arms]
        vals = [np.nan if m is None else float(m) for m in means]
        colors = ["#8c8c8c"] + [STAGE_COLORS[i % len(STAGE_COLORS)] for i in range(len(arms) - 1)]
        xs = np.arange(len(arms))
        ax.bar(xs, vals, color=colors, width=0.6)
        notes = []
        for i, a in enumerate(arms):
            ci = e["arms"][a].get("ci")
            if ci is None and i == 1:
                ci = e.get("ci")
            if ci is None or vals[i] != vals[i]:
                continue
            lo, hi = float(ci[0]), float(ci[1])
            if ci_of == "change" and i > 0:
                lo, hi = vals[0] + lo, vals[0] + hi
            elif ci_of == "change" and i == 0:
                continue
            ax.errorbar([i], [vals[i]], yerr=[[max(vals[i] - lo, 0)], [max(hi - vals[i], 0)]], color="black",
                        capsize=4, linewidth=1.2)
        if len(arms) > 1:
            a1 = e["arms"][arms[1]]
            change = a1.get("change", e.get("change"))
            pct = a1.get("change_pct", e.get("change_pct"))
            ci = a1.get("ci", e.get("ci"))
            ci_pct = a1.get("ci_pct", e.get("ci_pct"))
            if change is None and vals[0] == vals[0] and vals[1] == vals[1]:
                change = vals[1] - vals[0]
                pct = 100.0 * change / vals[0] if vals[0] else None
            if pct is not None:
                notes.append(f"Δ {pct:+.1f}%")
            elif change is not None:
                notes.append(f"Δ {change:+.3g}")
            if ci_pct is not None:
                notes.append(f"[{ci_pct[0]:+.1f}, {ci_pct[1]:+.1f}]%")
            elif ci is not None:
                notes.append(f"[{ci[0]:+.3g}, {ci[1]:+.3g}]")
            else:
                notes.append("exact" if e.get("deterministic") else "no interval")
        for i, v in enumerate(vals):
            if v == v:
                ax.text(i + 0.32, v, f"{v:.3g}", ha="left", va="center", fontsize=7)
        ax.set_xticks(xs, arms, fontsize=8)
        ax.set_xlim(-0.6, len(arms) - 0.1)
        ax.set_title(e["metric"] + ("\n" + " ".join(notes) if notes else ""), fontsize=8, loc="left")
        if e.get("unit"):
            ax.set_ylabel(e["unit"], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.margins(y=0.12)
    return fig
