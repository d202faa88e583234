"""Lanes and colours shared by the matplotlib plots (notebooks) and the SVG of the HTML report,
so that both pictures read the same."""
from __future__ import annotations

LANE_BATCH = "batch"
LANE_H2D = "H2D copies"
LANE_D2H = "D2H copies"
LANE_KERNELS = "kernels"
LANE_GRAPHS = "graphs"
LANE_BUSY = "GPU busy"
GPU_LANES = (LANE_H2D, LANE_D2H, LANE_KERNELS, LANE_GRAPHS, LANE_BUSY)

STAGE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                "#ccb974", "#64b5cd")
MEMORY_COLORS = {"pageable": "#d62728", "pinned": "#2ca02c"}
OTHER_MEMORY_COLOR = "#ff7f0e"          # H2D copies from memory neither pageable nor pinned
OTHER_COLOR = "#b0b0b0"
KERNEL_COLOR = "#1f3a93"
GRAPH_COLOR = "#9c27b0"
D2H_COLOR = "#6a3d9a"
BUSY_COLOR = "#555555"


def timeline_title(name: str, first: int, last: int, n_batches: int, requests: int, h2d: int, cuda: bool,
                   title: str | None = None) -> str:
    """The timeline's title line, the same over the notebook plot and the report's SVG."""
    line = (title or f"{name}: batches #{first}–#{last}") + f" · {n_batches} batches, {requests} requests"
    if cuda and requests:
        line += f" · {h2d} H2D copies = {h2d / requests:.2f} per request"
    return line


class TimelineMarks:
    """The figures both timelines give of their marks (`marks`: lane -> marks of the batches shown)."""

    marks: dict[str, int]
    requests: int

    @property
    def h2d_marks(self) -> int:
        return self.marks.get(LANE_H2D, 0)

    @property
    def h2d_per_request(self) -> float | None:
        return self.h2d_marks / self.requests if self.requests else None
