"""Load a stage spec's NVTX wrappers into every Python process of a command, without touching
its source.

    clef-prof inject --spec annotations/X.toml -- python -m server ...
    eval "$(clef-prof inject --spec annotations/X.toml --print-env)"; nsys profile ... server
    clef-prof inject --spec annotations/X.toml --emit-nsys-json X.json   # nsys's own route

How it reaches every process: the environment carries the spec (`CLEF_PROF_SPEC`) and puts
`clef_prof/annotate/_startup/` first on `PYTHONPATH`; that directory holds a `sitecustomize.py`,
which every Python interpreter imports at start-up (the process itself, multiprocessing
`spawn` and `forkserver` workers, Python subprocesses; forked children inherit the hooks).
It first runs the `sitecustomize` it shadows, if any, then calls `bootstrap()` here.

Targets are wrapped lazily: `install()` puts a finder at the front of `sys.meta_path` that
only answers for the modules a spec names (and their parent packages). When one is
imported, its loader runs the module's code, then the wrappers are set on the module or the
class, before the importer gets the module back, so `from pkg.server import parse_schema`
elsewhere binds the wrapped function. Targets already imported are wrapped at once. Targets
in the main module are wrapped as their definitions run (see "targets in the main module").

Ranges are emitted through `clef_prof.annotate.api` (the ctypes NVTX client): a stage target is
wrapped by `annotate.stage(name, domain)` (push/pop; start/end for coroutines), the batch
target by `annotate.batch(n=len(<size_arg>), name=..., domain=...)` (`pooler n=K`, payload
K), so `clef-prof analyze --spec X` reads the capture with no extra option.

Unresolvable targets (a missing attribute, a module missing from a package that was
imported, something not callable or not wrappable) print one line on stderr and end the
process with exit code 1; with `CLEF_PROF_LENIENT=1` (`--lenient`) they print a warning and
are skipped. A target whose module is never imported in a process is not an error there:
a server's API process and its workers import different modules; at exit, each process
prints one line per target it never wrapped. `clef-prof inject` imports every target up
front, in the command's interpreter and as the command will run them, before launching.

This module is standard library only: it runs in every profiled process.
"""
from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import re
import shlex
import sys
import threading
import types

from ..errors import SpecError

ENV_SPEC = "CLEF_PROF_SPEC"            # absolute path of the stage spec TOML
ENV_LENIENT = "CLEF_PROF_LENIENT"      # 1: warn and skip unresolvable targets
ENV_PKG = "CLEF_PROF_PKG"              # the clef_prof package directory the hook loads
ENV_VERBOSE = "CLEF_PROF_VERBOSE"      # 1: one stderr line per installed wrapper
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the clef_prof package
STARTUP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_startup")
EXIT_UNRESOLVED = 1
MARK = "__clef_prof__"                 # attribute set on every wrapper: (role, range name)

_TRUE = ("1", "true", "yes", "on")


class TargetError(SpecError):
    """A spec target that cannot be resolved or wrapped: one line naming the spec, the key and
    the target."""

    def __init__(self, spec_path: str, where: str, target: str, problem: str):
        self.spec_path, self.where, self.target, self.problem = spec_path, where, target, problem
        super().__init__(f"spec {spec_path} {where}: {target}: {problem}")

    def short(self) -> str:
        return f"{self.where} {self.target}: {self.problem}"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not break the server
        pass


# --------------------------------------------------------------------------------------------
# resolving and wrapping one target

_MISSING = object()
_C_CALLABLES = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                types.ClassMethodDescriptorType, types.MethodWrapperType)


def _unwrap_kind(raw, owner_is_class: bool):
    """(kind, function to wrap) of a raw attribute, or raise TargetError-worthy ValueError."""
    if isinstance(raw, staticmethod):
        return "staticmethod", raw.__func__
    if isinstance(raw, classmethod):
        return "classmethod", raw.__func__
    if inspect.isfunction(raw):
        return ("method" if owner_is_class else "function"), raw
    if isinstance(raw, property):
        raise ValueError("is a property, not a callable")
    if not callable(raw):
        raise ValueError(f"is not callable (a {type(raw).__name__})")
    if isinstance(raw, _C_CALLABLES):
        raise ValueError(f"is implemented in C (a {type(raw).__name__}): C code and names bound before "
                         f"never call a wrapper; name the Python function that calls it")
    if owner_is_class and hasattr(raw, "__get__") and not inspect.isbuiltin(raw) and not isinstance(raw, type):
        raise ValueError(f"is a {type(raw).__name__} descriptor; inject wraps functions, methods, "
                         f"classmethods, staticmethods and coroutines")
    return "callable", raw


