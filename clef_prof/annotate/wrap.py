"""Resolving one stage-spec target in an imported module and building its NVTX wrapper
(`clef_prof.annotate.api`: `stage` for a stage target, `batch` with the size read from the call
for the batch target). Standard library only: it runs in every profiled process."""
from __future__ import annotations

import functools
import inspect
import os
import sys
import types

from ..base.errors import SpecError

MARK = "__clef_prof__"                 # attribute set on every wrapper: (role, range name)

_TRUE = ("1", "true", "yes", "on")


class TargetError(SpecError):
    """A spec target that cannot be resolved or wrapped: one line naming the spec, the key and
    the target."""

    def __init__(self, spec_path: str, where: str, target: str, problem: str):
        self.spec_path, self.where, self.target, self.problem = spec_path, where, target, problem
        super().__init__(f"spec {spec_path} {where}: {target}: {problem}")


def flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not break the server
        pass


_MISSING = object()
_C_CALLABLES = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                types.ClassMethodDescriptorType, types.MethodWrapperType)


def _unwrap_kind(raw):
    """(kind, callable to wrap) of a raw attribute, or raise a TargetError-worthy ValueError."""
    if isinstance(raw, staticmethod):
        return "staticmethod", raw.__func__
    if isinstance(raw, classmethod):
        return "classmethod", raw.__func__
    if inspect.isfunction(raw):
        return "function", raw
    if isinstance(raw, property):
        if raw.fget is None:
            raise ValueError("is a property without a getter")
        return "property", raw.fget
    if isinstance(raw, functools.cached_property):
        return "cached_property", raw.func
    if isinstance(raw, type):
        raise ValueError("is a class; a wrapper would replace it by a function (isinstance and subclasses "
                         "would break): name the method to time (Class.__init__, Class.__call__)")
    if not callable(raw):
        raise ValueError(f"is not callable (a {type(raw).__name__})")
    if isinstance(raw, _C_CALLABLES):
        raise ValueError(f"is implemented in C (a {type(raw).__name__}): C code and names bound before "
                         f"never call a wrapper; name the Python function that calls it")
    return "callable", raw


def _flavour(obj) -> str:
    """sync, async (a coroutine function), generator or asyncgen: what calling `obj` gives,
    looking through bound methods, partials, `__wrapped__` (lru_cache) and `__call__`."""
    for _ in range(16):
        if inspect.isasyncgenfunction(obj):
            return "asyncgen"
        if inspect.isgeneratorfunction(obj):
            return "generator"
        if inspect.iscoroutinefunction(obj):
            return "async"
        if inspect.isfunction(obj):
            return "sync"
        if inspect.ismethod(obj):
            obj = obj.__func__
        elif isinstance(obj, functools.partial):
            obj = obj.func
        elif getattr(obj, "__wrapped__", None) is not None:
            obj = obj.__wrapped__
        elif inspect.isfunction(getattr(type(obj), "__call__", None)):
            obj = type(obj).__call__
        else:
            return "sync"
    return "sync"


class _Passthrough:
    """The wrapper set in place of a callable that is not a plain function (an `lru_cache`
    function, a callable instance, a `partial`, a bound method): a call goes through `call`,
    the range; every other attribute is the wrapped object's (`cache_info`, `cache_clear`, its
    own attributes and methods, `isinstance`), so the code that uses them keeps working."""

    __slots__ = ("__wrapped__", "_clef_make", "__clef_prof__", "__weakref__")

    def __new__(cls, wrapped, make):
        # a class of its own whose __call__ is the ranged function: a call costs no extra frame
        own = type(cls.__name__, (cls,), {"__slots__": (), "__call__": staticmethod(make(wrapped)),
                                          "__doc__": _FORWARDED["__doc__"], "__module__": _FORWARDED["__module__"]})
        self = object.__new__(own)
        object.__setattr__(self, "__wrapped__", wrapped)
        object.__setattr__(self, "_clef_make", make)
        return self

    def __getattr__(self, name):
        return getattr(self.__wrapped__, name)

    def __setattr__(self, name, value):
        if name == MARK:
            object.__setattr__(self, name, value)
        else:
            setattr(self.__wrapped__, name, value)

    def __delattr__(self, name):
        delattr(self.__wrapped__, name)

    def __dir__(self):
        return dir(self.__wrapped__)

    def __repr__(self):
        return repr(self.__wrapped__)

    def __reduce_ex__(self, protocol):
        return self.__wrapped__.__reduce_ex__(protocol)

    __class__ = property(lambda self: type(self.__wrapped__))


