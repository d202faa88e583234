"""Targets in the main module: its source compiled to wrap each target as its definition runs.
Standard library only: it runs in every profiled process.
"""
from __future__ import annotations

import functools
import os
import sys
import threading

from . import importhook
from .wrap import MARK

# The main module (`python -m pkg.server`, `python path/server.py`, and its `__mp_main__` copy in
# spawn and forkserver workers) is never imported under its name, and its code runs top to
# bottom, `if __name__ == "__main__": main()` included, before any import hook could see the
# finished module. So its source is compiled with one call to `_main_defined` after every
# top-level statement (also inside top-level if/try/with/for/while blocks, never in a function
# or class body): each target is wrapped as soon as its definition has run, before the code
# below it (the main guard) can call it. Line numbers are kept. That code reaches the
# interpreter through the one door each launch has:
# - `-m NAME` (runpy), and workers of such a parent (`runpy.run_module(NAME, "__mp_main__")`):
#   the post-import finder's loader answers `get_code(NAME)`;
# - a script by path: the `cpython.run_file` audit event, raised just before the interpreter
#   runs the file, runs it instead (into the real `__main__`, as the interpreter would) and
#   ends with its exit status; installed only when a target names that script;
# - workers of a script parent (`runpy.run_path(PATH, run_name="__mp_main__")`): run_path.
# A target names the main module by module name (`-m`; for a script, when its path ends with
# the module's path: `embedsrv.server` matches `.../embedsrv/server.py`) or by file path.

ENV_MAIN = "CLEF_PROF_MAIN"            # the module a `-m` parent runs: its workers re-run it
_main_runs: dict[int, list] = {}       # key in the compiled main code -> [(state, binding)]
_main_lock = threading.Lock()


class _Namespace:
    """A main module's globals as an object, for prepare() and setattr()."""

    def __init__(self, g: dict):
        self.__dict__ = g


def matches_main(target, name: str | None, filename: str | None) -> bool:
    """Whether `target` names the main code run as module `name` from `filename`."""
    if target.path is not None:
        return filename is not None and os.path.realpath(filename) == os.path.realpath(target.path)
    if name is not None:
        return target.module == name
    if filename is None:
        return False
    parts = target.module.split(".")
    stem = os.path.splitext(os.path.realpath(filename))[0].split(os.sep)
    return stem[-len(parts):] == parts


def main_bindings(name: str | None, filename: str | None) -> list:
    return [(st, b) for st in importhook.states() for b in st.spec.bindings() if matches_main(b.target, name, filename)]


def main_code(source, filename: str, entries: list):
    """`source` compiled with a `_main_defined` call after each top-level statement, or None
    when it does not compile (the interpreter then reports it as usual)."""
    import ast
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    with _main_lock:
        key = len(_main_runs)
        _main_runs[key] = entries
    for st, b in entries:
        if b.where in st.pending:
            st.pending[b.where] = f"{filename} ran, but defined no {b.target.qualname} at its top level"
    call = f"__import__('clef_prof.annotate.mainhook', None, None, ('_main_defined',))._main_defined({key}, globals())"

    def hook(after):
        node = ast.parse(call).body[0]
        for n in ast.walk(node):
            n.lineno = n.end_lineno = after.end_lineno
            n.col_offset = n.end_col_offset = 0
        return node

    def fill(body, top=False):
        out, i = [], 0
        if top:   # the docstring and `from __future__` imports stay first
            while i < len(body) and (isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__" or
                                     i == 0 and isinstance(body[i], ast.Expr) and
                                     isinstance(body[i].value, ast.Constant)):
                out.append(body[i])
                i += 1
        for stmt in body[i:]:
            for field in ("body", "orelse", "finalbody"):
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                        isinstance(getattr(stmt, field, None), list) and getattr(stmt, field):
                    setattr(stmt, field, fill(getattr(stmt, field)))
            for h in getattr(stmt, "handlers", ()):
                h.body = fill(h.body)
            out += [stmt, hook(stmt)]
        return out

    tree.body = fill(tree.body, top=True)
    return compile(tree, filename, "exec", dont_inherit=True)


def _main_defined(key: int, g: dict) -> None:
    """Called by the main module's code after each top-level statement: wrap every target
    whose first name is now defined."""
    ns = None
    for st, b in _main_runs.get(key, ()):
        if b.target.qualname.split(".", 1)[0] in g and b.where in st.pending:
            ns = ns or _Namespace(g)
            st.wrap(b, ns)


