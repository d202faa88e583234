#!/usr/bin/env python3
"""How fast are the commands people run on the captures they actually make (tens of MB)?

    python bench/bench_small.py                      # tests/data/gpu-q1c16-main (17 MB), 7 rounds
    python bench/bench_small.py --runs 9 --json out.json

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

No timing is asserted anywhere: the targets (issue 16) are printed beside the medians.
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

TARGETS = {"help": 0.1, "doctor": 0.1, "analyze": 0.25, "report": 1.0, "compare": 1.5}
RATIO_TARGET = 2.5          # nsys stats / analyze


def unpack(name: str, tmp: str) -> str:
    out = os.path.join(tmp, f"{name}.sqlite")
    with lzma.open(ROOT / "tests" / "data" / f"{name}.sqlite.xz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


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
    args = p.parse_args(argv)

    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"]
                                                     if os.environ.get("PYTHONPATH") else "")}
    # as installed: byte-code cached (compiling clef_prof's sources costs ~50 ms a run)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="clef-bench-small-") as tmp:
        capture = args.capture or unpack("gpu-q1c16-main", tmp)
        pr = args.pr or unpack("gpu-q1c16-pr", tmp)
        nsys = find_nsys(args.nsys)
        cmds = commands(capture, pr, tmp, nsys)
        if args.only:
            cmds = {k: v for k, v in cmds.items() if k in args.only.split(",") or k == "python"}
        for f in (capture, pr):
            warm(f)
        for cmd in cmds.values():       # warm-up: byte-code caches, page cache
            run_child(cmd, env=env)
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        names = list(cmds)
        for i in range(args.runs):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                r = run_child(cmds[name], env=env)
                if r["rc"] not in (0, 1) or (r["rc"] == 1 and name != "doctor"):
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
        t = TARGETS.get(name)
        lines.append(f"| {name} | {wall:.3f} | {summary[name]['wall_min_s']:.3f} | {cpu:.3f} | "
                     f"{summary[name]['rss_mb']:.0f} | {'≤ %.2f s' % t if t else ''} |")
    if "nsys" in runs and "analyze" in runs:
        ratios = [n["wall_s"] / a["wall_s"] for n, a in zip(runs["nsys"], runs["analyze"])]
        summary["nsys_over_analyze"] = statistics.median(ratios)
        lines += ["", f"nsys stats / analyze, median of per-round ratios: {summary['nsys_over_analyze']:.2f} "
                      f"(target ≥ {RATIO_TARGET}; range {min(ratios):.2f}–{max(ratios):.2f})"]
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"schema": "clef-prof/bench-small/1", "summary": summary, "runs": runs,
                                               "markdown": "\n".join(lines)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