def _async_kind(func) -> str:
    if inspect.isasyncgenfunction(func):
        return "asyncgen"
    if inspect.isgeneratorfunction(func):
        return "generator"
    if inspect.iscoroutinefunction(func):
        return "async"
    return "sync"


class _ArgGetter:
    """Reads `name.attr.attr` from a call's arguments, as bound by the target's signature."""

    __slots__ = ("path", "root", "attrs", "index", "default")

    def __init__(self, func, path: str):
        self.path = path
        self.root, *attrs = path.split(".")
        self.attrs = tuple(attrs)
        self.index = None
        self.default = _MISSING
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            return  # no signature (a builtin): keyword lookup only
        params = list(sig.parameters.values())
        for i, p in enumerate(params):
            if p.name == self.root and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    self.index = i
                if p.default is not p.empty:
                    self.default = p.default
                return
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            names = ", ".join(p.name for p in params) or "none"
            raise ValueError(f"has no parameter {self.root!r} (parameters: {names})")

    def __call__(self, args, kwargs):
        if self.index is not None and self.index < len(args):
            v = args[self.index]
        elif self.root in kwargs:
            v = kwargs[self.root]
        elif self.default is not _MISSING:
            v = self.default
        else:
            return _MISSING
        for a in self.attrs:
            v = getattr(v, a)
        return v


def _batch_size(value):
    if value is _MISSING or value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return len(value)


def _make_batch_wrapper(func, name: str, domain: str, size: _ArgGetter | None, rids: _ArgGetter | None):
    from . import api as ann
    from . import nvtx_client as nc

    def measure(args, kwargs):
        n = ids = None
        if size is not None:
            try:
                n = _batch_size(size(args, kwargs))
            except Exception:
                n = None
        if rids is not None:
            try:
                v = rids(args, kwargs)
                ids = None if v is _MISSING or v is None else list(v)
            except Exception:
                ids = None
        return n, ids

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def run_batch_async(*args, **kwargs):
            if not nc.enabled():
                return await func(*args, **kwargs)
            n, ids = measure(args, kwargs)
            async with ann.batch(n, ids, name=name, domain=domain):
                return await func(*args, **kwargs)
        return run_batch_async

    @functools.wraps(func)
    def run_batch(*args, **kwargs):
        if not nc.enabled():
            return func(*args, **kwargs)
        n, ids = measure(args, kwargs)
        with ann.batch(n, ids, name=name, domain=domain):
            return func(*args, **kwargs)
    return run_batch


class Prepared:
    """A resolved target and the wrapper to set: `apply()` sets it."""

    def __init__(self, binding, owner, attr: str, kind: str, new, flavour: str = "sync"):
        self.binding, self.owner, self.attr, self.kind, self.new = binding, owner, attr, kind, new
        self.flavour = flavour          # "sync" or "async" (a coroutine function)

    def apply(self) -> None:
        setattr(self.owner, self.attr, self.new)


def _resolve_attr(module, qualname: str):
    """(owner, attr, raw attribute) of `qualname` below `module`; raises ValueError."""
    parts = qualname.split(".")
    owner = module
    for i, p in enumerate(parts[:-1]):
        try:
            owner = getattr(owner, p)
        except AttributeError:
            where = ".".join([module.__name__, *parts[:i]])
            raise ValueError(f"{where} has no attribute {p!r}") from None
    name = parts[-1]
    try:
        raw = inspect.getattr_static(owner, name)
    except AttributeError:
        try:  # a module-level __getattr__ (PEP 562) or a dynamic attribute
            raw = getattr(owner, name)
        except AttributeError:
            where = ".".join([module.__name__, *parts[:-1]])
            raise ValueError(f"{where} has no attribute {name!r}") from None
    return owner, name, raw


