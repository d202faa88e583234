"""compare's function-level change per stage (clef_prof.compare.functions) on real captures:
tests/programs/sampled_split.py under nsys 2023.4 with clef-prof's sampler, 3 captures per arm
(scripts/make-samples-compare-captures.py): main runs three(3K) then one(K) in its head stage, pr
runs three(6K) then one(K). Oracles: per-capture values from SQL over each export (marks joined
to the head ranges of their thread and to their stack's leaf frame), Welch's interval by hand,
and the program's own perf_counter_ns clock; a seeded simulation holds the interval to its
coverage at the designs compare allows."""
from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest

from clef_prof.analyze.figures.stages import StageConfig
from clef_prof.cli.app import main
from clef_prof.compare import engine as comparison
from clef_prof.compare import welch
from clef_prof.compare.arm import collect
from clef_prof.compare.functions import function_changes, verdict_fields
from conftest import SAMPLES_IN_HEAD, sql

CFG = StageConfig(stages=("head",))
ARMS = {"main": [f"cpu23-samples-main-{i}" for i in (1, 2, 3)], "pr": [f"cpu23-samples-pr-{i}" for i in (1, 2, 3)]}

# marks of clef-prof's sampler inside a head range of the thread their message names, with the
# function of their stack's innermost frame (the first frame id of the stack definition)
LEAF_IN_HEAD = """
WITH s AS (
  SELECT m.start, m.globalTid AS g, m.int64Value AS sid,
         CAST(substr(t.value, 3, instr(substr(t.value, 3), ' ') - 1) AS INTEGER) AS pid,
         CAST(substr(t.value, instr(substr(t.value, 3), ' ') + 3) AS INTEGER) AS tid
  FROM NVTX_EVENTS m JOIN StringIds t ON t.id = m.textId
  WHERE m.eventType = 34 AND t.value LIKE 't %'),
st AS (
  SELECT CAST(substr(value, 17, instr(value, ':') - 17) AS INTEGER) AS pid,
         CAST(substr(value, instr(value, ':') + 1, instr(value, char(9)) - instr(value, ':') - 1) AS INTEGER) AS sid,
         substr(value, instr(value, char(9)) + 1) AS ids
  FROM StringIds WHERE value LIKE 'clef-prof stack %'),
leaf AS (
  SELECT pid, sid, CASE WHEN instr(ids, ' ') > 0 THEN substr(ids, 1, instr(ids, ' ') - 1) ELSE ids END AS fid FROM st),
fr AS (
  SELECT substr(value, 17, instr(value, char(9)) - 17) AS key,
         substr(value, instr(value, char(9)) + 1) AS rest
  FROM StringIds WHERE value LIKE 'clef-prof frame %')
SELECT substr(fr.rest, 1, instr(fr.rest, char(9)) - 1) AS function, count(*)
FROM s
JOIN NVTX_EVENTS h ON h.eventType = 59 AND h.start <= s.start AND s.start <= h."end"
     AND (h.globalTid >> 24) = (s.g >> 24) AND (h.globalTid & 16777215) = s.tid
JOIN StringIds hn ON hn.id = h.textId AND hn.value = 'head'
JOIN leaf ON leaf.pid = s.pid AND leaf.sid = s.sid
JOIN fr ON fr.key = leaf.pid || ':' || leaf.fid
GROUP BY function
"""


