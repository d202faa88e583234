"""Targets in the main module: its source compiled so that each target is wrapped as its
definition runs, and follows its name when the module binds that name again.
Standard library only: it runs in every profiled process.
"""
from __future__ import annotations

import ast
import functools
import os
import sys
import threading

from . import registry
from .wrap import MARK, TargetError

# The main module (`python -m pkg.server`, `python path/server.py`, and its `__mp_main__` copy in
# spawn and forkserver workers) is never imported under its name, and its code runs top to
# bottom, `if __name__ == "__main__": main()` included, before any import hook could see the
# finished module. So its source is compiled with a call to `_main_bound` after each top-level
# statement that can bind the first name of a target (`class Embedder`, `def respond`, an
# assignment, an import, a `for`/`with` target; also inside top-level if/try/with/for/while
# blocks and the main guard, never in a function or class body), and a call to `_main_settle`
# at the start of the main guard and at the end of the module. Other statements (a hot loop at
# the top level) run as compiled by the interpreter, at no cost. Line numbers are kept.
#
# `_main_bound` wraps a target as soon as its name is bound to something it resolves in; when
# the name is bound again (an import or a `None` placeholder first, the real class later), the
# wrapper moves: the earlier object gets its own attribute back, the new one is wrapped. A
# name bound to something the target does not resolve in is not an error until a settle point:
# there, what still does not resolve is reported (one line; the process ends unless lenient),
# as `inject --check` reports it from the module's final top-level state.
#
# That code reaches the interpreter through the one door each launch has:
# - `-m NAME` (runpy), and workers of such a parent (`runpy.run_module(NAME, "__mp_main__")`):
#   the post-import finder's loader answers `get_code(NAME)`;
# - a script by path: the `cpython.run_file` audit event, raised just before the interpreter
#   runs the file, runs it instead (into the real `__main__`, as the interpreter would) and
#   ends as the interpreter would (its exit status; death by SIGINT after an uncaught
#   KeyboardInterrupt); installed only when a target names that script;
# - workers of a script parent (`runpy.run_path(PATH, run_name="__mp_main__")`): run_path.
# A target names the main module by module name (`-m`; for a script, when its path ends with
# the module's path: `embedsrv.server` matches `.../embedsrv/server.py`) or by file path.

ENV_MAIN = "CLEF_PROF_MAIN"            # the module a `-m` parent runs: its workers re-run it
_MISSING = object()
_main_runs: dict[int, list] = {}       # key in the compiled main code -> [_MainTarget]
_main_lock = threading.Lock()
_interrupted = False                   # the script run by _RunFile ended by KeyboardInterrupt


class _Namespace:
    """A main module's globals as an object, for prepare() and setattr()."""

    def __init__(self, g: dict):
        self.__dict__ = g


class _MainTarget:
    """One target in one run of main code: the object its first name was bound to when last
    seen, the wrapper set below it, and why it does not resolve (if it does not)."""

    __slots__ = ("state", "b", "first", "seen", "applied", "failure")

    def __init__(self, state, b):
        self.state, self.b = state, b
        self.first = b.target.qualname.split(".", 1)[0]
        self.seen, self.applied, self.failure = _MISSING, None, None

    def update(self, g: dict, value) -> None:
        """The first name is now bound to `value` (again, or to something new): wrap the
        target below it, moving the wrapper off the object the name meant before."""
        if value is not self.seen and value is not _MISSING and self.applied is not None:
            if not isinstance(self.applied.owner, _Namespace):
                self.applied.undo()          # a class or module the name no longer means
            self.applied = None
        self.seen = value
        if value is _MISSING:
            return
        try:
            p = self.state.apply(self.b, _Namespace(g))
        except TargetError as exc:
            self.failure = exc
            if self.b.where in self.state.pending:
                self.state.pending[self.b.where] = f"{exc.problem} (as the main module left it)"
            return
        self.failure = None
        if p is not None:
            self.applied = p
        self.seen = g.get(self.first, _MISSING)   # a top-level function: now its wrapper


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
    return [(st, b) for st in registry.states() for b in st.spec.bindings()
            if matches_main(b.target, name, filename)]


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_BLOCKS = ("body", "orelse", "finalbody")