# class attributes that every class sets for itself, so that a lookup never reaches __getattr__
_FORWARDED = {name: property(lambda self, name=name: getattr(self.__wrapped__, name))
              for name in ("__doc__", "__module__")}


class _BindingPassthrough(_Passthrough):
    """A _Passthrough of a callable that binds like a method (an `lru_cache` function in a
    class): bound the way the wrapped object binds, the range kept."""

    __slots__ = ()

    def __get__(self, obj, objtype=None):
        wrapped = self.__wrapped__
        bound = type(wrapped).__get__(wrapped, obj, objtype)
        if bound is wrapped:
            return self
        if isinstance(bound, types.MethodType) and bound.__func__ is wrapped:
            return types.MethodType(self, bound.__self__)
        return _Passthrough(bound, self._clef_make)


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

    # a torch profiler is looked up (as clef_prof.batch does) only once torch is imported
    torch_mod, modules = ann._TORCH_PROF, sys.modules

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def run_batch_async(*args, **kwargs):
            if not (nc.enabled() or (torch_mod in modules and ann.torch_refresh())):
                return await func(*args, **kwargs)
            n, ids = measure(args, kwargs)
            async with ann.batch(n, ids, name=name, domain=domain):
                return await func(*args, **kwargs)
        return run_batch_async

    @functools.wraps(func)
    def run_batch(*args, **kwargs):
        if not (nc.enabled() or (torch_mod in modules and ann.torch_refresh())):
            return func(*args, **kwargs)
        n, ids = measure(args, kwargs)
        with ann.batch(n, ids, name=name, domain=domain):
            return func(*args, **kwargs)
    return run_batch


def _request_id(getter: "_ArgGetter", header: str | None, fallback: "_ArgGetter | None" = None):
    """A reader of the request id from a call: the value at `getter`'s path, or the header `header`
    of the object there (a mapping `.headers`, as aiohttp, Starlette and http.server requests have),
    else (no such header) the value at `fallback`'s path. None when it cannot be read, and for a
    list, tuple, set or dict (several ids: no one request range can carry them)."""
    def one(get, hdr, args, kwargs):
        try:
            v = get(args, kwargs)
            if v is _MISSING or v is None:
                return None
            if hdr is not None:
                v = v.headers.get(hdr)
            return None if v is None or isinstance(v, (list, tuple, set, dict)) else str(v)
        except Exception:
            return None

    def read(args, kwargs):
        v = one(getter, header, args, kwargs)
        return v if v is not None or fallback is None else one(fallback, None, args, kwargs)
    return read


def _make_request_wrapper(func, role: str, domain: str, read):
    """The request range around a handler (role "request"), or the enqueue mark before a call
    (role "enqueue"); with no profiler attached (NVTX, or a torch profiler seen at the last batch
    range), or no id, only the call."""
    from . import api as ann
    from . import nvtx_client as nc

    if role == "enqueue":
        def mark(args, kwargs):
            rid = read(args, kwargs)
            if rid is not None:
                ann.enqueued(rid, domain)
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def enqueue_async(*args, **kwargs):
                if nc.enabled() or ann._TORCH_ON:
                    mark(args, kwargs)
                return await func(*args, **kwargs)
            return enqueue_async

        @functools.wraps(func)
        def enqueue(*args, **kwargs):
            if nc.enabled() or ann._TORCH_ON:
                mark(args, kwargs)
            return func(*args, **kwargs)
        return enqueue

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def request_async(*args, **kwargs):
            rid = read(args, kwargs) if nc.enabled() or ann._TORCH_ON else None
            if rid is None:
                return await func(*args, **kwargs)
            async with ann.request(rid, domain=domain):
                return await func(*args, **kwargs)
        return request_async

    @functools.wraps(func)
    def request(*args, **kwargs):
        rid = read(args, kwargs) if nc.enabled() or ann._TORCH_ON else None
        if rid is None:
            return func(*args, **kwargs)
        with ann.request(rid, domain=domain):
            return func(*args, **kwargs)
    return request


