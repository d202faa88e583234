"""The environment form of a stage spec (`clef-prof inject --print-env`, `record --spec`): the
variables that make every Python process started with them install the spec at start-up.

`clef_prof/annotate/_startup/` goes first on `PYTHONPATH`; it holds a `sitecustomize.py`, which
every Python interpreter imports at start-up (the process itself, multiprocessing `spawn` and
`forkserver` workers, Python subprocesses; forked children inherit the hooks). It first runs
the `sitecustomize` it shadows, if any, then `clef_prof.annotate.startup.install_from_env()`.
"""
from __future__ import annotations

import os
import shlex

from .registry import ENV_LENIENT, ENV_VERBOSE
from .startup import ENV_SPEC

ENV_PKG = "CLEF_PROF_PKG"              # the clef_prof package directory the hook loads
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the clef_prof package
STARTUP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_startup")


def environment(spec_path: str, lenient: bool = False, base: dict | None = None,
                verbose: bool = False) -> dict[str, str]:
    """The variables to set so that every Python process started with them installs the spec.

    PYTHONPATH gets the start-up directory first and keeps `base`'s entries (os.environ by
    default) after it; an existing sitecustomize on the path is chained, not replaced.
    """
    base = os.environ if base is None else base
    old = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    old = [p for p in old if os.path.abspath(p) != STARTUP_DIR]
    env = {ENV_SPEC: os.path.abspath(spec_path),
           ENV_PKG: PKG_DIR,
           "PYTHONPATH": os.pathsep.join([STARTUP_DIR, *old])}
    if lenient:
        env[ENV_LENIENT] = "1"
    if verbose:
        env[ENV_VERBOSE] = "1"
    return env


def format_env(env: dict[str, str], fmt: str = "sh") -> str:
    if fmt == "json":
        import json
        return json.dumps(env, indent=2) + "\n"
    if fmt == "env":
        return "".join(f"{k}={v}\n" for k, v in env.items())
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
