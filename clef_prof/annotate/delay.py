"""Virtual slowdowns: a controlled extra host time added to named stages on every call, with or
without a profiler (what `clef-prof whatif` measures the serving response to).

    CLEF_PROF_DELAY="head=spin:100us,transfer=sleep:25%"
    CLEF_PROF_DELAY_STATS=/tmp/run/delay-01      # a folder: this process writes PID.json there

Each entry is `STAGE=[MODE:]AMOUNT`, entries separated by `,`:
- MODE `spin` (default: a busy loop on the calling thread that holds the GIL, like Python work) or
  `sleep` (time.sleep: the GIL is released, like a wait on a device or a lock);
- AMOUNT a fixed time per call, `<number>us` (also `ns`, `ms`), or a fraction of the call's own
  measured time, `<number>%` or `<number>x` (`25%` = `0.25x`). `0us` wraps and measures the stage
  without adding anything (the baseline of an experiment, so that every level pays the same cost).

The delay is added when the stage's call returns (its own time measured first, in
perf_counter_ns), by the same wrappers that code annotations (`clef_prof.stage`) and stage specs
(`clef-prof inject`) use: `api.stage()` gives a `DelayedStage` for a named stage, a plain `Stage`
for every other, so a process without $CLEF_PROF_DELAY pays nothing per call (the lookup happens
once, when a stage is made). A stage made before this module read the variable (at its import)
is not delayed. A bad $CLEF_PROF_DELAY prints one line and ends the process (exit 2): a server
that silently ran undelayed would give figures that look fine and are not.

Per named stage the process counts calls, own ns (the stage's time without what was injected in
it, nested delayed stages included) and injected ns; with $CLEF_PROF_DELAY_STATS set it writes
them as JSON to `FOLDER/PID.json` every PERIOD_S ($CLEF_PROF_DELAY_PERIOD_S) and at exit (a temporary file and a rename: a
reader never sees half a file), with the parsed spec and every stage name this process made.
Standard library only: this runs inside the server.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time

ENV_DELAY = "CLEF_PROF_DELAY"
ENV_STATS = "CLEF_PROF_DELAY_STATS"
ENV_PERIOD = "CLEF_PROF_DELAY_PERIOD_S"
EXIT_BAD_SPEC = 2
PERIOD_S = 0.5              # $CLEF_PROF_DELAY_PERIOD_S overrides it (whatif: 0.05, to read a snapshot when idle)
MODES = ("spin", "sleep")
SCHEMA = "clef-prof/delay/1"

_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|%|x)\s*$")
_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000}


class DelaySpecError(ValueError):
    pass


class Delay:
    """One stage's delay: `mode` spin|sleep, and `fixed_ns` per call or `frac` of its own time."""

    __slots__ = ("stage", "mode", "fixed_ns", "frac")

    def __init__(self, stage: str, mode: str, fixed_ns: int = 0, frac: float = 0.0):
        self.stage, self.mode, self.fixed_ns, self.frac = stage, mode, fixed_ns, frac

    def text(self) -> str:
        amount = f"{self.frac:g}x" if self.frac else f"{self.fixed_ns / 1000:g}us"
        return f"{self.stage}={self.mode}:{amount}"

    def as_dict(self) -> dict:
        return {"stage": self.stage, "mode": self.mode, "fixed_us": self.fixed_ns / 1000, "frac": self.frac}


def parse(text: str) -> dict[str, Delay]:
    """`head=spin:100us,transfer=sleep:25%` to {stage: Delay}; raises DelaySpecError (one line)."""
    out: dict[str, Delay] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        stage, eq, rest = item.rpartition("=")
        stage = stage.strip()
        if not eq or not stage:
            raise DelaySpecError(f"{item!r}: expected STAGE=[spin|sleep:]AMOUNT, e.g. head=spin:100us or "
                                 f"transfer=sleep:25%")
        mode, colon, amount = rest.rpartition(":")
        mode = mode.strip() if colon else "spin"
        if mode not in MODES:
            raise DelaySpecError(f"{item!r}: mode {mode!r} is not spin or sleep")
        m = _AMOUNT.match(amount)
        if not m:
            raise DelaySpecError(f"{item!r}: amount {amount.strip()!r} is not a time per call (100us, 0.5ms, 800ns) "
                                 f"or a fraction of the stage's time (25% or 0.25x)")
        value, unit = float(m.group(1)), m.group(2)
        if stage in out:
            raise DelaySpecError(f"{item!r}: stage {stage!r} named twice")
        if unit in _NS:
            out[stage] = Delay(stage, mode, fixed_ns=round(value * _NS[unit]))
        else:
            out[stage] = Delay(stage, mode, frac=value / 100 if unit == "%" else value)
    return out


def text_of(delays: dict[str, Delay]) -> str:
    return ",".join(d.text() for d in delays.values())