def _oracle(path) -> dict[str, float]:
    """{function: self ms per request} in head, from SQL: leaf samples x the median gap between a
    thread's consecutive samples / the requests of the batch ranges (n=K)."""
    counts = dict(sql(path, LEAF_IN_HEAD))
    rows = sql(path, "SELECT t.value, m.start FROM NVTX_EVENTS m JOIN StringIds t ON t.id = m.textId "
                     "WHERE m.eventType = 34 AND t.value LIKE 't %' ORDER BY t.value, m.start")
    gaps = [b[1] - a[1] for a, b in zip(rows, rows[1:]) if a[0] == b[0] and b[1] > a[1]]
    ms_per_sample = statistics.median(gaps) / 1e6
    (requests,), = sql(path, "SELECT sum(CAST(substr(COALESCE(n.text, s.value), instr(COALESCE(n.text, s.value), "
                             "'n=') + 2) AS INTEGER)) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                             "WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'pooler n=%'")
    return {f: k * ms_per_sample / requests for f, k in counts.items()}


def _welch_by_hand(b: list[float], a: list[float], conf: float = 0.95) -> tuple[float, float]:
    """Welch's interval of mean(log a) - mean(log b), Satterthwaite df, as exp(.) - 1 in %."""
    lb, la = [math.log(v) for v in b], [math.log(v) for v in a]
    vb, va = statistics.variance(lb) / len(lb), statistics.variance(la) / len(la)
    df = (vb + va) ** 2 / (vb ** 2 / (len(lb) - 1) + va ** 2 / (len(la) - 1))
    q = float(welch.t_quantile(1 - (1 - conf) / 2, df))     # held to published tables in test_compare
    d = statistics.mean(la) - statistics.mean(lb)
    half = q * math.sqrt(vb + va)
    return 100 * math.expm1(d - half), 100 * math.expm1(d + half)


@pytest.fixture(scope="module")
def paths(capture):
    return {arm: [str(capture(n)) for n in names] for arm, names in ARMS.items()}


@pytest.fixture(scope="module")
def comp(paths):
    arms = collect([], [f"{arm}={','.join(p)}" for arm, p in paths.items()])
    return comparison.compare(arms, comparison.load_all(arms, CFG, jobs=1), CFG)


def _entry(comp, fn):
    return next(e for e in comp["functions"]["stages"]["head"]["functions"] if e["function"] == fn)


def test_slowed_function_beyond_noise_the_other_not(comp, paths, truth):
    oracle = {arm: [_oracle(p) for p in ps] for arm, ps in paths.items()}
    three, one = _entry(comp, "three"), _entry(comp, "one")
    for e in (three, one):
        for arm in ARMS:
            # each capture's value, against SQL over its export
            assert e["arms"][arm]["per_capture"] == pytest.approx([o[e["function"]] for o in oracle[arm]], rel=1e-9)
        assert e["file"].endswith("sampled_split.py") and e["arms"]["pr"]["scale"] == "log"
        by_hand = _welch_by_hand(e["arms"]["main"]["per_capture"], e["arms"]["pr"]["per_capture"])
        assert e["ci_pct"] == pytest.approx(list(by_hand), rel=1e-6)
    assert three["verdict"] == "beyond noise" and three["ci_pct"][0] > 0
    assert one["verdict"] == "within noise" and one["ci_pct"][0] < 0 < one["ci_pct"][1]
    # the program's own clock: three's ms per batch more than doubled, and the interval holds it
    t = {n: truth("cpu23-samples-compare")[n] for names in ARMS.values() for n in names}
    per_batch = {arm: statistics.mean(t[n]["ns"]["three"] / t[n]["batches"] for n in names)
                 for arm, names in ARMS.items()}
    change = 100 * (per_batch["pr"] / per_batch["main"] - 1)
    assert change > 100 and three["ci_pct"][0] <= change <= three["ci_pct"][1]
    # three leads: the order is the largest ms per request in any arm
    assert comp["functions"]["stages"]["head"]["functions"][0]["function"] == "three"


def test_every_renderer_carries_the_function_rows(paths, tmp_path, capsys):
    args = ["compare", "--stages", "head"] + [x for arm, p in paths.items() for x in ("--arm", f"{arm}={','.join(p)}")]
    assert main(args + ["-f", "json", "-o", str(tmp_path / "c.json")]) == 0
    data = json.loads((tmp_path / "c.json").read_text())
    assert _entry(data, "three")["verdict"] == "beyond noise"
    assert main(args + ["-f", "markdown", "-o", str(tmp_path / "c.md")]) == 0
    md = (tmp_path / "c.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| head | `three (sampled_split.py)`"))
    assert "beyond noise" in row and "**+" in row
    row = next(line for line in md.splitlines() if line.startswith("| head | `one (sampled_split.py)`"))
    assert "within noise" in row and "**" not in row
    assert main(args + ["-o", str(tmp_path / "c.txt")]) == 0
    text = (tmp_path / "c.txt").read_text()
    assert "Python functions per stage, self ms per request" in text
    lines = [line for line in text.splitlines() if line.startswith("head") and "three (sampled_split.py)" in line]
    assert lines and any("beyond noise" in line for line in text.splitlines() if "three (sampled" in line)


