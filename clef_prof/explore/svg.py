"""The HTML report's pictures as inline SVG, drawn from an `Analysis` with NumPy alone.

`timeline` draws consecutive batches of one thread (host stages and GPU work in lanes, each
copy a mark, a zoom on one stage's copies); `stage_durations` the per-stage host time per batch
(box plots, every batch a dot, log scale). The same pictures as `clef_prof.explore.plots`
(matplotlib, for notebooks), with neither matplotlib nor pandas: text in a self-contained page,
scaled by the browser, with a title and a description for screen readers and a tooltip on each
batch, stage instance and GPU record. The timeline reads only its window's rows
(`Analysis.window`), not every row of the capture.

Every mark of the timeline is an element of its lane's group (`<g data-lane=NAME>`) carrying
`data-batch` (its batch, -1 outside any) and the class `own` (work of a plotted batch) or
`other` (drawn grey), so that a test can count what was drawn.

`flame` draws one stage's Python samples as an icicle (the root at the top, each box a stack
prefix as wide as its inclusive samples); each box is a `<rect data-depth data-samples>` with a
tooltip naming the function, its file, its samples and their share of the stage.
"""
from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..analyze.figures import cuda as cu
from ..analyze.figures.intervals import union
from ..base.errors import ClefError
from .style import (BUSY_COLOR, D2H_COLOR, GPU_LANES, GRAPH_COLOR, KERNEL_COLOR, LANE_BATCH, LANE_BUSY, LANE_D2H,
                    LANE_GRAPHS, LANE_H2D, LANE_KERNELS, MEMORY_COLORS, OTHER_COLOR, OTHER_MEMORY_COLOR,
                    STAGE_COLORS, TimelineMarks, timeline_title)

__all__ = ["Timeline", "timeline", "stage_durations", "waterfall", "flame"]

FONT = 'font-family="system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif"'
WIDTH = 1100                   # viewBox units; the page scales the picture to its column
LEFT, RIGHT = 150, 150         # lane labels, legend
LANE = 32                      # lane pitch; marks span 0.75 of it
MEMORY_LABELS = {cu.PAGEABLE: "pageable", cu.PINNED: "pinned"}
_HOST_SIDE_SRC = (1, 3, 9, 11)  # directions whose host memory is the source (H2D, H2A, H2H, UVM H2D)


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _n(v: float) -> str:
    """A coordinate: one decimal, no trailing '.0'."""
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _ticks(lo: float, hi: float, n: int = 8) -> np.ndarray:
    """Round tick values (1, 2, 2.5, 5 x 10^k apart) inside [lo, hi]."""
    span = hi - lo
    if not span > 0:
        return np.array([lo])
    raw = span / n
    mag = 10.0 ** np.floor(np.log10(raw))
    step = mag * min((m for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10)
    return np.arange(np.ceil(lo / step), np.floor(hi / step) + 1) * step


def _tick_label(v: float) -> str:
    return f"{v:.6g}" if abs(v) >= 1e-9 else "0"


class _Svg:
    """One SVG element in the making: a list of parts, joined once."""

    def __init__(self, width: float, height: float, label_id: str, title: str, desc: str):
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(width)} {_n(height)}" '
                      f'width="{_n(width)}" height="{_n(height)}" role="img" '
                      f'aria-labelledby="{label_id}-t {label_id}-d" {FONT} font-size="11" fill="#1d1d1f">',
                      f'<title id="{label_id}-t">{_e(title)}</title><desc id="{label_id}-d">{_e(desc)}</desc>',
                      f'<rect width="{_n(width)}" height="{_n(height)}" fill="#fff"/>']

    def add(self, part: str) -> None:
        self.parts.append(part)

    def text(self, x: float, y: float, s: str, anchor: str = "start", size: float | None = None,
             extra: str = "") -> None:
        sz = f' font-size="{_n(size)}"' if size else ""
        self.add(f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}"{sz}{extra}>{_e(s)}</text>')

    def done(self) -> str:
        return "".join(self.parts) + "</svg>"


def _rects(xs: np.ndarray, xe: np.ndarray, y: float, h: float, colors, batches: np.ndarray, own: np.ndarray,
           titles: list[str], min_w: float = 0.8, extra: str = "") -> str:
    """One <rect> per mark (at least `min_w` wide, so each stays visible), with its tooltip."""
    w = np.maximum(xe - xs, min_w)
    colors = [colors] * len(xs) if isinstance(colors, str) else colors
    return "".join(
        f'<rect class="{"own" if o else "other"}" data-batch="{int(b)}" x="{_n(x0)}" y="{_n(y)}" width="{_n(wd)}" '
        f'height="{_n(h)}" fill="{c}"{extra}><title>{_e(t)}</title></rect>'
        for x0, wd, c, b, o, t in zip(xs, w, colors, batches, own, titles))


def _us(ns) -> str:
    return f"{ns / 1e3:.1f} µs" if ns < 1e6 else f"{ns / 1e6:.3f} ms"


# ------------------------------------------------------------------------------------------
# timeline


