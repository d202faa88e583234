"""The small pieces every renderer and the analyze path share: the NumPy column table
(analyze.read.columns) and Markdown escaping of untrusted text (explore.markup)."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.read.columns import Table, factorize
from clef_prof.explore.markup import md


def test_table_rows_columns_and_selection():
    t = Table({"a": np.array([1, 2, 3])}, b=np.array([4.0, 5.0, 6.0]))
    assert len(t) == 3 and t.columns == ["a", "b"] and "a" in t and "c" not in t
    assert len(Table()) == 0 and Table().columns == [] and "a" not in Table()
    sub = t[np.array([True, False, True])]
    assert sub["a"].tolist() == [1, 3] and sub["b"].tolist() == [4.0, 6.0]
    t["c"] = 7                                            # a scalar fills the column
    assert t["c"].tolist() == [7, 7, 7]
    t["c"][0] = 0                                         # its own copy, not a broadcast view
    assert t["c"].tolist() == [0, 7, 7]
    u = t.assign(d=np.array([1, 1, 2]), e=1.5)
    assert u.columns == ["a", "b", "c", "d", "e"] and t.columns == ["a", "b", "c"]
    assert t.select(["c", "a"]).columns == ["c", "a"]
    both = Table.concat([t.select(["a", "b"]), Table(a=np.array([9]), b=np.array([9.5]), z=np.array([0]))])
    assert both.columns == ["a", "b"] and both["a"].tolist() == [1, 2, 3, 9]
    assert repr(t) == "Table(3 rows: a, b, c)"
    assert t.frame().shape == (3, 3)


@pytest.mark.parametrize("other, same", [
    (Table(a=np.array([1, 2]), b=np.array([0.5, 1.0])), True),
    (Table(b=np.array([0.5, 1.0]), a=np.array([1, 2])), False),            # the order of the columns counts
    (Table(a=np.array([1.0, 2.0]), b=np.array([0.5, 1.0])), False),        # equal values of another dtype
    (Table(a=np.array([1, 3]), b=np.array([0.5, 1.0])), False),            # another value
    (Table(a=np.array([1, 2])), False),                                    # a column fewer
])
def test_table_equals(other, same):
    t = Table(a=np.array([1, 2]), b=np.array([0.5, 1.0]))
    assert t.equals(other) is same and other.equals(t) is same


def test_factorize_in_order_of_appearance():
    uniques, codes = factorize(np.array(["b", "a", "b", "c", "a"], dtype=object))
    assert uniques.tolist() == ["b", "a", "c"] and codes.tolist() == [0, 1, 0, 2, 1] and codes.dtype == np.int64
    uniques, codes = factorize(np.array([], dtype=object))
    assert len(uniques) == 0 and len(codes) == 0


@pytest.mark.parametrize("text, code, want", [
    ("encode_batch", True, "`encode_batch`"),
    ("encode_batch", False, "encode\\_batch"),
    ("a|b", True, "a\\|b"),                               # cannot be a code span: escaped instead
    ("a`b", True, "a\\`b"),
    ("a\\b", True, "a\\\\b"),
    ("<script>&", False, "&lt;script&gt;&amp;"),
    ("two\nlines\there", True, "`two lines here`"),
    ("", True, ""),
    ("   ", False, ""),
    ("x\x00y", True, "`x y`"),
])
def test_markdown_of_untrusted_text(text, code, want):
    assert md(text, code) == want


def _tables(markdown: str) -> dict[str, list[list[str]]]:
    """The markdown's stage tables by their bold title: header row and body rows, cells stripped."""
    out, title, lines = {}, None, markdown.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("**") and ln.endswith("**") and i + 2 < len(lines) and lines[i + 2].startswith("| stage |"):
            title = ln.strip("*")
            out[title] = []
        elif title and ln.startswith("|") and not ln.startswith("|---"):
            out[title].append([c.strip() for c in ln.strip("|").split("|")])
        elif title and not ln.startswith("|") and out[title]:
            title = None
    return out


def test_analyze_markdown_is_split_into_readable_tables(capture):
    """analyze -f markdown had one stage table of 26 columns; now one per kind of figure (host time,
    CUDA work per request, CUDA counts per capture), each of at most 12 columns, each row naming
    its stage, and the figures those of the JSON (gpu-q1c16-main: 9 pageable H2D copies and 3,424 B
    per request in transfer, 22,800 kernels in head per capture)."""
    import json

    from clicheck import run_main

    path = capture("gpu-q1c16-main")
    p = run_main("analyze", "-f", "markdown", path)
    assert p.returncode == 0, p.stderr
    t = _tables(p.stdout)
    assert list(t) == ["Host time", "CUDA work per request", "CUDA counts per capture"]
    doc = json.loads(run_main("analyze", "-f", "json", path).stdout)
    stages = list(doc["stages"])
    for rows in t.values():
        assert len(rows[0]) <= 12 and rows[0][0] == "stage"
        assert [r[0] for r in rows[1:]] == [*stages, "pooler (batch)"]
    cell = {title: {r[0]: dict(zip(rows[0], r)) for r in rows[1:]} for title, rows in t.items()}
    tr, head = doc["stages"]["transfer"], doc["stages"]["head"]
    assert cell["Host time"]["transfer"]["instances"] == f"{tr['instances']:,}" == "282"
    assert cell["CUDA work per request"]["transfer"]["H2D copies /req"] == f"{tr['h2d_copies_per_request']:.2f}" == "9.00"
    assert cell["CUDA work per request"]["transfer"]["H2D B /req"] == f"{tr['h2d_bytes_per_request']:,.0f}" == "3,424"
    assert cell["CUDA counts per capture"]["head"]["GPU kernels"] == f"{head['gpu_kernels']:,}" == "22,800"
    host = run_main("analyze", "-f", "markdown", capture("cpu23-inline"))
    assert list(_tables(host.stdout)) == ["Host time"]