def prepare(binding, spec, module) -> Prepared | None:
    """Resolve `binding` in the imported `module` and build its wrapper (not yet set).

    None when the target is already wrapped. Raises TargetError with one line naming it.
    """
    t = binding.target
    try:
        owner, attr, raw = _resolve_attr(module, t.qualname)
        owner_is_class = isinstance(owner, type)
        kind, func = _unwrap_kind(raw, owner_is_class)
        if getattr(func, MARK, None) is not None:
            return None
        flavour = _async_kind(func)
        if flavour in ("generator", "asyncgen"):
            raise ValueError(f"is a{'n async' if flavour == 'asyncgen' else ''} generator function; a range "
                             f"around it would only cover creating the generator (annotate its body "
                             f"with clef_prof.stage instead)")
        if binding.role == "batch":
            size = _ArgGetter(func, binding.size_arg) if binding.size_arg else None
            rids = _ArgGetter(func, binding.request_ids_arg) if binding.request_ids_arg else None
            wrapper = _make_batch_wrapper(func, binding.name, spec.domain, size, rids)
        else:
            from . import api as ann
            wrapper = ann.stage(binding.name, spec.domain)(func)
    except ValueError as exc:
        raise TargetError(spec.path, binding.where, str(t), str(exc)) from None
    setattr(wrapper, MARK, (binding.role, binding.name))
    if kind == "staticmethod" or (kind == "callable" and owner_is_class):
        new = staticmethod(wrapper)
    elif kind == "classmethod":
        new = classmethod(wrapper)
    else:
        new = wrapper
    return Prepared(binding, owner, attr, kind, new, flavour)


# --------------------------------------------------------------------------------------------
# the post-import hook

_lock = threading.RLock()
_hooks: dict[str, list] = {}          # module name -> callbacks(module), run after it is imported
_busy = threading.local()
_installed: dict[str, object] = {}     # spec path -> Spec, specs installed in this process
_states: dict[str, "_State"] = {}      # spec path -> its _State
_finder = None


class _HookLoader:
    """Wraps a module's loader: runs the module, then the hooks registered for it."""

    def __init__(self, loader, name: str):
        self._clef_loader = loader
        self._clef_name = name

    def __getattr__(self, attr):
        if attr.startswith("_clef_"):
            raise AttributeError(attr)
        return getattr(self._clef_loader, attr)

    def create_module(self, spec):
        create = getattr(self._clef_loader, "create_module", None)
        return create(spec) if create is not None else None

    def get_code(self, fullname):
        """The module's code; for a main module with targets (`runpy` runs `-m` and workers
        through this), compiled to wrap them as their definitions run."""
        loader = self._clef_loader
        get_filename = getattr(loader, "get_filename", None)
        entries = _main_bindings(fullname, get_filename(fullname) if get_filename else None)
        get_source = getattr(loader, "get_source", None)
        source = get_source(fullname) if entries and get_source else None
        code = main_code(source, get_filename(fullname), entries) if source is not None else None
        return code if code is not None else loader.get_code(fullname)

    def exec_module(self, module):
        loader = self._clef_loader
        loader.exec_module(module)
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = loader
        name = getattr(module, "__name__", self._clef_name)
        _run_hooks(name, sys.modules.get(name, module))