def _bound_names(node, out: set) -> set:
    """The names `node` can bind in the scope it runs in (not in nested functions or classes,
    nor in its own blocks of statements, which are visited one statement at a time)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(node.name)
        for d in node.decorator_list:
            _bound_names(d, out)
        return out
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            out.add(a.asname or a.name.split(".", 1)[0])   # "*": a star import binds anything
        return out
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        out.add(node.id)
    elif isinstance(node, ast.NamedExpr):
        _bound_names(node.target, out)
    elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        out.add(node.name)
    elif isinstance(node, ast.MatchMapping) and node.rest:
        out.add(node.rest)
    for field, value in ast.iter_fields(node):
        if field in _BLOCKS or isinstance(node, ast.Lambda):
            continue
        for child in (value if isinstance(value, list) else [value]):
            if isinstance(child, ast.AST) and not isinstance(child, ast.stmt):
                _bound_names(child, out)
    return out


def _header_nodes(stmt):
    """The expression nodes of `stmt` that run in its scope (not its blocks, nested functions
    or classes)."""
    todo = [c for f, v in ast.iter_fields(stmt) if f not in _BLOCKS
            for c in (v if isinstance(v, list) else [v]) if isinstance(c, ast.AST) and not isinstance(c, ast.stmt)]
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, _SCOPES):
            todo.extend(ast.iter_child_nodes(n))


def _root(node):
    """`a` of `a.b[c].d`, or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _block_names(body) -> set:
    """The names the statements of `body` (and their blocks, not function or class bodies) bind."""
    out: set = set()
    for stmt in body:
        _bound_names(stmt, out)
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in _BLOCKS:
                out |= _block_names(getattr(stmt, field, None) or ())
            for h in getattr(stmt, "handlers", ()):
                out |= _block_names(h.body)
            for c in getattr(stmt, "cases", ()):
                out |= _block_names(c.body)
    return out


