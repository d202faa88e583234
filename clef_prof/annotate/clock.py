"""Clock marks: the server's wall clock written into the capture, so that record can place the
capture on its own clock without trusting nsys' session start.

Why: record counts the client's requests inside the span nsys recorded (the bounds analyze's
request count is checked against). That span is on nsys' clock; the client's times are
`time.time_ns()`. nsys gives one pairing of the two, the wall-clock time of its time 0
(TARGET_INFO_SESSION_START_TIME), taken once at the session's start; when that pairing is off,
the bounds are off and a correct capture reads as holding another client's requests.

What: while $CLEF_PROF_CLOCK_MARKS is 1 (set by `clef-prof record`) and a profiler is attached,
a daemon thread writes, every PERIOD_S, one NVTX mark in domain DOMAIN whose registered
message is MESSAGE and whose int64 payload is `time.time_ns()` read just before the mark. nsys
stamps the mark with its own clock, so each mark pairs the two clocks; the wall-clock read comes
first, so a mark's (payload - start) is the clocks' offset less any delay between the two reads,
never more (record keeps the largest). Standard library only: this runs inside the server.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from ..base.config import CLOCK_MARK_MESSAGE as MESSAGE, ENV_CLOCK_MARKS as ENV
from . import nvtx_client as _nc

DOMAIN = "clef-prof clock"
PERIOD_S = 0.25

_thread: "threading.Thread | None" = None
_pid = 0


def _run() -> None:
    try:
        domain = _nc.Domain(DOMAIN)
        msg = domain.register(MESSAGE)
        mark, now = domain.mark, time.time_ns
        while True:
            mark(msg, payload=now())
            time.sleep(PERIOD_S)
    except Exception as exc:        # never break the server: say once, stop marking
        sys.stderr.write(f"clef-prof clock[{os.getpid()}]: stopped: {type(exc).__name__}: {exc}\n")


def start_from_env() -> bool:
    """Start this process's clock marks when $CLEF_PROF_CLOCK_MARKS is 1 and a profiler is
    attached (once per process; again in a forked child, whose threads the fork did not copy)."""
    global _thread, _pid
    if os.environ.get(ENV) != "1" or not _nc.enabled():
        return False
    if _thread is not None and _pid == os.getpid() and _thread.is_alive():
        return True
    _thread, _pid = threading.Thread(target=_run, name="clef-prof clock", daemon=True), os.getpid()
    _thread.start()
    return True


def _after_fork_in_child() -> None:
    if _thread is not None:
        start_from_env()


os.register_at_fork(after_in_child=_after_fork_in_child)
