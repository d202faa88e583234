"""Reading request ids and ranges by event type (analyze.read.nvtx) from a real nsys 2023.4 capture
(cpu23-inline) with request ranges and marks added in its `clef` domain, one of each shape a server
writes, each read back against what the message says by hand."""
from __future__ import annotations

import re

import pytest

from clef_prof.analyze.read.export import Export
from clef_prof.analyze.read.nvtx import read_ids, read_marks, read_ranges, MARK_TYPES
from conftest import edited_copy

PID_TID = 281648402802793            # the thread that created the clef domain (id 2)
ROWS = [  # (eventType, start, end, message, by_string_id)
    (59, 10, 20, "request rid=abc", True),
    (59, 30, 40, "request rid=x y", False),          # whitespace in the id: left to the regex, as a message
    (60, 50, 60, "request rid=a;b", False),
    (70, 70, 80, "request rid=q)", True),
    (71, 90, 100, "request rid=", False),            # no id at all
    (59, 110, 120, "request other text", True),
    (59, 130, 140, "requestx rid=z", False),          # another name: not read
    (60, 150, 160, "request rid=tab\there", True),
    (70, 170, 180, "request rid=plain-2", False),
    (34, 200, None, "enqueued rid=m1", True),
    (34, 210, None, "enqueued rid=m 2", False),
    (35, 220, None, "enqueued rid=no", False),       # not a mark type nsys writes
    (33, 230, None, "enqueued rid=no", False),
]


@pytest.fixture(scope="module")
def cap(capture, tmp_path_factory):
    out = tmp_path_factory.mktemp("nvtx") / "ids.sqlite"
    st = []
    for i, (etype, s, e, msg, by_id) in enumerate(ROWS):
        sid = 900_000 + i
        if by_id:
            st.append(("INSERT INTO StringIds (id, value) VALUES (?, ?)", (sid, msg)))
        st.append(("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, textId, globalTid, domainId) "
                   "VALUES (?, ?, ?, ?, ?, ?, 2)", (s, e, etype, None if by_id else msg, sid if by_id else None, PID_TID)))
    # the same request in another domain (1, Python Backtrace): never read as clef's
    st.append(("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId) VALUES "
               "(5, 6, 59, 'request rid=other-domain', ?, 1)", (PID_TID,)))
    path = edited_copy(capture("cpu23-inline"), out, *st)
    with Export.open(str(path)) as c:
        yield c


def by_hand(types):
    """(start, end, id, raw) of the rows `read_ids` should give: an id where the message is
    `request rid=ID` with an ID holding no whitespace, ';' or ')', else the whole message."""
    out = []
    for etype, s, e, msg, _ in ROWS:
        prefix = "enqueued" if types == MARK_TYPES else "request"
        if etype not in types or not msg.startswith(prefix + " "):
            continue
        m = re.fullmatch(re.escape(prefix) + r" rid=([^\s;)]+)", msg)
        out.append((s, -1 if e is None else e, m.group(1) if m else "", "" if m else msg))
    return out


def test_request_ids_cut_out_or_left_as_messages(cap):
    r, raw = read_ids(cap, "clef", "request")
    got = sorted(zip(r["start"].tolist(), r["end"].tolist(), r["id"].tolist(), raw.tolist()))
    assert got == sorted(by_hand((59, 60, 70, 71)))
    assert {i for i in r["id"] if i} == {"abc", "plain-2"}
    assert (r["gtid"] == PID_TID).all()


def test_enqueued_marks(cap):
    m, raw = read_ids(cap, "clef", "enqueued", MARK_TYPES)
    assert sorted(zip(m["start"].tolist(), m["end"].tolist(), m["id"].tolist(), raw.tolist())) == \
        [(200, -1, "m1", ""), (210, -1, "", "enqueued rid=m 2")]
    marks = read_marks(cap, "clef", ["enqueued"])
    assert sorted(marks.start.tolist()) == [200, 210] and (marks.end == -1).all()


def test_push_pop_ranges_nest_and_start_end_ranges_do_not(cap):
    r = read_ranges(cap, "clef", [], ["request"])
    kinds = dict(zip(r.start.tolist(), r.push_pop.tolist()))
    want = {s: etype in (59, 70) for etype, s, e, msg, _ in ROWS
            if etype in (59, 60, 70, 71) and msg.startswith("request ")}
    assert kinds == want and set(want.values()) == {True, False}
    assert sorted(read_ranges(cap, "clef", ["request other text"], []).start.tolist()) == [110]
    probe = read_ranges(cap, "clef", [], ["request"], probe=True)
    assert len(probe) == 1
    assert len(read_ranges(cap, "clef", [], ["nothing"], probe=True)) == 0
    assert sorted(read_ranges(cap, "Python Backtrace", [], ["request"]).start.tolist()) == [5]