def _is_main_guard(stmt) -> bool:
    """`if __name__ == "__main__":` (either way round)."""
    t = stmt.test if isinstance(stmt, ast.If) else None
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)):
        return False
    sides = [t.left, t.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and
            any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def main_code(source, filename: str, entries: list):
    """`source` compiled with a `_main_bound` call after each top-level statement that can bind
    a target's first name and a `_main_settle` call at the main guard and the end, or None
    when it does not compile (the interpreter then reports it as usual)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    targets = [_MainTarget(st, b) for st, b in entries]
    names = {t.first for t in targets}
    with _main_lock:
        key = len(_main_runs)
        _main_runs[key] = targets
    for st, b in entries:
        if b.where in st.pending:
            st.pending[b.where] = f"{filename} ran, but defined no {b.target.qualname} at its top level"

    def call(func, at, *more):
        extra = "".join(f", {m!r}" for m in more)
        node = ast.parse(f"__import__('clef_prof.annotate.mainhook', None, None, ('{func}',))"
                         f".{func}({key}, globals(){extra})").body[0]
        for n in ast.walk(node):
            n.lineno = n.end_lineno = at.end_lineno
            n.col_offset = n.end_col_offset = 0
        return node

    def binds(stmt) -> bool:
        found = _bound_names(stmt, set())
        return bool(found & names) or "*" in found

    def sets_attribute(stmt) -> bool:   # `Embedder.run = ...`, `app.handler = ...`
        return any(isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)) and
                   _root(n) in names for n in _header_nodes(stmt))

    def fill(body, top=False):
        out, i = [], 0
        if top:   # the docstring and `from __future__` imports stay first
            while i < len(body) and (isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__" or
                                     i == 0 and isinstance(body[i], ast.Expr) and
                                     isinstance(body[i].value, ast.Constant)):
                out.append(body[i])
                i += 1
        for stmt in body[i:]:
            header = False
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                header = binds(stmt)
                for field in _BLOCKS:
                    block = getattr(stmt, field, None)
                    if isinstance(block, list) and block:
                        block = fill(block)
                        if field == "body" and _is_main_guard(stmt):   # names the guard binds may wait
                            block.insert(0, call("_main_settle", stmt, sorted(_block_names(block) & names)))
                        elif field == "body" and header:
                            block.insert(0, call("_main_bound", stmt))
                        setattr(stmt, field, block)
                for h in getattr(stmt, "handlers", ()):
                    h.body = fill(h.body)
                for c in getattr(stmt, "cases", ()):
                    c.body = fill(c.body)
                    if header:
                        c.body.insert(0, call("_main_bound", stmt))
            out.append(stmt)
            if header or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and binds(stmt):
                out.append(call("_main_bound", stmt))
            elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sets_attribute(stmt):
                out.append(call("_main_bound", stmt, True))
        return out

    tree.body = fill(tree.body, top=True)
    if tree.body:
        tree.body.append(call("_main_settle", tree.body[-1]))
    return compile(tree, filename, "exec", dont_inherit=True)


def _main_bound(key: int, g: dict, recheck: bool = False) -> None:
    """Called by the main module's code after a statement that can bind a target's first name:
    wrap each target whose first name is bound to another object than before, or that did not
    resolve yet; with `recheck` (after an attribute was set below a target's first name), every
    target (one already wrapped costs a lookup)."""
    for t in _main_runs.get(key, ()):
        value = g.get(t.first, _MISSING)
        if value is not t.seen or t.failure is not None or recheck:
            t.update(g, value)


def _main_settle(key: int, g: dict, later: tuple = ()) -> None:
    """At the main guard and at the end of the main module: catch up on bindings no hook saw
    (`globals()[...] =`, a function's `global`), then report each target whose name is bound to
    something it does not resolve in, except names in `later` (which the guard binds itself)."""
    _main_bound(key, g, True)
    for t in _main_runs.get(key, ()):
        if t.failure is not None and t.first not in later and t.b.where in t.state.pending:
            failure, t.failure = t.failure, None
            t.state.report(t.b, failure)


def guard_definitions(source: str, filename: str, names: set):
    """The code of the `def`/`class` statements (with their decorators) in the main guard of
    `source` that bind one of `names`, for `inject --check` to run them beside the module's
    top level; None when the guard defines none of them."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    found = []

    def walk(body):
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if stmt.name in names:
                    found.append(stmt)
                continue
            for field in _BLOCKS:
                walk(getattr(stmt, field, None) or ())
            for h in getattr(stmt, "handlers", ()):
                walk(h.body)

    for stmt in tree.body:
        if _is_main_guard(stmt):
            walk(stmt.body)
    if not found:
        return None
    return compile(ast.Module(body=found, type_ignores=[]), filename, "exec", dont_inherit=True)


def _source(filename: str):
    try:
        import io
        with io.open_code(filename) as fh:
            return fh.read()
    except OSError:
        return None


class _RunFile:
    """Audit hook: at `cpython.run_file`, run the script with its targets wrapped, then end
    the process with its exit status (SystemExit, which the interpreter honours there). An
    uncaught KeyboardInterrupt ends it as the interpreter would: traceback, exit handlers, then
    death by SIGINT (`exit_by_signal`, called by the last exit handler), so that the parent
    sees the signal (-2, a shell's 130), not a plain exit status."""

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
            if isinstance(exc, KeyboardInterrupt):
                global _interrupted
                _interrupted = True
                raise SystemExit(128 + 2) from None   # if exit_by_signal is never reached
            raise SystemExit(1) from None
        raise SystemExit(0)


def exit_by_signal() -> None:
    """At exit, after the other exit handlers: when the script ended by an uncaught
    KeyboardInterrupt, die of SIGINT, as CPython does (its SIG_DFL, then kill)."""
    if not _interrupted:
        return
    import gc
    import io
    import signal
    # the interpreter's finalization, which the signal cuts short, would flush every file left open
    for f in [sys.stdout, sys.stderr, *(o for o in gc.get_objects() if isinstance(o, io.IOBase))]:
        try:
            if not f.closed:
                f.flush()
        except Exception:
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


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
