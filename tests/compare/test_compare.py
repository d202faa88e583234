"""compare on the real captures in tests/data and the slices in traces/.

Every capture is analyzed once per session (comparison's in-process cache); the CLI calls below
reuse it, so the module stays fast. One test exercises the process pool on the small slices.
"""
from __future__ import annotations

import copy
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from clef_prof.compare import engine as comparison
from clef_prof.compare.arm import CompareError, collect
from clef_prof.compare import resample
from clef_prof.compare.resample import arm_rngs, percentile_interval, resampled_sums
from clef_prof.cli.app import main
from clef_prof.analyze.read.inputs import InputError
from clef_prof.base.errors import EXIT_NOT_JUDGED, CaptureError
from clef_prof.compare.gates import evaluate_gates, gate_line, parse_gate, render_markdown
from clef_prof.analyze.figures.stages import StageConfig

ROOT = Path(__file__).resolve().parents[2]
SLICE_MAIN = ROOT / "traces" / "gpu-main-slice.sqlite"
SLICE_PR = ROOT / "traces" / "gpu-pr-slice.sqlite"
CFG = StageConfig()


@pytest.fixture(scope="module")
def cap(capture):
    names = ("gpu-q1c16-main", "gpu-q1c16-pr", "gpu25-q1c16-pr", "cpu23-inline")
    paths = {n: str(capture(n)) for n in names}
    # analyze each once, in this process; later compare/CLI calls hit the cache
    comparison.load_all(collect([], [f"a{i}={p}" for i, p in enumerate(paths.values())]), CFG, jobs=1)
    return paths


def run(*specs: str, n_boot: int = 2000, seed: int = 0, config: StageConfig = CFG) -> dict:
    arms = collect([], list(specs))
    data = comparison.load_all(arms, config, jobs=1)
    return comparison.compare(arms, data, config, n_boot=n_boot, seed=seed)


def metric(comp: dict, name: str) -> dict:
    return next(m for m in comp["metrics"] if m["metric"] == name)


@pytest.fixture(scope="module")
def main_vs_pr(cap):
    return run(f"main={cap['gpu-q1c16-main']}", f"pr={cap['gpu-q1c16-pr']}")


# ---------------------------------------------------------------------------------------------
# acceptance: main vs pr


def test_h2d_copies_exact_nine_to_three(main_vs_pr):
    m = metric(main_vs_pr, "per_request.h2d_copies")
    assert m["deterministic"] is True
    assert (m["arms"]["main"]["mean"], m["arms"]["pr"]["mean"]) == (9.0, 3.0)
    assert m["change"] == -6.0 and m["change_pct"] == pytest.approx(-100 * 6 / 9)
    assert m["ci"] is None and m["ci_pct"] is None
    assert metric(main_vs_pr, "stages.transfer.h2d_copies_per_request")["arms"]["pr"]["mean"] == 3.0


@pytest.mark.parametrize("name, value", [("per_request.h2d_bytes", 3424.0),
                                         ("stages.transfer.h2d_bytes_per_request", 3424.0),
                                         ("stages.head.kernel_launches_per_request", 15.0),
                                         ("per_request.kernel_launches", 15.0),
                                         ("stages.head.graph_launches_per_request", 1.0)])
def test_equal_counts_exact(main_vs_pr, name, value):
    m = metric(main_vs_pr, name)
    assert m["deterministic"] and m["ci"] is None
    assert m["arms"]["main"]["mean"] == m["arms"]["pr"]["mean"] == value
    assert m["change"] == 0 and m["change_pct"] == 0


