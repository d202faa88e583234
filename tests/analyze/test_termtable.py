"""The terminal layout every renderer goes through (termtable): each width's exact lines, read and
checked by eye once, and the rules that hold at any width (no line wider than the terminal unless
one word is, no cell cut or split, figures right-aligned, headers on the rule)."""
import io
import re

import pytest

from clef_prof.explore import termtable
from clef_prof.explore.termtable import Column, table, width, wrap

STAGES = [Column("stage", "left"), Column("ms per request"), Column("H2D copies"), Column("bytes per request")]
STAGE_ROWS = [["parse", "0.50", "3", "4,848"], ["transfer", "12.25", "10", "1,212"]]
TITLE = "Host time per request, by stage (1,520 requests)"

EXPECTED = {
    80: [TITLE,
         "                             bytes",
         "           ms per     H2D      per",
         "stage     request  copies  request",
         "────────  ───────  ──────  ───────",
         "parse        0.50       3    4,848",
         "transfer    12.25      10    1,212"],

    # one figure column a block, the label column repeated in each, a blank line between
    22: ["Host time per request,", "by stage (1,520", "requests)",
         "           ms per", "stage     request", "────────  ───────", "parse        0.50", "transfer    12.25",
         "",
         "             H2D", "stage     copies", "────────  ──────", "parse          3", "transfer      10",
         "",
         "            bytes", "              per", "stage     request", "────────  ───────",
         "parse       4,848", "transfer    1,212"],
    # too narrow for a label beside a figure: each row's label on its own line, its figures under it
    12: ["Host time", "per request,", "by stage", "(1,520", "requests)",
         "stage", "   ms per", "  request", "  ───────", "parse", "     0.50", "transfer", "    12.25",
         "",
         "stage", "     H2D", "  copies", "  ──────", "parse", "       3", "transfer", "      10",
         "",
         "stage", "    bytes", "      per", "  request", "  ───────", "parse", "    4,848", "transfer", "    1,212"],
}

# the title wraps at spaces; the table still fits side by side
EXPECTED[34] = ["Host time per request, by stage", "(1,520 requests)", *EXPECTED[80][1:]]

FUNCS = [Column("function", "left"), Column("file", "left"), Column("ms a"), Column("ms b"), Column("change"),
         Column("calls")]
FUNC_ROWS = [["TokenizersBackend._encode_plus", "tokenization_utils.py", "0.132", "0.265", "+100.8%", "1,552"],
             ["matmul", "-", "0.132", "0", "-100.0%", "3"]]
FUNC_EXPECTED = {
    100: ["function                        file                    ms a   ms b   change  calls",
          "──────────────────────────────  ─────────────────────  ─────  ─────  ───────  ─────",
          "TokenizersBackend._encode_plus  tokenization_utils.py  0.132  0.265  +100.8%  1,552",
          "matmul                          -                      0.132      0  -100.0%      3"],
    # the figures would fit beside the labels only in two blocks, and the labels take more than a
    # third of the width: stacked instead, the two label columns named on one line
    60: ["function · file",
         "   ms a   ms b   change  calls",
         "  ─────  ─────  ───────  ─────",
         "TokenizersBackend._encode_plus  tokenization_utils.py",
         "  0.132  0.265  +100.8%  1,552",
         "matmul  -",
         "  0.132      0  -100.0%      3"],
    40: ["function · file",
         "   ms a   ms b   change  calls",
         "  ─────  ─────  ───────  ─────",
         "TokenizersBackend._encode_plus",
         "  tokenization_utils.py",
         "  0.132  0.265  +100.8%  1,552",
         "matmul  -",
         "  0.132      0  -100.0%      3"],
    20: ["function · file", "   ms a   ms b", "  ─────  ─────",
         "TokenizersBackend._encode_plus", "  tokenization_utils.py", "  0.132  0.265",
         "matmul  -", "  0.132      0",
         "",
         "function · file", "   change  calls", "  ───────  ─────",
         "TokenizersBackend._encode_plus", "  tokenization_utils.py", "  +100.8%  1,552",
         "matmul  -", "  -100.0%      3"],
}


