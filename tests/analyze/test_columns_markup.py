"""The small pieces every renderer and the analyze path share: the NumPy column table
(analyze.columns) and Markdown escaping of untrusted text (analyze.markup)."""
from __future__ import annotations

import numpy as np
import pytest

from clef_prof.analyze.columns import Table, factorize
from clef_prof.analyze.markup import md


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