def test_two_captures_an_arm_give_no_interval_and_never_read_exact(paths, tmp_path, monkeypatch):
    """With 2 captures an arm a function's change has no interval: the text (its glyphs asked
    for) and Markdown say so ("—", "too few captures to judge"), never "exact" (which is for
    deterministic counts only)."""
    monkeypatch.setenv("CLEF_PROF_ASCII", "0")
    args = ["compare", "--stages", "head"] + [x for arm, p in paths.items() for x in ("--arm", f"{arm}={','.join(p[:2])}")]
    assert main(args + ["-o", str(tmp_path / "c.txt")]) == 0
    text = (tmp_path / "c.txt").read_text().splitlines()
    at = next(i for i, line in enumerate(text) if "Python functions per stage" in line)
    end = next(i for i in range(at, len(text)) if text[i].startswith("beyond noise"))
    rows = [line for line in text[at:end] if "too few" in line]     # each function's label, then its figures
    assert len(rows) == len([line for line in text[at:end] if line.startswith("head")]) > 0
    assert not [line for line in text[at:end] if "exact" in line] and "(detects" not in "".join(text)
    assert all(line.rstrip().endswith("—  too few captures to judge") for line in rows), rows
    assert main(args + ["-f", "markdown", "-o", str(tmp_path / "c.md")]) == 0
    rows = [line for line in (tmp_path / "c.md").read_text().splitlines() if line.startswith("| head | `")]
    assert rows and all("| — |" in line and "exact" not in line for line in rows)


def test_a_capture_without_samples_gives_no_function_change_and_says_so(paths):
    arms = collect([], [f"{arm}={','.join(p)}" for arm, p in paths.items()])
    data = comparison.load_all(arms, CFG, jobs=1)
    data = {n: list(v) for n, v in data.items()}
    data["pr"][0] = dataclasses.replace(data["pr"][0], samples=None)
    out, notes = function_changes(["main", "pr"], data, ("head",), 0.95)
    assert out is None and notes and "Python samples in 5 of 6 captures" in notes[0]
    none = {n: [dataclasses.replace(d, samples=None) for d in data[n]] for n in ("main", "pr")}
    assert function_changes(["main", "pr"], none, ("head",), 0.95) == (None, [])


@pytest.mark.parametrize("n", [3, 4, 6, 8])
def test_function_change_interval_holds_its_coverage(n):
    """Seeded simulation at compare's designs: each capture's self samples of a function are a
    Poisson count around its level (the capture's own level spread 0-10% between captures), times
    its ms per sample / requests (2% spread); the per-capture values go through the tool's Welch
    interval (`welch.unit_interval`, which `verdict_fields` calls; checked equal on a few studies).
    A/A: false positives at most 6.5%; a true +50%: covered 93-97.5% of the time where the counts
    are large enough for the log scale (10 or more expected samples)."""
    rng = np.random.default_rng(240 + n)
    studies = 2000
    for lam in (2, 5, 10, 30, 100, 500):
        for sd in (0.0, 0.05, 0.1):
            def arm(mult):
                level = lam * mult * np.exp(rng.normal(0, sd, (studies, n)))
                return rng.poisson(level) * 0.01 * np.exp(rng.normal(0, 0.02, (studies, n)))
            base, same, more = arm(1.0), arm(1.0), arm(1.5)
            aa = welch.unit_interval(base, same, 0.95)
            fp = float(welch.beyond(aa.lo, aa.hi).mean())
            assert 0.01 <= fp <= 0.065, (n, lam, sd, fp)
            for i in range(3):          # the renderers' path gives the same interval
                f = verdict_fields(list(base[i]), list(same[i]), float(base[i].mean()), 0.95)
                if f["ci"] is not None:
                    lo, hi, _ = aa.absolute(base[i].mean())
                    assert f["ci"] == pytest.approx([float(lo[i]), float(hi[i])])
            if lam >= 10:
                ch = welch.unit_interval(base, more, 0.95)
                cover = float(((ch.lo <= math.log(1.5)) & (math.log(1.5) <= ch.hi) & ch.log).mean() / ch.log.mean())
                assert 0.93 <= cover <= 0.975, (n, lam, sd, cover)


