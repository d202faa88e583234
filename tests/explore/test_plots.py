"""clef_prof.explore.plots: the timeline draws what the data says (3 H2D copies per request in the pr
slice, 9 in main), and every figure renders to a non-blank PNG."""
from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.collections import LineCollection

import clef_prof
from clef_prof.explore import plots
from clef_prof.base.errors import ClefError
from clef_prof.explore.frames import arm_means

TRACES = Path(__file__).resolve().parents[2] / "traces"
PR = TRACES / "gpu-pr-slice.sqlite"        # a slice of gpu-q1c16-pr (nsys 2023.4)
MAIN = TRACES / "gpu-main-slice.sqlite"
GPU25 = TRACES / "gpu25-pr-slice.sqlite"
CPU = TRACES / "cpu23-inline.sqlite"


def drawn_ticks(ax, lane_y: float, color: str) -> int:
    """Vertical tick segments of `color` drawn across the lane centred on lane_y."""
    from matplotlib.colors import to_rgba

    want = np.array(to_rgba(color))
    n = 0
    for coll in ax.collections:
        if not isinstance(coll, LineCollection):
            continue
        colors = coll.get_colors()
        for i, seg in enumerate(coll.get_segments()):
            (x0, y0), (x1, y1) = seg[0], seg[-1]
            c = colors[i % len(colors)]
            if x0 == x1 and min(y0, y1) < lane_y < max(y0, y1) and np.allclose(c, want):
                n += 1
    return n


def assert_png_not_blank(path: Path, min_w: int = 300, min_h: int = 150, min_colours: int = 8) -> None:
    assert path.exists() and path.stat().st_size > 5_000
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    assert w >= min_w and h >= min_h
    rgb = (img[..., :3] * 255).astype(np.uint32).reshape(-1, 3)
    packed = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    assert len(np.unique(packed)) >= min_colours
    assert (rgb < 240).any(axis=1).mean() > 0.01          # not all white


@pytest.mark.parametrize("first", [0, 37])
def test_timeline_pr_shows_3_h2d_copies_per_request(tmp_path, first):
    cap = clef_prof.open(PR)
    tl = plots.timeline(cap, first=first, n=4)
    assert len(tl.batches) == 4 and tl.requests == int(cap.batches.loc[tl.batches, "size"].sum())
    # the counts timeline returns, per batch and overall ...
    assert tl.h2d_marks / tl.requests == 3
    assert (tl.per_batch["h2d_marks"] == 3 * tl.per_batch["size"]).all()
    # ... are the ticks on the axes: pinned (green) ticks in the H2D lane
    green = plots.MEMORY_COLORS["pinned"]
    assert drawn_ticks(tl.ax, tl.lane_y[plots.LANE_H2D], green) == tl.h2d_marks
    assert drawn_ticks(tl.ax, tl.lane_y[plots.LANE_H2D], plots.MEMORY_COLORS["pageable"]) == 0
    # zoom: one batch, each copy apart
    assert tl.zoom is not None and tl.zoom["stage"] == "transfer"
    assert tl.zoom["h2d_marks"] == 3 * tl.zoom["size"]
    assert tl.marks[plots.LANE_D2H] == 4 and tl.marks["head"] == 4
    out = tmp_path / "timeline-pr.png"
    tl.savefig(out)
    assert_png_not_blank(out, 1000, 600)


def test_timeline_main_shows_9_pageable_copies_per_request(tmp_path):
    tl = plots.timeline(MAIN, first=0, n=4)
    assert tl.h2d_marks / tl.requests == 9
    assert drawn_ticks(tl.ax, tl.lane_y[plots.LANE_H2D], plots.MEMORY_COLORS["pageable"]) == tl.h2d_marks
    assert tl.notes and "launch calls" in tl.notes[0]      # graph mode, nsys 2023.4: no GPU record


def test_timeline_graph_trace_and_cpu_only(tmp_path):
    tl = plots.timeline(GPU25, first=0, n=3)
    assert tl.h2d_per_request == 3
    assert tl.marks[plots.LANE_GRAPHS] == tl.requests      # one graph execution per request
    assert not tl.notes
    cpu = plots.timeline(CPU, first=2, n=3)
    assert cpu.lanes == ["batch", "parse", "index", "transfer", "head", "encode"]
    assert cpu.marks["batch"] == 3 and cpu.h2d_marks == 0 and cpu.zoom_ax is None
    out = tmp_path / "cpu.png"
    cpu.savefig(out)
    assert_png_not_blank(out)


def test_timeline_errors():
    with pytest.raises(ClefError, match="past the last batch"):
        plots.timeline(PR, first=500)
    with pytest.raises(ClefError, match="no batch range on thread"):
        plots.timeline(PR, thread="nope")


def test_stage_durations(tmp_path):
    fig = plots.stage_durations(PR)
    ax = fig.axes[0]
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == [
        "parse", "index", "transfer", "head", "encode", "pooler (batch)"]
    out = tmp_path / "durations.png"
    fig.savefig(out)
    assert_png_not_blank(out)
    per_req = plots.stage_durations(PR, per_request=True, log=False)
    assert "per request" in per_req.axes[0].get_xlabel()


def test_compare_bars_from_compare_shape(tmp_path):
    data = {"baseline": "main", "metrics": [
        {"metric": "per_request.pooler_host_ms", "unit": "ms/request",
         "arms": {"main": {"mean": 1.0}, "pr": {"mean": 0.6}}, "ci": [-0.5, -0.3]},
        {"metric": "per_request.h2d_copies", "arms": {"main": {"mean": 9}, "pr": {"mean": 3}}, "ci": None,
         "deterministic": True},
        {"metric": "stages.head.host_ms_per_request", "arms": {"main": {"mean": 0.5, "ci": [0.45, 0.55]},
                                                                "pr": {"mean": 0.4, "ci": [0.35, 0.47]}},
         "ci": None}]}
    fig = plots.compare_bars(data, ci_of="change")
    axes = [a for a in fig.axes if a.get_visible() and a.axison]
    assert len(axes) == 3
    # bars: baseline first
    assert [p.get_height() for p in axes[0].patches] == [1.0, 0.6]
    # the change interval sits on the pr bar at baseline + ci
    caps = [line for line in axes[0].lines if line.get_marker() == "_"]
    ys = sorted(float(y) for line in caps for y in line.get_ydata())
    assert ys == pytest.approx([0.5, 0.7])
    assert "exact" in axes[1].get_title(loc="left")
    out = tmp_path / "bars.png"
    fig.savefig(out)
    assert_png_not_blank(out)
    only = plots.compare_bars(data["metrics"], metrics=["per_request.h2d_copies"])
    assert len([a for a in only.axes if a.axison]) == 1
    with pytest.raises(ClefError, match="no such metric"):
        plots.compare_bars(data, metrics=["nope"])


def test_compare_bars_from_arm_means():
    comp = arm_means({"main": clef_prof.open(MAIN), "pr": clef_prof.open(PR)})
    fig = plots.compare_bars(comp, metrics=["per_request.h2d_copies", "stages.transfer.host_ms_per_request"])
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [9, 3]
    assert "no interval" in ax.get_title(loc="left")
