#!/usr/bin/env python3
"""Move clef_prof's modules into their rooms (issue #36) and rewrite every import of them.

    python3 scripts/rehouse.py            # in a clean checkout: git mv, then rewrite the imports
    python3 scripts/rehouse.py --dry-run  # print what would move and which files would change

Mechanical and re-runnable: on a newer main, or on a branch made before the move, it does the same
`git mv`s (those whose source still exists) and rewrites, in clef_prof/, tests/, benchmarks/,
scripts/, notebooks/, docs/ and the top-level files:

- absolute imports inside strings of code (`python -c "import os; from clef_prof.analyze import
  export, parallel"`);
- relative imports (`from ..analyze import export as e, cuda`, `from .result import analyze`),
  resolved against the file's old place and written again relative to its new one (one statement
  per target package where the names of one statement now live apart);
- the short names prose uses for analyze's modules (`analyze.kineto`, `analyze/export.py`);
- absolute dotted names anywhere in the text: imports, `import a.b as c`, the strings of
  `monkeypatch.setattr("clef_prof....")` and `mock.patch`, `-m clef_prof...`, import-linter
  contracts, docs; and paths such as `clef_prof/analyze/_scan.c` (setup.py, docs);
- a moved module named as an attribute of its package (`delattr(clef_prof.analyze, "_scan")`);
- `from clef_prof.X import name` where `name` is a module that moved, or a symbol that SYMBOLS
  says moved to another module (split modules).

Attribute uses of a split module through an alias (`mf.check_manifest` after
`from ..analyze.read import manifest as mf`) are not rewritten: a broken one fails at import time
or in the tests, and is fixed by hand.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# old module (dotted) -> new module (dotted); a package's modules keep their file names
MOVES = {
    # analyze/read: every input to the same tables
    "clef_prof.analyze.export": "clef_prof.analyze.read.export",
    "clef_prof.analyze._scan": "clef_prof.analyze.read._scan",
    "clef_prof.analyze.columns": "clef_prof.analyze.read.columns",
    "clef_prof.analyze.nvtx": "clef_prof.analyze.read.nvtx",
    "clef_prof.analyze.kineto": "clef_prof.analyze.read.kineto",
    "clef_prof.analyze.nsyspy": "clef_prof.analyze.read.nsyspy",
    "clef_prof.analyze.inputs": "clef_prof.analyze.read.inputs",
    "clef_prof.analyze.filecache": "clef_prof.analyze.read.filecache",
    "clef_prof.analyze.manifest": "clef_prof.analyze.read.manifest",
    # analyze/figures: functions of the tables to typed parts of the result
    "clef_prof.analyze.stages": "clef_prof.analyze.figures.stages",
    "clef_prof.analyze.cuda": "clef_prof.analyze.figures.cuda",
    "clef_prof.analyze.attribute": "clef_prof.analyze.figures.attribute",
    "clef_prof.analyze.overlap": "clef_prof.analyze.figures.overlap",
    "clef_prof.analyze.ranks": "clef_prof.analyze.figures.ranks",
    "clef_prof.analyze.journey": "clef_prof.analyze.figures.journey",
    "clef_prof.analyze.samples": "clef_prof.analyze.figures.samples",
    "clef_prof.analyze.window": "clef_prof.analyze.figures.window",
    "clef_prof.analyze.intervals": "clef_prof.analyze.figures.intervals",
    "clef_prof.analyze.arrays": "clef_prof.analyze.figures.arrays",
    "clef_prof.analyze.metrics": "clef_prof.analyze.figures.metrics",
    # analyze/judge: validation and findings over the typed result
    "clef_prof.analyze.validate": "clef_prof.analyze.judge.validate",
    "clef_prof.analyze.findings": "clef_prof.analyze.judge.findings",
    # the one pass
    "clef_prof.analyze.result": "clef_prof.analyze.pipeline",
    # presentation beside the other renderers
    "clef_prof.analyze.termtable": "clef_prof.explore.termtable",
    "clef_prof.analyze.markup": "clef_prof.explore.markup",
    # tools that write captures
    "clef_prof.analyze.scrub": "clef_prof.capture.scrub",
    "clef_prof.analyze.slicing": "clef_prof.capture.slicing",
    # the shared base
    **{f"clef_prof.{m}": f"clef_prof.base.{m}" for m in (
        "config", "defaults", "errors", "safeio", "redact", "nsys", "cupti", "glyphs", "_sigint_default")},
}
# new packages and their docstrings
PACKAGES = {
    "clef_prof.analyze.read": "Reading: every input (nsys SQLite exports, Kineto traces, nsys' Python samples, record\n"
                              "folders) becomes the same columnar tables.",
    "clef_prof.analyze.figures": "Figures: each module a function of the tables to a typed part of the result.",
    "clef_prof.analyze.judge": "Judging: validation warnings and findings over the typed result.",
    "clef_prof.capture": "Tools that write captures: scrub (secrets out) and slice (a time window).",
    "clef_prof.base": "The shared base: configuration, errors, safe I/O, redaction, nsys and CUPTI facts, glyphs\n"
                      "(standard library only; imports no other subpackage).",
}
# (module after the moves, symbol) -> the module it moved to, for symbols that a split took out of
# their module (looked up after MOVES, so that a re-run on the moved tree applies them too)
SYMBOLS: dict[tuple[str, str], str] = {
    ("clef_prof.analyze.read.inputs", "report_identity"): "clef_prof.analyze.read.identity",
    ("clef_prof.analyze.read.inputs", "HASHED"): "clef_prof.analyze.read.identity",
    ("clef_prof.analyze.pipeline", "CUDA_STAGE_KEYS"): "clef_prof.analyze.assemble",
    **{("clef_prof.analyze.read.manifest", name): "clef_prof.analyze.judge.manifest" for name in (
        "sampling_check", "check_manifest", "client_check", "CLIENT_ALLOWANCE_MS", "CLIENT_ALLOWANCE_SHARE")},
}

TREES = ("clef_prof", "tests", "benchmarks", "scripts", "notebooks", "docs", ".ci")
TOP_FILES = ("pyproject.toml", "setup.py", "README.md", "mkdocs.yml")
TEXT_EXT = {".py", ".pyi", ".c", ".md", ".toml", ".cfg", ".ini", ".txt", ".sh", ".ipynb", ".yml", ".yaml", ".json", ""}
SKIP_DIRS = {"data", "__pycache__", ".git", "mutation-results"}
SELF = Path(__file__).resolve()


def module_of(path: Path) -> tuple[str, bool] | None:
    """(dotted module, is a package __init__) of a file under clef_prof/, else None."""
    rel = path.relative_to(ROOT)
    if rel.parts[0] != "clef_prof" or rel.suffix not in (".py", ".c"):
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def new_name(mod: str) -> str:
    """Where a module (or a name inside one) lives after the moves."""
    best = max((old for old in MOVES if mod == old or mod.startswith(old + ".")), key=len, default=None)
    return mod if best is None else MOVES[best] + mod[len(best):]


def file_of(mod: str) -> Path:
    p = ROOT / Path(*mod.split("."))
    for cand in (p.with_suffix(".py"), p.with_suffix(".c"), p / "__init__.py"):
        if cand.exists():
            return cand
    return p.with_suffix(".py")


def is_module(mod: str) -> bool:
    """A module or package of the tree before the moves (or one of the moves' sources)."""
    if mod in MOVES or mod in PACKAGES:
        return True
    p = ROOT / Path(*mod.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists() or any(p.parent.glob(p.name + ".*.so"))


def resolve(rel: str, here: str, is_pkg: bool) -> str:
    """The absolute module of `from <rel> import` written in module `here`."""
    dots = len(rel) - len(rel.lstrip("."))
    base = here.split(".") if is_pkg else here.split(".")[:-1]
    if dots > 1:
        base = base[:len(base) - (dots - 1)]
    tail = rel[dots:]
    return ".".join(base + ([tail] if tail else []))


def relative(target: str, here: str, is_pkg: bool) -> str:
    """`target` written relative to module `here` (the shortest form with leading dots)."""
    pkg = here.split(".") if is_pkg else here.split(".")[:-1]
    t = target.split(".")
    common = 0
    while common < min(len(pkg), len(t)) and pkg[common] == t[common]:
        common += 1
    dots = len(pkg) - common + 1
    return "." * dots + ".".join(t[common:])


FROM = re.compile(r"^(?P<ind>[ \t]*)from[ \t]+(?P<mod>\.*[\w.]*)[ \t]+import[ \t]+"
                  r"(?P<names>\((?:[^()])*\)|(?:[^\n#\\]|\\\n)*?)(?P<tail>[ \t]*(?:#[^\n]*)?)$", re.M)


# an absolute import inside a string of code (`python -c "import os; from clef_prof.analyze import
# export, parallel; ..."`): after `;`, a quote or a `\n` escape, up to the next `;`, quote or escape
FROM_INLINE = re.compile(r"(?:(?<=[;\"'])|(?<=\\n))(?P<ind>[ \t]*)from[ \t]+(?P<mod>clef_prof[\w.]*)[ \t]+import[ \t]+"
                         r"(?P<names>[\w ,]+?)(?P<tail>)(?=[ \t]*(?:;|\"|'|\\n))")


def split_names(names: str) -> list[str]:
    body = names.strip()
    if body.startswith("("):
        body = body[1:-1]
    body = re.sub(r"#[^\n]*", "", body).replace("\\\n", " ")
    return [n.strip() for n in body.replace("\n", " ").split(",") if n.strip()]


def rewrite_from(m: re.Match, here: tuple[str, bool] | None, new_here: tuple[str, bool] | None,
                 joiner: str = "\n") -> str:
    mod = m["mod"]
    rel = mod.startswith(".")
    if rel and here is None:
        return m.group(0)
    old = resolve(mod, *here) if rel else mod
    if not (old == "clef_prof" or old.startswith("clef_prof.")):
        return m.group(0)
    names = split_names(m["names"])
    groups: dict[str, list[str]] = {}
    renamed = False
    for n in names:
        name, _, alias = (part.strip() for part in n.partition(" as "))
        if name != "*" and is_module(f"{old}.{name}"):
            target, _, last = new_name(f"{old}.{name}").rpartition(".")
            if last != name:        # a module renamed (result -> pipeline): the importer's name kept
                n, renamed = f"{last} as {alias or name}", True
        else:
            target = SYMBOLS.get((new_name(old), name)) or new_name(old)
        groups.setdefault(target, []).append(n)

    def written(target: str) -> str:
        return relative(target, *new_here) if rel else target

    if len(groups) == 1 and not renamed:
        (target,) = groups
        w = written(target)
        if w == mod:
            return m.group(0)
        return f"{m['ind']}from {w} import {m['names']}{m['tail']}"
    lines = [f"{m['ind']}from {written(t)} import {', '.join(ns)}" for t, ns in groups.items()]
    lines[0] += m["tail"]
    if joiner == "\n":
        return "\n".join(lines)
    return joiner.join(line.strip() if i else line for i, line in enumerate(lines))


def dotted_pattern() -> re.Pattern:
    olds = sorted(MOVES, key=len, reverse=True)
    return re.compile(r"(?<![\w.])(" + "|".join(re.escape(o) for o in olds) + r")(?![\w])")


def path_pattern() -> re.Pattern:
    olds = sorted(MOVES, key=len, reverse=True)
    return re.compile(r"(?<![\w/.])(" + "|".join(re.escape(o.replace(".", "/")) for o in olds) + r")(\.py|\.c)\b")


SHORT = {old[len("clef_prof."):]: new[len("clef_prof."):] for old, new in MOVES.items()
         if old.startswith("clef_prof.analyze.")}


def short_pattern() -> re.Pattern:
    """`analyze.kineto`, `analyze/export.py`: how prose (docstrings, comments, docs) names them."""
    olds = sorted(SHORT, key=len, reverse=True)
    return re.compile(r"(?<![\w./])(" + "|".join(re.escape(o).replace(r"\.", "[./]") for o in olds) + r")(?![\w])")


def attr_pattern() -> re.Pattern:
    """A moved module named as an attribute of its package: `delattr(clef_prof.analyze, "_scan")`."""
    return re.compile(r"(?<![\w.])(clef_prof(?:\.\w+)*), ([\"'])(\w+)\2")


def rewrite_attr(m: re.Match) -> str:
    old = f"{m.group(1)}.{m.group(3)}"
    if old not in MOVES:
        return m.group(0)
    parent, _, name = MOVES[old].rpartition(".")
    return f"{parent}, {m.group(2)}{name}{m.group(2)}"


def rewrite_text(text: str, here, new_here) -> str:
    text = attr_pattern().sub(rewrite_attr, text)
    if here is not None or "import" in text:
        text = FROM.sub(lambda m: rewrite_from(m, here, new_here), text)
        text = FROM_INLINE.sub(lambda m: rewrite_from(m, None, None, joiner="; "), text)
    text = dotted_pattern().sub(lambda m: MOVES[m.group(1)], text)
    text = path_pattern().sub(lambda m: MOVES[m.group(1).replace("/", ".")].replace(".", "/") + m.group(2), text)

    def short(m: re.Match) -> str:
        sep = "/" if "/" in m.group(1) else "."
        return SHORT[m.group(1).replace("/", ".")].replace(".", sep)
    return short_pattern().sub(short, text)


def files() -> list[Path]:
    out = [ROOT / f for f in TOP_FILES if (ROOT / f).exists()]
    for tree in TREES:
        for dirpath, dirnames, filenames in os.walk(ROOT / tree):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            for f in filenames:
                p = Path(dirpath) / f
                if p.suffix in TEXT_EXT and p.resolve() != SELF and not p.name.endswith((".xz", ".gz")):
                    out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    moves = {file_of(o): file_of(o).parent.joinpath(*([".."] * 0)) for o in ()}  # filled below
    moves = {}
    for old, new in MOVES.items():
        src = file_of(old)
        if src.exists():
            moves[src] = ROOT / Path(*new.split(".")).with_suffix(src.suffix)
    changed = []
    for p in files():
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        here = module_of(p)
        dest = moves.get(p, p)
        new_here = module_of(dest) if here is not None else None
        if here is not None and new_here is None:
            new_here = here
        out = rewrite_text(text, here, new_here)
        if out != text:
            changed.append(p)
            if not args.dry_run:
                p.write_text(out, encoding="utf-8")
    for src, dst in moves.items():
        print(f"git mv {src.relative_to(ROOT)} {dst.relative_to(ROOT)}")
    print(f"{len(changed)} files rewritten", file=sys.stderr)
    if args.dry_run:
        for p in changed:
            print(f"  {p.relative_to(ROOT)}", file=sys.stderr)
        return 0
    for pkg, doc in PACKAGES.items():
        init = ROOT / Path(*pkg.split(".")) / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text(f'"""{doc}"""\n', encoding="utf-8")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    for src, dst in moves.items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
