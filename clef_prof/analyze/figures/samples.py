"""Which Python functions spend each stage's time: the samples of clef-prof's sampler
(clef_prof.annotate.sampler; docs/sampling.md), per stage.

Reading at the edge (the sampler's registered strings from StringIds, its marks through
`nvtx.read_ranges`), then NumPy: each sample goes to the innermost stage range open on its
thread at its time, else "(batch)" inside a batch range, else "(outside)"; per slot, the
functions by self samples (the leaf frame: the Python line that called into C for a thread in C
code) and by inclusive samples (anywhere on the stack, once per sample), each with its share of
the slot's samples and a 95% Wilson interval, and the ms per request it stands for (samples x the
observed sampling period / requests).

Python runs once per distinct frame, stack and thread message (the definitions), never per sample.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...annotate.sampler import DOMAIN, FRAME_PREFIX, MAX_DEPTH, SAMPLER_PREFIX, STACK_PREFIX
from ..read import nsyspy
from ..read.columns import factorize
from ..read.export import Export
from .arrays import first_of_repeats
from .intervals import innermost_containing
from ..model import FunctionSamples, SampleFigures, Samples
from ..read.nvtx import MARK_TYPES, domains, read_ranges
from .stages import Stages

BATCH_SLOT = "(batch)"
OUTSIDE_SLOT = "(outside)"
NO_FRAMES = "(no frames)"           # a stack defined with no frame
UNKNOWN_STACK = "(unknown stack)"   # a sample whose stack id has no definition
UNKNOWN_FRAME = "(unknown frame)"   # a frame id a stack names with no definition
TOP = 10
Z95 = 1.959963984540054
FEW_SAMPLES = 30                    # below this many samples in a slot, its shares are not a measurement
MIN_SWEEPS = 2.0                    # fewer sweeps of the batch phase than this: the samples alias (`beat`)
PY_TABLE = "CLEF_PYTHON_FUNCTIONS"  # a converted Kineto trace's python_function events (analyze.read.kineto)
KINETO_SOURCE = "kineto python_function"
_KINETO_NAME = re.compile(r"^(.*)\((\d+)\): (.+)$")      # `path/file.py(LINE): function`


def wilson(k: np.ndarray, n: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of a binomial share k/n (both bounds 0 where n is 0)."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    safe = np.where(n > 0, n, 1.0)
    p = k / safe
    den = 1.0 + z * z / safe
    mid = (p + z * z / (2 * safe)) / den
    half = z / den * np.sqrt(p * (1 - p) / safe + z * z / (4 * safe * safe))
    lo = np.where(n > 0, np.clip(mid - half, 0.0, 1.0), 0.0)
    hi = np.where(n > 0, np.clip(mid + half, 0.0, 1.0), 0.0)
    return lo, hi


BLOCK_SAMPLES = 8                   # samples per time block of the block interval, at least
MIN_BLOCKS = 5                      # fewer blocks than this: the Wilson interval alone
MAX_BLOCKS = 10                     # more blocks: shorter ones, blind to correlation longer than a block


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile by its Cornish-Fisher expansion in 1/df (within 0.3% of the exact one
    at df >= 4, where the block interval uses it; analyze is below compare.welch's exact one)."""
    z, v = _normal_q(p), float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3))


def _normal_q(p: float) -> float:
    import math
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p else (lo, mid)
    return 0.5 * (lo + hi)


