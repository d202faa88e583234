"""The CLI in a subprocess or in this process, and the one-line error check that bad input gets.

`run_main` calls clef_prof.cli.main in this process (no interpreter start, no imports again:
0.15-0.2 s less a call here); `run_cli` starts `python -m clef_prof`, for what only a process
shows: signals, the environment, the interpreter's start, the set of imports, another process
holding a lock, and an error that escapes main (at least one such test per subcommand)."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import warnings


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def run_main(*args, cwd=None) -> subprocess.CompletedProcess:
    """clef_prof.cli.main(args) here, read like run_cli's result: its return code (or argparse's
    SystemExit code), and what it wrote to stdout and stderr. Rich consoles write to sys.stdout /
    sys.stderr when they print, so they land in the captured streams too; Python warnings are
    shown under the interpreter's default filters (not pytest's) and added to stderr, as a fresh
    interpreter would print them."""
    from clef_prof.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.resetwarnings()
        for quiet in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", quiet)
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main(argv)
        except SystemExit as exc:
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    for w in caught:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    return subprocess.CompletedProcess(["clef-prof", *argv], code, out.getvalue(), err.getvalue())


def assert_one_line(p, code, *needles):
    assert p.returncode == code, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
