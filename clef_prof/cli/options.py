"""Options and output shared by several subcommands."""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..base.defaults import DEFAULT_BATCH, DEFAULT_DOMAIN, DEFAULT_STAGES

if TYPE_CHECKING:
    from ..base.config import StageConfig


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """A command's description and epilog filled to the terminal's width: the lines of a paragraph
    that start at the margin are joined and filled again, indented lines (examples, lists) are
    kept as they are written."""

    def _fill_text(self, text, width, indent):
        import textwrap

        out: list[str] = []
        run: list[str] = []

        def flush():
            if run:
                out.extend(textwrap.wrap(" ".join(run), width, initial_indent=indent, subsequent_indent=indent,
                                         break_long_words=False, break_on_hyphens=False))
                run.clear()

        for line in text.splitlines():
            if line.strip() and not line[0].isspace():
                run.append(line.strip())
                continue
            flush()
            out.append(indent + line if line.strip() else "")
        flush()
        return "\n".join(out)


class Parser(argparse.ArgumentParser):
    """clef-prof's parsers: help filled to the width (HelpFormatter), and a usage error said in one
    line, as every other bad input is (argparse prints the whole usage first)."""

    command: str | None = None      # the subcommand named: argparse says its unknown flags at the top
    command_args: list = []         # the arguments after it

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        prog = self.prog
        extra = message.partition("unrecognized arguments:")[2].split()
        if self.command and extra and all(a in self.command_args for a in extra):
            prog = f"{prog} {self.command}"
        self.exit(2, f"{prog}: error: {' '.join(message.split())} (see {prog} --help)\n")


def stage_config(args, captures=()) -> StageConfig:
    """--spec, --domain, --batch, --stages and --threshold, resolved as annotate.spec.stage_config
    resolves them (whose module, 3 ms of dataclasses, is imported only with --spec). With none of
    the first four, the configuration the `captures` were recorded with (their manifests'
    `record --spec`: analyze.read.manifest.recorded_config), said on stderr; captures recorded with
    different ones (or some with one and some without) are refused: one set of stages must fit all.
    `captures`: what the user named, or (name, manifest dict or None, export) triples."""
    from dataclasses import replace

    from ..base.config import StageConfig, parse_threshold, with_overrides

    cfg = StageConfig()
    if getattr(args, "spec", None):
        from ..annotate.spec import load
        cfg = replace(load(args.spec).config, source=f"spec {args.spec}")
    elif captures and all(getattr(args, k, None) is None for k in ("domain", "batch", "stages")):
        cfg = _recorded(captures) or cfg
    return with_overrides(cfg, args.domain, args.batch, args.stages,
                          [parse_threshold(t) for t in getattr(args, "threshold", None) or []])


def _recorded(captures) -> StageConfig | None:
    """The one stage configuration the captures' manifests record, None when none records one."""
    from ..analyze.read import manifest as mf
    from ..analyze.read.inputs import resolve
    from ..base.errors import ClefError

    seen: dict = {}
    for c in captures:
        name, m, export = c if isinstance(c, tuple) else (c, *reversed(resolve(c)))
        where = None
        if m is None:
            where = mf.find_for(export)
            m = mf.read(where) if where else None
        elif os.path.isdir(name):
            where = os.path.join(name, mf.NAME)
        cfg = mf.recorded_config(m, where or name) if m is not None else None
        seen.setdefault(cfg, []).append(name)
    if len(seen) > 1:
        said = "; ".join(f"{', '.join(names[:2])}{' …' if len(names) > 2 else ''}: "
                         f"{'stages ' + ','.join(cfg.stages) + ' (' + cfg.source + ')' if cfg else 'no recorded spec'}"
                         for cfg, names in seen.items())
        raise ClefError(f"the captures were recorded with different stage specs ({said}); pass --spec, or "
                        "--domain/--batch/--stages, to read them all alike")
    cfg = next(iter(seen), None)
    if cfg is not None:
        say(f"note: stages {','.join(cfg.stages)} in domain {cfg.domain!r}, batch {cfg.batch!r}: {cfg.source}")
    return cfg


def check_jobs(jobs: int | None) -> None:
    """--jobs is a number of captures at a time: 0 or below would quietly mean one. $CLEF_PROF_POOL
    is checked here too, before any input is read or converted, whatever the number of captures."""
    if jobs is not None and jobs < 1:
        from ..base.errors import ClefError
        raise ClefError(f"--jobs {jobs}: expected at least 1 capture at a time (1: one after another)")
    from ..analyze.parallel import pool_kind
    pool_kind()


def add_threshold_option(g) -> None:
    g.add_argument("--threshold", action="append", metavar="KEY=VALUE",
                   help="override a findings threshold, e.g. overlap_max_pct=30 (repeat; also a [findings] table "
                        "in the spec; docs/analyze.md lists them)")


def add_stage_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("stage ranges")
    g.add_argument("--spec", help="stage spec TOML (annotations/*.toml) naming domain, batch range and stages")
    g.add_argument("--domain", help=f"NVTX domain of the stage ranges (default {DEFAULT_DOMAIN!r}; '' = default domain)")
    g.add_argument("--batch", help=f"name of the outer batch range (default {DEFAULT_BATCH!r}, message 'pooler n=K')")
    g.add_argument("--stages", help=f"comma-separated stage names (default {','.join(DEFAULT_STAGES)})")
    g.add_argument("--requests", type=int, help="total requests in the capture, when batch ranges carry no size")
    add_threshold_option(g)


def emit(text: str, output: str | None, inputs=()) -> None:
    """Write to `output` (never over one of `inputs`, complete or not at all), or to stdout."""
    if output:
        from ..base.safeio import write_text
        write_text(output, text, inputs)
    else:
        sys.stdout.write(text)


def render_text(render, **console) -> str:
    """What `render(console)` prints on a rich Console without colour, as text: a terminal report
    for a file (-o), laid out as it would be printed."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    render(Console(file=buf, color_system=None, **console))
    return buf.getvalue()


def say(text: str) -> None:
    """One line on stderr (a warning, a gate, an error), in ASCII where reports are
    (glyphs.plain): whatever the width, so that each stays one line to grep."""
    from ..base.glyphs import plain
    print(plain(text), file=sys.stderr)


def import_numpy() -> None:
    """Import NumPy with OpenBLAS on one thread. The analysis does no linear algebra, and the
    thread pool OpenBLAS starts when NumPy is imported costs as much CPU as the import itself
    (40 ms on a 2-core machine, a fifth of a small capture's analysis); compare's bootstrap
    multiplies small matrices, one arm per thread, where OpenBLAS's own threads would only spin.
    The variable is set for the import only: processes started later get the environment as it was."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def add_family_option(p) -> None:
    """--family: how compare and bench judge many figures at once."""
    p.add_argument("--family", choices=["none", "holm"], default="none",
                   help="many figures at once: none (default: each judged at --confidence, the family's chance "
                        "of any false 'beyond noise' stated) or holm (Holm's correction of the verdicts and of "
                        "the gates over several figures: that chance held to 1 - confidence)")