def _requests(path) -> int:
    (n,), = sql(path, "SELECT sum(CAST(substr(COALESCE(n.text, s.value), instr(COALESCE(n.text, s.value), "
                      "'n=') + 2) AS INTEGER)) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                      "WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'pooler n=%'")
    return n


def test_pooled_figures_of_each_function_against_sql(comp, paths):
    """Each arm's self samples, share of the stage's samples and ms per request pooled over its
    captures (Σ ms / Σ requests), and the change between arms, from the SQL oracle's counts."""
    head = comp["functions"]["stages"]["head"]
    counts = {arm: [dict(sql(p, LEAF_IN_HEAD)) for p in ps] for arm, ps in paths.items()}
    ms = {arm: [_oracle(p) for p in ps] for arm, ps in paths.items()}
    requests = {arm: [_requests(p) for p in ps] for arm, ps in paths.items()}
    for arm in ARMS:                                      # the stage's samples: marks inside head ranges, by SQL
        assert head["samples"][arm] == sum(sql(p, SAMPLES_IN_HEAD)[0][0] for p in paths[arm]) > 0
    for e in head["functions"]:
        f = e["function"]
        pooled = {}
        for arm in ARMS:
            a = e["arms"][arm]
            assert a["self_samples"] == sum(c.get(f, 0) for c in counts[arm])
            assert a["stage_samples"] == head["samples"][arm] >= a["self_samples"]
            assert a["self_share"] == pytest.approx(a["self_samples"] / a["stage_samples"], rel=1e-12)
            pooled[arm] = sum(m.get(f, 0) * r for m, r in zip(ms[arm], requests[arm])) / sum(requests[arm])
            assert a["self_ms_per_request"] == pytest.approx(pooled[arm], rel=1e-9)
        assert e["change"] == pytest.approx(pooled["pr"] - pooled["main"], rel=1e-9)
        assert e["change_pct"] == pytest.approx(100 * (pooled["pr"] / pooled["main"] - 1), rel=1e-9)
    # the rows: the top functions by samples of each arm, ordered by the largest ms per request
    order = [max(e["arms"][a]["self_ms_per_request"] for a in ARMS) for e in head["functions"]]
    assert order == sorted(order, reverse=True)
    tops = set()
    for arm in ARMS:
        pooled = {}
        for c in counts[arm]:
            for fn, k in c.items():
                pooled[fn] = pooled.get(fn, 0) + k
        tops |= set(sorted(pooled, key=lambda fn: (-pooled[fn], fn))[:5])
    assert {e["function"] for e in head["functions"]} == tops and len(tops) > 2


def test_a_stage_no_capture_holds_gets_no_function_rows(paths):
    cfg = StageConfig(stages=("head", "extra"))
    arms = collect([], [f"{arm}={','.join(p)}" for arm, p in paths.items()])
    comp = comparison.compare(arms, comparison.load_all(arms, cfg, jobs=1), cfg)
    assert list(comp["functions"]["stages"]) == ["head"]
    assert any(n.startswith("no range in any capture for stage(s) extra") for n in comp["notes"])
