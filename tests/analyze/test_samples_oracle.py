"""Every figure of the samples part of analyze's result (clef_prof.analyze.figures.samples) against a
reading of the export by hand, on real recordings of tests/programs/sampled_split.py under nsys
2023.4 with clef-prof's sampler at 200 Hz (cpu23-sampled: 96 marks, 3 stacks; cpu23-samples-main-1:
237 marks, 8 stacks, stacks of depth 2 to 4). The oracle reads the sampler's marks, frame and stack
definitions and the stage and batch ranges by SQL, then places each mark with a plain loop over the
ranges of the thread its message names (innermost stage range holding its time, else a batch
range, else "(outside)"), counts self and inclusive samples per function, and computes the
Wilson bounds, the sampling period (median positive gap between a thread's consecutive marks) and
the ms per request with the formulas written out here."""
from __future__ import annotations

import json
import lzma
import math
import sqlite3
import statistics
import struct
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from clef_prof.analyze.figures import samples as smp
from clef_prof.analyze.read.inputs import resolve
from clef_prof.analyze.pipeline import analyze
from clef_prof.analyze.figures.stages import StageConfig
from conftest import edited_copy, sql
from nsys_json_oracle import decode

DATA = Path(__file__).resolve().parents[1] / "data"
NAMES = ("cpu23-sampled", "cpu23-samples-main-1")
Z = 1.959963984540054

MARKS = """
SELECT m.start, t.value, m.int64Value, m.globalTid FROM NVTX_EVENTS m
JOIN StringIds t ON t.id = m.textId
WHERE m.eventType = 34 AND m.domainId = (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'clef-prof samples')
ORDER BY m.start"""
RANGES = """
SELECT r.start, r."end", r.globalTid, coalesce(r.text, s.value) FROM NVTX_EVENTS r
LEFT JOIN StringIds s ON s.id = r.textId WHERE r.eventType = 59 AND r."end" IS NOT NULL"""


def _wilson(k: int, n: int) -> tuple[float, float]:
    p = k / n
    den = 1 + Z * Z / n
    mid = (p + Z * Z / (2 * n)) / den
    half = Z / den * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return max(mid - half, 0.0), min(mid + half, 1.0)


def oracle(path, stage_names) -> dict:
    """The figures by hand: per slot, samples and per (function, file) self and inclusive counts."""
    frames, stacks = {}, {}
    hz = None
    for (v,) in sql(path, "SELECT value FROM StringIds WHERE value LIKE 'clef-prof %'"):
        if v.startswith("clef-prof frame "):
            key, name, file, _line = v[len("clef-prof frame "):].split("\t")
            frames[key] = (name, file)
        elif v.startswith("clef-prof stack "):
            key, ids = v[len("clef-prof stack "):].split("\t")
            stacks[key] = ids.split()
        elif v.startswith("clef-prof sampler "):
            hz = float(v.split()[3].removeprefix("hz="))
    ranges = defaultdict(list)          # gtid -> [(start, end, name)]
    for s, e, g, name in sql(path, RANGES):
        ranges[g].append((s, e, name))
    slot_of, self_, incl, times = {}, defaultdict(Counter), defaultdict(Counter), defaultdict(list)
    per_slot, seq = Counter(), defaultdict(list)
    for t, msg, sid, mg in sql(path, MARKS):
        _, pid, tid = msg.split()
        g = ((mg >> 24) << 24) | int(tid)
        times[g].append(t)
        holding = [(s, name) for s, e, name in ranges[g] if s <= t <= e]
        in_stage = sorted((s, name) for s, name in holding if name in stage_names)
        slot = in_stage[-1][1] if in_stage else \
            "(batch)" if any(name.startswith("pooler") for _, name in holding) else "(outside)"
        st = [frames[f"{pid}:{f}"] for f in stacks[f"{pid}:{sid}"]]
        per_slot[slot] += 1
        self_[slot][st[0]] += 1
        for f in set(st):
            incl[slot][f] += 1
        seq[slot].append((t, st[0], set(st)))
        slot_of[t] = slot
    gaps = [b - a for ts in times.values() for a, b in zip(ts, ts[1:]) if b > a]
    med = statistics.median(gaps)
    return dict(samples=sum(per_slot.values()), per_slot=per_slot, self=self_, incl=incl, hz=hz, seq=seq,
                period_ms=med / 1e6, observed_hz=1e9 / med, threads=len(times))


HEAD_MARKS = """
SELECT m.rowid FROM NVTX_EVENTS m JOIN StringIds t ON t.id = m.textId
JOIN NVTX_EVENTS h ON h.eventType = 59 AND h.start <= m.start AND m.start <= h."end"
     AND (h.globalTid >> 24) = (m.globalTid >> 24)
     AND (h.globalTid & 16777215) = CAST(substr(t.value, instr(substr(t.value, 3), ' ') + 3) AS INTEGER)
JOIN StringIds hn ON hn.id = h.textId AND hn.value = 'head'
WHERE m.eventType = 34 AND t.value LIKE 't %' ORDER BY m.start"""


