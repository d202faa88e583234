"""The CLI in a subprocess, and the one-line error check that bad input gets."""
from __future__ import annotations

import subprocess
import sys


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def assert_one_line(p, code, *needles):
    assert p.returncode == code, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