@dataclass
class Timeline(TimelineMarks):
    """What `timeline` drew (the counts a caption or a test reads), and the SVG.

    marks: lane -> marks of work of the plotted batches (stage instances, GPU records, busy
    intervals); other_marks: lane -> marks drawn grey (other batches, or launched outside).
    per_batch: one dict per plotted batch (batch, size, h2d_marks, h2d_copies, d2h_marks, kernels).
    zoom: None, or the zoom panel (batch, size, stage, h2d_marks). window_ns: the time span drawn
    (the batches, padded by 2%); rows_read: rows of each row-level table read for it.
    """

    svg: str
    zoom_svg: str | None
    batches: list[int]
    requests: int
    t0_ns: int
    window_ns: tuple[int, int]
    lanes: list[str]
    marks: dict[str, int]
    other_marks: dict[str, int]
    per_batch: list[dict]
    zoom: dict | None = None
    notes: list[str] = field(default_factory=list)
    rows_read: dict[str, int] = field(default_factory=dict)


def _thread_batches(analysis) -> np.ndarray:
    """Indices (into `analysis.stages.batches`) of the batches of the thread with the most."""
    b = analysis.stages.batches
    if len(b) == 0:
        raise ClefError(f"{os.path.basename(analysis.path)}: no {analysis.config.batch!r} batch ranges to plot")
    g = b["gtid"]
    key = (((g >> 24) & 0xFFFFFF) << 24) | (g & 0xFFFFFF)          # (pid, tid), in that order
    keys, counts = np.unique(key, return_counts=True)
    return np.flatnonzero(key == keys[np.argmax(counts)])


def first_batch(analysis, which: str | int) -> int:
    """The timeline's first batch, 0-based on the busiest thread: an index (negative counts from
    the end), 'slowest' (the longest batch range) or 'p99' (the batch of nearest rank at the 99th
    percentile of the batch ranges' durations). An index past the last batch is an error."""
    mine = _thread_batches(analysis)
    b = analysis.stages.batches
    if which in ("slowest", "p99"):
        dur = (b["end"][mine] - b["start"][mine]).astype(np.int64)
        order = np.argsort(dur, kind="stable")
        rank = len(order) - 1 if which == "slowest" else max(math.ceil(0.99 * len(order)) - 1, 0)
        return int(order[rank])
    i = int(which)
    if not -len(mine) <= i < len(mine):
        raise ClefError(f"{os.path.basename(analysis.path)}: batch {i} is past the last batch "
                        f"({len(mine)} on the busiest thread: 0 to {len(mine) - 1}, or -1 to -{len(mine)})")
    return i % len(mine)


def pick_batches(analysis, first: int | str, n: int) -> np.ndarray:
    """Indices (into `analysis.stages.batches`) of `n` consecutive batches from the `first` one
    (as `first_batch` reads it) of the thread with the most batches."""
    mine = _thread_batches(analysis)
    i = first_batch(analysis, first)
    return mine[i:i + max(int(n), 1)]