class _Finder:
    """A meta path finder that answers only for hooked modules, wrapping their loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _hooks:
            return None
        busy = getattr(_busy, "names", None)
        if busy is None:
            busy = _busy.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = _find_elsewhere(fullname, path, target, self)
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        if not isinstance(spec.loader, _HookLoader):
            spec.loader = _HookLoader(spec.loader, fullname)
        return spec

    def invalidate_caches(self):
        pass

    def __repr__(self):
        return "<clef_prof.annotate.inject post-import finder>"


def _find_elsewhere(fullname, path, target=None, skip=None):
    for f in list(sys.meta_path):
        if f is skip or isinstance(f, _Finder):
            continue
        fs = getattr(f, "find_spec", None)
        if fs is None:
            continue
        try:
            spec = fs(fullname, path, target)
        except TypeError:
            spec = fs(fullname, path)
        if spec is not None:
            return spec
    return None


def _run_hooks(name: str, module) -> None:
    with _lock:
        hooks = list(_hooks.get(name, ()))
    for h in hooks:
        h(module)


def when_imported(name: str, callback) -> None:
    """Call `callback(module)` once `name` is imported (now, if it already is; and again after
    a re-import)."""
    global _finder
    with _lock:
        _hooks.setdefault(name, []).append(callback)
        if _finder is None or _finder not in sys.meta_path:
            _finder = _Finder()
            sys.meta_path.insert(0, _finder)
    mod = sys.modules.get(name)
    if mod is not None:
        callback(mod)


# --------------------------------------------------------------------------------------------
# installing a spec

def _report(on_error: str, err: SpecError) -> None:
    """Raise `err`, or print it as one line and go on ("warn") or end the process ("exit")."""
    if on_error == "raise":
        raise err
    message = str(err)
    if on_error == "warn":
        _say(f"clef-prof inject: warning: {message}; skipped ({ENV_LENIENT}=1)")
        return
    _say(f"clef-prof inject: error: {message} (set {ENV_LENIENT}=1 to skip unresolvable targets)")
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os._exit(EXIT_UNRESOLVED)


class _State:
    """One installed spec in this process: how to report, and why each target is not wrapped
    yet (None once wrapped; left out once a line about it was printed)."""

    def __init__(self, spec, on_error: str, verbose: bool):
        self.spec, self.on_error, self.verbose = spec, on_error, verbose
        self.pending = {b.where: (f"{b.target.path} was never run" if b.target.path else
                                  f"module {b.target.module} was never imported") for b in spec.bindings()}

    def report(self, b, err: SpecError) -> None:
        self.pending.pop(b.where, None)
        _report(self.on_error, err)

    def wrap(self, b, module) -> None:
        """Wrap binding `b` in `module` (a module, or a main module's namespace)."""
        try:
            p = prepare(b, self.spec, module)
        except TargetError as exc:
            self.report(b, exc)
            return
        if p is not None:
            try:
                p.apply()
            except (AttributeError, TypeError) as exc:
                self.report(b, TargetError(self.spec.path, b.where, str(b.target), f"cannot be replaced: {exc}"))
                return
            if self.verbose:
                _say(f"clef-prof inject[{os.getpid()}]: {b.where} {b.target} ({p.kind}) -> {b.role} range "
                     f"{b.name!r} in domain {self.spec.domain!r}")
        if b.where in self.pending:
            self.pending[b.where] = None


def install(spec, on_error: str = "raise", verbose: bool | None = None) -> None:
    """Wrap `spec`'s targets in this process, now or when their modules are imported, or (in
    the main module) as their definitions run.

    on_error: "raise" (TargetError from the import that found the problem), "warn" (one
    stderr line, target skipped) or "exit" (one stderr line, then exit code 1). Installing
    the same spec twice is a no-op.
    """
    if on_error not in ("raise", "warn", "exit"):
        raise ValueError(f"on_error={on_error!r}")
    if verbose is None:
        verbose = _flag(ENV_VERBOSE)
    key = os.path.abspath(spec.path) if spec.path and not spec.path.startswith("<") else f"{spec.path}#{id(spec)}"
    with _lock:
        if key in _installed:
            return
        _installed[key] = spec
        state = _states[key] = _State(spec, on_error, verbose)
    by_module: dict[str, list] = {}
    for b in spec.bindings():
        if b.target.path is None:
            by_module.setdefault(b.target.module, []).append(b)

    def wrap_all(bindings):
        def hook(module):
            for b in bindings:
                state.wrap(b, module)
        return hook

    # a module missing from a package that *was* imported is a definite error: check each
    # parent package when it is imported
    checks: dict[tuple[str, str], list] = {}
    for mod, bindings in by_module.items():
        parts = mod.split(".")
        for i in range(1, len(parts)):
            checks.setdefault((".".join(parts[:i]), ".".join(parts[:i + 1])), []).extend(bindings)
    for (parent, child), bindings in checks.items():
        when_imported(parent, _child_check(child, bindings, state))
    for mod, bindings in by_module.items():
        when_imported(mod, wrap_all(bindings))


def _child_check(child: str, bindings, state):
    def hook(parent_module):
        if child in sys.modules:
            return
        last = child.rsplit(".", 1)[1]
        if inspect.ismodule(getattr(parent_module, last, None)):
            return
        path = getattr(parent_module, "__path__", None)
        if path is None:
            problem = f"{parent_module.__name__} is a module, not a package"
        else:
            try:
                found = _find_elsewhere(child, list(path)) is not None
            except Exception:
                found = True  # cannot tell: leave it to the import
            if found:
                return
            problem = f"no module named {child!r}"
        b = bindings[0]
        more = f" (and {len(bindings) - 1} more target(s) in it)" if len(bindings) > 1 else ""
        for other in bindings[1:]:
            state.pending.pop(other.where, None)
        state.report(b, TargetError(state.spec.path, b.where, str(b.target), problem + more))
    return hook


# --------------------------------------------------------------------------------------------
# targets in the main module
#
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


class _Namespace:
    """A main module's globals as an object, for prepare() and setattr()."""

    def __init__(self, g: dict):
        self.__dict__ = g


def _matches_main(target, name: str | None, filename: str | None) -> bool:
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


def _main_bindings(name: str | None, filename: str | None) -> list:
    with _lock:
        states = list(_states.values())
    return [(st, b) for st in states for b in st.spec.bindings() if _matches_main(b.target, name, filename)]


def main_code(source, filename: str, entries: list):
    """`source` compiled with a `_main_defined` call after each top-level statement, or None
    when it does not compile (the interpreter then reports it as usual)."""
    import ast
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    with _lock:
        key = len(_main_runs)
        _main_runs[key] = entries
    for st, b in entries:
        if b.where in st.pending:
            st.pending[b.where] = f"{filename} ran, but defined no {b.target.qualname} at its top level"
    call = f"__import__('clef_prof.annotate.inject', None, None, ('_main_defined',))._main_defined({key}, globals())"

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
        entries = _main_bindings(None, filename)
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
        entries = _main_bindings(None, filename) if os.path.isfile(filename) else []
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


def _report_pending() -> None:
    """At exit: one stderr line per target this process never wrapped (and said nothing about)."""
    pid = os.getpid()
    with _lock:
        states = list(_states.values())
    for st in states:
        for b in st.spec.bindings():
            why = st.pending.get(b.where)
            if why:
                _say(f"clef-prof inject[{pid}]: warning: {b.where} {b.target} was never wrapped in this "
                     f"process: {why}")


def bootstrap() -> None:
    """Install the spec named by $CLEF_PROF_SPEC (called by the bootstrap sitecustomize), reach
    the main module's targets, and report the targets never wrapped at exit."""
    path = os.environ.get(ENV_SPEC)
    if not path:
        return
    lenient = _flag(ENV_LENIENT)
    from .spec import load
    try:
        spec = load(path)
    except SpecError as exc:
        _report("warn" if lenient else "exit", exc)
        return
    install(spec, on_error="warn" if lenient else "exit")
    import atexit
    atexit.register(_report_pending)
    launch = python_launch(list(getattr(sys, "orig_argv", ()))[1:])[0]   # Python >= 3.10
    if launch and launch[0] == "module":
        os.environ[ENV_MAIN] = launch[1]
    elif launch and _main_bindings(None, launch[1]):
        sys.addaudithook(_RunFile())
    if os.environ.get(ENV_MAIN):
        _hooks.setdefault(os.environ[ENV_MAIN], [])
    when_imported("runpy", _patch_runpy)


def installed() -> list:
    """The specs installed in this process."""
    with _lock:
        return list(_installed.values())


# --------------------------------------------------------------------------------------------
# the environment form

def environment(spec_path: str, lenient: bool = False, base: dict | None = None,
                verbose: bool = False) -> dict[str, str]:
    """The variables to set so that every Python process started with them installs the spec.

    PYTHONPATH gets the bootstrap directory first and keeps `base`'s entries (os.environ by
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


def env_assignments(spec_path: str, lenient: bool = False, base: dict | None = None,
                    verbose: bool = False) -> list[str]:
    """`NAME=value` words, for `env NAME=value ... server` (as `clef-prof record` builds)."""
    return [f"{k}={v}" for k, v in environment(spec_path, lenient, base, verbose).items()]


def format_env(env: dict[str, str], fmt: str = "sh") -> str:
    if fmt == "json":
        import json
        return json.dumps(env, indent=2) + "\n"
    if fmt == "env":
        return "".join(f"{k}={v}\n" for k, v in env.items())
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


# --------------------------------------------------------------------------------------------
# checking a spec up front, in the command's interpreter

_CHECK_SNIPPET = (
    "import importlib.util,sys\n"
    "p=sys.argv[1]\n"
    "if 'clef_prof' not in sys.modules:\n"
    " s=importlib.util.spec_from_file_location('clef_prof',p+'/__init__.py',submodule_search_locations=[p])\n"
    " m=importlib.util.module_from_spec(s);sys.modules['clef_prof']=m;s.loader.exec_module(m)\n"
    "from clef_prof.annotate.inject import _check_child\n"
    "_check_child(sys.argv[2:])\n")


def _check_child(argv: list[str]) -> None:
    """In a fresh interpreter: import each target of the spec (the command's main script by
    its path), wrap it, and write what fails (and each target's kind) as JSON. The module
    being imported is written to OUT.progress first, so that a hang or a hard exit is named."""
    import json
    spec_path, out_path, path0, main_kind, main_value = argv
    main = (main_kind, main_value) if main_kind else None
    if path0:
        sys.path.insert(0, path0)
    from .spec import load
    errors, warnings, kinds = [], [], {}
    try:
        spec = load(spec_path)
    except SpecError as exc:
        errors.append(str(exc))
        spec = None
    modules = {}

    def load_module(b):
        t = b.target
        script = None
        if t.path is not None:
            if main is not None and main[0] == "module":
                return ("error", f"the command runs -m {main[1]}, not this file: a file target is wrapped "
                                 f"only in the script run by path (and its workers)")
            if main is not None and not _matches_main(t, None, main[1]):
                return "error", f"the command runs {main[1]}, not this file"
            script = t.path
        elif main is not None and main[0] == "script" and _matches_main(t, None, main[1]):
            script = main[1]
        key = script or t.module
        if key in modules:
            return modules[key]
        with open(out_path + ".progress", "w") as fh:
            fh.write(f"{b.where}: {t}: importing {key}")
        try:
            if script is not None:
                if not os.path.isfile(script):
                    raise ModuleNotFoundError(f"no such file {script}", name=None)
                s = importlib.util.spec_from_file_location("__clef_prof_main__", script)
                mod = importlib.util.module_from_spec(s)
                sys.modules[s.name] = mod
                s.loader.exec_module(mod)
                modules[key] = ("ok", mod)
            else:
                modules[key] = ("ok", importlib.import_module(t.module))
        except ModuleNotFoundError as exc:
            if script is None and exc.name and (t.module == exc.name or t.module.startswith(exc.name + ".")):
                modules[key] = ("missing", exc.name)
            else:
                modules[key] = ("soft", f"importing {key} failed: ModuleNotFoundError: {exc}")
        except SystemExit as exc:
            modules[key] = ("soft", f"importing {key} exited (SystemExit: {exc.code})")
        except BaseException as exc:  # noqa: BLE001 - the target's own import trouble
            modules[key] = ("soft", f"importing {key} raised {type(exc).__name__}: {exc}")
        return modules[key]

    for b in (spec.bindings() if spec is not None else ()):
        state, val = load_module(b)
        problem = None
        if state == "missing":
            problem, soft = f"no module named {val!r}", "." not in val
        elif state in ("soft", "error"):
            problem, soft = val, state == "soft"
        else:
            try:
                p = prepare(b, spec, val)
                if p is not None:
                    p.apply()
                kinds[b.where] = ("wrapped" if p is None else
                                  f"async {p.kind}" if p.flavour == "async" else p.kind)
            except TargetError as exc:
                problem, soft = exc.problem, False
            except (AttributeError, TypeError) as exc:
                problem, soft = f"cannot be replaced: {exc}", False
        if problem is not None:
            errors.append({"where": b.where, "target": str(b.target), "problem": problem, "soft": soft})
    runner = None
    if spec is not None and any(b.runner for b in spec.bindings()):
        from . import vllm_runner
        runner = vllm_runner.report([b.runner for b in spec.bindings() if b.runner])
    with open(out_path, "w") as fh:
        json.dump({"errors": errors, "warnings": warnings, "kinds": kinds, "python": sys.executable,
                   "runner": runner}, fh)


def command_python(command: list[str], cwd: str | None = None) -> tuple[str | None, str | None]:
    """(interpreter, sys.path[0]) the command will run with, when it is a Python command:
    `python[3.X] [opts] script.py|-m mod|-c code`, or a script whose shebang names Python."""
    import shutil
    if not command:
        return None, None
    cwd = cwd or os.getcwd()
    exe = shutil.which(command[0]) or command[0]
    if re.fullmatch(r"python[\d.]*", os.path.basename(command[0])):
        main, _ = python_launch(command[1:], cwd)
        return exe, (os.path.dirname(main[1]) if main and main[0] == "script" else cwd)
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None, None
    if first.startswith("#!") and "python" in first:
        words = first[2:].split()
        if words and os.path.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
            if not words:
                return None, None
            return shutil.which(words[0]), None
        if words and "python" in os.path.basename(words[0]):
            return words[0], None
    return None, None


def command_main(command: list[str], cwd: str | None = None) -> tuple[tuple[str, str] | None, str]:
    """The command's main code (`python_launch`), and the options that keep the hook out;
    a Python script run directly (shebang) is its own main script."""
    import shutil
    if not command:
        return None, ""
    if re.fullmatch(r"python[\d.]*", os.path.basename(command[0])):
        return python_launch(command[1:], cwd)
    exe = shutil.which(command[0]) or os.path.join(cwd or os.getcwd(), command[0])
    return ("script", os.path.abspath(exe)), ""


class CheckResult:
    """What importing a spec's targets in a fresh interpreter found: one line per problem."""

    def __init__(self, errors=(), warnings=(), kinds=None, python=None, runner=None):
        self.errors = list(errors)          # SpecError / TargetError
        self.warnings = list(warnings)      # str
        self.kinds = dict(kinds or {})      # binding.where -> function|method|staticmethod|classmethod|...
        self.python = python
        self.runner = runner                # vllm_runner.report() when batch targets name a runner

    def __iter__(self):  # errors, warnings = check_targets(...)
        return iter((self.errors, self.warnings))


def check_targets(spec, python: str | None = None, path0: str | None = None, timeout: float = 120,
                  strict_top_level: bool = True, main: tuple[str, str] | None = None) -> CheckResult:
    """Import every target of `spec` in a fresh `python` (sys.path[0] = path0; `main`, the
    command's main code, loaded as the command will run it) and try to wrap it. A top-level
    package missing, or a module that raises or exits on import, counts as an error only with
    strict_top_level (when `python` is the command's own interpreter); else as a warning. A
    module that hangs (`timeout`) or ends the interpreter is an error."""
    import json
    import subprocess
    import tempfile
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="clef-prof-check-") as tmp:
        out = os.path.join(tmp, "result.json")
        argv = [python, "-c", _CHECK_SNIPPET, PKG_DIR, os.path.abspath(spec.path), out, path0 or "",
                *(main or ("", ""))]
        env = {k: v for k, v in os.environ.items() if k not in (ENV_SPEC, ENV_LENIENT, ENV_MAIN)}

        def progress() -> str:
            try:
                with open(out + ".progress") as fh:
                    return fh.read()
            except OSError:
                return "importing the targets"

        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return CheckResult([SpecError(f"spec {spec.path} {progress()}: did not finish within "
                                          f"{timeout:g} s (--check-timeout)")], python=python)
        except OSError as exc:
            return CheckResult(warnings=[f"cannot run {python} to check the targets: {exc}; not checked"],
                               python=python)
        if not os.path.exists(out):
            tail = (p.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            why = tail[-1] if tail else f"exit code {p.returncode}"
            return CheckResult([SpecError(f"spec {spec.path} {progress()}: ended the checking "
                                          f"interpreter {python} ({why})")], python=python)
        with open(out) as fh:
            res = json.load(fh)
    errors, warnings = [], list(res["warnings"])
    for e in res["errors"]:
        if isinstance(e, str):
            errors.append(SpecError(e))
        elif e["soft"] and not strict_top_level:
            warnings.append(f"spec {spec.path} {e['where']}: {e['target']}: not checked: {e['problem']} "
                            f"in {python}")
        else:
            errors.append(TargetError(spec.path, e["where"], e["target"], e["problem"]))
    return CheckResult(errors, warnings, res.get("kinds"), python, res.get("runner"))


# --------------------------------------------------------------------------------------------
# nsys's own Python annotation JSON

_PALETTE = ("0x1f77b4", "0xff7f0e", "0x2ca02c", "0xd62728", "0x9467bd", "0x8c564b", "0xe377c2",
            "0x7f7f7f", "0xbcbd22", "0x17becf")


# nsys 2023.4 wraps `attrgetter("Class.method")(module)` in a plain function and sets it on the
# class: a classmethod then gets the instance as an extra argument (TypeError) and a staticmethod
# called through an instance gets `self`. Such targets are left out of the JSON.
NSYS_UNSAFE_KINDS = ("classmethod", "staticmethod")


def nsys_annotations(spec, kinds: dict | None = None) -> tuple[list[dict], list[str]]:
    """The spec as nsys's Python-annotation JSON (`--python-nvtx-annotations` in nsys 2023.4,
    `--python-functions-trace` later), and one line per target left out of it.

    One block per target, the range's name (stage or batch) as NVTX category; nsys names each
    range `module.qualname`. `kinds` (from check_targets) marks classmethods and staticmethods,
    which nsys's wrapper breaks: those are left out."""
    blocks, left_out = [], []
    names = [spec.batch_name, *spec.stages]
    for b in spec.bindings():
        kind = (kinds or {}).get(b.where) or ""
        if b.target.path is not None:
            left_out.append(f"{b.where}: {b.target} is a file target: nsys imports modules by name; left out of "
                            f"the JSON")
            continue
        if kind.startswith("async "):
            left_out.append(f"{b.where}: {b.target} is a coroutine function: nsys's range would end when the "
                            f"coroutine is created, before it runs; left out of the JSON")
            continue
        if kind in NSYS_UNSAFE_KINDS:
            why = ("calls through an instance get it as an extra argument (TypeError)" if kind == "classmethod"
                   else "calls through an instance get self as an extra argument")
            left_out.append(f"{b.where}: {b.target} is a {kind}: nsys would replace it by a plain function "
                            f"({why}); left out of the JSON")
            continue
        color = _PALETTE[names.index(b.name) % len(_PALETTE)]
        what = (f"batch range {b.name!r} (nsys cannot carry its size: analyze with --requests)"
                if b.role == "batch" else f"stage {b.name!r}")
        blocks.append({"_comment": f"{b.where}: {what}; generated by clef-prof from {os.path.basename(spec.path)}",
                       "module": b.target.module, "domain": spec.domain, "category": b.name,
                       "color": color, "functions": [b.target.qualname]})
    return blocks, left_out


def nsys_range_names(blocks: list[dict]) -> dict[str, list[str]]:
    """Range name (the block's category) -> the names nsys gives its ranges (`module.qualname`)."""
    out: dict[str, list[str]] = {}
    for blk in blocks:
        for f in blk["functions"]:
            out.setdefault(blk["category"], []).append(f"{blk['module']}.{f}")
    return out


def nsys_analyze_hint(spec, blocks: list[dict], capture: str = "CAPTURE.sqlite") -> str:
    """The analyze command that reads a capture made with the JSON of `blocks`."""
    names = nsys_range_names(blocks)
    stages = [n for s in spec.stages for n in names.get(s, [])]
    parts = ["clef-prof", "analyze", capture, "--domain", spec.domain]
    if spec.batch_name in names:
        parts += ["--batch", names[spec.batch_name][0]]
    parts += ["--stages", ",".join(stages), "--requests", "N"]
    return " ".join(shlex.quote(p) for p in parts)


# --------------------------------------------------------------------------------------------
# command line
