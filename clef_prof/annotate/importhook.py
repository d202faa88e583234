"""The post-import hook, and installing a stage spec with it: `install(spec)` puts a finder at
the front of `sys.meta_path` that answers only for the modules a spec names (and their parent
packages). When one is imported, its loader runs the module's code, then the wrappers are set
on the module or the class, before the importer gets the module back, so `from pkg.server
import parse_schema` elsewhere binds the wrapped function. Targets already imported are
wrapped at once. Standard library only: it runs in every profiled process."""
from __future__ import annotations

import inspect
import sys
import threading

from . import mainhook, registry
from .registry import ENV_VERBOSE
from .wrap import TargetError, flag

_lock = registry.lock
_hooks: dict[str, list] = {}          # module name -> callbacks(module), run after it is imported
_busy = threading.local()
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
        entries = mainhook.main_bindings(fullname, get_filename(fullname) if get_filename else None)
        get_source = getattr(loader, "get_source", None)
        source = get_source(fullname) if entries and get_source else None
        code = mainhook.main_code(source, get_filename(fullname), entries) if source is not None else None
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
        return "<clef_prof.annotate.importhook post-import finder>"


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


def hook_module(name: str) -> None:
    """Have the finder answer for module `name`, with no callback (so that runpy gets its
    code through the finder's loader)."""
    with _lock:
        _hooks.setdefault(name, [])




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
        verbose = flag(ENV_VERBOSE)
    state = registry.register(spec, on_error, verbose)
    if state is None:
        return
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