def timeline(analysis, first: int = 0, n: int = 4, *, zoom: bool = True, title: str | None = None) -> Timeline:
    """A timeline of `n` consecutive batches of the thread with the most batches, from its
    `first` batch, as `clef_prof.explore.plots.timeline` draws it.

    Host lanes: the batch ranges (labelled with size and H2D copies per request), then one lane
    per stage. GPU lanes (with CUDA): H2D and D2H copies (one mark per copy record, H2D coloured
    by host memory: pageable red, pinned green), kernels, graphs (GRAPH_TRACE executions, or the
    graph launch calls when the capture has no GPU record of graphs) and the union of the GPU
    work. Work outside the plotted batches is grey; dashed lines mark batch boundaries; x is ms
    from the first plotted batch's start. `zoom` adds a panel: the stage with the most H2D copies
    in the smallest plotted batch, every copy apart and numbered.
    """
    stages = analysis.stages
    b = stages.batches
    sel = pick_batches(analysis, first, n)
    t0, t1 = int(b["start"][sel].min()), int(b["end"][sel].max())
    pad = max((t1 - t0) // 50, 1000)
    w0, w1 = t0 - pad, t1 + pad
    pks = np.unique(b["gtid"][sel] >> 24)
    pids, tids = pks & 0xFFFFFF, np.unique(b["gtid"][sel] & 0xFFFFFF)
    names = list(analysis.config.stages)
    cuda = bool(analysis.result.capture.cuda_traced)
    rows = analysis.window(w0, w1, pks) if cuda else None

    lanes = [LANE_BATCH, *names] + (list(GPU_LANES) if cuda else [])
    plot_w = WIDTH - LEFT - RIGHT
    top = 30
    lane_y = {lane: top + LANE * (i + 0.5) for i, lane in enumerate(lanes)}
    height = top + LANE * len(lanes) + 44
    h = 0.75 * LANE

    def sx(t) -> np.ndarray:
        """x of times, clipped to the plot (a range that starts before the window starts at its edge)."""
        return LEFT + (np.clip(np.asarray(t, dtype=np.float64), w0, w1) - w0) * (plot_w / (w1 - w0))

    marks = {lane: 0 for lane in lanes}
    other: dict[str, int] = {lane: 0 for lane in GPU_LANES} if cuda else {}
    notes: list[str] = []
    groups: dict[str, list[str]] = {lane: [] for lane in lanes}

    # GPU rows of the window
    tr = rows["transfers"] if cuda else None
    if cuda:
        ck = tr["copyKind"]
        host_kind = np.where(np.isin(ck, _HOST_SIDE_SRC), tr["srcKind"], np.where(np.isin(ck, [2, 4, 12]),
                                                                                   tr["dstKind"], tr["srcKind"]))
        own_tr = np.isin(tr["batch"], sel)
        h2d, d2h = ck == cu.HTOD, ck == cu.DTOH
    size = b["size"][sel].astype(np.int64)

    # host: batch ranges, labelled
    per_batch = []
    for i, bi in enumerate(sel):
        bi = int(bi)
        row = {"batch": bi, "size": int(size[i]), "h2d_marks": 0, "h2d_copies": 0, "d2h_marks": 0}
        if cuda:
            mb = tr["batch"] == bi
            row.update(h2d_marks=int((mb & h2d).sum()), h2d_copies=int(tr["copies"][mb & h2d].sum()),
                       d2h_marks=int((mb & d2h).sum()), kernels=int((rows["kernels"]["batch"] == bi).sum()))
        per_batch.append(row)
    xs, xe = sx(b["start"][sel]), sx(b["end"][sel])
    y = lane_y[LANE_BATCH] - h / 2
    for i, row in enumerate(per_batch):
        label = [f"#{row['batch']}  n={row['size']}"]
        if cuda:
            per = f"{row['h2d_marks'] / row['size']:.1f}/req" if row["size"] else "—/req"
            label.append(f"{row['h2d_marks']} H2D ({per})")
        dur = (int(b["end"][row["batch"]]) - int(b["start"][row["batch"]])) / 1e6
        tip = f"batch #{row['batch']}: n={row['size']}, {dur:.3f} ms" + (f", {label[1]}" if cuda else "")
        w = max(xe[i] - xs[i], 0.8)
        fits = [len(s) * 5.2 + 4 <= w for s in label]          # 9-unit text, about 5.2 units a character
        lines = label if all(fits) else label[:1] if fits[0] else []     # the whole label is in the tooltip
        y0 = lane_y[LANE_BATCH] - 5 * (len(lines) - 1) + 3
        txt = "".join(f'<text x="{_n((xs[i] + xe[i]) / 2)}" y="{_n(y0 + 10 * k)}" text-anchor="middle" '
                      f'font-size="9">{_e(s)}</text>' for k, s in enumerate(lines))
        groups[LANE_BATCH].append(
            f'<g class="own" data-batch="{row["batch"]}"><title>{_e(tip)}</title><rect x="{_n(xs[i])}" y="{_n(y)}" '
            f'width="{_n(w)}" height="{_n(h)}" fill="#e8e8e8" stroke="#444" stroke-width="0.8"/>{txt}</g>')
        marks[LANE_BATCH] += 1

    # host: stage instances in the window on the plotted batches' threads
    inst = stages.instances
    m = ((inst["end"] >= w0) & (inst["start"] <= w1) & np.isin((inst["gtid"] >> 24) & 0xFFFFFF, pids)
         & np.isin(inst["gtid"] & 0xFFFFFF, tids))
    st = inst[m]
    st_own = np.isin(st["batch"], sel)
    for code, sname in enumerate(names):
        ms = st["code"] == code
        sub, ow = st[ms], st_own[ms]
        colors = [STAGE_COLORS[code % len(STAGE_COLORS)] if o else OTHER_COLOR for o in ow]
        tips = [f"{sname}{f' · batch #{int(bb)}' if bb >= 0 else ''} · {(e - s) / 1e6:.3f} ms"
                for bb, s, e in zip(sub["batch"], sub["start"], sub["end"])]
        groups[sname].append(_rects(sx(sub["start"]), sx(sub["end"]), lane_y[sname] - h / 2, h, colors,
                                    sub["batch"], ow, tips, min_w=0.6))
        marks[sname] += int(ow.sum())
        if (~ow).any():
            other[sname] = other.get(sname, 0) + int((~ow).sum())

    graph_calls = False
    if cuda:
        for lane, mk in ((LANE_H2D, h2d), (LANE_D2H, d2h)):
            sub, ow, hk = tr[mk], own_tr[mk], host_kind[mk]
            if lane == LANE_H2D:
                colors = [MEMORY_COLORS.get(MEMORY_LABELS.get(int(k), ""), OTHER_MEMORY_COLOR) if o else OTHER_COLOR
                          for k, o in zip(hk, ow)]
            else:
                colors = [D2H_COLOR if o else OTHER_COLOR for o in ow]
            tips = [f"{lane[:3]} copy · {int(nb):,} B · {MEMORY_LABELS.get(int(k), 'other')} · {_us(e - s)}"
                    + (f" · batch #{int(bb)}" if bb >= 0 else "")
                    for nb, k, s, e, bb in zip(sub["bytes"], hk, sub["start"], sub["end"], sub["batch"])]
            groups[lane].append(_rects(sx(sub["start"]), sx(sub["end"]), lane_y[lane] - h / 2, h, colors,
                                       sub["batch"], ow, tips, min_w=0.9))
            marks[lane] += int(ow.sum())
            other[lane] += int((~ow).sum())

        def bars(t, lane: str, color: str, what: str) -> None:
            ow = np.isin(t["batch"], sel)
            tips = [f"{what} · {_us(e - s)}" + (f" · batch #{int(bb)}" if bb >= 0 else "")
                    for s, e, bb in zip(t["start"], t["end"], t["batch"])]
            groups[lane].append(_rects(sx(t["start"]), sx(t["end"]), lane_y[lane] - h / 2, h,
                                       [color if o else OTHER_COLOR for o in ow], t["batch"], ow, tips, min_w=0.6))
            marks[lane] += int(ow.sum())
            other[lane] += int((~ow).sum())

        k = rows["kernels"]
        bars(k, LANE_KERNELS, KERNEL_COLOR, "kernel")
        busy = rows["gpu_busy"]
        g = busy[busy["kind"] == "graph"]
        if len(g):
            bars(g, LANE_GRAPHS, GRAPH_COLOR, "graph execution")
        else:
            c = rows["calls"]
            gl = c[c["kind"] == cu.GRAPH]
            if len(gl):
                graph_calls = True
                ow = np.isin(gl["batch"], sel)
                yc = lane_y[LANE_GRAPHS]
                groups[LANE_GRAPHS].append("".join(
                    f'<path class="{"own" if o else "other"}" data-batch="{int(bb)}" d="M{_n(x - 4)} {_n(yc - 4)}'
                    f'h8l-4 8z" fill="none" stroke="{GRAPH_COLOR if o else OTHER_COLOR}" stroke-width="1.2">'
                    f'<title>graph launch call · {_us(e - s)}{f" · batch #{int(bb)}" if bb >= 0 else ""}</title></path>'
                    for x, o, bb, s, e in zip(sx(gl["start"]), ow, gl["batch"], gl["start"], gl["end"])))
                marks[LANE_GRAPHS] += int(ow.sum())
                other[LANE_GRAPHS] += int((~ow).sum())
                notes.append("graphs: launch calls (the capture has no GPU record of graph executions)")
        if len(busy):
            us, ue = union(np.maximum(busy["start"], w0), np.minimum(busy["end"], w1))
            groups[LANE_BUSY].append(_rects(sx(us), sx(ue), lane_y[LANE_BUSY] - h / 2, h, BUSY_COLOR,
                                            np.full(len(us), -1), np.ones(len(us), bool),
                                            [f"GPU busy · {_us(e - s)}" for s, e in zip(us, ue)], min_w=0.5))
            marks[LANE_BUSY] += len(us)
        del other[LANE_BUSY]
    else:
        notes.append("CUDA not traced: host lanes only")

    requests = int(size.sum())
    h2d_own = marks.get(LANE_H2D, 0)
    line = timeline_title(os.path.basename(analysis.path), int(sel[0]), int(sel[-1]), len(sel), requests, h2d_own,
                          cuda, title)
    desc = (f"Timeline of batches #{int(sel[0])} to #{int(sel[-1])} ({requests} requests): the batch ranges, "
            "one lane per stage")
    if cuda:
        desc += (f", then the GPU: H2D copies ({h2d_own} copy records of these batches), D2H copies, kernels, graphs "
                 "and GPU busy time")
    svg = _Svg(WIDTH, height, "timeline", line, desc)
    svg.text(LEFT, 18, line, size=12)
    bottom = top + LANE * len(lanes)
    xlo, xhi = (w0 - t0) / 1e6, (w1 - t0) / 1e6
    _x_axis(svg, lambda v: LEFT + (v - xlo) * plot_w / (xhi - xlo), xlo, xhi, top, bottom,
            f"ms from the start of batch #{int(sel[0])} (t0 = {t0 / 1e6:.3f} ms into the session)")
    for x in np.concatenate([xs, xe]):
        svg.add(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{top}" y2="{_n(bottom)}" stroke="#999" stroke-width="0.6" '
                f'stroke-dasharray="3 3"/>')
    for lane in lanes:
        label = (f"{analysis.config.batch} (batch)" if lane == LANE_BATCH else
                 "graphs (launch calls)" if lane == LANE_GRAPHS and graph_calls else lane)
        svg.text(LEFT - 8, lane_y[lane] + 4, label, anchor="end")
        svg.add(f'<g data-lane="{_e(lane)}">{"".join(groups[lane])}</g>')
    if cuda:
        ysep = top + LANE * (1 + len(names))
        svg.add(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{ysep}" y2="{ysep}" stroke="#333" stroke-width="0.8"/>')
    svg.add(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{_n(bottom - top)}" fill="none" stroke="#333" '
            f'stroke-width="0.8"/>')
    legend = [(STAGE_COLORS[i % len(STAGE_COLORS)], s, "box") for i, s in enumerate(names)]
    if cuda:
        legend += [(MEMORY_COLORS["pageable"], "H2D from pageable", "tick"),
                   (MEMORY_COLORS["pinned"], "H2D from pinned", "tick"), (D2H_COLOR, "D2H", "tick"),
                   (KERNEL_COLOR, "kernel", "box"),
                   (GRAPH_COLOR, *(("graph launch call", "tri") if graph_calls else ("graph execution", "box"))),
                   (OTHER_COLOR, "other batches / outside", "box")]
    _legend(svg, WIDTH - RIGHT + 10, top + 6, legend)

    zinfo = zsvg = None
    if zoom and cuda:
        zsvg, zinfo = _zoom(analysis, sel, tr, own_tr & h2d, host_kind, rows["calls"], t0)
    return Timeline(svg.done(), zsvg, [int(x) for x in sel], requests, t0, (w0, w1), lanes, marks, other, per_batch,
                    zinfo, notes, {k: len(v) for k, v in (rows or {}).items()})


def _x_axis(svg: _Svg, x_of, lo: float, hi: float, top: float, bottom: float, label: str) -> None:
    """Grid lines, tick labels under `bottom`, and the axis label."""
    for v in _ticks(lo, hi):
        x = x_of(v)
        svg.add(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{_n(top)}" y2="{_n(bottom)}" stroke="#eee" stroke-width="0.6"/>'
                f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{_n(bottom)}" y2="{_n(bottom + 4)}" stroke="#333"/>')
        svg.text(x, bottom + 15, _tick_label(v), anchor="middle", size=10)
    svg.text(x_of((lo + hi) / 2), bottom + 32, label, anchor="middle")


def _legend(svg: _Svg, x: float, y: float, items: list[tuple[str, str, str]]) -> None:
    for i, (color, label, kind) in enumerate(items):
        yy = y + 15 * i
        if kind == "tick":
            svg.add(f'<line x1="{_n(x)}" x2="{_n(x + 12)}" y1="{_n(yy)}" y2="{_n(yy)}" stroke="{color}" '
                    'stroke-width="2"/>')
        elif kind == "tri":
            svg.add(f'<path d="M{_n(x + 2)} {_n(yy - 4)}h8l-4 8z" fill="none" stroke="{color}" stroke-width="1.2"/>')
        else:
            svg.add(f'<rect x="{_n(x)}" y="{_n(yy - 5)}" width="12" height="10" fill="{color}"/>')
        svg.text(x + 17, yy + 3.5, label, size=10)


def _zoom(analysis, sel: np.ndarray, tr, own_h2d: np.ndarray, host_kind: np.ndarray, calls, t0: int):
    """(SVG, facts) of the zoom on the stage holding most H2D copies in the smallest plotted batch
    that has any; (None, None) when no plotted batch has an H2D copy."""
    b = analysis.stages.batches
    h2d = tr[own_h2d]
    kinds_of = host_kind[own_h2d]
    cand = [int(i) for i in sel if b["size"][i] > 0 and (h2d["batch"] == i).any()]
    if not cand:
        return None, None
    bi = min(cand, key=lambda i: (int(b["size"][i]), int(b["start"][i])))
    mb = h2d["batch"] == bi
    mine, kinds = h2d[mb], kinds_of[mb]
    names = list(analysis.config.stages)
    slot = int(np.argmax(np.bincount(mine["slot"])))
    slots = list(analysis.result.slots or [*names, f"{analysis.config.batch} (no stage)", "outside"])
    stage = slots[slot]
    inst = analysis.stages.instances
    inst = inst[(inst["batch"] == bi) & (inst["code"] == slot)] if slot < len(names) else inst[:0]
    c = calls[(calls["batch"] == bi) & (calls["slot"] == slot) & (calls["kind"] == cu.COPY)]
    if len(inst):
        z0, z1 = int(inst["start"].min()), int(inst["end"].max())
    else:
        z0, z1 = int(c["start"].min()) if len(c) else int(mine["start"].min()), int(mine["end"].max())
    z0, z1 = min(z0, int(mine["start"].min())), max(z1, int(mine["end"].max()))
    pad = max((z1 - z0) // 25, 200)
    z0, z1 = z0 - pad, z1 + pad
    order = np.argsort(mine["start"], kind="stable")
    mine, kinds = mine[order], kinds[order]
    size = int(b["size"][bi])
    kind_names = ", ".join(sorted({MEMORY_LABELS.get(int(k), "other") for k in kinds}))
    head = (f"zoom: batch #{bi} (n={size}), stage {stage}: {len(mine)} H2D copies ({kind_names}) = "
            f"{len(mine) / size:.1f} per request")
    plot_w = WIDTH - LEFT - RIGHT
    top, lh = 26, 34
    lanes = [f"{stage} (host)", "memcpy calls (host)", "H2D copies (GPU)"]
    ys = [top + lh * (i + 0.5) for i in range(3)]
    bottom = top + 3 * lh
    svg = _Svg(WIDTH, bottom + 44, "zoom", head, f"Batch #{bi}, stage {stage}: the stage range, its memcpy calls "
               f"and each of its {len(mine)} H2D copies on the GPU, numbered in time order.")
    svg.text(LEFT, 16, head, size=11)
    xlo, xhi = (z0 - t0) / 1e6, (z1 - t0) / 1e6

    def sx(t) -> np.ndarray:
        return LEFT + (np.clip(np.asarray(t, dtype=np.float64), z0, z1) - z0) * (plot_w / (z1 - z0))

    _x_axis(svg, lambda v: LEFT + (v - xlo) * plot_w / (xhi - xlo), xlo, xhi, top, bottom,
            "ms (same origin as above)")
    color = STAGE_COLORS[slot % len(STAGE_COLORS)] if slot < len(names) else OTHER_COLOR
    for y, lane in zip(ys, lanes):
        svg.text(LEFT - 8, y + 4, lane, anchor="end")
    svg.add('<g data-lane="zoom stage">' + _rects(sx(inst["start"]), sx(inst["end"]), ys[0] - 12, 24, color,
                                                   inst["batch"], np.ones(len(inst), bool),
                                                   [f"{stage} · {(e - s) / 1e6:.3f} ms"
                                                    for s, e in zip(inst["start"], inst["end"])]) + "</g>")
    svg.add('<g data-lane="zoom memcpy calls">' + _rects(sx(c["start"]), sx(c["end"]), ys[1] - 9, 18, "#999",
                                                          c["batch"], np.ones(len(c), bool),
                                                          [f"memcpy call · {_us(e - s)}"
                                                           for s, e in zip(c["start"], c["end"])]) + "</g>")
    colors = [MEMORY_COLORS.get(MEMORY_LABELS.get(int(k), ""), OTHER_MEMORY_COLOR) for k in kinds]
    xs = sx(mine["start"])
    copies = _rects(xs, sx(mine["end"]), ys[2] - 12, 24, colors, mine["batch"], np.ones(len(mine), bool),
                    [f"H2D copy {i + 1} · {int(nb):,} B · {MEMORY_LABELS.get(int(k), 'other')} · {_us(e - s)}"
                     for i, (nb, k, s, e) in enumerate(zip(mine["bytes"], kinds, mine["start"], mine["end"]))],
                    min_w=1.4)
    numbers = "".join(f'<text x="{_n(x)}" y="{_n(ys[2] - 15)}" text-anchor="middle" font-size="8">{i + 1}</text>'
                      for i, x in enumerate(xs)) if len(mine) <= 60 else ""
    svg.add(f'<g data-lane="zoom H2D copies">{copies}</g>{numbers}')
    svg.add(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{3 * lh}" fill="none" stroke="#333" '
            f'stroke-width="0.8"/>')
    return svg.done(), {"batch": bi, "size": size, "stage": stage, "h2d_marks": int(len(mine))}


# ------------------------------------------------------------------------------------------
# distributions


def _box_stats(v: np.ndarray) -> tuple[float, float, float, float, float]:
    """(lower whisker, q1, median, q3, upper whisker): whiskers at the furthest points within
    1.5 IQR of the box (matplotlib's boxplot rule)."""
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    iqr = q3 - q1
    lo = v[v >= q1 - 1.5 * iqr]
    hi = v[v <= q3 + 1.5 * iqr]
    return (float(lo.min()) if len(lo) else q1, q1, med, q3, float(hi.max()) if len(hi) else q3)


def stage_durations(analysis) -> str:
    """Per-stage host time per batch (each stage's instances in a batch summed), the batch range
    itself last: box plots (quartiles, median, 1.5 IQR whiskers) with every batch as a dot, on a
    log scale, as `clef_prof.explore.plots.stage_durations` draws them."""
    bt = analysis.batch_table
    names = list(analysis.config.stages)
    n_b = len(analysis.stages.batches)
    series = [(s, bt[f"{s}_ns"] / 1e6) for s in names]
    series.append((f"{analysis.config.batch} (batch)", (bt["end"] - bt["start"]) / 1e6))
    series = [(s, v[np.isfinite(v) & (v > 0)]) for s, v in series]
    values = np.concatenate([v for _, v in series])
    name = os.path.basename(analysis.path)
    head = f"{name}: host time per stage ({n_b} batches)"
    lane, top = 38, 28
    bottom = top + lane * len(series)
    plot_w = WIDTH - LEFT - 30
    desc = "; ".join(f"{s}: median {np.median(v):.3g} ms over {len(v)} batches" if len(v) else f"{s}: none"
                     for s, v in series)
    svg = _Svg(WIDTH, bottom + 44, "durations", head, "Host ms per batch, log scale. " + desc)
    svg.text(LEFT, 18, head, size=12)
    if len(values) == 0:
        svg.text(LEFT + plot_w / 2, (top + bottom) / 2, "no stage time to plot", anchor="middle")
        return svg.done()
    lo, hi = np.log10(values.min()), np.log10(values.max())
    margin = max(0.04 * (hi - lo), 0.05)
    dlo, dhi = lo - margin, hi + margin

    def sx(v) -> np.ndarray:
        return LEFT + (np.log10(np.asarray(v, dtype=np.float64)) - dlo) * (plot_w / (dhi - dlo))

    # grid at 1..9 x 10^k; labels at the decades, and at 2 and 5 when the range spans under two decades
    labelled = (1,) if dhi - dlo >= 2 else (1, 2, 5)
    for d in np.arange(np.floor(dlo), np.ceil(dhi) + 1):
        for m in range(1, 10):
            v = m * 10.0 ** d
            if not dlo <= np.log10(v) <= dhi:
                continue
            x = float(sx(v))
            svg.add(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{top}" y2="{_n(bottom)}" '
                    f'stroke="{"#ddd" if m == 1 else "#f0f0f0"}" stroke-width="0.6"/>')
            if m in labelled:
                svg.add(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{_n(bottom)}" y2="{_n(bottom + 4)}" stroke="#333"/>')
                svg.text(x, bottom + 15, f"{v:g}", anchor="middle", size=10)
    svg.text(LEFT + plot_w / 2, bottom + 32, "ms per batch (log scale)", anchor="middle")
    rng = np.random.default_rng(0)
    for i, (s, v) in enumerate(series):
        yc = top + lane * (i + 0.5)
        color = STAGE_COLORS[i % len(STAGE_COLORS)] if i < len(names) else "#dddddd"
        svg.text(LEFT - 8, yc - 2, s, anchor="end")
        svg.text(LEFT - 8, yc + 11, f"p50 {np.median(v):.3g}" if len(v) else "none", anchor="end", size=10)
        if not len(v):
            continue
        wlo, q1, med, q3, whi = (float(x) for x in sx(_box_stats(v)))
        bh = 0.6 * lane
        svg.add(f'<g data-series="{_e(s)}"><title>{_e(s)}: {len(v)} batches, p50 {np.median(v):.3g} ms</title>'
                f'<line x1="{_n(wlo)}" x2="{_n(q1)}" y1="{_n(yc)}" y2="{_n(yc)}" stroke="#333"/>'
                f'<line x1="{_n(q3)}" x2="{_n(whi)}" y1="{_n(yc)}" y2="{_n(yc)}" stroke="#333"/>'
                f'<line x1="{_n(wlo)}" x2="{_n(wlo)}" y1="{_n(yc - bh / 4)}" y2="{_n(yc + bh / 4)}" stroke="#333"/>'
                f'<line x1="{_n(whi)}" x2="{_n(whi)}" y1="{_n(yc - bh / 4)}" y2="{_n(yc + bh / 4)}" stroke="#333"/>'
                f'<rect x="{_n(q1)}" y="{_n(yc - bh / 2)}" width="{_n(max(q3 - q1, 0.5))}" height="{_n(bh)}" '
                f'fill="{color}" fill-opacity="0.55" stroke="#333" stroke-width="0.8"/>'
                f'<line x1="{_n(med)}" x2="{_n(med)}" y1="{_n(yc - bh / 2)}" y2="{_n(yc + bh / 2)}" stroke="#000" '
                f'stroke-width="1.5"/>')
        jitter = yc + rng.uniform(-0.18, 0.18, len(v)) * lane
        dots = "".join(f"M{_n(x)} {_n(y)}h0" for x, y in zip(sx(v), jitter))
        svg.add(f'<path class="dots" data-n="{len(v)}" d="{dots}" stroke="#333" stroke-opacity="0.6" '
                f'stroke-width="3" stroke-linecap="round"/></g>')
    svg.add(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{_n(bottom - top)}" fill="none" stroke="#333" '
            f'stroke-width="0.8"/>')
    return svg.done()


# ------------------------------------------------------------------------------------------
# request waterfall

SEGMENT_COLORS = {"receive": "#8e8e93", "queue": "#ff9f0a", "batch": "#0a84ff", "after_batch": "#bf5af2",
                  "encode": "#30d158", "send": "#64d2ff", "unattributed": "#ff453a"}


def waterfall(analysis, which: str = "p50,p99", max_rows: int = 40) -> tuple[str, dict]:
    """The journeys of the requests `which` names (analyze.figures.journey.select: the p50 one and the p99+
    tail by default), one row each from its handler entry (x = 0, ms) to its exit: its segments in
    order on the handler's thread, its batch's stages in a thin row under it on the batch's thread.
    Returns (SVG, {"requests": [rid, ...], "rows": n, "segments": {name: marks}})."""
    from ..analyze.figures import journey as jn

    t = analysis.journeys
    pick = jn.select(t, which)[:max_rows]
    if len(pick) == 0:
        raise ClefError("waterfall: no complete request journey to draw")
    rows = t[pick]
    order = np.argsort(rows["e2e_ns"], kind="stable")
    rows = rows[order]
    e2e = rows["e2e_ns"].astype(np.float64)
    hi = float(e2e.max()) / 1e6 or 1.0
    row_h, top = 34, 30
    height = top + row_h * len(rows) + 60
    x0, x1 = LEFT + 60, WIDTH - RIGHT
    svg = _Svg(WIDTH, height, "waterfall", "Request journeys",
               f"{len(rows)} requests, each from handler entry to exit: "
               + ", ".join(s.replace("_", " ") for s in jn.SEGMENTS) + "; the batch's stages below each")

    def x_of(ms):
        return x0 + (x1 - x0) * ms / hi

    _x_axis(svg, x_of, 0.0, hi, top - 6, top + row_h * len(rows), "ms from the request's handler entry")
    marks = {s: 0 for s in jn.SEGMENTS}
    st = analysis.stages
    inst = st.instances
    names = list(st.config.stages)
    for k in range(len(rows)):
        y = top + row_h * k
        r0 = int(rows["start"][k])
        g, bt = int(rows["gtid"][k]), int(rows["batch"][k])
        svg.text(LEFT + 55, y + 13, f"{rows['rid'][k]} ({_us(int(rows['e2e_ns'][k]))})"[:34], anchor="end", size=10)
        svg.text(LEFT + 55, y + 25, f"tid {g & 0xFFFFFF}" + (f" → tid {int(st.batches['gtid'][bt]) & 0xFFFFFF}"
                                                             if bt >= 0 else ""), anchor="end", size=8)
        pos = r0
        parts = []
        for s in jn.SEGMENTS:
            d = int(rows[f"{s}_ns"][k])
            if d <= 0:
                continue
            if s != "unattributed":
                start = _seg_start(rows, k, s)
                pos = start if start is not None else pos
            a, b = (pos - r0) / 1e6, (pos - r0 + d) / 1e6
            parts.append(f'<rect data-segment="{s}" x="{_n(x_of(a))}" y="{_n(y + 3)}" '
                         f'width="{_n(max(x_of(b) - x_of(a), 0.8))}" height="14" fill="{SEGMENT_COLORS[s]}">'
                         f'<title>{_e(rows["rid"][k])}: {s.replace("_", " ")} {_us(d)}</title></rect>')
            marks[s] += 1
            pos += d
        if bt >= 0:
            m = inst["batch"] == bt
            for c, s0, s1 in zip(inst["code"][m], inst["start"][m], inst["end"][m]):
                a, b = (int(s0) - r0) / 1e6, (int(s1) - r0) / 1e6
                parts.append(f'<rect data-stage="{names[int(c)]}" x="{_n(x_of(a))}" y="{_n(y + 19)}" '
                             f'width="{_n(max(x_of(b) - x_of(a), 0.8))}" height="6" '
                             f'fill="{STAGE_COLORS[int(c) % len(STAGE_COLORS)]}"><title>batch #{bt} '
                             f'{names[int(c)]} {_us(int(s1) - int(s0))}</title></rect>')
        svg.add(f'<g data-request="{_e(rows["rid"][k])}">' + "".join(parts) + "</g>")
    _legend(svg, WIDTH - RIGHT + 12, top + 4, [(SEGMENT_COLORS[s], s.replace("_", " "), "rect") for s in jn.SEGMENTS])
    return svg.done(), {"requests": [str(r) for r in rows["rid"]], "rows": len(rows), "segments": marks}


def _seg_start(rows, k: int, seg: str):
    """Where segment `seg` of row k starts (ns), None when it follows the one before."""
    col = {"receive": "start", "queue": "enqueue", "batch": "batch_start", "after_batch": "batch_end",
           "encode": "encode_start"}.get(seg)
    if col is None:
        return None
    v = int(rows[col][k])
    return v if v >= 0 else None


# ------------------------------------------------------------------------------------------
# Python samples: an icicle per stage

FLAME_ROW = 18                  # box pitch per stack depth
FLAME_MIN_W = 0.3               # boxes narrower than this (viewBox units) are not drawn, but counted
FLAME_COLORS = ("#f8c471", "#f5b041", "#eb984e", "#e59866", "#f0b27a", "#f7dc6f", "#f4d03f", "#edbb99")


def flame(sc, slot: str, title: str | None = None, unit: str = "samples") -> str:
    """One slot's stacks (`analyze.figures.samples.StackCounts`) as an icicle: the outermost frame at the
    top, callees under their caller, each box as wide as the samples whose stack passes through it
    (inclusive). Boxes under `FLAME_MIN_W` units are left out; the group's `data-hidden` counts them."""
    from ..analyze.figures.samples import stack_tree

    nodes = stack_tree(sc, slot)
    total = sum(n.inclusive for n in nodes if len(n.path) == 1)
    depth = max((len(n.path) for n in nodes), default=0)
    top = 30
    plot_w = WIDTH - 20
    height = top + FLAME_ROW * max(depth, 1) + 10
    head = title or f"{slot}: {total:,} {unit}"
    svg = _Svg(WIDTH, height, "flame-" + "".join(c if c.isalnum() else "-" for c in slot), head,
               f"Icicle of the Python stacks sampled in {slot}: the outermost frame at the top, each box as wide as "
               f"the {unit} whose stack passes through it (inclusive), out of {total:,}.")
    svg.text(10, 18, head, size=12)
    if not total:
        svg.text(WIDTH / 2, top + 12, f"no {unit}", anchor="middle")
        return svg.done()
    scale = plot_w / total
    drawn, hidden = [], 0
    for n in nodes:
        w = n.inclusive * scale
        if w < FLAME_MIN_W:
            hidden += 1
            continue
        f = n.path[-1]
        name, file = sc.func_name[f], sc.func_file[f]
        x, y = 10 + n.start * scale, top + FLAME_ROW * (len(n.path) - 1)
        pct = 100.0 * n.inclusive / total
        tip = (f"{name} ({file or 'no file'}): {n.inclusive:,} {unit} ({pct:.1f}% of {slot}), "
               f"self {n.self:,} {unit} ({100.0 * n.self / total:.1f}%)")
        color = FLAME_COLORS[sum(map(ord, name)) % len(FLAME_COLORS)]
        box = (f'<rect data-depth="{len(n.path)}" data-samples="{n.inclusive}" x="{_n(x)}" y="{_n(y)}" '
               f'width="{_n(w)}" height="{FLAME_ROW - 1}" fill="{color}" stroke="#fff" stroke-width="0.5">'
               f'<title>{_e(tip)}</title></rect>')
        chars = int((w - 6) / 6.2)
        if chars >= 3:
            label = name if len(name) <= chars else name[:chars - 1] + "…"
            box += f'<text x="{_n(x + 3)}" y="{_n(y + 12.5)}" font-size="10" pointer-events="none">{_e(label)}</text>'
        drawn.append(box)
    svg.add(f'<g data-stage="{_e(slot)}" data-total="{total}" data-hidden="{hidden}">{"".join(drawn)}</g>')
    return svg.done()
