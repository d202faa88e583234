"""Decoding nsys' Python sample payloads (analyze.read.nsyspy.decode) built here with struct.pack from
the layouts the module's docstring gives (seen on real recordings: tests/analyze/test_nsys_samples.py
reads those): 2023.4's header (flags, 1, count, padding) and 2025.3's (flags, 0, kind, count), then
count frames of (function id, file id, line); payloads cut at every edge of the header and frames."""
from __future__ import annotations

import base64
import struct

import numpy as np
import pytest

from clef_prof.analyze.read import nsyspy

TABLE = ["<module>", "head", "/srv/app.py", "three", "one", "a &amp; b"]


def payload(frames, count=None, flags=7, layout="2023.4", cut=None):
    n = len(frames) if count is None else count
    head = struct.pack("<IIII", flags, 1, n, 0) if layout == "2023.4" else struct.pack("<IIII", flags, 0, 9, n)
    raw = head + b"".join(struct.pack("<QQQ", *f) for f in frames)
    return base64.b64encode(raw[:cut] if cut is not None else raw).decode()


@pytest.mark.parametrize("layout, word", [("2023.4", 2), ("2025.3", 3)])
def test_frames_by_layout(layout, word):
    a = [(1, 2, 10), (3, 2, 20)]
    b = [(4, 2, 30)]
    d = nsyspy.decode(np.array([100, 200, 300]), np.array([1, 2, 1]),
                      [payload(a, layout=layout), payload([], layout=layout), payload(b, flags=3, layout=layout)],
                      TABLE, sampler_gtid=5, count_word=word, os_threads=layout == "2025.3")
    assert d.status.tolist() == [nsyspy.OK] * 3
    assert d.depth.tolist() == [2, 0, 1] and d.first.tolist() == [0, 2, 2]
    assert d.flags.tolist() == [7, 7, 3]
    assert d.frames.tolist() == [list(f) for f in a + b]
    assert d.string_ids.tolist() == [1, 2, 3, 4] and d.string_text == ["head", "/srv/app.py", "three", "one"]
    assert (d.sampler_gtid, d.os_threads) == (5, layout == "2025.3")
    pos, known = d.text(np.array([3, 0, 4, 9]))
    assert known.tolist() == [True, False, True, False] and [d.string_text[p] for p in pos[[0, 2]]] == ["three", "one"]


def test_payloads_cut_at_each_edge():
    two = [(1, 2, 10), (3, 2, 20)]
    cases = [                        # (payload, status, depth)
        (payload(two, cut=15), nsyspy.TRUNCATED, 0),        # one byte short of the 16-byte header
        (payload([], count=0, cut=16), nsyspy.OK, 0),       # the header alone, no frame: an empty stack
        (payload(two, cut=16), nsyspy.OVERRUN, 0),          # the header says 2 frames, none follows
        (payload(two, cut=16 + 24), nsyspy.OVERRUN, 0),     # one of two
        (payload(two, cut=16 + 48 - 1), nsyspy.OVERRUN, 0),  # a byte short of the second
        (payload(two), nsyspy.OK, 2),                       # exactly two frames
        (payload(two + [(5, 5, 5)], count=2), nsyspy.OK, 2),  # more bytes than stated: the stated frames
        ("!!not base64!!", nsyspy.TRUNCATED, 0),
        ("", nsyspy.TRUNCATED, 0),
    ]
    d = nsyspy.decode(np.arange(len(cases)), np.ones(len(cases), np.int64), [c[0] for c in cases], TABLE, 1)
    assert d.status.tolist() == [c[1] for c in cases]
    assert d.depth.tolist() == [c[2] for c in cases]
    assert d.frames.tolist() == [list(f) for f in two + two]
    assert d.first.tolist() == [0, 0, 0, 0, 0, 0, 2, 4, 4]


def test_strings_unescaped_and_ids_outside_the_table_dropped():
    d = nsyspy.decode(np.array([1]), np.array([1]), [payload([(5, 99, 1), (-1 & 0xFFFFFFFFFFFFFFFF, 2, 3)])],
                      TABLE, 1)
    assert d.string_text == ["/srv/app.py", "a & b"] and d.string_ids.tolist() == [2, 5]
    empty = nsyspy.decode(np.zeros(0, np.int64), np.zeros(0, np.int64), [], TABLE, 1)
    assert len(empty.t) == len(empty.frames) == len(empty.string_ids) == 0
    assert empty.text(np.array([1, 2]))[1].tolist() == [False, False]
