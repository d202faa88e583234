"""The source trees a benchmark times (--tree LABEL=PATH), shared by bench_small and bench_analyze."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree_env(root: str) -> dict[str, str]:
    """The environment that runs clef_prof from `root`, byte-code cached as for an installed package
    (compiling clef_prof's sources costs ~50 ms a run)."""
    env = {**os.environ, "PYTHONPATH": str(root) + (os.pathsep + os.environ["PYTHONPATH"]
                                                    if os.environ.get("PYTHONPATH") else "")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def parse_trees(given: list[str] | None) -> dict[str, str]:
    """label -> tree root, from LABEL=PATH or PATH (labelled by its folder name); default: this tree."""
    if not given:
        return {ROOT.name: str(ROOT)}
    trees = {}
    for t in given:
        label, _, path = t.rpartition("=")
        path = os.path.abspath(path)
        if not os.path.isdir(os.path.join(path, "clef_prof")):
            raise SystemExit(f"bench: {path}: no clef_prof package there")
        trees[label or os.path.basename(path)] = path
    if len(trees) != len(given):
        raise SystemExit("bench: two trees with one label; name them LABEL=PATH")
    return trees