def test_host_times_carry_intervals(main_vs_pr, cap):

    res = {n: comparison.load_all(collect([], [f"x={cap[n]}", f"y={cap[n]}"]), CFG)["x"][0].result
           for n in ("gpu-q1c16-main", "gpu-q1c16-pr")}
    for stage, direction in (("transfer", -1), ("index", +1)):
        m = metric(main_vs_pr, f"stages.{stage}.host_ms_per_request")
        assert not m["deterministic"]
        # one capture per arm: no verdict between runs, only the labelled within-capture interval
        assert m["ci"] is None and m["ci_pct"] is None and m["beyond_noise"] is False
        assert m["verdict"] == "too few captures to judge (1 in an arm; 3 needed)"
        lo, hi = m["ci_within"]
        assert lo < m["change"] < hi
        assert (hi < 0) if direction < 0 else (lo > 0)          # transfer faster, index slower in pr
        # one capture per arm: the arm's figure is analyze's figure
        assert m["arms"]["main"]["mean"] == pytest.approx(
            res["gpu-q1c16-main"].stages[stage].host_ms_per_request, rel=1e-12)
        assert m["arms"]["pr"]["mean"] == pytest.approx(
            res["gpu-q1c16-pr"].stages[stage].host_ms_per_request, rel=1e-12)
        assert m["arms"]["main"]["instances"] == 282 and m["arms"]["pr"]["instances"] == 276
        assert m["arms"]["main"]["captures"] == 1
        assert m["arms"]["main"]["p50"] == pytest.approx(res["gpu-q1c16-main"].stages[stage].host_ms_p50)
        assert m["arms"]["main"]["p99"] == pytest.approx(res["gpu-q1c16-main"].stages[stage].host_ms_p99)
    over = metric(main_vs_pr, "overlap.gpu_busy_fraction_of_batch_spans")
    assert over["arms"]["main"]["mean"] == pytest.approx(
        res["gpu-q1c16-main"].overlap.gpu_busy_fraction_of_batch_spans, rel=1e-12)
    assert metric(main_vs_pr, "per_request.gpu_busy_ms")["arms"]["pr"]["mean"] == pytest.approx(
        res["gpu-q1c16-pr"].per_request.gpu_busy_ms, rel=1e-12)


def test_json_contract(main_vs_pr):
    c = json.loads(json.dumps(main_vs_pr, allow_nan=False))
    assert c["baseline"] == "main"
    assert c["arms"]["main"]["captures"] == 1 and c["arms"]["pr"]["captures"] == 1
    assert c["method"]["B"] == 2000 and c["method"]["seed"] == 0 and c["method"]["confidence"] == 0.95
    for m in c["metrics"]:
        assert {"metric", "arms", "change", "change_pct", "ci"} <= set(m)
        assert {"mean", "instances"} <= set(m["arms"]["main"])
        assert m["ci"] is None or len(m["ci"]) == 2
    names = [m["metric"] for m in c["metrics"]]
    for n in ("stages.encode.host_ms_per_request", "per_request.h2d_bytes", "overlap.gpu_busy_fraction_of_batch_spans"):
        assert n in names


def test_seeded_reproducible(cap):
    a = run(f"main={cap['gpu-q1c16-main']}", f"pr={cap['gpu-q1c16-pr']}", seed=7)
    b = run(f"main={cap['gpu-q1c16-main']}", f"pr={cap['gpu-q1c16-pr']}", seed=7)
    c = run(f"main={cap['gpu-q1c16-main']}", f"pr={cap['gpu-q1c16-pr']}", seed=8)
    name = "stages.head.host_ms_per_request"
    assert metric(a, name)["ci_within"] == metric(b, name)["ci_within"] != metric(c, name)["ci_within"]


# ---------------------------------------------------------------------------------------------
# self-comparison


@pytest.mark.parametrize("which", ["gpu-q1c16-main", "gpu-q1c16-pr"])
def test_self_comparison_contains_zero(cap, which):
    comp = run(f"a={cap[which]}", f"b={cap[which]}")
    for m in comp["metrics"]:
        assert m["change"] == 0
        assert m["ci"] is None and not m["beyond_noise"]
        if not m["deterministic"]:
            lo, hi = m["ci_within"]
            assert lo < 0 < hi, m["metric"]
            assert m["verdict"].startswith("too few captures to judge")