@pytest.mark.parametrize("cols", sorted(EXPECTED))
def test_stage_table_at_each_width(cols):
    assert table(STAGES, STAGE_ROWS, cols, title=TITLE) == EXPECTED[cols]


@pytest.mark.parametrize("cols", sorted(FUNC_EXPECTED))
def test_two_label_columns_at_each_width(cols):
    assert table(FUNCS, FUNC_ROWS, cols, labels=2) == FUNC_EXPECTED[cols]


def _words(lines):
    return {w for line in lines for w in re.split(r" {2,}|^ +| · ", line) if w}


@pytest.mark.parametrize("cols", range(8, 121, 7))
@pytest.mark.parametrize("columns,rows,labels", [(STAGES, STAGE_ROWS, 1), (FUNCS, FUNC_ROWS, 2)])
def test_rules_that_hold_at_any_width(columns, rows, labels, cols):
    lines = table(columns, rows, cols, labels=labels)
    # a line is wider than the terminal only where one word (indented, when stacked) is
    longest = 2 + max(len(w) for w in [*(c for r in rows for c in r), *(w for c in columns for w in c.header.split())])
    assert all(len(x) <= max(cols, longest) for x in lines)
    # no cell is cut, split or dropped: each stands whole between gaps of two spaces
    cells = _words(lines)
    assert {c for r in rows for c in r} <= cells
    # every rule is only box-drawing runs two spaces apart, each as wide as the figures under it
    rules = [x.strip() for x in lines if "─" in x]
    assert rules and all(re.fullmatch(r"─+(  ─+)*", r) for r in rules)


def test_a_figure_wider_than_the_terminal_gets_a_line_of_its_own():
    lines = table([Column("function", "left"), Column("x")], [["parse", "123456789012345"]], 10)
    assert lines == ["function", "                x", "  ───────────────", "parse", "  123456789012345"]


def test_labels_only_and_empty_headers():
    assert table([Column("stage", "left")], [["parse"], ["head"]], 10) == ["stage", "parse", "head"]
    assert table([Column("")], [[""]], 10) == ["", ""]
    # an empty header still leaves its column a header line, blank, above the rule
    assert table([Column("stage", "left"), Column("")], [["parse", "1"]], 40) == [
        "stage", "─────  ─", "parse  1"]


def test_headers_sit_on_the_rule_and_labels_align_left():
    lines = table([Column("name", "left"), Column("a b c d")], [["x", "1234567"], ["yy", "1"]], 80)
    assert lines == ["name  a b c d", "────  ───────", "x     1234567", "yy          1"]
    lines = table([Column("name", "left"), Column("one two three"), Column("n")], [["x", "12345", "7"]], 80)
    assert lines == ["        one", "        two", "name  three  n", "────  ─────  ─", "x     12345  7"]


def test_wrap_breaks_at_spaces_only():
    assert wrap("a 123456789012 b", 5) == ["a", "123456789012", "b"]
    assert wrap("one two three four", 9, indent="  ", first="- ") == ["- one two", "  three", "  four"]
    assert wrap("", 10, first="  - ") == ["  -"]


def test_width_reads_columns_then_the_terminal_then_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "123")
    assert width() == 123
    monkeypatch.setattr(termtable.sys, "stdout", io.StringIO())         # a pipe: not a terminal
    for bad in ("0", "-5", "wide", ""):
        monkeypatch.setenv("COLUMNS", bad)
        assert width() == 80
    monkeypatch.setenv("COLUMNS", "1")
    assert width() == 1

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(termtable.sys, "stdout", Tty())
    monkeypatch.setattr(termtable.shutil, "get_terminal_size", lambda fallback: termtable.os.terminal_size((97, 30)))
    assert width() == 97


LONG_LABEL = [Column("abcdefghij", "left"), Column("a"), Column("b"), Column("c")]
SHORT_LABEL = [Column("abcde", "left"), Column("a"), Column("b"), Column("c")]