def interval_by_hand(member: list[bool]) -> tuple[float, float]:
    """A share's interval by hand (#35 C7): the wider, at each end, of Wilson's and the block
    interval over min(n // 8, 10) consecutive time blocks (none below 5 blocks): the ratio of the
    blocks' sums, variance sum((k_b - p n_b)^2) / (B - 1) * B / n^2, Student's t (compare's exact
    quantile) on B - 1 degrees of freedom."""
    from clef_prof.compare.welch import t_quantile
    n, k = len(member), sum(member)
    lo, hi = _wilson(k, n)
    blocks = min(n // 8, 10)
    if blocks < 5:
        return lo, hi
    edges = [i * n // blocks for i in range(blocks + 1)]
    p = k / n
    ss = sum((sum(member[a:b]) - p * (b - a)) ** 2 for a, b in zip(edges, edges[1:]))
    half = float(t_quantile(0.975, blocks - 1)) * math.sqrt(ss / (blocks - 1) * blocks / n ** 2)
    return min(lo, max(p - half, 0.0)), max(hi, min(p + half, 1.0))


def idle_by_hand(self_counts) -> float:
    """The self samples (or ns) of a slot whose leaf is the standard library parking a thread, by
    hand: select/poll/wait/acquire/join in selectors, threading or queue, or such a built-in (#35 B10)."""
    return sum(v for k, v in self_counts.items()
               if (k[1].endswith(("selectors.py", "threading.py", "queue.py")) and
                   k[0].rsplit(".", 1)[-1] in ("select", "poll", "wait", "acquire", "join", "_wait_for_tstate_lock"))
               or (not k[1] and k[0].startswith(("<built-in method select", "<built-in method poll",
                                                 "<built-in method acquire", "<built-in function sleep"))))


def check_slots(s, want: dict, requests: int) -> None:
    """Each slot's figures of analyze's samples `s` against the by-hand `want` (per_slot, self,
    incl, samples, period_ms)."""
    for slot, fig in s.stages.items():
        n = want["per_slot"][slot]
        assert fig.samples == n and fig.share_of_samples == pytest.approx(n / want["samples"], rel=1e-12)
        idle = idle_by_hand(want["self"][slot])
        assert fig.idle_samples == idle
        work = n - idle if slot == "(outside)" else n
        assert fig.ms_per_request == pytest.approx(work * want["period_ms"] / requests, rel=1e-12)
        assert fig.few == (n < 30)
        if not n:
            assert fig.top_self == fig.top_inclusive == []
            continue
        sf, inc = want["self"][slot], want["incl"][slot]
        # a function is (name, file, ...): nsys' frames name it by string ids, whose texts may repeat
        rows = Counter((k[0], k[1], sf.get(k, 0), inc[k]) for k in inc)
        for by, top, mine in (("self", fig.top_self, sf), ("incl", fig.top_inclusive, inc)):
            assert len(top) == min(10, len(mine))
            shown = Counter((f.function, f.file, f.self_samples, f.inclusive_samples) for f in top)
            assert not shown - rows, (slot, by, shown - rows)
            key = [f.self_samples if by == "self" else f.inclusive_samples for f in top]
            assert key == sorted(mine.values(), reverse=True)[:10]         # the ten largest, largest first
            for f in top:
                k_s, k_i = f.self_samples, f.inclusive_samples
                assert (f.self_share, f.inclusive_share) == (pytest.approx(k_s / n), pytest.approx(k_i / n))
                keys = [k for k in inc if (k[0], k[1]) == (f.function, f.file)]
                if len(keys) != 1:      # texts repeated under several string ids: no one key to follow
                    continue
                order = sorted(want["seq"][slot], key=lambda x: x[0])
                self_in = [leaf == keys[0] for _, leaf, _ in order]
                incl_in = [keys[0] in on for _, _, on in order]
                assert sum(self_in) == k_s and sum(incl_in) == k_i
                assert (f.self_share_low, f.self_share_high) == pytest.approx(interval_by_hand(self_in), abs=2e-3)
                assert (f.inclusive_share_low, f.inclusive_share_high) == pytest.approx(interval_by_hand(incl_in),
                                                                                        abs=2e-3)
                assert f.self_ms_per_request == pytest.approx(k_s * want["period_ms"] / requests, rel=1e-12)
                assert f.inclusive_ms_per_request == pytest.approx(k_i * want["period_ms"] / requests, rel=1e-12)

@pytest.mark.parametrize("name, head_kept", [(n, None) for n in NAMES] + [("cpu23-sampled", 30), ("cpu23-sampled", 29)])
def test_sampler_figures_against_a_reading_by_hand(capture, tmp_path, name, head_kept):
    """head_kept: a copy whose head stage keeps only its first K marks (SQL deletes the others):
    30 samples are enough for shares to be a measurement (`few` False), 29 are not."""
    path = capture(name)
    if head_kept is not None:
        gone = [r for (r,) in sql(path, HEAD_MARKS)][head_kept:]
        path = edited_copy(path, tmp_path / "cut.sqlite",
                           f"DELETE FROM NVTX_EVENTS WHERE rowid IN ({','.join(map(str, gone))})")
    an = analyze(str(path))
    r = an.result
    cfg = StageConfig()
    want = oracle(path, set(cfg.stages))
    s = r.samples
    assert s.source == "clef-prof sampler" and s.unit == "samples" and s.confidence == 0.95
    assert (s.samples, s.threads, s.asked_hz) == (want["samples"], want["threads"], want["hz"])
    assert s.samples == sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34")[0][0]
    assert s.ms_per_sample == pytest.approx(want["period_ms"], rel=1e-12)
    assert s.observed_hz == pytest.approx(want["observed_hz"], rel=1e-12)
    assert (s.unknown_stack, s.unreadable, s.outside_session, s.cut_stacks, s.bad_definitions) == (0, 0, 0, 0, 0)
    assert (s.placed_by_time, s.unplaced) == (0, 0) and an.sample_counts.notes == []      # nsys' figures only
    assert r.requests == sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'pooler n=1'")[0][0]
    # every configured stage is a slot; (batch) and (outside) only where they hold samples
    slots = list(cfg.stages) + [k for k in ("(batch)", "(outside)") if want["per_slot"][k]]
    assert list(s.stages) == slots
    assert want["per_slot"]["head"] == head_kept if head_kept else want["per_slot"]["head"] >= 60
    check_slots(s, want, r.requests)
    # without a request count, no ms per request anywhere
    bare, _ = smp.figures(an.sample_counts, None)
    assert all(fig.ms_per_request is None for fig in bare.stages.values())
    assert all(f.self_ms_per_request is None for fig in bare.stages.values() for f in fig.top_self)



# ------------------------------------------------- a real Kineto with_stack trace: self and inclusive ns
BERT = "kineto-bert-stack.pt.trace.json.xz"
BERT_STAGES = ("parse", "transfer", "head", "encode")


def _kineto_oracle(trace: dict) -> tuple[dict, dict, dict]:
    """({slot: {(function, file): self ns}}, the same inclusive, {slot: total ns}) by hand: an
    event's self time is its duration less its children's (by Python parent id), counted to its own
    function and, once each, to every function among its ancestors; the slot is the innermost stage
    range of its thread holding the whole event, else a batch range that does, else "(outside)"."""
    import re
    ev = trace["traceEvents"]
    py = [e for e in ev if e.get("cat") == "python_function"]
    by_id = {e["args"]["Python id"]: e for e in py}
    child = Counter()
    for e in py:
        p = e["args"].get("Python parent id")
        if p is not None:
            child[p] += e["dur"]
    ranges = [e for e in ev if e.get("cat") == "user_annotation"]

    def fn(e):
        m = re.match(r"(.*)\((\d+)\): (.+)$", e["name"])     # `file(LINE): function`; `<frozen runpy>` a file too
        return (m.group(3), m.group(1)) if m else (re.sub(r" at 0x[0-9a-f]+>$", ">", e["name"]), "")

    self_, incl, total = defaultdict(Counter), defaultdict(Counter), Counter()
    for e in py:
        a, b = e["ts"], e["ts"] + e["dur"]
        holding = [r for r in ranges if r["tid"] == e["tid"] and r["pid"] == e["pid"] and r["ts"] <= a
                   and b <= r["ts"] + r["dur"]]
        stages = [r for r in holding if r["name"] in BERT_STAGES]
        slot = (max(stages, key=lambda r: r["ts"])["name"] if stages else
                "(batch)" if any(r["name"].startswith("pooler") for r in holding) else "(outside)")
        own = max(e["dur"] - child[e["args"]["Python id"]], 0.0) * 1000       # µs -> ns
        on_stack, x = {fn(e)}, e
        while x["args"].get("Python parent id") is not None:
            x = by_id[x["args"]["Python parent id"]]
            on_stack.add(fn(x))
        root = x                        # the outermost event of its stack
        if fn(root)[1].endswith("threading.py") and all(re.search(r"(^|/)clef_prof/", f[1]) or
                                                        f[1].endswith("threading.py") for f in on_stack):
            continue                    # clef-prof's own thread (#35 B10): left out
        self_[slot][fn(e)] += own
        for f in on_stack:
            incl[slot][f] += own
        total[slot] += own
    return self_, incl, total


def test_kineto_top_ten_by_self_and_inclusive_time_against_a_reading_by_hand(tmp_path, monkeypatch):
    """tests/programs/bertsrv under torch.profiler with_stack (the H200 recording cut to three
    batches): per stage the ten functions with the most self (and inclusive) ns, each with its
    self and inclusive ns, share and ms per request, against json.load of the trace and a walk
    of each event's parent ids."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    raw = lzma.decompress((DATA / BERT).read_bytes())
    trace = json.loads(raw)
    path = tmp_path / "bert.pt.trace.json"
    path.write_bytes(raw)
    r = analyze(resolve(str(path))[0], StageConfig(stages=BERT_STAGES)).result
    s = r.samples
    self_, incl, total = _kineto_oracle(trace)
    assert s.unit == "ns" and s.samples == pytest.approx(sum(total.values()), rel=1e-6)
    assert s.ms_per_sample is None and s.observed_hz is None and s.asked_hz is None and s.source == smp.KINETO_SOURCE
    assert (s.unknown_stack, s.unreadable, s.outside_session, s.cut_stacks, s.bad_definitions, s.placed_by_time,
            s.unplaced) == (0,) * 7
    assert s.threads == len({(e["pid"], e["tid"]) for e in trace["traceEvents"] if e.get("cat") == "python_function"})
    assert list(s.stages) == list(BERT_STAGES) + [k for k in ("(batch)", "(outside)") if total[k]]
    requests = sum(int(e["name"].split("=")[1]) for e in trace["traceEvents"]
                   if e.get("cat") == "user_annotation" and e["name"].startswith("pooler n="))
    assert r.requests == requests == 48
    assert len([f for f in self_["head"].values() if f > 0]) > 10       # the top ten is a cut here
    for stage in s.stages:
        got, n = s.stages[stage], total[stage]
        assert got.samples == pytest.approx(n, rel=1e-6, abs=1000) and not got.few
        idle = idle_by_hand(self_[stage])
        assert got.idle_samples == pytest.approx(idle, rel=1e-6, abs=1000), stage
        work = n - idle if stage == "(outside)" else n
        assert got.ms_per_request == pytest.approx(work / 1e6 / requests, rel=1e-6)
        for by, top, mine in (("self", got.top_self, self_[stage]), ("incl", got.top_inclusive, incl[stage])):
            ranked = sorted((v for v in mine.values() if v >= 1), reverse=True)
            assert len(top) == min(10, len(ranked)), (stage, by)
            shown = [f.self_samples if by == "self" else f.inclusive_samples for f in top]
            assert shown == pytest.approx(ranked[:len(top)], rel=1e-5, abs=100), (stage, by)
            for f in top:
                k_s, k_i = self_[stage][(f.function, f.file)], incl[stage][(f.function, f.file)]
                assert f.self_samples == pytest.approx(k_s, rel=1e-5, abs=100)
                assert f.inclusive_samples == pytest.approx(k_i, rel=1e-5, abs=100), (stage, f.function)
                assert f.self_share_low == f.self_share == f.self_share_high == pytest.approx(k_s / n, rel=1e-5,
                                                                                            abs=1e-6)
                assert f.inclusive_share_low == f.inclusive_share == f.inclusive_share_high
                assert f.inclusive_share == pytest.approx(k_i / n, rel=1e-5, abs=1e-6)
                assert f.self_ms_per_request == pytest.approx(k_s / 1e6 / requests, rel=1e-5, abs=1e-6)
                assert f.inclusive_ms_per_request == pytest.approx(k_i / 1e6 / requests, rel=1e-5, abs=1e-6)


def test_a_stack_cut_short_counts_as_cut_not_as_an_unknown_frame(capture, tmp_path):
    """Frame id 0 is the sampler's "frames cut here" (clef_prof.annotate.sampler): a stack written
    by a sampler of smaller depth, `1 2 0`, is cut after two frames: its samples (SQL: the marks
    naming that stack) count as cut, and no frame of theirs is an unknown one."""
    path = capture("cpu23-sampled")
    (key, ids), = [v[len("clef-prof stack "):].split("\t") for (v,) in
                   sql(path, "SELECT value FROM StringIds WHERE value LIKE 'clef-prof stack %:1\t%'")]
    assert len(ids.split()) == 3
    cut = edited_copy(path, tmp_path / "cut.sqlite",
                      ("UPDATE StringIds SET value = ? WHERE value = ?",
                       (f"clef-prof stack {key}\t{' '.join(ids.split()[:2])} 0", f"clef-prof stack {key}\t{ids}")))
    (k,), = sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND int64Value = 1")
    assert k > 30
    an = analyze(str(cut))
    s = an.result.samples
    assert s.cut_stacks == k and s.samples == analyze(str(path)).result.samples.samples
    assert smp.UNKNOWN_FRAME not in an.sample_counts.func_name
    assert any(f"{k:,} samples had stacks deeper than 128 frames" in w for w in an.result.warnings)


@pytest.mark.parametrize("msg", ["t 12x 34", "t 12 3x", "t 12 34 5", "t 12", f"t 12 {1 << 24}",
                                 f"t {1 << 31} 34", "t -12 34"])
def test_a_mark_that_names_no_thread_is_left_out_and_counted(capture, tmp_path, msg):
    """A sampler mark whose message is not `t PID TID` (decimal, a TID below 2^24 and a PID below
    2^31, what a globalTid can hold): left out, counted as unreadable, said in a warning; the
    other samples unchanged."""
    path = capture("cpu23-sampled")
    (first,), = sql(path, "SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 34")
    (nid,), = sql(path, "SELECT max(id) + 1 FROM StringIds")
    bad = edited_copy(path, tmp_path / "bad.sqlite", ("INSERT INTO StringIds (id, value) VALUES (?, ?)", (nid, msg)),
                      ("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, textId, domainId, int64Value) SELECT "
                       "start + 1, 34, globalTid, ?, domainId, int64Value FROM NVTX_EVENTS WHERE rowid = ?", (nid, first)))
    before = analyze(str(path)).result.samples
    r = analyze(str(bad)).result
    s = r.samples
    assert (s.unreadable, s.samples, s.threads) == (1, before.samples, before.threads)
    assert {k: v.samples for k, v in s.stages.items()} == {k: v.samples for k, v in before.stages.items()}
    assert any("1 with a message that is not `t PID TID`" in w for w in r.warnings)


def test_hostile_definitions_and_marks_on_the_shipped_capture(capture, tmp_path):
    """cpu23-sampled with strings and marks added by SQL: a stack never defined, a stack with no
    frames, one 200 frames deep (cut at 128), one naming a frame never defined, an unreadable frame
    and sampler definition, marks before and after the session. Each is counted where the by-hand
    reading says, the rest of the figures unchanged."""
    path = capture("cpu23-sampled")
    (msg, pid), = sql(path, "SELECT value, CAST(substr(value, 3, instr(substr(value, 3), ' ') - 1) AS INTEGER) "
                            "FROM StringIds WHERE value LIKE 't %'")
    fid = sql(path, "SELECT value FROM StringIds WHERE value LIKE 'clef-prof frame %:1\t%'")[0][0].split("\t")[0].split(":")[1]
    leaf = sql(path, "SELECT value FROM StringIds WHERE value LIKE 'clef-prof frame %:1\t%'")[0][0].split("\t")[1]
    (nid,), = sql(path, "SELECT max(id) FROM StringIds")
    (first,), = sql(path, "SELECT rowid FROM NVTX_EVENTS WHERE eventType = 34 ORDER BY start LIMIT 1")
    (dur,), = sql(path, 'SELECT max(coalesce("end", start)) FROM NVTX_EVENTS')
    strings = [f"clef-prof stack {pid}:90001\t", f"clef-prof stack {pid}:90002\t" + " ".join([fid] * 200),
               f"clef-prof stack {pid}:90003\t999999 {fid}", "clef-prof frame notanumber", "clef-prof sampler x"]
    edits = [("INSERT INTO StringIds (id, value) VALUES (?, ?)", (nid + 1 + i, v)) for i, v in enumerate(strings)]
    for dt, sid in ((1, 99_999), (3, 90001), (4, 90002), (5, 90003)):
        edits.append(("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, textId, domainId, int64Value) SELECT "
                      "start + ?, 34, globalTid, textId, domainId, ? FROM NVTX_EVENTS WHERE rowid = ?", (dt, sid, first)))
    for t in (10 * dur + 10**12, -5):
        edits.append(("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, textId, domainId, int64Value) SELECT "
                      "?, 34, globalTid, textId, domainId, int64Value FROM NVTX_EVENTS WHERE rowid = ?", (t, first)))
    bad = edited_copy(path, tmp_path / "hostile.sqlite", *edits)
    before = analyze(str(path))
    an = analyze(str(bad))
    s, b = an.result.samples, before.result.samples
    assert (s.unknown_stack, s.unreadable, s.outside_session, s.cut_stacks, s.bad_definitions) == (1, 0, 2, 1, 2)
    assert s.samples == b.samples + 4 and s.asked_hz == b.asked_hz == 200
    # the four kept marks lie 1-5 ns after the first one: in its slot
    cnt = an.sample_counts
    grew = {sl: int(cnt.counts[i].sum()) - int(before.sample_counts.counts[before.sample_counts.slots.index(sl)].sum())
            for i, sl in enumerate(cnt.slots)}
    assert sorted(grew.values()) == [0] * (len(grew) - 1) + [4]
    slot = max(grew, key=grew.get)
    fig = s.stages[slot]
    by = {f.function: f for f in fig.top_self}
    assert by[smp.UNKNOWN_STACK].self_samples == by[smp.NO_FRAMES].self_samples == 1
    assert by[smp.UNKNOWN_FRAME].self_samples == 1
    was = {f.function: f for f in b.stages[slot].top_inclusive}
    # the 200-deep stack (cut to 128 frames of `leaf`) adds one self sample to it; it and 90003's
    # stack (an unknown frame, then `leaf`) one inclusive sample each
    assert by[leaf].self_samples == next(f.self_samples for f in b.stages[slot].top_self if f.function == leaf) + 1
    incl = {f.function: f for f in fig.top_inclusive}
    assert incl[leaf].inclusive_samples == was[leaf].inclusive_samples + 2
    deep = [st for st in cnt.stacks if len(st) > 3]
    assert [len(st) for st in deep] == [128]
    said = " | ".join(an.result.warnings)
    for words in ("1 whose stack has no definition", "2 outside the session", "1 samples had stacks deeper than 128",
                  "2 sampler definitions in StringIds could not be read"):
        assert words in said, words


@pytest.mark.parametrize("keep, hz, want", [
    ("one", True, (5.0, None)),         # no thread has two samples: the asked 200 Hz's period
    ("same time", True, (5.0, None)),   # the second at the first's time, thread and stack: a repeat, once
    ("one", False, (None, None)),       # and no rate asked (the sampler's definition gone)
    ("two", True, (None, None)),        # two samples 7 ms apart: that gap
])
def test_sampling_period_without_two_samples_of_a_thread(capture, tmp_path, keep, hz, want):
    path = capture("cpu23-sampled")
    (a, ta), (b, tb) = sql(path, "SELECT rowid, start FROM NVTX_EVENTS WHERE eventType = 34 ORDER BY start LIMIT 2")
    edits = [f"DELETE FROM NVTX_EVENTS WHERE eventType = 34 AND rowid NOT IN ({a}, {b})"]
    if keep == "one":
        edits.append(f"DELETE FROM NVTX_EVENTS WHERE rowid = {b}")
    elif keep == "same time":
        edits.append(f"UPDATE NVTX_EVENTS SET start = {ta} WHERE rowid = {b}")
    else:
        edits.append(f"UPDATE NVTX_EVENTS SET start = {ta + 7_000_000} WHERE rowid = {b}")
    if not hz:
        edits.append("DELETE FROM StringIds WHERE value LIKE 'clef-prof sampler %'")
    s = analyze(str(edited_copy(path, tmp_path / "few.sqlite", *edits))).result.samples
    assert s.samples == (2 if keep == "two" else 1) and s.asked_hz == (200 if hz else None)
    assert s.duplicates == (keep == "same time")
    if keep == "two":
        assert (s.ms_per_sample, s.observed_hz) == (pytest.approx(7.0), pytest.approx(1e9 / 7e6))
    else:
        assert (s.ms_per_sample, s.observed_hz) == want


# ------------------------------------------------- nsys 2025.3's own Python samples, each on its OS thread
def _nsys_oracle(db, stage_names, ties: dict | None = None) -> dict:
    """The slots' figures by hand from nsys' JSON export: each sample on the OS thread its mark
    names, in the innermost stage range of that thread holding its time (SQL), else a batch range,
    else "(outside)"; its innermost 128 frames; a function is its (name, file) string id pair."""
    ranges = defaultdict(list)
    for a, b, g, name in sql(db, RANGES):
        ranges[g & 0xFFFFFF].append((a, b, name))
    hand = [(t, who, [(f, fl, fid, flid) for f, fl, _ln, fid, flid in frames])
            for t, who, frames in decode(db.with_suffix(".json"))]
    if ties:            # 2023.4: the OS thread of each ordinal (-category), as the program says
        hand = [(t, ties[-k], frames) for t, k, frames in hand]
    per_slot, self_, incl, times = Counter(), defaultdict(Counter), defaultdict(Counter), defaultdict(list)
    seq = defaultdict(list)
    for t, tid, frames in hand:
        times[tid].append(t)
        holding = [(a, name) for a, b, name in ranges[tid] if a <= t <= b]
        in_stage = sorted((a, name) for a, name in holding if name in stage_names)
        slot = in_stage[-1][1] if in_stage else \
            "(batch)" if any(name.startswith("pooler") for _, name in holding) else "(outside)"
        st = frames[:128] or [(smp.NO_FRAMES, "", -1, -1)]
        per_slot[slot] += 1
        self_[slot][st[0]] += 1
        for f in set(st):
            incl[slot][f] += 1
        seq[slot].append((t, st[0], set(st)))
    gaps = [b - a for ts in times.values() for a, b in zip(sorted(ts), sorted(ts)[1:]) if b > a]
    med = statistics.median(gaps)
    return dict(samples=len(hand), per_slot=per_slot, self=self_, incl=incl, period_ms=med / 1e6, threads=len(times),
                seq=seq)


@pytest.mark.parametrize("tag", ["split", "threads", "idle"])
def test_nsys_2025_samples_against_a_reading_by_hand(tmp_path, tag):
    for ext in ("sqlite", "json"):
        (tmp_path / f"c.{ext}").write_bytes(lzma.decompress((DATA / f"gpu25-nsyspy-{tag}.{ext}.xz").read_bytes()))
    db = tmp_path / "c.sqlite"
    an = analyze(str(db))
    r, s = an.result, an.result.samples
    want = _nsys_oracle(db, set(an.config.stages))
    assert s.source == "nsys python sampling" and (s.samples, s.threads) == (want["samples"], want["threads"])
    assert s.ms_per_sample == pytest.approx(want["period_ms"], rel=1e-12)
    assert (s.unknown_stack, s.unreadable, s.outside_session, s.cut_stacks, s.placed_by_time, s.unplaced) == (0,) * 6
    assert an.sample_counts.notes == [] and not [w for w in r.warnings if "Python samples" in w]   # nothing damaged
    assert list(s.stages) == list(an.config.stages) + [k for k in ("(batch)", "(outside)") if want["per_slot"][k]]
    assert r.requests == sql(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'pooler n=1'")[0][0]
    check_slots(s, want, r.requests)


@pytest.mark.parametrize("at_end, delta, out", [(False, 0, 0), (False, -1, 1), (True, 0, 0), (True, 1, 1)])
def test_session_edges_of_a_sample(capture, tmp_path, at_end, delta, out):
    """A mark at the session's start (t = 0) or its end (ANALYSIS_DETAILS.duration, by SQL) is in
    the session; 1 ns before or after it is not, and is counted outside it."""
    path = capture("cpu23-sampled")
    (d,), = sql(path, "SELECT max(duration) FROM ANALYSIS_DETAILS")
    (first,), = sql(path, "SELECT rowid FROM NVTX_EVENTS WHERE eventType = 34 ORDER BY start LIMIT 1")
    t = (d if at_end else 0) + delta
    moved = edited_copy(path, tmp_path / "edge.sqlite", f"UPDATE NVTX_EVENTS SET start = {t} WHERE rowid = {first}")
    s = analyze(str(moved)).result.samples
    n = sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34")[0][0]
    assert (s.outside_session, s.samples) == (out, n - out)


def _py_trace(funcs: list[tuple[str, float, float, int, int | None]]) -> dict:
    """A constructed with_stack trace (the format of test_kineto_python's): one batch `pooler n=1`
    [0, 1000] µs holding `head` [100, 900] µs on thread 7, and python_function events
    (name, ts, dur, Python id, Python parent id) on it, all 1 s after the trace's start."""
    t0 = 1_000_000.0
    ev = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 7, "tid": 7, "ts": t0 + a, "dur": d, "args": {}}
          for n, a, d in (("pooler n=1", 0.0, 1000.0), ("head", 100.0, 800.0))]
    ev += [{"ph": "X", "cat": "python_function", "name": n, "pid": 7, "tid": 7, "ts": t0 + a, "dur": d,
            "args": {"Python id": i, "Python parent id": p, "Python thread": 0}} for n, a, d, i, p in funcs]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_kineto_self_time_orphans_and_overlong_children(tmp_path, monkeypatch):
    """By hand: a [50, 950] (Python id 0; batch: it starts before head) calls b [100, 500] (head) which calls
    c [150, 450], and d [600, 950] (batch: it ends after head); e [700, 800] names a parent id
    no event has (an orphan: its own root, counted in unknown_stack); g [1100, 1110] outside the
    batch calls h [1100, 1130], longer than it (a damaged trace): g's self time is 0, not -20;
    x [-20, 30] ends inside the batch but starts before it: outside."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(_py_trace([
        ("m.py(1): a", 50, 900, 0, None), ("m.py(2): b", 100, 400, 2, 0), ("m.py(3): c", 150, 300, 3, 2),
        ("m.py(4): d", 600, 350, 4, 0), ("m.py(5): e", 700, 100, 5, 99), ("m.py(7): g", 1100, 10, 7, None),
        ("m.py(8): h", 1100, 30, 8, 7), ("m.py(9): x", -20, 50, 9, None)])))
    s = analyze(resolve(str(path))[0], StageConfig(stages=("head",))).result.samples
    assert (s.unit, s.unknown_stack, s.samples, s.threads) == ("ns", 1, 1_080_000, 1)
    want = {"head": ({"b": 100, "c": 300, "e": 100}, {"a": 400, "b": 400, "c": 300, "e": 100}),
            "(batch)": ({"a": 150, "d": 350}, {"a": 500, "d": 350}),
            "(outside)": ({"h": 30, "x": 50}, {"g": 30, "h": 30, "x": 50})}
    assert list(s.stages) == list(want)
    for slot, (self_us, incl_us) in want.items():
        fig = s.stages[slot]
        assert fig.samples == 1000 * sum(self_us.values()) and fig.ms_per_request == fig.samples / 1e6
        assert {f.function: f.self_samples for f in fig.top_self} == {k: 1000 * v for k, v in self_us.items()}
        assert {f.function: f.inclusive_samples for f in fig.top_inclusive} == {k: 1000 * v for k, v in incl_us.items()}
        assert all(f.file == "m.py" for f in fig.top_inclusive)


def test_kineto_parent_ids_in_a_cycle_give_no_python_view(tmp_path, monkeypatch):
    """Two events each naming the other as parent (a damaged trace): no stack can be built, so
    no Python view, and the rest of the analysis stands."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(_py_trace([("m.py(1): a", 100, 100, 1, 2), ("m.py(2): b", 300, 100, 2, 1)])))
    r = analyze(resolve(str(path))[0], StageConfig(stages=("head",))).result
    assert r.samples is None and r.requests == 1


def test_share_text_and_label_of_the_first_stages_top_function(capture):
    """The text report's cells of a function (explore.text): its share with the interval in
    whole percent, the inclusive one likewise, and its file's base name; for measured durations
    (interval = point) the share alone. Figures of cpu23-sampled's head, written out by hand."""
    from dataclasses import replace

    r = analyze(str(capture("cpu23-sampled"))).result
    f = next(x for x in r.samples.stages["head"].top_inclusive if x.function == "main")    # on every head stack
    assert f.self_share == 0 < f.self_share_high and f.inclusive_share == 1.0 > f.inclusive_share_low
    assert f.file.startswith("/")
    for self_, share, lo, hi in ((True, f.self_share, f.self_share_low, f.self_share_high),
                                 (False, f.inclusive_share, f.inclusive_share_low, f.inclusive_share_high)):
        assert smp.share_text(f, self_=self_) == f"{round(100 * share)}% [{round(100 * lo)}–{round(100 * hi)}%]"
    assert smp.label(f) == f"{f.function} (sampled_split.py)"
    assert smp.label(replace(f, file="")) == f.function
    timed = replace(f, self_share=0.25, self_share_low=0.25, self_share_high=0.25, inclusive_share=0.5,
                    inclusive_share_low=0.5, inclusive_share_high=0.5)
    assert (smp.share_text(timed), smp.share_text(timed, self_=False)) == ("25%", "50%")


def test_nsys_2023_samples_of_two_tied_threads_against_a_reading_by_hand(tmp_path):
    """nsys 2023.4 names a sample's Python thread by an ordinal only: which ordinal is which OS
    thread comes from the program (heavy() runs on the main thread only, light() on w-light
    only; cpu23-nsyspy.truth.json), then every slot's figures by hand as for 2025.3."""
    for ext in ("sqlite", "json"):
        (tmp_path / f"c.{ext}").write_bytes(lzma.decompress((DATA / f"cpu23-nsyspy-threads.{ext}.xz").read_bytes()))
    db = tmp_path / "c.sqlite"
    facts = json.loads((DATA / "cpu23-nsyspy.truth.json").read_text())["cpu23-nsyspy-threads"]["threads"]
    hand = decode(db.with_suffix(".json"))
    ties = {}
    for fn, thread in (("heavy", "MainThread"), ("light", "w-light")):
        (k,) = {-k for _t, k, fr in hand if fr and fr[0][0] == fn}
        ties[k] = facts[thread]["tid"]
    assert len({k for _t, k, _f in hand}) == 2
    an = analyze(str(db))
    r, s = an.result, an.result.samples
    want = _nsys_oracle(db, set(an.config.stages), ties)
    assert s.source == "nsys python sampling" and (s.samples, s.threads) == (want["samples"], want["threads"])
    assert {k: g & 0xFFFFFF for k, g in an.sample_counts.thread_ties.items()} == ties
    assert s.ms_per_sample == pytest.approx(want["period_ms"], rel=1e-12)
    assert (s.unknown_stack, s.unreadable, s.outside_session, s.cut_stacks, s.placed_by_time, s.unplaced) == (0,) * 6
    assert list(s.stages) == list(an.config.stages) + [k for k in ("(batch)", "(outside)") if want["per_slot"][k]]
    check_slots(s, want, r.requests)


def test_a_sample_in_the_first_stage_range_counts_there(capture, tmp_path):
    """cpu23-sampled's sampler starts after the first head range ends; a copy with one mark moved
    into that range (and the thread it names) counts it in head: SQL over the copy."""
    from conftest import SAMPLES_IN_HEAD
    path = capture("cpu23-sampled")
    (a, b, g), = sql(path, "SELECT r.start, r.\"end\", r.globalTid FROM NVTX_EVENTS r JOIN StringIds s ON s.id = r.textId "
                           "WHERE r.eventType = 59 AND s.value = 'head' ORDER BY r.start LIMIT 1")
    (first, t), = sql(path, "SELECT rowid, start FROM NVTX_EVENTS WHERE eventType = 34 ORDER BY start LIMIT 1")
    assert t > b                                        # no sample in the first range as recorded
    moved = edited_copy(path, tmp_path / "first.sqlite",
                        f"UPDATE NVTX_EVENTS SET start = {(a + b) // 2} WHERE rowid = {first}")
    (in_head,), = sql(moved, SAMPLES_IN_HEAD)
    (was,), = sql(path, SAMPLES_IN_HEAD)
    assert in_head == was + (1 if sql(path, SAMPLES_IN_HEAD + f" AND m.rowid = {first}")[0][0] == 0 else 0)
    s = analyze(str(moved)).result.samples
    assert s.stages["head"].samples == in_head
    assert sum(f.self_samples for f in s.stages["head"].top_self) == in_head


def test_nsys_samples_after_the_session_are_counted_out(tmp_path):
    """gpu25-nsyspy-split with its session cut short by SQL (ANALYSIS_DETAILS.duration set 1 ns
    before its fifth-last sample, from the JSON decoded by hand): those five samples are outside
    the session, counted and left out; the others stay where they were."""
    for ext in ("sqlite", "json"):
        (tmp_path / f"c.{ext}").write_bytes(lzma.decompress((DATA / f"gpu25-nsyspy-split.{ext}.xz").read_bytes()))
    db = tmp_path / "c.sqlite"
    times = sorted(t for t, _k, _f in decode(db.with_suffix(".json")))
    assert times[-5] > times[-6]
    before = analyze(str(db)).result.samples
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE ANALYSIS_DETAILS SET duration = ?", (times[-5] - 1,))
    con.close()
    s = analyze(str(db)).result.samples
    assert (s.outside_session, s.samples) == (5, len(times) - 5) and before.outside_session == 0
    assert sum(f.samples for f in s.stages.values()) == len(times) - 5


def test_an_emptied_python_functions_table_gives_no_python_view(tmp_path, monkeypatch):
    """A converted with_stack trace whose CLEF_PYTHON_FUNCTIONS rows were deleted (an edited
    export): no Python view and no error; the stages as before."""
    import shutil

    from clef_prof.analyze.read import kineto
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(_py_trace([("m.py(1): a", 150, 100, 1, None)])))
    copy = tmp_path / "edited.sqlite"
    shutil.copy(kineto.to_export(str(path), quiet=True), copy)
    con = sqlite3.connect(copy)
    with con:
        con.execute("DELETE FROM CLEF_PYTHON_FUNCTIONS")
    con.close()
    before = analyze(resolve(str(path))[0], StageConfig(stages=("head",))).result
    r = analyze(str(copy), StageConfig(stages=("head",))).result
    assert before.samples.stages["head"].samples == 100_000 and r.samples is None
    assert r.requests == before.requests == 1 and r.stages["head"].host_ns_total == 800_000


