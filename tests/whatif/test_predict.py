"""`clef-prof predict`: real compare JSON (cpu23-samples, 3 captures per arm; gpu-q1c16, one),
a bench JSON recomputed by `bench --from` from saved windows, and a what-if file of seeded
servers; the total's interval coverage by vectorised simulation; bad inputs one line."""
import json
import lzma
import subprocess
import sys

import numpy as np
import pytest

from clef_prof.base.errors import EXIT_INPUT
from clef_prof.whatif.fit import slope
from clef_prof.whatif.model import Observation
from clef_prof.whatif.predict import combine, predict, stage_changes
from clef_prof.whatif.slopes import analyse
from clef_prof.whatif.store import save

from whatif_sim import studies

DATA = __import__("pathlib").Path(__file__).resolve().parents[1] / "data"
S = 2400
TOL = 3 * np.sqrt(0.95 * 0.05 / S)


def clef(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def _unxz(tmp, name):
    out = tmp / name
    out.write_bytes(lzma.decompress((DATA / f"{name}.xz").read_bytes()))
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("predict")
    caps = {a: [_unxz(tmp, f"cpu23-samples-{a}-{i}.sqlite") for i in (1, 2, 3)] for a in ("main", "pr")}
    r = clef("compare", "--arm", "main=" + ",".join(map(str, caps["main"])),
             "--arm", "pr=" + ",".join(map(str, caps["pr"])), "-f", "json", "-o", tmp / "c3.json")
    assert r.returncode == 0, r.stderr
    g = {a: _unxz(tmp, f"gpu-q1c16-{a}.sqlite") for a in ("main", "pr")}
    r = clef("compare", "--arm", f"main={g['main']}", "--arm", f"pr={g['pr']}", "-f", "json", "-o", tmp / "g1.json")
    assert r.returncode == 0, r.stderr
    # a what-if on main: head 5.83 ms/request (the cpu23 captures'), -4%/ms, levels +0, 50, 125%;
    # transfer 0.31 ms/request (gpu-q1c16's), -30%/ms, levels +0, 50, 100%
    rng = np.random.default_rng(4)
    obs, slot = [], 0
    for stage, own, ms, pct in (("head", 5.83, (2.915, 7.29), -4.0), ("transfer", 0.31, (0.155, 0.31), -30.0)):
        for lv, add in zip((0.5, 1.0 if stage == "transfer" else 1.25), ms):
            for _ in range(4):
                y = 100 * (1 + pct / 100 * add) * (1 + 0.01 * rng.standard_normal())
                obs.append(Observation(stage, lv, "frac", slot, add, own, 1.0, 3, {"throughput_rps": y,
                                       "p99_ms": 50 * (1 - pct / 200 * add) * (1 + 0.02 * rng.standard_normal())}))
                slot += 1
    for _ in range(4):
        obs.append(Observation(None, 0.0, "frac", slot, 0.0, 5.83, 1.0, 3,
                               {"throughput_rps": 100 * (1 + 0.01 * rng.standard_normal()),
                                "p99_ms": 50 * (1 + 0.02 * rng.standard_normal())}))
        slot += 1
    save(tmp / "w.json", obs, {"load": "C=16"})
    # a bench of main vs pr: its saved windows (3 servers an arm, 2 windows each), recomputed by bench --from
    (tmp / "run").mkdir()
    windows, seq = [], 0
    for server, arm in enumerate(("main", "pr", "pr", "main", "main", "pr")):
        for w in range(2):
            rps = (100 if arm == "main" else 96.3) * (1 + 0.01 * rng.standard_normal())
            windows.append({"seq": seq, "case": 0, "arm": arm, "server": server, "completions": int(rps * 10),
                            "elapsed_s": 10.0, "throughput_rps": int(rps * 10) / 10.0,
                            "latency_ms_p50": 20.0, "latency_ms_p90": 30.0, "latency_ms_p99": 50.0,
                            "latency_ms_mean": 22.0, "errors": 0, "error_kinds": {}})
            seq += 1
    saved = {"schema": "clef-prof/bench/2", "status": "ok", "baseline": "main",
             "arms": {"main": {"command": "serve main"}, "pr": {"command": "serve pr"}},
             "cases": [{"case": {"concurrency": 16, "words": 200, "questions": 1, "rate": None},
                        "arms": {a: {"windows": [w for w in windows if w["arm"] == a]} for a in ("main", "pr")}}],
             "servers": [{"arm": a} for a in ("main", "pr", "pr", "main", "main", "pr")], "parity": None,
             "method": {"rounds": 3, "order": "ABBA", "windows": 2, "window_s": 10.0, "warmup_s": 5.0},
             "notes": [], "duration_s": 60.0}
    (tmp / "run" / "bench.json").write_text(json.dumps(saved))
    r = clef("bench", "--from", tmp / "run", "-f", "json", "-o", tmp / "b.json")
    assert r.returncode == 0, r.stderr
    return tmp, obs


def test_prediction_from_a_real_compare_matches_by_hand(inputs):
    """cpu23-samples: head +6.80 ms/request (pr slower, 5.83 -> 12.6); the term is the what-if slope times
    compare's change, its interval the delta-method one from the per-capture values."""
    tmp, obs = inputs
    c = json.loads((tmp / "c3.json").read_text())
    result = analyse(obs)
    pred = predict(obs, result, c, stages=("head",))
    (thr,) = [m for m in pred.metrics if m.metric == "throughput_rps"]
    (term,) = thr.terms
    head = next(m for m in c["metrics"] if m["metric"] == "stages.head.host_ms_per_request")
    assert np.isclose(term.change_ms, head["change"]) and np.isclose(term.change_ms, 6.80, atol=0.01)
    sl = next(s for s in result.stages[0].slopes if s.metric == "throughput_rps")
    assert np.isclose(term.pct, sl.pct_per_ms * head["change"]) and thr.pct == term.pct
    m, p = (np.array(head["arms"][a]["per_capture"]) for a in ("main", "pr"))
    vd = m.var(ddof=1) / 3 + p.var(ddof=1) / 3
    vb = (100 * sl.se / sl.baseline_mean) ** 2
    var = sl.pct_per_ms ** 2 * vd + head["change"] ** 2 * vb
    assert np.isclose(term.lo, term.pct - (term.pct - term.lo)) and term.lo < term.pct < term.hi
    half = (term.hi - term.lo) / 2
    assert np.sqrt(var) * 1.9 < half < np.sqrt(var) * 13          # t quantile at Satterthwaite's df
    d, V, df, n = stage_changes(c, ("head",), "pr", "c")
    assert n == [3, 3] and np.isclose(V[0, 0], vd)


def test_cli_with_bench_and_the_share_explained(inputs):
    tmp, _ = inputs
    r = clef("predict", "--whatif", tmp / "w.json", "--compare", tmp / "c3.json", "--bench", tmp / "b.json")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    text = " ".join(lines)
    assert "head explains" in text and "measured" in text and "unexplained" in text
    j = clef("predict", "--whatif", tmp / "w.json", "--compare", tmp / "c3.json", "--bench", tmp / "b.json",
             "-f", "json")
    pred = json.loads(j.stdout)
    assert pred["schema"] == "clef-prof/predict/1" and pred["baseline"] == "main" and pred["arm"] == "pr"
    thr = next(m for m in pred["metrics"] if m["metric"] == "throughput_rps")
    b = json.loads((tmp / "b.json").read_text())
    meas = next(ch for ch in b["cases"][0]["changes"] if ch["metric"] == "throughput_rps")
    assert np.isclose(thr["measured"]["pct"], meas["change_pct"]) and thr["measured"]["lo"] == meas["ci"][0]
    u, lo, hi = thr["unexplained"]
    assert np.isclose(u, meas["change_pct"] - thr["pct"]) and lo < u < hi
    # both uncertainties (Satterthwaite's df of the two may exceed the prediction's own: its t is smaller)
    assert hi - lo > meas["ci"][1] - meas["ci"][0] and hi - lo > 0.9 * (thr["hi"] - thr["lo"])
    p99 = next(m for m in pred["metrics"] if m["metric"] == "p99_ms")
    assert p99["measured"] is None or p99["measured"]["pct"] is not None
    md = clef("predict", "--whatif", tmp / "w.json", "--compare", tmp / "c3.json", "-f", "markdown")
    assert md.returncode == 0 and "| total |" in md.stdout


def test_one_capture_per_arm_and_beyond_the_linear_range(inputs):
    """gpu-q1c16 (one capture an arm): point predictions, no interval, said; its transfer change
    -0.206 ms/request lies within the what-if's +0.31 range; with head alone the total is given."""
    tmp, obs = inputs
    c = json.loads((tmp / "g1.json").read_text())
    pred = predict(obs, analyse(obs), c, stages=("transfer", "head"))
    thr = next(m for m in pred.metrics if m.metric == "throughput_rps")
    assert [t.stage for t in thr.terms] == ["transfer", "head"]
    assert all(t.lo is None and t.pct is not None for t in thr.terms) and thr.lo is None
    assert any("1 capture(s) in an arm" in n for n in pred.notes)
    from clef_prof.whatif.render import render_prediction
    text = render_prediction(pred, "text")
    assert "no interval" in text and max(map(len, text.splitlines())) <= 80
    assert np.isclose(thr.terms[0].change_ms, -0.206, atol=0.001) and thr.terms[0].pct > 0
    short = [Observation(o.stage, o.level, o.unit, o.slot, o.added_ms_per_request / 4, o.stage_ms_per_request,
                         1.0, 3, o.metrics) for o in obs]
    pred = predict(short, analyse(short), c, stages=("transfer", "head"))
    thr = next(m for m in pred.metrics if m.metric == "throughput_rps")
    assert "beyond the measured linear range" in thr.terms[0].refused and thr.pct is None and thr.refused


@pytest.mark.parametrize("args, needle", [
    (["--stages", "transfer,head,encode"], "encode of the compare have no slope in the what-if"),
    ([], "parse, index, encode of the compare have no slope"),
    (["--stages", "nope"], "--stages: nope not in the compare"),
    (["--bench", "C"], "not the JSON of clef-prof bench"),
    (["--whatif-is", "C"], "not a clef-prof what-if file"),
    (["--compare-is", "W"], "not the JSON of clef-prof compare"),
    (["--compare-is", "MISSING"], "cannot read it"),
    (["--bench", "BADARMS", "--stages", "transfer,head"], "are not the compare's (main vs pr)"),
    (["--stages", "transfer,head", "--confidence", "2"], "--confidence 2.0"),
    (["--bench", "BADMETRICS", "--stages", "transfer,head"], "none of the what-if's metrics"),
    (["--compare-is", "NOPERCAPTURE", "--stages", "transfer,head"], "lack their arms' changes"),
])
def test_bad_input_one_line(inputs, args, needle, tmp_path):
    tmp, _ = inputs
    files = {"C": tmp / "g1.json", "W": tmp / "w.json", "MISSING": tmp_path / "none.json"}
    b = json.loads((tmp / "b.json").read_text())
    b["baseline"] = "a"
    (tmp_path / "bad.json").write_text(json.dumps(b))
    files["BADARMS"] = tmp_path / "bad.json"
    b = json.loads((tmp / "b.json").read_text())
    for ch in b["cases"][0]["changes"]:
        ch["metric"] = "x_" + ch["metric"]
    (tmp_path / "badm.json").write_text(json.dumps(b))
    files["BADMETRICS"] = tmp_path / "badm.json"
    c = json.loads((tmp / "g1.json").read_text())
    for m in c["metrics"]:
        del m["arms"]["pr"]["change"]
    (tmp_path / "badc.json").write_text(json.dumps(c))
    files["NOPERCAPTURE"] = tmp_path / "badc.json"
    w, c, rest = tmp / "w.json", tmp / "g1.json", []
    it = iter(args)
    for a in it:
        v = next(it)
        if a == "--whatif-is":
            w = files[v]
        elif a == "--compare-is":
            c = files[v]
        else:
            rest += [a, files.get(v, v)]
    r = clef("predict", "--whatif", w, "--compare", c, *rest)
    assert r.returncode == EXIT_INPUT and r.stdout == "", (r.returncode, r.stdout)
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


@pytest.mark.parametrize("captures", [3, 5])
def test_total_interval_coverage(captures):
    """The whole chain, vectorised: a what-if of 4 baseline + 2 stages x 2 levels x 4 servers
    (slopes share the baseline) and a compare of `captures` per arm whose captures move both
    stages together; the total's interval covers Σ slope x change >= 95% - tolerance."""
    rng = np.random.default_rng(captures)
    beta, delta = np.array([-4.0, -30.0]), np.array([0.9, -0.1])       # %/ms; ms/request
    base = np.repeat([0.0], 4)
    xs, ys = [], []
    x0, y0, _ = studies(rng, S, (4,), (0.0,), 0.0)
    for k, lv in enumerate(((0.6, 1.5), (0.15, 0.3))):
        x, y, _ = studies(rng, S, (4, 4, 4), (0.0,) + lv, beta[k])
        xs.append(np.concatenate([x0, x[:, 4:]], 1))
        ys.append(np.concatenate([y0, y[:, 4:]], 1))
    g = np.repeat([0, 1, 2], 4)
    fits = [slope(x, y, g, 0.95) for x, y in zip(xs, ys)]
    b0 = y0.mean(-1)
    b = np.stack([100 * f.est / b0 for f in fits], -1)
    Vb = np.zeros((S, 2, 2))
    for i in range(2):
        Vb[:, i, i] = (100 * fits[i].se / b0) ** 2
    w = [-x[:, 4:].mean(-1) * 8 / 12 / ((x - x.mean(-1, keepdims=True)) ** 2).sum(-1) for x in xs]
    s0 = y0.var(-1, ddof=1) * 4 / 3
    Vb[:, 0, 1] = Vb[:, 1, 0] = 1e4 * w[0] * w[1] * 4 * s0 / b0 ** 2
    dfb = np.stack([f.df for f in fits], -1)
    main = np.array([5.8, 0.31])
    shared = rng.standard_normal((S, 2, captures, 1)) * 0.05
    own = rng.standard_normal((S, 2, captures, 2)) * 0.03
    arm = np.array([0.0, 1.0])[None, :, None, None]                 # (S, arm, capture, stage)
    vals = (main + arm * delta) * (1 + shared + own)
    d = vals[:, 1].mean(1) - vals[:, 0].mean(1)
    cov = lambda a: np.einsum("sci,scj->sij", a - a.mean(1, keepdims=True), a - a.mean(1, keepdims=True)) / (captures - 1)
    Vd = (cov(vals[:, 0]) + cov(vals[:, 1])) / captures
    dd = np.einsum("sii->si", Vd)
    dfd = dd ** 2 / ((np.einsum("sii->si", cov(vals[:, 0])) / captures) ** 2 / (captures - 1)
                     + (np.einsum("sii->si", cov(vals[:, 1])) / captures) ** 2 / (captures - 1))
    est, half, _ = combine(b, Vb, dfb, d, Vd, dfd, 0.95)
    truth = float((beta * delta).sum())
    cov_rate = np.mean(np.abs(est - truth) <= half)
    assert cov_rate >= 0.95 - TOL, cov_rate
    # without the shared-baseline covariance the interval is a different one (the term matters)
    Vb0 = Vb.copy()
    Vb0[:, 0, 1] = Vb0[:, 1, 0] = 0
    assert not np.allclose(combine(b, Vb0, dfb, d, Vd, dfd, 0.95)[1], half)