def test_exact_fits_at_the_edges_of_each_layout():
    """Widths where a layout just fits: one column more and it would change."""
    # 17 = the label column, the gap and the first figure: still side by side, one figure a block
    assert table(STAGES, STAGE_ROWS, 17) == EXPECTED[22][3:]
    assert table(STAGES, STAGE_ROWS, 16) == EXPECTED[12][5:]
    # three 5-wide figures in one line are 21 wide with their indent: stacked at 21, in one chunk,
    # since the label takes more than a third of the width and the figures would need two blocks
    rows = [["row", "123", "12345", "12345"], ["r2", "12345", "1", "12345"]]
    assert table(LONG_LABEL, rows, 21) == [
        "abcdefghij", "      a      b      c", "  ─────  ─────  ─────",
        "row", "    123  12345  12345", "r2", "  12345      1  12345"]
    # a label of exactly a third of the width keeps the blocks
    assert table(SHORT_LABEL, [["row", "12345", "12345", "12345"]], 21) == [
        "abcde      a      b", "─────  ─────  ─────", "row    12345  12345", "",
        "abcde      c", "─────  ─────", "row    12345"]


def test_empty_headers_and_cells_keep_their_column():
    # a column of empty cells under an empty header used to be 0 wide, which textwrap refuses
    assert table([Column("s", "left"), Column("")], [["a", ""]], 40) == ["s", "─  ─", "a"]
    assert table([Column("", "left"), Column("")], [["", ""]], 40) == ["", "─  ─", ""]
    assert table([Column("", "left"), Column("")], [["a", "1"]], 40) == ["", "─  ─", "a  1"]


def test_every_label_column_takes_its_gap():
    # two 1-wide labels and their gaps take 6 columns: with a 5-wide figure, 10 is too narrow
    assert table([Column("a", "left"), Column("b", "left"), Column("c")], [["a", "b", "12345"]], 11, labels=2) == [
        "a  b      c", "─  ─  ─────", "a  b  12345"]
    assert table([Column("a", "left"), Column("b", "left"), Column("c")], [["a", "b", "12345"]], 10, labels=2) == [
        "a · b", "      c", "  ─────", "a  b", "  12345"]


def test_two_blocks_under_a_wide_label_are_stacked_and_stacked_figures_fill_each_line():
    assert table(LONG_LABEL, [["row", "12345", "12345", "12345"]], 24) == [
        "abcdefghij", "      a      b      c", "  ─────  ─────  ─────", "row", "  12345  12345  12345"]
    four = LONG_LABEL + [Column("d")]
    assert table(four, [["row", "12345", "12345", "12345", "12345"]], 14) == [
        "abcdefghij", "      a      b", "  ─────  ─────", "row", "  12345  12345", "",
        "abcdefghij", "      c      d", "  ─────  ─────", "row", "  12345  12345"]


def test_a_stacked_cell_wider_than_the_terminal_wraps_at_its_spaces_indented_under_itself():
    assert table([Column("name", "left"), Column("x")], [["a", "1234567890 1234567890"]], 15) == [
        "name", "                      x", "  ─────────────────────", "a", "  1234567890", "    1234567890"]
    assert table([Column("stage", "left"), Column("p50 → p99"), Column("n")], [["head", "0.51 → 1.20", "7"]], 12) == [
        "stage", "    p50 → p99", "  ───────────", "head", "  0.51 →", "    1.20", "",
        "stage", "  n", "  ─", "head", "  7"]


@pytest.mark.parametrize("cols", range(8, 40))
def test_a_figure_keeps_its_unit_on_its_line(cols):
    """A number and its unit (B, ms, s, MB ...) are one word to the wrap; a number before another
    word (`290 requests`), a unit inside a word (`3 Bs`, `5 s/req`) and the text's own control
    characters are left alone."""
    text = "3.00 copies per request of 1,141 B on average, 0.565 of 0.844 ms in 290 requests, 3 Bs 5 s/req \x1f"
    lines = wrap(text, cols)
    assert " ".join(" ".join(lines).split()) == " ".join(text.replace("\x1f", " ").split())
    for unit in ("1,141 B", "0.844 ms"):
        assert any(unit in line for line in lines), (unit, lines)
    assert all(len(line) <= cols or len(line.split()) <= 2 for line in lines)
    if cols <= 12:          # `290 requests` is no figure and unit: it parts where the width asks
        assert "290" in [line.split()[-1] for line in lines], lines
