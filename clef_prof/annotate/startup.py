"""What `_startup/sitecustomize.py` runs in every Python process started with the environment
form (`clef_prof.annotate.envform`): `install_from_env()` installs the spec named by
$CLEF_PROF_SPEC through the post-import hook (`importhook`), reaches the targets in the main
module (`mainhook`), and at exit prints one line per target the process never wrapped.

Ranges are emitted through `clef_prof.annotate.api` (the ctypes NVTX client): a stage target is
wrapped by `annotate.stage(name, domain)` (push/pop; start/end for coroutines), the batch
target by `annotate.batch(n=len(<size_arg>), name=..., domain=...)` (`pooler n=K`, payload
K), so `clef-prof analyze --spec X` reads the capture with no extra option.

Unresolvable targets (a missing attribute, a module missing from a package that was
imported, something not callable or not wrappable) print one line on stderr and end the
process with exit code 1; with `CLEF_PROF_LENIENT=1` (`--lenient`) they print a warning and
are skipped. A target whose module is never imported in a process is not an error there:
a server's API process and its workers import different modules. `clef-prof inject` imports
every target up front (`check`), in the command's interpreter and as the command will run
them, before launching.

Standard library only, like every module it loads.
"""
from __future__ import annotations

import os
import sys

from ..base.errors import SpecError
from . import importhook, mainhook, registry
from .registry import ENV_LENIENT
from .wrap import flag, say

ENV_SPEC = "CLEF_PROF_SPEC"            # absolute path of the stage spec TOML


def _at_exit() -> None:
    """The process's last exit handler (registered before the program's own): one stderr line
    per target this process never wrapped (and said nothing about); then, for a script that
    ended by KeyboardInterrupt, death by SIGINT."""
    pid = os.getpid()
    for st in registry.states():
        for b in st.spec.bindings():
            why = st.pending.get(b.where)
            if why:
                say(f"clef-prof inject[{pid}]: warning: {b.where} {b.target} was never wrapped in this "
                    f"process: {why}")
    mainhook.exit_by_signal()


def _hook_main(argv: list[str]) -> None:
    """Reach the targets in the main code that `argv` (the interpreter's, without its path)
    runs: a `-m` module through the finder (and in its workers, through $CLEF_PROF_MAIN), a
    script through the `cpython.run_file` audit hook, workers of a script through run_path."""
    launch = mainhook.python_launch(argv)[0]
    if launch and launch[0] == "module":
        os.environ[mainhook.ENV_MAIN] = launch[1]
    elif launch and mainhook.main_bindings(None, launch[1]):
        sys.addaudithook(mainhook._RunFile())
    if os.environ.get(mainhook.ENV_MAIN):
        importhook.hook_module(os.environ[mainhook.ENV_MAIN])
    importhook.when_imported("runpy", mainhook._patch_runpy)


def install_from_env() -> None:
    """Install the spec named by $CLEF_PROF_SPEC (called by `_startup/sitecustomize.py`), reach
    the main module's targets, and report the targets never wrapped at exit."""
    path = os.environ.get(ENV_SPEC)
    if not path:
        return
    lenient = flag(ENV_LENIENT)
    from .spec import load
    try:
        spec = load(path)
    except SpecError as exc:
        registry.report_error("warn" if lenient else "exit", exc)
        return
    importhook.install(spec, on_error="warn" if lenient else "exit")
    import atexit
    atexit.register(_at_exit)
    _hook_main(list(getattr(sys, "orig_argv", ()))[1:])   # Python >= 3.10
