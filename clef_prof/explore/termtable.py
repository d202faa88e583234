"""Plain-text tables and paragraphs that fit a terminal width without cutting or splitting a number.

Every terminal renderer (analyze, compare, and what else prints figures) lays out through this
module: cells are never shortened or folded; a header wraps at its spaces; columns that do not
fit go to a second block under the first (the label columns repeated); a label too wide to share
a line with any figure goes on a line of its own above its figures. Prose wraps at spaces only.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass, replace

from ..base.glyphs import plain

GAP = 2


def width() -> int:
    """The terminal's width: $COLUMNS, else the terminal's size, else 80 (a pipe or a file)."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return 80


@dataclass(frozen=True)
class Column:
    header: str
    align: str = "right"     # "right" for figures, "left" for labels


_UNIT = re.compile(r"(?<![\w.])(\d[\d,.]*) (B|KB|MB|GB|KiB|MiB|GiB|ns|us|µs|ms|s)(?![\w/])")
_KEEP = "\x1f"      # a space that does not break: a figure and its unit stay on one line


def wrap(text: str, cols: int, indent: str = "", first: str = "") -> list[str]:
    """`text` as lines of at most `cols` characters, broken at spaces only (a number is never split,
    nor parted from its unit: `1,141 B`); clef-prof's glyphs as their ASCII stand-ins in ASCII
    mode (glyphs.plain)."""
    kept = _UNIT.sub(rf"\1{_KEEP}\2", plain(text).replace(_KEEP, " "))
    lines = textwrap.wrap(kept, cols, initial_indent=first, subsequent_indent=indent,
                          break_long_words=False, break_on_hyphens=False) or [first.rstrip()]
    return [line.replace(_KEEP, " ") for line in lines]


def _header_lines(header: str, w: int) -> list[str]:
    return textwrap.wrap(header, w, break_long_words=False, break_on_hyphens=False) or [""]


def _col_width(col: Column, cells: list[str]) -> int:
    """The longest header word or cell; at least 1, so that a column of empty cells keeps its rule."""
    longest_word = max((len(x) for x in col.header.split()), default=0)
    return max([1, longest_word, *(len(c) for c in cells)])


def _block(cols: list[Column], widths: list[int], rows: list[list[str]]) -> list[str]:
    heads = [_header_lines(c.header, w) for c, w in zip(cols, widths)]
    depth = max(len(h) for h in heads)
    heads = [[""] * (depth - len(h)) + h for h in heads]     # headers sit on the rule

    def line(cells: list[str]) -> str:
        parts = [c.ljust(w) if col.align == "left" else c.rjust(w) for col, w, c in zip(cols, widths, cells)]
        return (" " * GAP).join(parts).rstrip()

    out = [line([h[i] for h in heads]) for i in range(depth)]
    out.append((" " * GAP).join(plain("─") * w for w in widths))
    out += [line(r) for r in rows]
    return out


def table(columns: list[Column], rows: list[list[str]], cols: int, labels: int = 1,
          title: str | None = None) -> list[str]:
    """Lines of a table at most `cols` wide. The first `labels` columns name the row; the others
    are split into as many blocks as needed, each repeating the labels. Headers and cells are
    laid out as printed: with $CLEF_PROF_ASCII, in ASCII stand-ins (glyphs.plain)."""
    columns = [replace(c, header=plain(c.header)) for c in columns]
    rows = [[plain(x) for x in r] for r in rows]
    widths = [_col_width(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    out = wrap(title, cols) if title else []
    lab_w = sum(widths[:labels]) + GAP * labels
    figures = list(range(labels, len(columns)))
    if figures and lab_w + widths[figures[0]] > cols or not figures:
        return out + _stacked(columns, widths, rows, cols, labels)
    blocks: list[list[int]] = [[]]
    used = lab_w
    for i in figures:
        if blocks[-1] and used + widths[i] > cols:
            blocks.append([])
            used = lab_w
        blocks[-1].append(i)
        used += widths[i] + GAP
    one_line = GAP + sum(widths[i] + GAP for i in figures) - GAP
    if any(lab_w + widths[i] > cols for i in figures) or len(blocks) > 1 and one_line <= cols and lab_w > cols // 3:
        return out + _stacked(columns, widths, rows, cols, labels)
    for n, block in enumerate(blocks):
        idx = list(range(labels)) + block
        if n:
            out.append("")
        out += _block([columns[i] for i in idx], [widths[i] for i in idx], [[r[i] for i in idx] for r in rows])
    return out


def _chunks(idx: list[int], widths: list[int], room: int) -> list[list[int]]:
    """`idx` in order, cut into runs whose columns side by side (GAP apart) fit `room`."""
    out: list[list[int]] = [[]]
    used = 0
    for i in idx:
        need = widths[i] + (GAP if out[-1] else 0)
        if out[-1] and used + need > room:
            out.append([])
            used, need = 0, widths[i]
        out[-1].append(i)
        used += need
    return out


def _stacked(columns: list[Column], widths: list[int], rows: list[list[str]], cols: int, labels: int) -> list[str]:
    """Each row's labels on a line of their own, its figures on the next, indented under one header;
    figures too wide for one line go into blocks, each with its header and the rows' labels again."""
    figs = list(range(labels, len(columns)))
    pad = " " * GAP
    out: list[str] = []
    for n, chunk in enumerate(_chunks(figs, widths, cols - GAP) if figs else [[]]):
        if n:
            out.append("")
        out.append(plain(" · ").join(c.header for c in columns[:labels]))
        if chunk:
            out += [pad + h for h in _block([columns[i] for i in chunk], [widths[i] for i in chunk], [])]
        for r in rows:
            out += wrap(pad.join(r[:labels]).rstrip(), cols, indent=pad)
            if chunk:
                line = pad + pad.join(r[i].rjust(widths[i]) for i in chunk)
                out += [line.rstrip()] if len(line) <= cols else wrap(pad.join(r[i] for i in chunk), cols, pad * 2, pad)
    return out