def spin_ns(ns: int, _now=time.perf_counter_ns) -> None:
    """Busy-wait `ns` nanoseconds on this thread, holding the GIL between clock reads."""
    end = _now() + ns
    while _now() < end:
        pass


# --- this process's counters --------------------------------------------------------------------

_lock = threading.Lock()
_threads: list[dict] = []           # every thread's counters: stage -> [calls, own_ns, injected_ns]
_seen: set[str] = set()             # every stage name made in this process
_writer: "threading.Thread | None" = None
PLAN: dict[str, Delay] = {}


class _Local(threading.local):
    """A thread's own counters (no lock per call: each thread adds to its own, snapshot sums)."""
    injected = 0                    # ns injected on this thread so far (nested stages subtract it)

    def __init__(self):
        self.counts = {}
        with _lock:
            _threads.append(self.counts)


_local = _Local()


def seen(name: str) -> None:
    _seen.add(name)


class Timer:
    """Times one delayed stage's calls and adds its delay: `begin()` before the call, `end(token)`
    after (the token is what begin returned, kept by the caller: no per-call state here)."""

    __slots__ = ("delay", "stage", "_spin", "_fixed", "_frac")

    def __init__(self, delay: Delay):
        self.delay, self.stage = delay, delay.stage
        self._spin = delay.mode == "spin"
        self._fixed, self._frac = delay.fixed_ns, delay.frac

    @staticmethod
    def begin(_now=time.perf_counter_ns) -> tuple[int, int]:
        return _now(), _local.injected

    def end(self, token: tuple[int, int], _now=time.perf_counter_ns) -> None:
        t1 = _now()
        here = _local
        t0, inj0 = token
        inj = here.injected
        own = t1 - t0 - (inj - inj0)
        want = self._fixed or int(own * self._frac)
        added = 0
        if want > 0:
            if self._spin:
                end = t1 + want
                while _now() < end:
                    pass
            else:
                time.sleep(want / 1e9)
            added = _now() - t1
            here.injected = inj + added
        c = here.counts.get(self.stage)
        if c is None:
            c = here.counts[self.stage] = [0, 0, 0]
        c[0] += 1
        c[1] += own
        c[2] += added


def snapshot() -> dict:
    """This process's counters and spec, as written to the stats file."""
    stages = {d: {"calls": 0, "own_ns": 0, "injected_ns": 0} for d in PLAN}
    with _lock:
        tables = list(_threads)
    for t in tables:
        for name, c in list(t.items()):
            row = stages.setdefault(name, {"calls": 0, "own_ns": 0, "injected_ns": 0})
            row["calls"] += c[0]
            row["own_ns"] += c[1]
            row["injected_ns"] += c[2]
    return {"schema": SCHEMA, "pid": os.getpid(), "time_ns": time.time_ns(), "spec": text_of(PLAN),
            "delays": [d.as_dict() for d in PLAN.values()], "stages": stages, "stages_seen": sorted(_seen)}


def write_stats() -> None:
    folder = os.environ.get(ENV_STATS)
    if not folder:
        return
    path = os.path.join(folder, f"{os.getpid()}.json")
    tmp = f"{path}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(folder, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(snapshot(), fh)
        os.replace(tmp, path)
    except OSError as exc:
        _say(f"clef-prof delay[{os.getpid()}]: cannot write {path}: {exc.strerror or exc}")


def _period() -> float:
    try:
        v = float(os.environ.get(ENV_PERIOD, PERIOD_S))
    except ValueError:
        return PERIOD_S
    return v if 0.01 <= v <= 60 else PERIOD_S


def _periodic() -> None:
    period = _period()
    while True:
        time.sleep(period)
        write_stats()


def _start_writer() -> None:
    global _writer
    if os.environ.get(ENV_STATS):
        _writer = threading.Thread(target=_periodic, name="clef-prof delay stats", daemon=True)
        _writer.start()


def _after_fork_in_child() -> None:
    """A forked child counts its own calls (its file is its own PID's) and needs its own writer."""
    global _lock
    _lock = threading.Lock()
    _threads[:] = [_local.counts]
    _local.counts.clear()
    if _writer is not None:
        _start_writer()


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:       # a closed stderr must not break the server
        pass


def _load_from_env() -> dict[str, Delay]:
    text = os.environ.get(ENV_DELAY, "")
    if not text.strip():
        return {}
    try:
        plan = parse(text)
    except DelaySpecError as exc:
        _say(f"clef-prof delay: error: ${ENV_DELAY}: {exc}")
        os._exit(EXIT_BAD_SPEC)
    import atexit
    atexit.register(write_stats)
    os.register_at_fork(after_in_child=_after_fork_in_child)
    return plan


PLAN = _load_from_env()
if PLAN:
    _start_writer()