def test_nsys_one_frame_stacks_and_the_first_string(tmp_path):
    """nsys 2023.4 payloads edited (struct.pack, test_nsys_samples' _edit): the first sample cut
    to its leaf frame alone (a stack of one frame, not "no frames"); the second's leaf naming the
    export's first kept string (the smallest id frames name, decoded by hand) as both function
    and file: shown as that text twice."""
    from test_nsys_samples import _edit
    first_id = min(min(f, i) for _t, _k, fr in decode(_unpack23(tmp_path / "probe")) for _n, _fl, _ln, f, i in fr)
    one = lambda raw: raw[:8] + struct.pack("<I", 1) + raw[12:40]                        # noqa: E731
    same = lambda raw: raw[:16] + struct.pack("<QQ", first_id, first_id) + raw[32:]        # noqa: E731
    db = _edit(tmp_path, {0: one, 1: same})
    hand = decode(db.with_suffix(".json"))
    (leaf, leaf_file, _, _, _), = hand[0][2]
    text = next(n if f == first_id else fl for _t, _k, fr in hand for n, fl, _ln, f, i in fr if first_id in (f, i))
    assert hand[1][2][0][:2] == (text, text) and text
    an = analyze(str(db))
    sc = an.sample_counts
    used = sc.counts.sum(axis=0)
    assert not [j for j, st in enumerate(sc.stacks) if used[j] and sc.func_name[st[0]] == smp.NO_FRAMES]
    ones = {fr[0][:2] for _t, _k, fr in hand if len(fr) == 1}
    assert (leaf, leaf_file) in ones
    assert {(sc.func_name[st[0]], sc.func_file[st[0]]) for j, st in enumerate(sc.stacks) if used[j] and len(st) == 1} \
        == ones
    assert (text, text) in set(zip(sc.func_name, sc.func_file))


def _unpack23(tmp) -> Path:
    tmp.mkdir()
    for ext in ("sqlite", "json"):
        (tmp / f"c.{ext}").write_bytes(lzma.decompress((DATA / f"cpu23-nsyspy-split.{ext}.xz").read_bytes()))
    return tmp / "c.json"
