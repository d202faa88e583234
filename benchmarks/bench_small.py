#!/usr/bin/env python3
"""How fast are the commands people run on the captures they actually make (tens of MB)?

    python benchmarks/bench_small.py                      # tests/data/gpu-q1c16-main (17 MB), 7 rounds
    python benchmarks/bench_small.py --runs 9 --json out.json
    python benchmarks/bench_small.py --tree main=/tmp/main-copy --tree .   # two trees, side by side

Whole-process runs, side by side, after one warm-up run of each (byte-code caches written, as
for an installed package; PYTHONDONTWRITEBYTECODE is dropped): each round runs every command once, in a rotating order, so
that a load change on a shared machine hits all of them alike. Per command the median wall
time (and CPU time) over the rounds; `analyze / nsys stats` is the median of the per-round
ratios. Commands:

  python       `python -c pass`: the interpreter alone, for reference
  help         `clef-prof analyze --help`
  doctor       `clef-prof doctor`
  analyze      `clef-prof analyze CAPTURE -f json -o FILE`
  nsys         `nsys stats -r nvtx_gpu_proj_trace,cuda_gpu_trace -f csv -o - CAPTURE`
  report       `clef-prof report CAPTURE --html FILE`
  compare      `clef-prof compare --arm main=4 copies of CAPTURE --arm pr=4 copies of --pr -f json`

With --tree (given twice or more), each clef-prof command runs once per tree in every round
(PYTHONPATH set to that tree), so that the trees meet the same load; the table then gives, per
command, the median of the per-round ratios of each tree to the first (wall and CPU).

No timing is asserted anywhere: the targets (issue 16; `--help` and the ratio to nsys stats from
issue 26) are printed beside the medians.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_analyze import NSYS_REPORTS, find_nsys, run_child, warm  # noqa: E402
from trees import parse_trees, tree_env  # noqa: E402

TARGETS = {"help": 0.06, "doctor": 0.1, "analyze": 0.25, "report": 1.0, "compare": 1.5}
RATIO_TARGET = 3.0          # nsys stats / analyze


def unpack(name: str, tmp: str) -> str:
    out = os.path.join(tmp, f"{name}.sqlite")
    with lzma.open(ROOT / "tests" / "data" / f"{name}.sqlite.xz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


TREE_COMMANDS = ("help", "doctor", "analyze", "report", "compare")     # the ones that run clef_prof


def commands(capture: str, pr: str, tmp: str, nsys: str | None) -> dict[str, list[str]]:
    py = [sys.executable]
    clef = [*py, "-m", "clef_prof"]
    arms = {}
    for arm, src in (("main", capture), ("pr", pr)):
        copies = []
        for i in range(4):
            dst = os.path.join(tmp, f"{arm}{i}.sqlite")
            shutil.copyfile(src, dst)
            copies.append(dst)
        arms[arm] = ",".join(copies)
    cmds = {"python": [*py, "-c", "pass"],
            "help": [*clef, "analyze", "--help"],
            "doctor": [*clef, "doctor"],
            "analyze": [*clef, "analyze", capture, "-f", "json", "-o", os.path.join(tmp, "a.json")],
            "report": [*clef, "report", capture, "--html", os.path.join(tmp, "r.html")],
            "compare": [*clef, "compare", "--arm", f"main={arms['main']}", "--arm", f"pr={arms['pr']}", "-f", "json",
                        "-o", os.path.join(tmp, "c.json")]}
    if nsys:
        cmds["nsys"] = [nsys, "stats", "-r", NSYS_REPORTS, "-f", "csv", "-o", "-", capture]
    return cmds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capture", help="the export (default: tests/data/gpu-q1c16-main, decompressed)")
    p.add_argument("--pr", help="the second arm's export for compare (default: tests/data/gpu-q1c16-pr)")
    p.add_argument("--runs", type=int, default=7, help="rounds (default 7)")
    p.add_argument("--only", help="comma-separated commands to run (default: all)")
    p.add_argument("--nsys", help="nsys binary (default .nsys/2023.4/nsys, then PATH)")
    p.add_argument("--json", help="write every run here")
    p.add_argument("--tree", action="append", metavar="[LABEL=]PATH",
                   help="a source tree to run clef_prof from (repeat to compare trees; default: this one)")
    args = p.parse_args(argv)

    trees = parse_trees(args.tree)
    with tempfile.TemporaryDirectory(prefix="clef-bench-small-") as tmp:
        capture = os.path.abspath(args.capture) if args.capture else unpack("gpu-q1c16-main", tmp)
        pr = os.path.abspath(args.pr) if args.pr else unpack("gpu-q1c16-pr", tmp)
        nsys = find_nsys(args.nsys)
        base = commands(capture, pr, tmp, nsys)
        if args.only:
            base = {k: v for k, v in base.items() if k in args.only.split(",") or k == "python"}
        cmds: dict[str, tuple[list[str], dict]] = {}     # name (with its tree when several) -> argv, env
        for name, argv_ in base.items():
            for label, root in (trees.items() if name in TREE_COMMANDS else list(trees.items())[:1]):
                cmds[f"{name} [{label}]" if len(trees) > 1 and name in TREE_COMMANDS else name] = (argv_, tree_env(root))
        for f in (capture, pr):
            warm(f)
        # run in the temporary folder: `python -m` puts the working directory first on sys.path,
        # which would shadow PYTHONPATH's tree when run from another tree's root
        for cmd, env in cmds.values():       # warm-up: byte-code caches, page cache
            run_child(cmd, env=env, cwd=tmp)
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        names = list(cmds)
        for i in range(args.runs):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                r = run_child(*cmds[name], cwd=tmp)
                if r["rc"] not in (0, 1) or (r["rc"] == 1 and not name.startswith("doctor")):
                    raise SystemExit(f"bench: {name} failed (exit {r['rc']}): {r['stderr']}")
                r.pop("stderr", None)
                runs[name].append(r)
            print(f"bench: round {i + 1}/{args.runs}", file=sys.stderr)
    size_mb = os.path.getsize(capture) / 1e6 if args.capture else 17.4
    lines = [f"{args.runs} rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, capture {size_mb:.0f} MB",
             "", "| command | wall s (median) | wall s (min) | CPU s (median) | peak RSS MB | target |",
             "|---|---|---|---|---|---|"]
    summary = {}
    for name, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        summary[name] = {"wall_s": wall, "wall_min_s": min(r["wall_s"] for r in rs), "cpu_s": cpu,
                         "rss_mb": max(r["rss_mb"] for r in rs)}
        t = TARGETS.get(name.split(" [")[0])
        lines.append(f"| {name} | {wall:.3f} | {summary[name]['wall_min_s']:.3f} | {cpu:.3f} | "
                     f"{summary[name]['rss_mb']:.0f} | {'≤ %.2f s' % t if t else ''} |")
    for label in trees:
        key = f"analyze [{label}]" if len(trees) > 1 else "analyze"
        if "nsys" in runs and key in runs:
            ratios = [n["wall_s"] / a["wall_s"] for n, a in zip(runs["nsys"], runs[key])]
            summary[f"nsys_over_{key}"] = statistics.median(ratios)
            lines += ["", f"nsys stats / {key}, median of per-round ratios: {statistics.median(ratios):.2f} "
                          f"(target ≥ {RATIO_TARGET}; range {min(ratios):.2f}–{max(ratios):.2f})"]
    if len(trees) > 1:
        first, *others = trees
        lines += ["", f"| command | tree | wall ÷ [{first}] (median of rounds) | CPU ÷ [{first}] |", "|---|---|---|---|"]
        for name in base:
            if name not in TREE_COMMANDS:
                continue
            ref = runs[f"{name} [{first}]"]
            for label in others:
                rs = runs[f"{name} [{label}]"]
                w = statistics.median(r["wall_s"] / q["wall_s"] for r, q in zip(rs, ref))
                c = statistics.median(r["cpu_s"] / q["cpu_s"] for r, q in zip(rs, ref))
                summary[f"{name} [{label}] / [{first}]"] = {"wall": w, "cpu": c}
                lines.append(f"| {name} | {label} | {w:.3f} | {c:.3f} |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"schema": "clef-prof/bench-small/1", "summary": summary, "runs": runs,
                                               "markdown": "\n".join(lines)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