def share_interval(member: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """The interval of each row's share of a slot's samples; `member` (functions, samples) in time
    order: whether each sample counts to the function. Samples are not independent draws: the
    sampler ticks at a nearly fixed period against a program that repeats itself (batch after
    batch), so neighbouring samples see the same phase, and the binomial (Wilson) interval is too
    narrow. So the interval is the wider, at each end, of Wilson's and a block interval: the
    samples cut into consecutive time blocks of at least BLOCK_SAMPLES (at most n / BLOCK_SAMPLES
    blocks, at most MAX_BLOCKS), the share as the ratio of the blocks' sums, its variance from the blocks'
    residuals (a ratio estimator over clusters) with Student's t on blocks - 1 degrees of freedom:
    it holds correlation within a block's span. Coverage is measured by a seeded simulation of the
    sampler against a program of batches (tests/analyze/test_samples.py)."""
    member = np.atleast_2d(np.asarray(member, dtype=bool))
    m, n = member.shape
    k = member.sum(axis=1)
    lo, hi = wilson(k, np.full(m, n), z)
    blocks = min(n // BLOCK_SAMPLES, MAX_BLOCKS)
    if blocks < MIN_BLOCKS:
        return lo, hi
    edges = (np.arange(blocks + 1) * n) // blocks
    kb = np.add.reduceat(member.astype(np.int64), edges[:-1], axis=1)     # (m, blocks)
    nb = np.diff(edges).astype(float)
    p = k / n
    resid = kb - p[:, None] * nb[None, :]
    var = (resid ** 2).sum(axis=1) / (blocks - 1) * blocks / n ** 2
    half = t_quantile(_phi(z), blocks - 1) * np.sqrt(var)
    return np.minimum(lo, np.clip(p - half, 0.0, 1.0)), np.maximum(hi, np.clip(p + half, 0.0, 1.0))


def _phi(z: float) -> float:
    import math
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


@dataclass
class _Defs:
    """The sampler's definitions: functions, and per stack its frames as function indices."""

    func_name: list[str]
    func_file: list[str]
    stack_key: np.ndarray           # pid << 32 | sid, sorted
    stacks: list[tuple[int, ...]]   # per stack: its frames' function indices, innermost first
    cut_stacks: np.ndarray          # bool per stack: deeper than the sampler's depth
    asked_hz: float | None
    bad_definitions: int


def _definitions(cap: Export) -> _Defs:
    rows = cap.rows(f"SELECT value FROM StringIds WHERE value GLOB '{FRAME_PREFIX}*' "
                    f"OR value GLOB '{STACK_PREFIX}*' OR value GLOB '{SAMPLER_PREFIX}*'")
    funcs: dict[tuple[str, str], int] = {}
    frames: dict[tuple[int, int], int] = {}
    stacks: list[tuple[int, list[str]]] = []
    asked: list[float] = []
    bad = 0

    def func(name: str, file: str) -> int:
        return funcs.setdefault((name, file), len(funcs))

    for (value,) in rows:           # once per distinct definition
        try:
            if value.startswith(FRAME_PREFIX):
                head, name, file, _line = value[len(FRAME_PREFIX):].split("\t")
                pid, fid = head.split(":")
                frames[(int(pid), int(fid))] = func(name, file)
            elif value.startswith(STACK_PREFIX):
                head, _, ids = value[len(STACK_PREFIX):].partition("\t")
                pid, sid = head.split(":")
                stacks.append(((int(pid) << 32) | int(sid), ids.split()))
            else:
                asked.append(float(value[len(SAMPLER_PREFIX):].split()[1].removeprefix("hz=")))
        except (ValueError, IndexError):
            bad += 1
    stacks.sort()
    cut = np.zeros(len(stacks), dtype=bool)
    out: list[tuple[int, ...]] = []
    for i, (key, ids) in enumerate(stacks):     # once per distinct stack
        pid = key >> 32
        fs = []
        for raw in ids[:MAX_DEPTH + 1]:
            if raw == "0":
                cut[i] = True
                break
            try:
                fs.append(frames[(pid, int(raw))])
            except (KeyError, ValueError):
                fs.append(func(UNKNOWN_FRAME, ""))
        if len(fs) > MAX_DEPTH:
            fs, cut[i] = fs[:MAX_DEPTH], True
        if not fs:
            fs = [func(NO_FRAMES, "")]
        out.append(tuple(fs))
    keys = np.array([k for k, _ in stacks], dtype=np.int64)
    return _Defs([n for n, _ in funcs], [f for _, f in funcs], keys, out, cut, max(asked) if asked else None, bad)


def _thread_ids(messages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pid, tid) of each `t PID TID` message; -1 where unreadable."""
    uniq, codes = factorize(messages)
    pid = np.full(len(uniq), -1, dtype=np.int64)
    tid = np.full(len(uniq), -1, dtype=np.int64)
    for i, text in enumerate(uniq):     # once per distinct thread
        parts = str(text).split()
        if len(parts) == 3 and parts[0] == "t" and parts[1].isdigit() and parts[2].isdigit():
            if int(parts[2]) < (1 << 24) and int(parts[1]) < (1 << 31):
                pid[i], tid[i] = int(parts[1]), int(parts[2])
    return pid[codes], tid[codes]


def has_samples(cap: Export) -> bool:
    return any(name == DOMAIN for _, _, name in domains(cap))


@dataclass
class StackCounts:
    """One capture's samples per (slot, stack): what every per-stage view is made of (analyze's
    `Samples`, compare's function-level change, the HTML flame view, the samples frame).

    `stacks[j]` is stack column j as function indices, innermost first (the last column: samples
    whose stack has no definition, one frame `(unknown stack)`); `counts[slot, j]` its samples in
    each slot (the stages, then "(batch)" and "(outside)")."""

    slots: list[str]
    func_name: list[str]
    func_file: list[str]
    stacks: list[tuple[int, ...]]
    counts: np.ndarray              # int64 (slot, stack)
    samples: int
    threads: int
    asked_hz: float | None
    observed_hz: float | None
    ms_per_sample: float | None
    unknown_stack: int
    unreadable: int
    outside_session: int
    cut_stacks: int
    bad_definitions: int
    unit: str = "samples"           # or "ns": self time of a Kineto trace's python_function events
    source: str = "clef-prof sampler"
    by_time: int = 0                # nsys' samples placed by time only (their thread not tied to an OS thread)
    unplaced: int = 0               # nsys' samples left out: several untied threads had a range open
    notes: list[str] = field(default_factory=list)  # what the source itself says (nsys: payloads, ties)
    own_samples: int = 0            # samples of clef-prof's own threads, left out (leave_out_own)
    sequence: np.ndarray | None = None  # (2, samples) int64: each sample's slot and stack column, in time order
    thread_ties: dict[int, int] = field(default_factory=dict)  # nsys: Python thread ordinal -> globalTid, where certain
    sweeps: dict[str, float] = field(default_factory=dict)    # stage -> `beat`: sweeps of the batch phase
    duplicates: int = 0             # samples (or python_function events) repeating another exactly: counted once

    def function_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(self, inclusive) samples per (slot, function): the leaf frame's function, and every
        function on the stack once per sample."""
        n_func = len(self.func_name)
        leaf = np.array([st[0] for st in self.stacks], dtype=np.int64)
        pairs = [(j, f) for j, st in enumerate(self.stacks) for f in set(st)]   # once per distinct stack
        ps = np.array([j for j, _ in pairs], dtype=np.int64)
        pf = np.array([f for _, f in pairs], dtype=np.int64)
        n_slot = len(self.slots)
        self_ = np.zeros((n_slot, n_func), dtype=np.int64)
        np.add.at(self_, (slice(None), leaf), self.counts)
        incl = np.zeros((n_slot, n_func), dtype=np.int64)
        np.add.at(incl, (slice(None), pf), self.counts[:, ps])
        return self_, incl


def count(cap: Export, stages: Stages) -> StackCounts | None:
    """The samples of the capture per (slot, stack): clef-prof's sampler's, else nsys' own, else
    the self time of a Kineto trace's python_function events (`durations`); None when it holds
    none. clef-prof's own threads are left out (`leave_out_own`)."""
    if not cap.has("StringIds"):
        return None
    if not has_samples(cap):
        found = nsyspy.marks(cap)
        if found is not None:
            return leave_out_own(nsys_counts(cap, stages, *found))
        return leave_out_own(durations(cap, stages)) if cap.has(PY_TABLE) else None
    return leave_out_own(_sampler_counts(cap, stages))


_OWN_FILE = re.compile(r"(^|[/\\])clef_prof[/\\]")
_THREADING = ("threading.py",)
_OWN_THREAD = re.compile(r"(^|[/\\])clef_prof[/\\]annotate[/\\](clock|sampler)\.py$")   # the tool's thread entries
IDLE_NAMES = frozenset({"select", "poll", "epoll", "wait", "wait_for", "sleep", "acquire", "_wait_for_tstate_lock",
                        "join", "accept", "recv_into", "_recv_bytes", "_poll"})
IDLE_FILES = frozenset({"selectors.py", "threading.py", "queue.py", "base_events.py", "connection.py", "socket.py",
                        "ssl.py", "subprocess.py", "popen_fork.py", "synchronize.py", "thread.py", "process.py",
                        "windows_events.py", "socketserver.py"})
_BUILTIN_IDLE = re.compile(r"^<built-in (method|function) (select|poll|epoll|wait|sleep|acquire)\b")


def _own(sc: StackCounts) -> np.ndarray:
    """Per function: it is clef-prof's own code or the threading module that starts threads."""
    return np.array([bool(_OWN_FILE.search(f)) or f.endswith(_THREADING) for f in sc.func_file], dtype=bool)


def leave_out_own(sc: StackCounts | None) -> StackCounts | None:
    """The counts less the samples of clef-prof's own threads (its clock thread `_run (clock.py)`,
    the sampler): a thread (threading's frames outermost) none of whose frames is outside clef_prof
    and `threading`, or whose entry below them is clef_prof's clock or sampler module, whatever it
    calls (ctypes' Python code when it marks). The main thread, and a server's stack that passes
    through clef-prof's wrappers, stay."""
    if sc is None or not sc.stacks:
        return sc
    own_func = _own(sc)
    entry = np.array([bool(_OWN_THREAD.search(f)) for f in sc.func_file], dtype=bool)
    threading_ = np.array([f.endswith(_THREADING) for f in sc.func_file], dtype=bool)

    def is_own(st: tuple[int, ...]) -> bool:
        if not threading_[st[-1]]:          # not a thread threading started (the main thread): kept
            return False
        outer = [f for f in reversed(st) if not threading_[f]]      # root first, below threading's frames
        return all(own_func[f] for f in st) or bool(outer and entry[outer[0]])

    own = np.array([is_own(st) for st in sc.stacks], dtype=bool)    # once per distinct stack
    k = int(sc.counts[:, own].sum())
    if k:
        if sc.sequence is not None:
            sc.sequence = sc.sequence[:, ~own[sc.sequence[1]]]
        sc.counts = sc.counts.copy()
        sc.counts[:, own] = 0
        sc.samples -= k
        sc.own_samples = k
    return sc


def idle_functions(sc: StackCounts) -> np.ndarray:
    """Per function: a wait of an idle thread (select, poll, epoll, wait, sleep, a lock's acquire,
    join...) in the standard library's waiting modules, or such a built-in (Kineto's names): a
    leaf there is a thread parked, not work."""
    out = np.zeros(len(sc.func_name), dtype=bool)
    for i, (name, file) in enumerate(zip(sc.func_name, sc.func_file)):    # once per distinct function
        base = file.replace("\\", "/").rsplit("/", 1)[-1]
        leaf = name.rsplit(".", 1)[-1]
        out[i] = (leaf in IDLE_NAMES and base in IDLE_FILES) or (not file and bool(_BUILTIN_IDLE.match(name)))
    return out


def _sampler_counts(cap: Export, stages: Stages) -> StackCounts:
    """clef-prof's sampler's samples per (slot, stack)."""
    d = _definitions(cap)
    m = read_ranges(cap, DOMAIN, [], ["t"], chars=64, types=MARK_TYPES)
    t = m.start
    pid, tid = _thread_ids(m.name)
    once = first_of_repeats(m.gtid, t, factorize(m.name)[1], m.payload)     # a merged trace's repeated marks
    n_repeats = int((~once).sum())
    readable = (pid >= 0) & once
    dur = cap.duration_ns
    outside = (t < 0) | ((t > dur) if dur is not None else False)
    keep = readable & ~outside
    n_unreadable = int((~readable).sum()) - n_repeats
    n_outside = int((outside & readable).sum())
    t, pid, tid, sid = t[keep], pid[keep], tid[keep], m.payload[keep].astype(np.int64)
    gtid = (m.gtid[keep] & ~np.int64(0xFFFFFF)) | tid
    n = len(t)

    # each sample's stack (-1: no definition)
    key = (pid << 32) | (sid & 0xFFFFFFFF)
    stack = np.full(n, -1, dtype=np.int64)
    if len(d.stack_key):
        pos = np.minimum(np.searchsorted(d.stack_key, key), len(d.stack_key) - 1)
        found = (d.stack_key[pos] == key) & (sid > 0) & (sid < (1 << 32))
        stack[found] = pos[found]
    n_unknown = int((stack < 0).sum())

    # each sample's slot: the innermost stage open on its thread, else (batch), else (outside)
    names = list(stages.config.stages)
    slots = names + [BATCH_SLOT, OUTSIDE_SLOT]
    inst, b = stages.instances, stages.batches
    slot = np.full(n, len(names) + 1, dtype=np.int64)
    if n and len(b):
        in_batch = innermost_containing(b["gtid"], b["start"], b["end"], gtid, t, t) >= 0
        slot[in_batch] = len(names)
    if n and len(inst):
        i = innermost_containing(inst["gtid"], inst["start"], inst["end"], gtid, t, t)
        slot[i >= 0] = inst["code"][i[i >= 0]]

    n_stack = len(d.stack_key) + 1          # the last stack column: no definition
    st = np.where(stack >= 0, stack, n_stack - 1)
    counts = np.bincount(slot * n_stack + st, minlength=len(slots) * n_stack).reshape(len(slots), n_stack)
    period_ms, observed = _period_ms(gtid, t, d.asked_hz)
    sweeps = _sweeps(inst, gtid, slot, len(names), period_ms)
    cut = int(d.cut_stacks[stack[stack >= 0]].sum()) if len(d.cut_stacks) else 0
    order = np.argsort(t, kind="stable")
    return StackCounts(slots=slots, func_name=d.func_name + [UNKNOWN_STACK], func_file=d.func_file + [""],
                       stacks=d.stacks + [(len(d.func_name),)], counts=counts, samples=n,
                       sequence=np.stack([slot[order], st[order]]).astype(np.int64),
                       threads=int(len(np.unique(gtid))), asked_hz=d.asked_hz, observed_hz=observed,
                       ms_per_sample=period_ms, unknown_stack=n_unknown, unreadable=n_unreadable,
                       outside_session=n_outside, cut_stacks=cut, bad_definitions=d.bad_definitions,
                       duplicates=n_repeats, sweeps=sweeps)


def beat(sample_ns: float, batch_ns: float, ticks: int) -> float:
    """How many times the sampler's phase in the batch cycle sweeps the whole cycle over `ticks`
    samples: a sampler ticking every `sample_ns` against a program that repeats every `batch_ns`
    sees phase k*r (r = sample_ns / batch_ns, mod 1); near r = p/q every q-th sample sees nearly
    the same phase, drifting by |q*r - p| a step, so the samples cover the cycle ticks * |q*r - p|
    times. Below MIN_SWEEPS the samples hold part of the stage and no interval over them can cover
    its split (`tests/analyze/test_samples.py`: 82-89% near one and two periods, 93-96% near half
    of one, even with 9-15% jitter between batches). q = 1 and 2 only: near a third (three phases
    in turn) the intervals hold (99.7% in that simulation, and the real H200 recording
    gpu25-pair-pr, whose 10.0 ms sampler meets 15.0 ms batches, holds its oracle's figures)."""
    r = sample_ns / batch_ns
    return float(min(ticks * abs(q * r - round(q * r)) for q in (1, 2)))


def _sweeps(inst, gtid: np.ndarray, slot: np.ndarray, n_stages: int, period_ms: float | None) -> dict[str, float]:
    """Per stage with samples: `beat` on its busiest sampled thread, from the observed sampling
    period, the median gap between the stage's starts on that thread and that thread's samples."""
    out: dict[str, float] = {}
    if not period_ms or not len(inst) or not len(slot):
        return out
    for code in np.unique(slot[slot < n_stages]).tolist():       # once per stage
        threads, k = np.unique(gtid[slot == code], return_counts=True)
        g = threads[int(np.argmax(k))]
        starts = np.sort(inst["start"][(inst["code"] == code) & (inst["gtid"] == g)])
        if len(starts) < 3:
            continue
        gap = float(np.median(np.diff(starts)))
        if gap > 0:
            out[str(inst["stage"][inst["code"] == code][0])] = beat(period_ms * 1e6, gap, int((gtid == g).sum()))
    return out


def figures(sc: StackCounts | None, requests: int | None) -> tuple[Samples | None, list[str]]:
    """(the typed samples part, warnings) of a capture's stack counts; (None, []) without them."""
    if sc is None:
        return None, []
    if sc.source == nsyspy.SOURCE and sc.samples == 0:
        return None, sc.notes
    self_, incl = sc.function_counts()
    per_slot = sc.counts.sum(axis=1)
    idle_func = idle_functions(sc)
    idle_stack = np.array([bool(idle_func[st[0]]) for st in sc.stacks], dtype=bool)
    idle_slot = sc.counts[:, idle_stack].sum(axis=1) if len(sc.stacks) else np.zeros(len(sc.slots), np.int64)
    n = sc.samples
    period_ms = sc.ms_per_sample
    fn_name, fn_file = sc.func_name, sc.func_file

    timed = sc.unit == "ns"

    def ms(k) -> float | None:
        if not requests:
            return None
        if timed:
            return float(k) / 1e6 / requests
        return None if period_ms is None else float(k) * period_ms / requests

    leaf = np.array([st[0] for st in sc.stacks], dtype=np.int64)

    aliased = {name for name, v in sc.sweeps.items() if v < MIN_SWEEPS} if not timed else set()

    def bounds(k: np.ndarray, total: int, j: int, funcs: np.ndarray, inclusive: bool) -> tuple[np.ndarray, np.ndarray]:
        if timed:           # measured durations, not a draw: no sampling interval (docs/sampling.md)
            share = k / total
            return share, share
        if sc.slots[j] in aliased:          # no interval over aliased samples holds: the whole range
            return np.zeros(len(k)), np.ones(len(k))
        if sc.sequence is None or not len(funcs):
            return wilson(k, np.full(len(k), total))
        cols = sc.sequence[1][sc.sequence[0] == j]          # the slot's samples' stacks, in time order
        if inclusive:       # once per top function and distinct stack
            on = np.array([[f in st for st in sc.stacks] for f in funcs.tolist()], dtype=bool)
        else:
            on = leaf[None, :] == funcs[:, None]
        return share_interval(on[:, cols])

    def top(mat_row: np.ndarray, other: np.ndarray, total: int, by_self: bool, j: int) -> list[FunctionSamples]:
        order = np.argsort(-mat_row, kind="stable")[:TOP]
        order = order[mat_row[order] > 0]
        s_k, i_k = (mat_row[order], other[order]) if by_self else (other[order], mat_row[order])
        s_lo, s_hi = bounds(s_k, total, j, order, False)
        i_lo, i_hi = bounds(i_k, total, j, order, True)
        return [FunctionSamples(function=fn_name[f], file=fn_file[f], self_samples=int(a), inclusive_samples=int(c),
                                self_share=a / total, self_share_low=float(sl), self_share_high=float(sh),
                                inclusive_share=c / total, inclusive_share_low=float(il),
                                inclusive_share_high=float(ih), self_ms_per_request=ms(a), inclusive_ms_per_request=ms(c))
                for f, a, c, sl, sh, il, ih in zip(order.tolist(), s_k.tolist(), i_k.tolist(), s_lo, s_hi, i_lo, i_hi)]

    out: dict[str, SampleFigures] = {}
    for j, name in enumerate(sc.slots):     # once per stage
        total = int(per_slot[j])
        if total == 0 and name in (BATCH_SLOT, OUTSIDE_SLOT):
            continue
        idle = int(idle_slot[j])
        # (outside) is every thread's time out of the stages, parked threads included: only its work
        # stands for host time per request; a stage's or batch's thread waits inside its own span
        work = total - idle if name == OUTSIDE_SLOT else total
        out[name] = SampleFigures(samples=total, share_of_samples=total / n if n else 0.0, ms_per_request=ms(work),
                                  few=not timed and total < FEW_SAMPLES, idle_samples=idle, aliased=name in aliased,
                                  top_self=top(self_[j], incl[j], total, True, j) if total else [],
                                  top_inclusive=top(incl[j], self_[j], total, False, j) if total else [])
    res = Samples(source=KINETO_SOURCE if timed else sc.source, samples=n, threads=sc.threads, asked_hz=sc.asked_hz,
                  observed_hz=sc.observed_hz, ms_per_sample=period_ms, requests=requests, confidence=0.95,
                  unknown_stack=sc.unknown_stack, unreadable=sc.unreadable, outside_session=sc.outside_session,
                  cut_stacks=sc.cut_stacks, bad_definitions=sc.bad_definitions, stages=out, unit=sc.unit,
                  placed_by_time=sc.by_time, unplaced=sc.unplaced, own_samples=sc.own_samples, duplicates=sc.duplicates)
    said = [f"{k} ({sc.sweeps[k]:.1f} sweeps)" for k in sorted(aliased) if k in out]
    more = [f"Python samples: the sampler's period is near a multiple (or half) of the batch period "
            f"in {', '.join(said)}: its samples see the same few phases of the stage batch after batch, fewer than "
            f"{MIN_SWEEPS:g} sweeps of the cycle over the recording, so the stage's function shares are not a "
            "measurement (shown 0-100%); record at another rate (record --python-sampling HZ)"] if said else []
    return res, sc.notes + _warnings(res) + more


def _period_ms(gtid: np.ndarray, t: np.ndarray, asked_hz: float | None) -> tuple[float | None, float | None]:
    """(ms one sample stands for, the observed rate in Hz): the median gap between consecutive
    samples of one thread (a sampler held up by the GIL ticks slower than asked); the asked rate's
    period when no thread has two samples."""
    if len(t) > 1:
        o = np.lexsort((t, gtid))
        gaps = np.diff(t[o])[gtid[o][1:] == gtid[o][:-1]]
        gaps = gaps[gaps > 0]
        if len(gaps):
            med = float(np.median(gaps))
            return med / 1e6, 1e9 / med
    return (1e3 / asked_hz, None) if asked_hz else (None, None)


def _warnings(s: Samples) -> list[str]:
    out = []
    odd = [(s.unreadable, "with a message that is not `t PID TID`"),
           (s.unknown_stack, "whose stack has no definition in the export (counted as (unknown stack))"),
           (s.outside_session, "outside the session's time")]
    said = [f"{k:,} {what}" for k, what in odd if k]
    if said:
        out.append(f"Python samples: {'; '.join(said)}; the samples left out are not in the shares")
    if s.duplicates:
        what = "python_function events" if s.unit == "ns" else "sample marks"
        out.append(f"Python samples: {s.duplicates:,} {what} repeat another exactly (a merged or re-exported "
                   "trace): counted once")
    if s.bad_definitions:
        out.append(f"Python samples: {s.bad_definitions:,} sampler definitions in StringIds could not be read "
                   "(damaged or edited export); their frames show as (unknown frame)")
    if s.cut_stacks:
        out.append(f"Python samples: {s.cut_stacks:,} samples had stacks deeper than {MAX_DEPTH} frames; their "
                   "outermost frames were cut (inclusive shares of outer functions are low)")
    if s.samples == 0:
        out.append("Python samples: the sampler's domain is in the capture but no sample could be used")
    staged = sum(f.samples for k, f in s.stages.items() if k not in (BATCH_SLOT, OUTSIDE_SLOT))
    if s.samples and not staged:
        where = ", ".join(f"{f.samples:,} in {k}" for k, f in s.stages.items() if f.samples)
        out.append(f"Python samples: none of the {s.samples:,} {'ns' if s.unit == 'ns' else 'samples'} lies in a stage "
                   f"range ({where}): the sampled threads are not the stages' threads, or their samples cannot be "
                   "tied to them; no per-stage function figure")
    return out


def share_text(f: FunctionSamples, self_: bool = True) -> str:
    """`72% [66–78%]`: a function's share of its slot's samples with the interval; `72%` where
    there is none (durations of a Kineto trace)."""
    lo, hi = (f.self_share_low, f.self_share_high) if self_ else (f.inclusive_share_low, f.inclusive_share_high)
    if lo == hi:
        return f"{100 * (f.self_share if self_ else f.inclusive_share):.0f}%"
    if self_:
        return f"{100 * f.self_share:.0f}% [{100 * f.self_share_low:.0f}–{100 * f.self_share_high:.0f}%]"
    return f"{100 * f.inclusive_share:.0f}% [{100 * f.inclusive_share_low:.0f}–{100 * f.inclusive_share_high:.0f}%]"


def label(f: FunctionSamples) -> str:
    """`heavy (prog.py)`: the function and its file's base name."""
    base = f.file.rsplit("/", 1)[-1]
    return f"{f.function} ({base})" if base else f.function


@dataclass
class StackNode:
    """One node of a slot's stack tree: a stack prefix, root first (function indices), the
    samples whose stack starts with it (inclusive) and those whose stack is exactly it (self),
    and where it starts among its siblings (the samples of the nodes left of it at its depth)."""

    path: tuple[int, ...]
    inclusive: int
    self: int
    start: int


def stack_tree(sc: StackCounts, slot: str) -> list[StackNode]:
    """The nodes of one slot's stacks (an icicle's boxes), parents before children; siblings in
    the order of their frames' (function, file), so that the layout is the same from run to run.
    Python runs once per distinct stack and depth, never per sample."""
    row = sc.counts[sc.slots.index(slot)]
    used = np.flatnonzero(row)
    key = [(sc.func_name[f], sc.func_file[f]) for f in range(len(sc.func_name))]
    paths = sorted(((tuple(reversed(sc.stacks[j])), int(row[j])) for j in used.tolist()),
                   key=lambda pc: [key[f] for f in pc[0]])
    nodes: dict[tuple[int, ...], StackNode] = {}
    at = 0
    for path, c in paths:
        for d in range(1, len(path) + 1):
            node = nodes.get(path[:d])
            if node is None:
                node = nodes[path[:d]] = StackNode(path[:d], 0, 0, at)
            node.inclusive += c
        nodes[path].self += c
        at += c
    return list(nodes.values())


def durations(cap: Export, stages: Stages) -> StackCounts | None:
    """A Kineto trace's python_function events as stack counts in ns: each event's self time (its
    duration less its children's, by `Python parent id`) on its stack (its name and its ancestors'),
    in the innermost stage range of its thread that holds the whole event, else "(batch)", else
    "(outside)". Vectorised: Python runs once per stack depth and per distinct name and stack."""
    rows = cap.rows(f'SELECT p.start, p."end", p.globalTid, p.pyId, p.parentId, s.value FROM {PY_TABLE} p '
                    "JOIN StringIds s ON s.id = p.nameId ORDER BY p.pyId")
    if not rows:
        return None
    n_all = len(rows)
    rows = list(dict.fromkeys(rows))        # a merged trace's repeated events, once (the order kept)
    start = np.array([r[0] for r in rows], dtype=np.int64)
    end = np.array([r[1] for r in rows], dtype=np.int64)
    gtid = np.array([r[2] for r in rows], dtype=np.int64)
    pyid = np.array([r[3] for r in rows], dtype=np.int64)
    par_id = np.array([-1 if r[4] is None else r[4] for r in rows], dtype=np.int64)
    names, func = factorize(np.array([r[5] for r in rows], dtype=object))
    n = len(rows)
    pos = np.minimum(np.searchsorted(pyid, par_id), n - 1)
    parent = np.where((par_id >= 0) & (pyid[pos] == par_id), pos, -1)
    orphans = int(((par_id >= 0) & (parent < 0)).sum())
    dur = np.maximum(end - start, 0)
    child = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=n)
    self_ns = np.maximum(dur - child, 0).astype(np.int64)
    # depth by pointer jumping, then stack ids level by level: (parent's stack, function) pairs
    depth = np.zeros(n, dtype=np.int64)
    anc = parent.copy()
    for _ in range(4 * MAX_DEPTH):       # deeper than this: a cycle of parent ids (a damaged trace)
        up = anc >= 0
        if not up.any():
            break
        depth[up] += 1
        anc[up] = parent[anc[up]]
    cyclic = bool((anc >= 0).any())
    stack = np.full(n, -1, dtype=np.int64)
    st_parent: list[np.ndarray] = []
    st_func: list[np.ndarray] = []
    n_stack = 0
    for d in range(int(depth.max()) + 1 if not cyclic else 0):      # once per depth
        at = np.flatnonzero(depth == d)
        ps = stack[parent[at]] if d else np.full(len(at), -1, dtype=np.int64)
        key = (ps + 1) * len(names) + func[at]
        uniq, inv = np.unique(key, return_inverse=True)
        stack[at] = n_stack + inv
        st_parent.append(uniq // len(names) - 1)
        st_func.append(uniq % len(names))
        n_stack += len(uniq)
    if cyclic or n_stack == 0:
        return None
    sp, sf = np.concatenate(st_parent), np.concatenate(st_func)
    # the functions: `file(line): name` -> (name, file); other names (built-ins, modules) as they are
    fkey: dict[tuple[str, str], int] = {}
    fmap = np.empty(len(names), dtype=np.int64)
    for i, text in enumerate(names):        # once per distinct name
        m = _KINETO_NAME.match(str(text))
        k = (m.group(3), m.group(1)) if m else (str(text), "")
        fmap[i] = fkey.setdefault(k, len(fkey))
    stacks: list[tuple[int, ...]] = []
    for j in range(n_stack):                # once per distinct stack (parents first)
        own = (int(fmap[sf[j]]),)
        stacks.append(own if sp[j] < 0 else own + stacks[sp[j]])

    names_cfg = list(stages.config.stages)
    slots = names_cfg + [BATCH_SLOT, OUTSIDE_SLOT]
    inst, b = stages.instances, stages.batches
    slot = np.full(n, len(names_cfg) + 1, dtype=np.int64)
    if len(b):
        slot[innermost_containing(b["gtid"], b["start"], b["end"], gtid, start, end) >= 0] = len(names_cfg)
    if len(inst):
        i = innermost_containing(inst["gtid"], inst["start"], inst["end"], gtid, start, end)
        slot[i >= 0] = inst["code"][i[i >= 0]]
    counts = np.bincount(slot * n_stack + stack, weights=self_ns,
                         minlength=len(slots) * n_stack).astype(np.int64).reshape(len(slots), n_stack)
    return StackCounts(slots=slots, func_name=[k[0] for k in fkey], func_file=[k[1] for k in fkey], stacks=stacks,
                       counts=counts, samples=int(self_ns.sum()), threads=int(len(np.unique(gtid))), asked_hz=None,
                       observed_hz=None, ms_per_sample=None, unknown_stack=orphans, unreadable=0, outside_session=0,
                       cut_stacks=0, bad_definitions=0, unit="ns", duplicates=n_all - n)


THREAD_BASE = ("_bootstrap", "threading.py")    # the outermost frame of every thread `threading` started


def nsys_counts(cap: Export, stages: Stages, times: np.ndarray, sampler_gtid: int) -> StackCounts | None:
    """nsys' own Python samples (analyze.read.nsyspy) as stack counts, placed like clef-prof's.

    nsys names each sample's Python thread by an ordinal, never by its OS thread, so a thread is
    tied to an OS thread only where that is certain (docs/sampling.md, "nsys' own samples"):
    the one ordinal whose samples never start at threading's `_bootstrap` is the main thread (OS
    id = the pid); when one other ordinal is left and one other thread of the process has stage or
    batch ranges, they are the same thread. Samples of ordinals left untied are placed by time: in
    "(outside)" when no untied thread has a range open then (certain), on the one untied thread
    with a range open when there is exactly one (counted in `by_time`, said in a warning), and
    left out when there are several (counted in `unplaced`)."""
    sc_empty = dict(slots=[], func_name=[], func_file=[], stacks=[], counts=np.zeros((0, 0), np.int64), samples=0,
                    threads=0, asked_hz=nsyspy.asked_hz(cap), observed_hz=None, ms_per_sample=None, unknown_stack=0,
                    unreadable=0, outside_session=0, cut_stacks=0, bad_definitions=0, source=nsyspy.SOURCE)
    try:
        d, why = nsyspy.load(cap.path, times)
    except nsyspy.NsysPythonError as exc:
        d, why = None, str(exc)
    if d is None and why is None:       # frames in no file beside the export: no samples section
        return None
    if d is None:
        return StackCounts(**sc_empty, notes=[f"Python samples: the capture holds {len(times):,} samples of nsys' "
                                              f"Python sampler, not read: {why}"])
    notes: list[str] = []
    bad = d.status != nsyspy.OK
    for code, what in ((nsyspy.TRUNCATED, "shorter than its header"), (nsyspy.OVERRUN, "with a frame count that overruns it")):
        k = int((d.status == code).sum())
        if k:
            notes.append(f"Python samples (nsys): {k:,} samples have a payload {what} (a damaged export); left out")
    # functions: (function, file) string pairs; an id the string table lacks is an unknown frame
    fpos, fknown = d.text(d.frames[:, 0])
    lpos, lknown = d.text(d.frames[:, 1])
    known = fknown & lknown
    n_unknown_frames = int((~known).sum())
    pair = np.where(known, fpos * (len(d.string_text) + 1) + lpos, -1)
    upair, finv = np.unique(pair, return_inverse=True)
    texts = d.string_text
    func_name = [UNKNOWN_FRAME if p < 0 else texts[p // (len(texts) + 1)] for p in upair.tolist()]
    func_file = ["" if p < 0 else texts[p % (len(texts) + 1)] for p in upair.tolist()]
    if n_unknown_frames:
        samples_hit = len(np.unique(np.repeat(np.arange(len(d.t)), d.depth)[~known]))
        notes.append(f"Python samples (nsys): {n_unknown_frames:,} frames of {samples_hit:,} samples name strings the "
                     f"export's table lacks; shown as {UNKNOWN_FRAME}")
    # stacks: each sample's innermost MAX_DEPTH frames as one row, distinct rows found by np.unique
    n = len(d.t)
    kept = np.minimum(d.depth, MAX_DEPTH)
    cut_each = d.depth > MAX_DEPTH
    width = max(int(kept.max()) if n else 0, 1)
    mat = np.full((n, width), -1, dtype=np.int32)
    owner = np.repeat(np.arange(n), kept)
    k = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    mat[owner, k] = finv[np.repeat(d.first, kept) + k]
    no_frames = len(func_name)
    mat[(kept == 0) & ~bad, 0] = no_frames
    urows, sinv = np.unique(mat, axis=0, return_inverse=True)
    sinv = sinv.reshape(-1)
    stacks = [tuple(int(f) for f in row if f >= 0) or (no_frames,) for row in urows]    # once per distinct stack
    func_name.append(NO_FRAMES)
    func_file.append("")
    outer = np.array([st[-1] for st in stacks], dtype=np.int64)
    outer_in_thread = np.array([func_name[f] == THREAD_BASE[0] and func_file[f].endswith(THREAD_BASE[1])
                                for f in outer.tolist()], dtype=bool)

    dur = cap.duration_ns
    outside = (d.t < 0) | ((d.t > dur) if dur is not None else False)
    keep = ~bad & ~outside
    t, cat, st_of = d.t[keep], d.category[keep], sinv[keep]
    n_outside = int((outside & ~bad).sum())

    threads = len(np.unique(cat))
    if d.os_threads:                        # 2025.3: each sample names its OS thread
        gtid, tie, n_by_time, unplaced = cat, {}, 0, np.zeros(len(t), dtype=bool)
    else:                                   # 2023.4: an ordinal, tied to an OS thread where certain
        gtid, tie, n_by_time, unplaced = _tie_ordinals(stages, t, cat, st_of, outer_in_thread, sampler_gtid, notes)
    n_unplaced = int(unplaced.sum())
    use = ~unplaced
    t, gtid, st_of, cat = t[use], gtid[use], st_of[use], cat[use]

    inst, b = stages.instances, stages.batches
    names = list(stages.config.stages)
    slots = names + [BATCH_SLOT, OUTSIDE_SLOT]
    m = len(t)
    slot = np.full(m, len(names) + 1, dtype=np.int64)
    placed = gtid >= 0
    if m and len(b):
        in_batch = innermost_containing(b["gtid"], b["start"], b["end"], gtid, t, t) >= 0
        slot[in_batch & placed] = len(names)
    if m and len(inst):
        i = innermost_containing(inst["gtid"], inst["start"], inst["end"], gtid, t, t)
        hit = (i >= 0) & placed
        slot[hit] = inst["code"][i[hit]]
    n_stack = len(stacks)
    counts = np.bincount(slot * n_stack + st_of, minlength=len(slots) * n_stack).reshape(len(slots), n_stack)
    period_ms, observed = _period_ms(cat, t, sc_empty["asked_hz"])
    order = np.argsort(t, kind="stable")
    return StackCounts(slots=slots, func_name=func_name, func_file=func_file, stacks=stacks, counts=counts, samples=m,
                       sequence=np.stack([slot[order], st_of[order]]).astype(np.int64),
                       threads=threads, asked_hz=sc_empty["asked_hz"], observed_hz=observed,
                       ms_per_sample=period_ms, unknown_stack=0, unreadable=int(bad.sum()), outside_session=n_outside,
                       cut_stacks=int(cut_each[keep][use].sum()), bad_definitions=0, source=nsyspy.SOURCE,
                       by_time=n_by_time, unplaced=n_unplaced, notes=notes, thread_ties=tie)


def _tie_ordinals(stages: Stages, t: np.ndarray, cat: np.ndarray, st_of: np.ndarray, outer_in_thread: np.ndarray,
                  sampler_gtid: int, notes: list[str]) -> tuple[np.ndarray, dict[int, int], int, np.ndarray]:
    """nsys 2023.4's samples, named by Python-thread ordinal (`cat`), on OS threads: (globalTid of
    each sample, -1 where none; the ties ordinal -> globalTid; how many were placed by time; which
    were left out), by the rules of nsys_counts' docstring; a note says what was guessed."""
    # ties: ordinal -> OS thread (globalTid), where certain
    proc = sampler_gtid >> 24
    main_gtid = (proc << 24) | (proc & 0xFFFFFF)
    cats = np.unique(cat)
    threaded = {int(c) for c in np.unique(cat[outer_in_thread[st_of]])}
    mains = [int(c) for c in cats if int(c) not in threaded]
    tie: dict[int, int] = {}
    if len(mains) == 1:
        tie[mains[0]] = main_gtid
    inst, b = stages.instances, stages.batches
    ranged = np.unique(np.concatenate([inst["gtid"] if len(inst) else np.zeros(0, np.int64),
                                       b["gtid"] if len(b) else np.zeros(0, np.int64)]))
    ranged = ranged[(ranged >> 24) == proc]
    free_threads = [int(g) for g in ranged if int(g) not in tie.values()]
    free_cats = [int(c) for c in cats if int(c) not in tie]
    if len(free_cats) == 1 and len(free_threads) == 1:
        tie[free_cats[0]] = free_threads[0]
    gtid = np.full(len(t), -1, dtype=np.int64)
    for c, g in tie.items():                # once per tied thread
        gtid[cat == c] = g
    untied = gtid < 0
    free_threads = [g for g in free_threads if g not in tie.values()]
    n_open = np.zeros(len(t), dtype=np.int64)
    only = np.full(len(t), -1, dtype=np.int64)
    for g in free_threads:                  # once per ranged thread not tied
        key = np.full(int(untied.sum()), g, dtype=np.int64)
        tt = t[untied]
        is_open = np.zeros(len(tt), dtype=bool)
        if len(b):
            is_open |= innermost_containing(b["gtid"], b["start"], b["end"], key, tt, tt) >= 0
        if len(inst):
            is_open |= innermost_containing(inst["gtid"], inst["start"], inst["end"], key, tt, tt) >= 0
        n_open[untied] += is_open
        sub = only[untied]
        sub[is_open] = g
        only[untied] = sub
    by_time = untied & (n_open == 1)
    gtid[by_time] = only[by_time]
    unplaced = untied & (n_open > 1)
    n_by_time, n_unplaced = int(by_time.sum()), int(unplaced.sum())
    untied_cats = sorted({int(c) for c in cat[untied]})
    if untied_cats:
        notes.append(f"Python samples (nsys): {len(untied_cats)} of nsys' {len(cats)} Python threads could not be tied to "
                     f"an OS thread (nsys names them by ordinal only); of their {int(untied.sum()):,} samples, "
                     f"{n_by_time:,} were placed by time in the one untied thread's range open then (a sample of "
                     f"another thread taken then counts there too), {n_unplaced:,} left out (several threads had a range "
                     f"open), the rest in (outside)")
    return gtid, tie, n_by_time, unplaced