def test_two_captures_per_arm(cap):
    """pr recorded twice (nsys 2023.4 and 2025.3): the two-level bootstrap draws captures too."""
    comp = run(f"main={cap['gpu-q1c16-main']}", f"pr={cap['gpu-q1c16-pr']},{cap['gpu25-q1c16-pr']}")
    assert comp["arms"]["pr"]["captures"] == 2
    h2d = metric(comp, "per_request.h2d_copies")
    assert h2d["arms"]["pr"]["mean"] == 3.0 and h2d["ci"] is None            # exact in both captures
    t = metric(comp, "stages.transfer.host_ms_per_request")
    assert t["arms"]["pr"]["instances"] == 276 + 277 and len(t["arms"]["pr"]["per_capture"]) == 2
    assert t["ci"] is None and t["verdict"] == "too few captures to judge (1 in an arm; 3 needed)"
    assert t["ci_within"][1] < 0
    assert any("different nsys versions" in n for n in comp["notes"])


# ---------------------------------------------------------------------------------------------
# gates (CLI)


def test_gate_fires_on_h2d_regression(cap, capsys):
    rc = main(["compare", "--arm", f"pr={cap['gpu-q1c16-pr']}", "--arm", f"main={cap['gpu-q1c16-main']}",
               "--fail-if", "per_request.h2d_copies > 0", "-f", "json"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "gate fired: per_request.h2d_copies > 0 - main vs pr: exact change +6" in err
    v = json.loads(out)["gates"][0]
    assert v["fired"] and v["basis"] == "exact" and v["value"] == 6.0


def test_host_time_gate_at_one_capture_is_not_judged(cap, capsys, tmp_path):
    """pr as the baseline: main's transfer stage is ~3x slower, its within-capture interval wholly
    beyond +5%, but with one capture an arm run-to-run noise is unmeasured: the gate is not judged
    and the command exits 3 (never 0, never a fired 1 on batch noise)."""
    rc = main(["compare", "--arm", f"pr={cap['gpu-q1c16-pr']}", "--arm", f"main={cap['gpu-q1c16-main']}",
               "--fail-if", "stages.transfer.host_ms_per_request > +5%", "-f", "json", "-o", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert rc == EXIT_NOT_JUDGED == 3
    assert "gate not judged: stages.transfer.host_ms_per_request > +5%" in err and "not a pass: exit 3" in err
    gate = json.loads((tmp_path / "c.json").read_text())["gates"][0]
    assert (gate["basis"], gate["fired"], gate["value"]) == ("too few", False, None)


def test_exact_gates_pass_and_a_noisy_one_is_not_judged(cap, capsys, tmp_path):
    rc = main(["compare", "--arm", f"main={cap['gpu-q1c16-main']}", "--arm", f"pr={cap['gpu-q1c16-pr']}",
               "--fail-if", "per_request.h2d_copies > 0", "--fail-if", "stages.transfer.host_ms_per_request > +5%",
               "--fail-if", "per_request.h2d_bytes >= 1", "-f", "markdown", "-o", str(tmp_path / "c.md")])
    err = capsys.readouterr().err
    assert rc == 3 and err.count("gate passed") == 2 and err.count("gate not judged") == 1 and "fired" not in err
    assert "- **not judged**: `stages.transfer.host_ms_per_request > +5%`" in (tmp_path / "c.md").read_text()
    rc = main(["compare", "--arm", f"main={cap['gpu-q1c16-main']}", "--arm", f"pr={cap['gpu-q1c16-pr']}",
               "--fail-if", "per_request.h2d_copies > 0", "--fail-if", "per_request.h2d_bytes >= 1", "-f", "json",
               "-o", str(tmp_path / "c.json")])
    assert rc == 0 and capsys.readouterr().err.count("gate passed") == 2


def test_gate_on_ci_ignores_noise_point_does_not(main_vs_pr):
    # head host time: change -1.6%, 95% CI about [-6%, +3%]
    g = parse_gate("stages.head.host_ms_per_request > -5%", {"stages.head.host_ms_per_request": "stages.head.host_ms_per_request"})
    assert evaluate_gates([g], main_vs_pr, "ci")[0]["fired"] is False
    assert evaluate_gates([g], main_vs_pr, "point")[0]["fired"] is True
    up = parse_gate("stages.index.host_ms_per_request > +5%", comparison.known_names(CFG.stages))
    v = evaluate_gates([up], main_vs_pr)[0]
    # one capture per arm: the within-capture interval lies beyond +5%, but it is batch noise only:
    # the gate is not judged
    assert metric(main_vs_pr, up.metric)["ci_within_pct"][0] > 5
    assert not v["fired"] and v["basis"] == "too few" and v["value"] is None
    assert "not a pass: exit 3" in gate_line(v, "host_ms")


def test_gate_alias(main_vs_pr):
    g = parse_gate("pooler.h2d_copies_per_request < 0", comparison.known_names(CFG.stages))
    assert g.metric == "per_request.h2d_copies" and evaluate_gates([g], main_vs_pr)[0]["fired"]


@pytest.mark.parametrize("expr, words", [
    ("stages.idx.host_ms_per_request > 5%", ["unknown metric 'stages.idx.host_ms_per_request'",
                                            "did you mean stages.index.host_ms_per_request"]),
    ("per_request.h2d_copies >> 3", ["expected METRIC OP VALUE"]),
    ("per_request.h2d_copies > five", ["expected METRIC OP VALUE"]),
])
def test_bad_gate_is_one_line(cap, capsys, expr, words):
    rc = main(["compare", "--arm", f"main={cap['gpu-q1c16-main']}", "--arm", f"pr={cap['gpu-q1c16-pr']}",
               "--fail-if", expr])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and err.startswith("clef-prof: error: --fail-if")
    for w in words:
        assert w in err


def test_cuda_gate_on_cpu_captures(cap, capsys):
    cpu = cap["cpu23-inline"]
    rc = main(["compare", "--arm", f"a={cpu}", "--arm", f"b={cpu}", "--fail-if", "per_request.h2d_copies > 0"])
    err = capsys.readouterr().err
    # in analyze's own words for these captures (the same as its warning)
    assert rc == 1 and "not available (these captures: CUDA was not traced (record with -t cuda,nvtx))" in err


# ---------------------------------------------------------------------------------------------
# refusal


def test_refuse_cpu_vs_gpu(cap, capsys):
    # the CPU capture's reason in analyze's words: it was recorded without -t cuda
    with pytest.raises(CompareError, match=r"gpu .* has CUDA records, cpu .* none \(CUDA was not traced \(record with"):
        run(f"cpu={cap['cpu23-inline']}", f"gpu={cap['gpu-q1c16-pr']}")
    rc = main(["compare", "--arm", f"cpu={cap['cpu23-inline']}", "--arm", f"gpu={cap['gpu-q1c16-pr']}"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "cannot compare" in err


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> Path:
    """gpu-main-slice with its `parse` stage renamed `tokenize` (as a PR renaming a range would)."""
    out = tmp_path_factory.mktemp("renamed") / "renamed-parse.sqlite"
    shutil.copyfile(SLICE_MAIN, out)
    con = sqlite3.connect(out)
    assert con.execute("UPDATE StringIds SET value = 'tokenize' WHERE value = 'parse'").rowcount == 1
    con.commit()
    con.close()
    return out


def test_refuse_different_stage_names(renamed, capsys):
    with pytest.raises(CompareError, match=r"different stage names \(parse only in pr"):
        run(f"main={renamed}", f"pr={SLICE_PR}")
    rc = main(["compare", "--arm", f"main={renamed}", "--arm", f"pr={SLICE_PR}"])
    assert rc == 1 and "--stages" in capsys.readouterr().err
    # the names both share compare fine
    common = StageConfig(stages=("index", "transfer", "head", "encode"))
    comp = run(f"main={renamed}", f"pr={SLICE_PR}", config=common)
    assert "stages.parse.host_ms_per_request" not in [m["metric"] for m in comp["metrics"]]
    assert metric(comp, "per_request.h2d_copies")["arms"]["pr"]["mean"] == 3.0


def test_refuse_graph_trace_mode_mismatch(cap):
    """No capture recorded with --cuda-graph-trace=node is available (every capture in
    tests/data is graph mode), so this checks the refusal on analyze's own facts with the mode relabelled in
    memory; no export is altered."""
    arms = collect([], [f"main={cap['gpu-q1c16-main']}", f"pr={cap['gpu-q1c16-pr']}"])
    data = comparison.load_all(arms, CFG)
    node = copy.copy(data["pr"][0])
    node.result = copy.deepcopy(node.result)
    node.result.capture.graph_trace_mode = "node"
    with pytest.raises(CompareError, match="different CUDA graph-trace modes \\(graph in main .*node in pr"):
        comparison.check_comparable(arms, {"main": data["main"], "pr": [node]}, CFG.stages)


def test_refuse_no_batches(cap, capsys):
    rc = main(["compare", "--arm", f"a={cap['gpu-q1c16-main']}", "--arm", f"b={cap['gpu-q1c16-pr']}",
               "--batch", "no-such-range"])
    err = capsys.readouterr().err
    assert rc == 1 and "no 'no-such-range' batch ranges" in err


def test_arm_errors(tmp_path, capsys):
    for argv, words in (
            (["--arm", f"main={SLICE_MAIN}"], "needs two arms"),
            (["--arm", f"main={SLICE_MAIN}", "--arm", f"pr={tmp_path}/none-*.sqlite"], "no file matches"),
            (["--arm", "main", "--arm", f"pr={SLICE_PR}"], "expected NAME=CAPTURE"),
            (["--arm", f"main={SLICE_MAIN}", "--arm", f"pr={tmp_path / 'missing.sqlite'}"], "missing.sqlite"),
            ([str(tmp_path)], "no capture folder with a manifest.json")):
        assert main(["compare", *argv]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err


# ---------------------------------------------------------------------------------------------
# inputs: manifests, globs, ab folders; parallel analysis


def _capture_dir(root: Path, name: str, arm: str, export: Path) -> Path:
    d = root / name
    d.mkdir()
    (d / "capture.sqlite").symlink_to(export)
    (d / "manifest.json").write_text(json.dumps({"arm": arm, "export": "capture.sqlite", "requests": 0}))
    return d


def test_ab_folder(tmp_path, capsys):
    _capture_dir(tmp_path, "0-pr", "pr", SLICE_PR)
    _capture_dir(tmp_path, "1-main", "main", SLICE_MAIN)
    arms = collect([str(tmp_path)], [])
    assert arms.names == ["main", "pr"]                       # main is the baseline by name
    out = tmp_path / "cmp.json"
    assert main(["compare", str(tmp_path), "-f", "json", "-o", str(out)]) == 0
    comp = json.loads(out.read_text())
    assert comp["baseline"] == "main"
    assert metric(comp, "per_request.h2d_copies")["arms"]["main"]["mean"] == 9.0
    assert main(["compare", str(tmp_path), "--baseline", "pr", "-f", "json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["baseline"] == "pr"


def test_manifests_and_globs(tmp_path):
    d = _capture_dir(tmp_path, "m", "ignored", SLICE_MAIN)
    arms = collect([], [f"main={d / 'manifest.json'}", f"pr={ROOT / 'traces'}/gpu-pr-*.sqlite"])
    assert [r.export for r in arms.captures["main"]] == [str(d / "capture.sqlite")]
    assert [Path(r.export).name for r in arms.captures["pr"]] == ["gpu-pr-slice.sqlite"]
    arms = collect([], [f"main={d}", f"pr={SLICE_PR},{SLICE_PR}"])  # a capture folder; a duplicate
    assert len(arms.captures["pr"]) == 1 and "twice" in arms.notes[0]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InputError, match='no "export" key'):
        collect([], [f"main={tmp_path / 'bad.json'}", f"pr={SLICE_PR}"])


def test_record_manifest_status_is_a_warning(tmp_path):
    d = _capture_dir(tmp_path, "m", "main", SLICE_MAIN)
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**m, "status": "server died"}))
    comp = run(f"main={d / 'manifest.json'}", f"pr={SLICE_PR}")
    assert any(w.startswith("main (") and "'server died'" in w for w in comp["warnings"])


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_parallel_analysis_matches_serial(monkeypatch, pool):
    monkeypatch.setenv("CLEF_PROF_POOL", pool)
    arms = collect([], [f"main={SLICE_MAIN}", f"pr={SLICE_PR}"])
    comparison._CACHE.clear()
    par = comparison.load_all(arms, CFG, jobs=2)
    comparison._CACHE.clear()
    ser = comparison.load_all(arms, CFG, jobs=1)
    for arm in ("main", "pr"):
        assert par[arm][0].table.equals(ser[arm][0].table)
        assert par[arm][0].result.stages == ser[arm][0].result.stages


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_pool_names_the_failing_capture_as_in_process(tmp_path, monkeypatch, pool):
    """compare's loader runs in analyze's pool (analyze.parallel.map_captures): a capture that
    cannot be analyzed is the same one-line error, naming it, on threads, in worker processes and
    one after another."""
    monkeypatch.setenv("CLEF_PROF_POOL", pool)
    bad = tmp_path / "no-nvtx.sqlite"
    shutil.copyfile(SLICE_PR, bad)
    bad.chmod(0o644)
    with sqlite3.connect(bad) as con:
        con.execute("DROP TABLE NVTX_EVENTS")
    arms = collect([], [f"main={SLICE_MAIN}", f"pr={bad}"])
    errors = []
    for jobs in (2, 1):
        comparison._CACHE.clear()
        with pytest.raises(CaptureError) as exc:
            comparison.load_all(arms, CFG, jobs=jobs)
        errors.append(str(exc.value))
    assert errors[0] == errors[1] and errors[0].startswith(f"{bad}: ") and "\n" not in errors[0]


def test_stage_name_clashing_with_a_per_batch_column_is_refused_before_analysis(capsys):
    comparison._CACHE.clear()
    rc = main(["compare", "--arm", f"main={SLICE_MAIN}", "--arm", f"pr={SLICE_PR}", "--stages", "parse,gpu_own"])
    err = capsys.readouterr().err
    assert rc == 1 and err == ("clef-prof: error: stage name 'gpu_own' clashes with the per-batch column 'gpu_own_ns'; "
                               "rename the stage\n")
    assert len(comparison._CACHE._items) == 0


def test_markdown_on_slices():
    comp = run(f"main={SLICE_MAIN}", f"pr={SLICE_PR}")
    md = render_markdown(comp)
    assert "### clef-prof compare: main → pr" in md
    assert "| `per_request.h2d_copies` | 9 → 3 | **-6 (-66.7%)** | exact |" in md
    assert "| `stages.head.kernel_launches_per_request` | 15 → 15 | +0 (+0.0%) | exact |" in md
    assert "within-capture bootstrap (batch instances resampled within each capture, B = 2000, seed 0)" in md
    assert "| too few captures to judge |" in md and "With 1 capture in an arm there is no verdict" in md
    assert "main: 1 capture, 48 batch instances, 256 requests; pr: 1 capture, 80 batch instances, 436 requests" in md
    assert "`stages.index.h2d_copies_per_request`" not in md          # exactly 0 in both: hidden
    assert "`stages.index.h2d_copies_per_request`" in render_markdown(comp, show_all=True)


# ---------------------------------------------------------------------------------------------
# the bootstrap itself


def test_bootstrap_one_capture_resamples_batches():
    x = np.column_stack([np.ones(50), np.arange(50.0)])
    s = resampled_sums(np.random.default_rng(1), [x], 500)
    assert (s[:, 0] == 50).all()                                  # n draws per replicate
    assert s[:, 1].mean() == pytest.approx(x[:, 1].sum(), rel=0.02)
    assert s[:, 1].std() > 0


def test_bootstrap_keeps_every_capture():
    """Within-capture: each capture is in every replicate once, only its batches are redrawn."""
    a = np.column_stack([np.ones(10), np.full(10, 1.0)])
    b = np.column_stack([np.ones(30), np.arange(30.0)])
    s = resampled_sums(np.random.default_rng(2), [a, b], 4000)
    assert (s[:, 0] == 40).all()
    assert s[:, 1].min() >= 10 and s[:, 1].std() > 0
    assert s[:, 1].mean() == pytest.approx(10 + 435, rel=0.01)        # 10 * 1 + sum(0..29)


@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_bootstrap_sums_are_the_sums_of_the_drawn_batches(scale):
    """Each replicate's sums against the batches it drew, summed by hand from the same stream:
    exact for whole numbers (counted as float64 through BLAS), to rounding for fractions
    (counted as integers); the replicates span several count blocks (_COUNT_ROWS)."""
    rng = np.random.default_rng(7)
    x = np.column_stack([np.ones(37), rng.integers(0, 10**9, 37).astype(np.float64) * scale])
    n_boot = 3 * resample._COUNT_ROWS + 5
    s = resampled_sums(np.random.default_rng(3), [x], n_boot)
    idx = np.random.default_rng(3).integers(0, 37, size=(n_boot, 37))
    by_hand = np.array([[sum(float(x[i, c]) for i in row) for c in range(2)] for row in idx])
    assert (s[:, 0] == 37).all()
    if scale == 1.0:
        assert (s == by_hand).all()
    else:
        assert s == pytest.approx(by_hand, rel=1e-12)


def test_arm_streams_and_interval():
    r1, r2 = arm_rngs(0, 2)
    assert r1[0].integers(0, 1 << 30) != r2[0].integers(0, 1 << 30)
    # an arm's streams hang on its position, not on how many arms there are
    assert arm_rngs(0, 2)[0][3].integers(0, 1 << 30) == arm_rngs(0, 1)[0][3].integers(0, 1 << 30)
    assert percentile_interval(np.array([np.nan, np.inf]), 0.95) is None
    lo, hi = percentile_interval(np.arange(1001.0), 0.9)
    assert (lo, hi) == (pytest.approx(50.0), pytest.approx(950.0))


def test_exact_multiple():
    assert comparison._exact_multiple(np.array([9, 27, 0]), np.array([1, 3, 0])) == 9.0
    assert comparison._exact_multiple(np.array([1, 1]), np.array([1, 3])) is None
    assert comparison._exact_multiple(np.array([1, 0]), np.array([1, 0])) == 1.0
    assert comparison._exact_multiple(np.array([1, 1]), np.array([1, 0])) is None


def test_byte_identical_copies_count_once(cap, tmp_path):
    """A copied capture is the same run: two copies in one arm are one capture, and a note says so."""
    a, b = tmp_path / "main-1.sqlite", tmp_path / "main-2.sqlite"
    for p in (a, b):
        shutil.copyfile(cap["gpu-q1c16-main"], p)
    arms = collect([], [f"main={a},{b}", f"pr={cap['gpu-q1c16-pr']}"])
    assert [r.source for r in arms.captures["main"]] == [str(a)]
    assert arms.notes == [f"arm main: {b} is a byte-identical copy of {a} (the same run, not another): counted once"]
    # the same bytes in two arms is a self-comparison, not a copy within an arm
    arms = collect([], [f"main={a}", f"pr={b}"])
    assert len(arms.captures["pr"]) == 1 and arms.notes == []


def test_overlap_is_summed_per_batch_and_named_so(capture):
    """compare's overlap figures add up per batch (each batch's GPU busy within its own span, what
    its batch resampling needs), so on a capture with two batches in flight they are analyze's
    `*_batch_spans` figures, by SQL larger than the per-capture union figure, not that one."""
    from analyze.test_concurrent_batches import truth_sql

    path = str(capture("gpu25-concurrent"))
    s = truth_sql(path)
    comp = run(f"a={path}", f"b={capture('gpu25-q1c16-pr')}",
               config=StageConfig(stages=("parse", "transfer", "head", "encode")))
    frac = metric(comp, "overlap.gpu_busy_fraction_of_batch_spans")["arms"]["a"]["mean"]
    assert frac == pytest.approx(s["gpu_busy_in_batch_spans_ns"] / s["batch_spans_ns"], rel=1e-9)
    ms = metric(comp, "overlap.gpu_busy_ms_in_batch_spans_per_request")["arms"]["a"]["mean"]
    assert ms == pytest.approx(s["gpu_busy_in_batch_spans_ns"] / 1e6 / s["requests"], rel=1e-9)
    assert ms > s["gpu_busy_in_span_union_ns"] / 1e6 / s["requests"] * 1.2
    names = {m["metric"] for m in comp["metrics"]}
    assert not {"overlap.gpu_busy_fraction_of_pooler_span", "overlap.gpu_busy_ms_in_pooler_span_per_request"} & names


def test_terminal_tables_fit_80_columns_and_say_the_interval_kind_once(cap):
    """One capture per arm: every interval is the within-capture one. Said once in the interval
    column's header, not in each cell (15 characters a cell made the CUDA table two stacked
    blocks, each repeating every metric's label); at COLUMNS=80 each line fits, each metric's
    label is printed once, and its interval whole."""
    import json
    import os
    import subprocess
    import sys

    args = ["compare", "--arm", f"main={cap['gpu-q1c16-main']}", "--arm", f"pr={cap['gpu-q1c16-pr']}"]
    env = {**os.environ, "COLUMNS": "80", "CLEF_PROF_ASCII": "1"}
    p = subprocess.run([sys.executable, "-m", "clef_prof", *args], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    assert "within-capture -" not in p.stdout and "within-capture +" not in p.stdout
    assert sum("(within-capture)" in ln for ln in lines) == 2            # one header per table
    doc = json.loads(subprocess.run([sys.executable, "-m", "clef_prof", *args, "--format", "json"],
                                    capture_output=True, text=True, env=env, timeout=300).stdout)
    d2h = next(m for m in doc["metrics"] if m["metric"] == "per_request.d2h_copies")
    lo, hi = d2h["arms"]["pr"]["ci_within_pct"]
    assert f"{lo:+.1f}% to {hi:+.1f}%" in p.stdout
    assert sum(ln.startswith("pooler d2h_copies") for ln in lines) == 1


def test_gate_on_point_is_warned(cap, capsys):
    """--gate-on point on a noisy figure: judged on the point change, and warned (stderr and the
    JSON's warnings); on exact counts alone there is nothing to warn of."""
    rc = main(["compare", "--arm", f"main={cap['gpu-q1c16-main']}", "--arm", f"pr={cap['gpu-q1c16-pr']}",
               "--gate-on", "point", "--fail-if", "stages.transfer.host_ms_per_request > +5%", "-f", "json"])
    out, err = capsys.readouterr()
    assert rc == 0 and "gate passed: stages.transfer.host_ms_per_request > +5% - pr vs main: point change" in err
    assert "warning: --gate-on point gates on the point change, not on its interval" in err
    assert any(w.startswith("--gate-on point gates on the point change") for w in json.loads(out)["warnings"])
    main(["compare", "--arm", f"main={cap['gpu-q1c16-main']}", "--arm", f"pr={cap['gpu-q1c16-pr']}",
          "--gate-on", "point", "--fail-if", "per_request.h2d_copies > 0", "-f", "json"])
    assert "--gate-on point gates" not in capsys.readouterr().err
