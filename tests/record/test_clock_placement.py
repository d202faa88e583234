"""record's placement of the recorded span on its own clock (record.manifest.place_span), at its
edges: which marks place each edge, the largest offset kept, the check against record's window
to the nanosecond. The same function on a real capture, and a copy with nsys' session start 2 s
off: tests/record/test_record.py (assert_clock_placement)."""
from __future__ import annotations

import pytest

from clef_prof.record.manifest import CLOCK_NEAR_NS, CLOCK_SLACK_NS, place_span

S = 1_000_000_000
T0 = 1_700_000_000 * S                   # nsys' session start, wall clock
OFF = T0 + 5_000_000                     # the true offset: nsys' session start is 5 ms early


def marks(*starts, off=OFF, delay=0):
    """Clock marks at these session times, each read `delay` ns before nsys stamped it."""
    return [(s, s + off - delay) for s in starts]


def test_marks_place_each_edge_with_the_largest_offset_near_it():
    # two processes' marks: one's reads 40 µs late (a smaller offset), the other's on time
    m = sorted(marks(0, S, 2 * S, 3 * S, delay=40_000) + marks(S // 2, 5 * S // 2))
    a, b, how = place_span(T0, 100, 3 * S, m, T0, T0 + 4 * S)
    assert (a, b) == (100 + OFF, 3 * S + OFF)
    assert how == {"source": "clef-prof clock marks", "marks": 6, "session_start_error_ms": -5.0}


def test_each_edge_its_own_marks_when_the_clocks_drift():
    """nsys' clock gains 1 ms a second on the wall clock: each edge takes the marks within 1 s
    of it, the largest offset among them (here the one 1 s before the last edge, 1 ms off it)."""
    m = [(k * S // 4, k * S // 4 + OFF - k * 250_000) for k in range(13)]     # 0 .. 3 s
    a, b, _ = place_span(T0, 0, 3 * S, m, T0, T0 + 4 * S)
    assert a == OFF and b == 3 * S + OFF - 2_000_000


def test_all_marks_when_none_is_near_an_edge():
    m = marks(10 * S)                            # one mark, far from both edges
    a, b, _ = place_span(T0, 0, S, m, None, None)
    assert (a, b) == (OFF, S + OFF)
    near = marks(CLOCK_NEAR_NS, off=OFF) + marks(10 * S, off=OFF + 7)
    a, _, _ = place_span(T0, 0, S, near, None, None)
    assert a == OFF                              # the mark exactly 1 s away counts as near


def test_without_marks_nsys_session_start_places_it():
    a, b, how = place_span(T0, 10, 20, [], T0, T0 + 30)
    assert (a, b, how) == (T0 + 10, T0 + 20, {"source": "nsys session start", "marks": 0})


@pytest.mark.parametrize("shift, refused", [(-CLOCK_SLACK_NS, False), (-CLOCK_SLACK_NS - 1, True),
                                            (CLOCK_SLACK_NS, False), (CLOCK_SLACK_NS + 1, True)])
def test_the_window_check_to_the_nanosecond(shift, refused):
    """The span may begin up to the slack before record asked, and end up to it after nsys
    confirmed the window closed; one nanosecond more and it is refused, with by how much."""
    lower, upper = T0 + 1_000, T0 + 9_000
    first, last = (1_000 + shift, 5_000) if shift < 0 else (2_000, 9_000 + shift)
    a, b, how = place_span(T0, first, last, [], lower, upper)
    assert (a is None) == refused == (b is None) == ("refused" in how)
    if refused and shift < 0:
        assert "begins 2.0 ms before record asked for the window" in how["refused"]
    if refused and shift > 0:
        assert "ends 2.0 ms after nsys confirmed the window closed" in how["refused"]


def test_no_window_edges_no_check():
    a, b, how = place_span(T0, 0, 10 * S, [], None, None)
    assert (a, b) == (T0, T0 + 10 * S) and "refused" not in how