class Prepared:
    """A resolved target and the wrapper to set: `apply()` sets it, `undo()` puts the original
    attribute back (when the wrapper is still there)."""

    def __init__(self, binding, owner, attr: str, kind: str, raw, new, flavour: str = "sync"):
        self.binding, self.owner, self.attr, self.kind = binding, owner, attr, kind
        self.raw, self.new = raw, new
        self.flavour = flavour          # "sync" or "async" (a coroutine function)

    def apply(self) -> None:
        setattr(self.owner, self.attr, self.new)

    def undo(self) -> None:
        try:
            if inspect.getattr_static(self.owner, self.attr, None) is self.new:
                setattr(self.owner, self.attr, self.raw)
        except (AttributeError, TypeError):
            pass


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


def _forwarded_to(owner, attr: str, func):
    """For a method that only forwards (`def m(self, *args, **kwargs): ... super().m(*args,
    **kwargs)`, vLLM's ServingScores.__call__), the first method of that name up its class's MRO
    that names its parameters: the signature its arguments are read by. `func` itself otherwise."""
    def names_them(f) -> bool | None:
        """Whether `f` takes no *args; None without a signature."""
        try:
            return not any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(f).parameters.values())
        except (TypeError, ValueError):
            return None

    if not isinstance(owner, type) or names_them(func) is not False:
        return func
    return next((f for base in owner.__mro__[1:]
                 if inspect.isfunction(f := base.__dict__.get(attr)) and names_them(f)), func)


def _ranged(binding, spec, func, flavour: str, signature=None):
    """The function that runs a call of `func` inside the binding's range; its arguments are
    read by `signature`'s parameters (default: func's own)."""
    from . import api as ann
    callee = signature or func      # its signature places the target's arguments
    if not inspect.isfunction(func) and flavour == "async":
        inner = func

        async def func(*args, **kwargs):
            return await inner(*args, **kwargs)
    if binding.role in ("request", "enqueue"):
        path = binding.header_arg if binding.id_header else binding.id_arg
        fallback = _ArgGetter(callee, binding.id_arg) if binding.id_header and binding.id_arg else None
        return _make_request_wrapper(func, binding.role, spec.domain,
                                     _request_id(_ArgGetter(callee, path), binding.id_header, fallback))
    if binding.role == "batch":
        size = _ArgGetter(callee, binding.size_arg) if binding.size_arg else None
        rids = _ArgGetter(callee, binding.request_ids_arg) if binding.request_ids_arg else None
        return _make_batch_wrapper(func, binding.name, spec.domain, size, rids)
    return ann.stage(binding.name, spec.domain)(func)


def prepare(binding, spec, module) -> Prepared | None:
    """Resolve `binding` in the imported `module` and build its wrapper (not yet set).

    A plain function gets a function (functools.wraps: name, docstring, `__dict__`,
    `__wrapped__`); any other callable a _Passthrough that keeps all its attributes; a
    staticmethod, classmethod, property or cached_property stays one, around the wrapped
    callable. None when the target is already wrapped. Raises TargetError with one line
    naming it.
    """
    t = binding.target
    try:
        owner, attr, raw = _resolve_attr(module, t.qualname)
        kind, func = _unwrap_kind(raw)
        if getattr(func, MARK, None) is not None:
            return None
        flavour = _flavour(func)
        if flavour in ("generator", "asyncgen"):
            raise ValueError(f"is a{'n async' if flavour == 'asyncgen' else ''} generator function; a range "
                             f"around it would only cover creating the generator (annotate its body "
                             f"with clef_prof.stage instead)")
        if inspect.isfunction(func):
            wrapper = _ranged(binding, spec, func, flavour, _forwarded_to(owner, attr, func))
        else:
            cls = _BindingPassthrough if hasattr(type(func), "__get__") else _Passthrough
            wrapper = cls(func, lambda f: _ranged(binding, spec, f, flavour))
    except ValueError as exc:
        raise TargetError(spec.path, binding.where, str(t), str(exc)) from None
    setattr(wrapper, MARK, (binding.role, binding.name))
    if kind == "staticmethod":
        new = staticmethod(wrapper)
    elif kind == "classmethod":
        new = classmethod(wrapper)
    elif kind == "property":
        new = raw.getter(wrapper)
    elif kind == "cached_property":
        new = type(raw)(wrapper)
        new.__set_name__(owner, raw.attrname or attr)
    else:
        new = wrapper
    if kind == "function" and isinstance(owner, type):
        kind = "method"
    return Prepared(binding, owner, attr, kind, raw, new, "async" if flavour == "async" else "sync")
