"""clef-prof's own Python sampler: which Python functions a thread is in, as NVTX marks.

Why: nsys 2022.4 has no Python sampling, and the samples of 2023.4 and 2025.3 do not reach an
SQLite export with their frames (docs/sampling.md). This sampler works under every nsys, in CI
too: a daemon thread reads `sys._current_frames()` at the rate asked and writes one NVTX mark
per sampled thread and tick, which `clef_prof.analyze.figures.samples` reads from the export.

It starts when the NVTX client attaches to a profiler (`nvtx_client`) and
$CLEF_PROF_PY_SAMPLING_HZ (set by `clef-prof record --python-sampling HZ`, default 100; by hand
beside `nsys profile`) is a positive rate; never otherwise.

What lands in the export (domain `clef-prof samples`; all text registered once, so that nsys
stores it once in StringIds, whatever the capture window):

- a frame, the first time it is seen: the registered string
  `clef-prof frame PID:FID<TAB>function<TAB>file<TAB>line` (no event refers to it);
- a stack, the first time it is seen: `clef-prof stack PID:SID<TAB>FID FID ...`, innermost frame
  first, at most 128 frames; a deeper stack ends with the frame id 0 (frames cut);
- the sampler itself, when it starts: `clef-prof sampler PID hz=HZ depth=128`;
- a sample: an NVTX mark on the sampler's thread whose message is the registered `t PID TID` of
  the sampled thread (its OS id, threading.get_native_id) and whose int64 payload is the SID.

A thread running C code (a NumPy call, a lock wait, a socket read) is sampled at the Python
frame that called into C: that frame is the leaf. Samples are wall time: a thread waiting is
sampled as often as one computing. Standard library only: this runs inside the server.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from ..base.config import ENV_PY_SAMPLING_HZ as ENV_HZ, MAX_PY_SAMPLING_HZ as MAX_HZ
from . import nvtx_client as _nc

DOMAIN = "clef-prof samples"
SAMPLER_PREFIX = "clef-prof sampler "
FRAME_PREFIX = "clef-prof frame "
STACK_PREFIX = "clef-prof stack "
MAX_DEPTH = 128

_sampler: "Sampler | None" = None


def rate_from_env(env=None) -> float:
    """The rate $CLEF_PROF_PY_SAMPLING_HZ asks for (0 when unset, not a number, or not positive),
    at most MAX_HZ."""
    raw = (os.environ if env is None else env).get(ENV_HZ, "").strip()
    try:
        hz = float(raw)
    except ValueError:
        return 0.0
    return min(hz, MAX_HZ) if hz > 0 else 0.0


class Sampler(threading.Thread):
    """The sampling thread of one process (see the module docstring for what it writes)."""

    def __init__(self, hz: float):
        super().__init__(name="clef-prof sampler", daemon=True)
        self.period = 1.0 / hz
        self.pid = os.getpid()
        self.domain = _nc.Domain(DOMAIN)
        self.frames: dict = {None: 0}           # (code, line) -> frame id (1, 2, ...); None: frames cut
        self.stacks: dict[tuple, int] = {}      # frame ids, innermost first -> stack id
        self.threads: dict[int, object] = {}    # threading ident -> the sampled thread's registered message
        self.stopping = threading.Event()
        self.taken = 0

    def _frame_id(self, key: tuple) -> int:
        fid = len(self.frames)
        code, line = key
        name = getattr(code, "co_qualname", code.co_name)
        self.domain.register(f"{FRAME_PREFIX}{self.pid}:{fid}\t{name}\t{code.co_filename}\t{line}", replay=False)
        self.frames[key] = fid
        return fid

    def _stack_id(self, keys: tuple) -> int:
        frames = self.frames
        ids = [frames[k] if k in frames else self._frame_id(k) for k in keys]
        sid = len(self.stacks) + 1
        self.domain.register(f"{STACK_PREFIX}{self.pid}:{sid}\t{' '.join(map(str, ids))}", replay=False)
        self.stacks[keys] = sid
        return sid

    def _thread_message(self, ident: int):
        native = None
        for t in threading.enumerate():
            if t.ident == ident:
                native = t.native_id
        if native is None:      # a thread threading does not know (started from C): not attributable
            return None
        h = self.domain.register(f"t {self.pid} {native}", replay=False)
        self.threads[ident] = h
        return h

    def sample_once(self) -> None:
        """One tick: a mark per Python thread but this one."""
        me = self.ident
        stacks = self.stacks
        mark = self.domain.mark
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            msg = self.threads.get(ident) or self._thread_message(ident)
            if msg is None:
                continue
            keys = []
            f = frame
            while f is not None and len(keys) < MAX_DEPTH:
                keys.append((f.f_code, f.f_lineno))
                f = f.f_back
            if f is not None:
                keys.append(None)           # frames cut: id 0
            keys = tuple(keys)
            sid = stacks.get(keys) or self._stack_id(keys)
            mark(msg, payload=sid)
            self.taken += 1

    def run(self) -> None:
        self.domain.register(f"{SAMPLER_PREFIX}{self.pid} hz={1.0 / self.period:g} depth={MAX_DEPTH}", replay=False)
        clock = time.monotonic
        due = clock() + self.period
        while not self.stopping.wait(max(due - clock(), 0.0)):
            try:
                self.sample_once()
            except Exception as exc:        # never break the server: say once, stop sampling
                sys.stderr.write(f"clef-prof sampler[{self.pid}]: stopped: {type(exc).__name__}: {exc}\n")
                return
            due += self.period
            now = clock()
            if due <= now:                  # fell behind (the GIL came late): skip the missed ticks, no burst
                due = now + self.period

    def stop(self) -> None:
        self.stopping.set()


def start_from_env() -> "Sampler | None":
    """Start this process's sampler when $CLEF_PROF_PY_SAMPLING_HZ asks for one and a profiler is
    attached (once per process; again in a forked child, whose threads the fork did not copy)."""
    global _sampler
    hz = rate_from_env()
    if not hz or not _nc.enabled():
        return None
    if _sampler is not None and _sampler.pid == os.getpid() and _sampler.is_alive():
        return _sampler
    _sampler = Sampler(hz)
    _sampler.start()
    return _sampler


def _after_fork_in_child() -> None:
    if _sampler is not None:
        start_from_env()


os.register_at_fork(after_in_child=_after_fork_in_child)