def _source(filename: str):
    try:
        import io
        with io.open_code(filename) as fh:
            return fh.read()
    except OSError:
        return None


class _RunFile:
    """Audit hook: at `cpython.run_file`, run the script with its targets wrapped, then end
    the process with its exit status (SystemExit, which the interpreter honours there)."""

    __cantrace__ = True          # debuggers and coverage keep working in the script

    def __init__(self):
        self.done = False

    def __call__(self, event, args):
        if self.done or event != "cpython.run_file":
            return
        self.done = True
        filename = os.path.abspath(args[0])
        entries = main_bindings(None, filename)
        source = _source(filename) if entries else None
        code = main_code(source, filename, entries) if source is not None else None
        if code is None:
            return               # the interpreter runs (or rejects) the file itself
        main = sys.modules["__main__"]
        main.__file__, main.__cached__ = filename, None
        try:
            exec(code, main.__dict__)
        except SystemExit:
            raise
        except BaseException as exc:  # what the interpreter does with an uncaught exception
            tb = exc.__traceback__.tb_next           # from the script's frame on
            sys.excepthook(type(exc), exc.with_traceback(tb), tb)
            raise SystemExit(130 if isinstance(exc, KeyboardInterrupt) else 1) from None
        raise SystemExit(0)


def _patch_runpy(runpy) -> None:
    """`runpy.run_path` runs a script with its targets wrapped (spawn and forkserver workers
    re-run their parent's script as `__mp_main__` through it)."""
    orig = runpy.run_path
    if getattr(orig, MARK, None) is not None or not hasattr(runpy, "_run_module_code"):
        return

    @functools.wraps(orig)
    def run_path(path_name, init_globals=None, run_name=None):
        filename = os.path.abspath(os.fsdecode(path_name))
        entries = main_bindings(None, filename) if os.path.isfile(filename) else []
        source = _source(filename) if entries else None
        code = main_code(source, filename, entries) if source is not None else None
        if code is None:
            return orig(path_name, init_globals, run_name)
        run_name = run_name or "<run_path>"
        return runpy._run_module_code(code, init_globals, run_name, pkg_name=run_name.rpartition(".")[0],
                                      script_name=path_name)
    setattr(run_path, MARK, ("runpy", "run_path"))
    runpy.run_path = run_path


def python_launch(args: list[str], cwd: str | None = None) -> tuple[tuple[str, str] | None, str]:
    """What a Python command line (without the interpreter) runs as its main code:
    ("module", NAME) for `-m NAME`, ("script", PATH) for a file; None for -c, stdin or no
    argument; and the option letters among I, E, S it gives (each keeps the hook out)."""
    i, off = 0, ""
    while i < len(args):
        a = args[i]
        if a in ("-c", "-") or a.startswith("-c"):
            return None, off
        if a == "-m":
            return (("module", args[i + 1]) if i + 1 < len(args) else None), off
        if a.startswith("-m"):
            return ("module", a[2:]), off
        if a in ("-X", "-W", "--check-hash-based-pycs"):
            i += 2
            continue
        if a.startswith("-") and not a.startswith("--"):
            off += "".join(c for c in a[1:] if c in "IES" and c not in off)
        if a.startswith("-") and a != "--":
            i += 1
            continue
        rest = args[i + 1:] if a == "--" else args[i:]
        return (("script", os.path.abspath(os.path.join(cwd or os.getcwd(), rest[0]))) if rest else None), off
    return None, off


def hook_main(argv: list[str]) -> None:
    """Reach the targets in the main code that `argv` (the interpreter's, without its path)
    runs: a `-m` module through the finder (and in its workers, through $CLEF_PROF_MAIN), a
    script through the `cpython.run_file` audit hook, workers of a script through run_path."""
    launch = python_launch(argv)[0]
    if launch and launch[0] == "module":
        os.environ[ENV_MAIN] = launch[1]
    elif launch and main_bindings(None, launch[1]):
        sys.addaudithook(_RunFile())
    if os.environ.get(ENV_MAIN):
        importhook.hook_module(os.environ[ENV_MAIN])
    importhook.when_imported("runpy", _patch_runpy)
