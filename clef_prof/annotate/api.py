"""Annotate a model server's pooler for clef-prof: stage ranges and batch ranges in NVTX.

    import clef_prof

    with clef_prof.batch(n=len(reqs), request_ids=[r.id for r in reqs]):
        with clef_prof.stage("parse"):
            ...
        with clef_prof.stage("index"):
            ...

    @clef_prof.stage("encode")
    def encode(batch): ...

The ranges go through clef_prof.annotate.nvtx_client (the NVTX injection protocol spoken directly), so
every nsys from 2022.4 on records them whatever `nvtx` package is installed. Stages are in
domain "clef" unless told otherwise, their names registered once per domain; a batch range
is `pooler n=K` (ASCII, plus ` rid=a,b,...` when request ids are given) with payload K,
which is what `clef-prof analyze` reads.

`push(name)` / `pop()` are the same ranges for code that cannot use a `with` block.

A request's own range and the moment it joins the batcher's queue (what `clef-prof analyze`
turns into per-request journeys, docs/journey.md)::

    async def handle(req):
        rid = req.headers["X-Request-Id"]
        async with clef_prof.request(rid):
            body = await req.json()
            clef_prof.enqueued(rid)
            ...

    @clef_prof.request(lambda req: req.headers["X-Request-Id"])
    def handle(req): ...

A request range is `request rid=ID` (ASCII); the enqueue point an NVTX mark `enqueued rid=ID`.

With no profiler attached every call returns after one flag check (a decorated function
only forwards the call).

Under a PyTorch profiler the same ranges are also emitted as `record_function` user annotations
(`user_annotation` events of its Kineto trace, which `clef-prof analyze` reads as it reads
NVTX), with the same names and batch message; request ranges too, and an enqueue mark as a
record_function `enqueued rid=ID` opened and closed at once (torch has no instant event in its
Python API; analyze turns it back into a mark at its start): when torch is already imported
(sys.modules is looked at; torch is never imported here) and its profiler is on. Whether it is on is looked up at
each batch range and when a stage is first made (`_torch_refresh`), not at each stage's `with`
or push(), which check one module flag: a profiler started between batches is seen from the next
batch range on (a server with stage ranges and no batch range calls `torch_refresh()` after
starting the profiler).

Sync code (`with`, decorated functions) uses push/pop ranges, which nest per thread.
Coroutines use start/end ranges instead (`async with`, decorated `async def`): several
tasks interleave on one thread, and a push/pop stack would pair one task's pop with
another's push. A start/end range covers the awaited call from its first to its last step,
time spent suspended included. Do not `await` inside a plain `with stage(...)` block.
"""
from __future__ import annotations

import contextvars
import functools
import sys
import threading

from ..base.defaults import DEFAULT_BATCH, DEFAULT_DOMAIN
from . import delay as _delay
from . import nvtx_client as _nc

__all__ = ["stage", "batch", "push", "pop", "request", "Request", "enqueued", "torch_refresh", "DEFAULT_DOMAIN",
           "DEFAULT_BATCH"]

RID_MAX_CHARS = 4000    # request ids beyond this are cut and marked with ",..." (16 UUIDs take 592)
REQUEST = "request"     # a request range: `request rid=ID`
ENQUEUED = "enqueued"   # the mark where a request joins the batcher's queue: `enqueued rid=ID`
_RID_UNSAFE = str.maketrans({c: "_" for c in " \t\n\r\f\v,;)"})

_stages: dict[tuple[str, str], "Stage"] = {}
_names: dict[tuple[str, str], tuple] = {}
# start/end range ids of the `async with` blocks open in the current task, innermost last
_open_ids: contextvars.ContextVar[tuple] = contextvars.ContextVar("clef_prof_open_ranges", default=())

# --- the same ranges under a PyTorch profiler ------------------------------------------------
_TORCH_ON = False       # a torch profiler was on at the last _torch_refresh()
_RF_USED = False        # a record_function was ever opened here: exits look at the thread's stack
_torch_prof = None      # torch.autograd.profiler, once torch is imported (by the server, not here)
_rf_cls = None          # torch.autograd.profiler.record_function: a user_annotation event in the trace
_prof_enabled = None    # torch._C._autograd._profiler_enabled, bound once torch is seen
_rf_local = threading.local()
_rf_task: contextvars.ContextVar[tuple] = contextvars.ContextVar("clef_prof_open_torch_ranges", default=())
_modules = sys.modules
_TORCH_PROF = "torch.autograd.profiler"
# request() and enqueued() do nothing: no NVTX injection and no torch profiler at the last look (set
# by _quiet_now() and _torch_refresh); False until known, so that the first calls look
_QUIET = False


def torch_refresh() -> bool:
    """Look now whether a torch profiler is on (False while torch is not imported)."""
    m = _torch_prof or _modules.get(_TORCH_PROF)
    return m is not None and _torch_refresh(m)


def _torch_refresh(m) -> bool:
    """Whether the torch profiler of module `m` (torch.autograd.profiler) is on; sets _TORCH_ON."""
    global _TORCH_ON, _torch_prof, _rf_cls, _prof_enabled
    if _torch_prof is None:
        _torch_prof = m
        # record_function, not torch._C._profiler._RecordFunctionFast: on torch 2.11 under
        # torch.profiler the fast one's ranges were not in the exported trace (measured on the H200)
        _rf_cls = m.record_function
        try:        # the C++ profiler's own state: set by every torch profiler, whoever started it
            _prof_enabled = _modules["torch"]._C._autograd._profiler_enabled
        except (KeyError, AttributeError):
            _prof_enabled = None
    # _profiler_enabled() reads the calling thread's profiler state: under profile_all_threads=True it
    # is False on every thread (torch 2.11, H200) while record_function is recorded on all of them;
    # torch.autograd.profiler._is_profiler_enabled is set for the process by whichever thread starts it
    _TORCH_ON = bool(getattr(m, "_is_profiler_enabled", False) or (_prof_enabled is not None and _prof_enabled()))
    _quiet_now()
    return _TORCH_ON


def _quiet_now() -> bool:
    """Set _QUIET from the profilers' flags (never while the NVTX client has not looked yet)."""
    global _QUIET
    _QUIET = _nc._state != "fresh" and not _nc._ON and not _TORCH_ON
    return _QUIET


def _rf_open(name: str):
    """An entered torch.autograd.profiler.record_function `name`."""
    rf = _rf_cls(name)
    rf.__enter__()
    return rf


def _rf_enter(name: str) -> None:
    """Open a record_function `name` on this thread (closed by _rf_exit, innermost first)."""
    global _RF_USED
    rf = _rf_open(name)
    _RF_USED = True
    st = getattr(_rf_local, "stack", None)
    if st is None:
        st = _rf_local.stack = []
    st.append((name, rf))


def _rf_exit(name: str) -> None:
    """Close this thread's innermost record_function when it is `name`'s (one opened while the
    profiler was on; a range entered while it was off has nothing to close)."""
    st = getattr(_rf_local, "stack", None)
    if st and st[-1][0] == name:
        st.pop()[1].__exit__(None, None, None)


def _rf_start(name: str) -> None:
    """Open a record_function for the current task (`async with`): kept in a context variable."""
    global _RF_USED
    rf = _rf_open(name)
    _RF_USED = True
    _rf_task.set(_rf_task.get() + ((name, rf),))


def _rf_end(name: str) -> None:
    open_ = _rf_task.get()
    if open_ and open_[-1][0] == name:
        _rf_task.set(open_[:-1])
        open_[-1][1].__exit__(None, None, None)


def _rf_mark(name: str) -> None:
    """A record_function `name` opened and closed at once: a mark in a Kineto trace (an X event
    of about zero duration, whose start is the mark's time)."""
    _rf_open(name).__exit__(None, None, None)


class Stage:
    """A named stage range: a context manager (sync and async) and a decorator.

    One object per (name, domain), shared by all threads: it holds no per-call state.
    """

    __slots__ = ("name", "domain", "_on", "_d", "_h", "_push", "_pop")

    def __init__(self, name: str, domain: str = DEFAULT_DOMAIN):
        self.name = name
        self.domain = domain
        self._d = _nc.Domain(domain)
        self._h = self._d.register(name)
        self._on = _nc.enabled()
        self._push, self._pop = self._d.bind(self._h)
        torch_refresh()

    def __enter__(self):
        if self._on:
            self._push()
        if _TORCH_ON:
            _rf_enter(self.name)
        return self

    def __exit__(self, *exc):
        if self._on:
            self._pop()
        if _RF_USED:
            _rf_exit(self.name)
        return False

    async def __aenter__(self):
        if self._on:
            _open_ids.set(_open_ids.get() + (self._d.start(self._h),))
        if _TORCH_ON:
            _rf_start(self.name)
        return self

    async def __aexit__(self, *exc):
        if self._on:
            ids = _open_ids.get()
            if ids:
                _open_ids.set(ids[:-1])
                self._d.end(ids[-1])
        if _RF_USED:
            _rf_end(self.name)
        return False

    def __call__(self, fn):
        """Decorate `fn` so that each call runs inside this stage. Always a new function
        (functools.wraps); with no profiler attached it only forwards the call."""
        import inspect
        if inspect.iscoroutinefunction(fn):
            d, h, on = self._d, self._h, self._on

            @functools.wraps(fn)
            async def run_async(*args, **kwargs):
                if _TORCH_ON:
                    async with self:
                        return await fn(*args, **kwargs)
                if not on:
                    return await fn(*args, **kwargs)
                rid = d.start(h)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    d.end(rid)
            return run_async

        if not self._on:
            stage_ = self

            @functools.wraps(fn)
            def forward(*args, **kwargs):
                if _TORCH_ON:
                    with stage_:
                        return fn(*args, **kwargs)
                return fn(*args, **kwargs)
            return forward

        push, pop = self._push, self._pop

        @functools.wraps(fn)
        def run(*args, **kwargs):
            if _TORCH_ON:
                with self:
                    return fn(*args, **kwargs)
            push()
            try:
                return fn(*args, **kwargs)
            finally:
                pop()
        return run

    def __repr__(self) -> str:
        return f"stage({self.name!r}, domain={self.domain!r})"


class DelayedStage(Stage):
    """A Stage named in $CLEF_PROF_DELAY (`annotate.delay`): the same range, its own time counted
    and the delay added inside it when each call's work returns (a `with` block's start kept per
    thread, an `async with`'s per task)."""

    __slots__ = ("_timer", "_tl", "_cv")

    def __init__(self, name: str, domain: str, delay):
        super().__init__(name, domain)
        self._timer = _delay.Timer(delay)
        self._tl = threading.local()
        self._cv = contextvars.ContextVar(f"clef_prof_delay_{name}", default=())

    def __enter__(self):
        st = getattr(self._tl, "stack", None)
        if st is None:
            st = self._tl.stack = []
        st.append(self._timer.begin())
        return Stage.__enter__(self)

    def __exit__(self, *exc):
        st = getattr(self._tl, "stack", None)
        if st:
            self._timer.end(st.pop())
        return Stage.__exit__(self, *exc)

    async def __aenter__(self):
        self._cv.set(self._cv.get() + (self._timer.begin(),))
        return await Stage.__aenter__(self)

    async def __aexit__(self, *exc):
        open_ = self._cv.get()
        if open_:
            self._cv.set(open_[:-1])
            self._timer.end(open_[-1])
        return await Stage.__aexit__(self, *exc)

    def __call__(self, fn):
        """The range around `fn` timed and delayed (the delay inside the range, as in a `with`)."""
        import inspect
        begin, end = self._timer.begin, self._timer.end
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def delayed_async(*args, **kwargs):
                t = begin()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    end(t)
            return Stage.__call__(self, delayed_async)

        @functools.wraps(fn)
        def delayed(*args, **kwargs):
            t = begin()
            try:
                return fn(*args, **kwargs)
            finally:
                end(t)
        return Stage.__call__(self, delayed)

    def __repr__(self) -> str:
        return f"stage({self.name!r}, domain={self.domain!r}, delay={self._timer.delay.text()!r})"


def _make_stage(name: str, domain: str) -> Stage:
    """A Stage, or a DelayedStage when $CLEF_PROF_DELAY names `name` (looked up once, here)."""
    if _delay.PLAN:
        _delay.seen(name)
        d = _delay.PLAN.get(name)
        if d is not None:
            return DelayedStage(name, domain, d)
    return Stage(name, domain)


def stage(name: str, domain: str = DEFAULT_DOMAIN) -> Stage:
    """The stage range `name` in `domain` (cached: the same object for the same arguments); a
    DelayedStage when $CLEF_PROF_DELAY names it (annotate.delay)."""
    s = _stages.get((name, domain))
    if s is None:
        s = _stages.setdefault((name, domain), _make_stage(name, domain))
    return s


def rid_text(rid) -> str:
    """A request id as messages carry it: whitespace, `,`, `;` and `)` (which end an id in
    `rid=a,b`) become `_`, the same in request, enqueue and batch messages."""
    return str(rid).translate(_RID_UNSAFE)


def batch_message(name: str = DEFAULT_BATCH, n: int | None = None, request_ids=None) -> str:
    """`pooler n=K rid=a,b,c`: the batch range's text, request ids cut to RID_MAX_CHARS."""
    msg = name if n is None else f"{name} n={int(n)}"
    if request_ids:
        rid = ",".join(rid_text(r) for r in request_ids)
        if len(rid) > RID_MAX_CHARS:
            rid = rid[:RID_MAX_CHARS].rsplit(",", 1)[0] + ",..."
        msg += f" rid={rid}"
    return msg


class batch:
    """The outer batch range: `with clef_prof.batch(n=K, request_ids=ids): ...`.

    Message `pooler n=K` (name= changes `pooler`), ASCII so that its text carries the
    size; int64 payload K. n defaults to len(request_ids). Also usable as `async with`
    (a start/end range) and as a decorator for a fixed-size batch.
    """

    __slots__ = ("name", "n", "request_ids", "domain", "_rid")

    def __init__(self, n: int | None = None, request_ids=None, *, name: str = DEFAULT_BATCH,
                 domain: str = DEFAULT_DOMAIN):
        if n is None and request_ids is not None:
            n = len(request_ids)
        self.n, self.request_ids, self.name, self.domain = n, request_ids, name, domain
        self._rid = 0
        if _nc._state == "fresh":
            _nc.enabled()

    def _args(self):
        return batch_message(self.name, self.n, self.request_ids), (None if self.n is None else int(self.n))

    def __enter__(self):
        if _nc._ON:
            _nc.Domain(self.domain).push(*self._args())
        if (_torch_prof is not None or _TORCH_PROF in _modules) and torch_refresh():
            _rf_enter(self._args()[0])
        return self

    def __exit__(self, *exc):
        if _nc._ON:
            _nc.Domain(self.domain).pop()
        if _RF_USED:
            _rf_exit(self._args()[0])
        return False

    async def __aenter__(self):
        if _nc._ON:
            self._rid = _nc.Domain(self.domain).start(*self._args())
        if (_torch_prof is not None or _TORCH_PROF in _modules) and torch_refresh():
            _rf_start(self._args()[0])
        return self

    async def __aexit__(self, *exc):
        if self._rid:
            _nc.Domain(self.domain).end(self._rid)
            self._rid = 0
        if _RF_USED:
            _rf_end(self._args()[0])
        return False

    def __call__(self, fn):
        import inspect
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args, **kwargs):
                async with batch(self.n, self.request_ids, name=self.name, domain=self.domain):
                    return await fn(*args, **kwargs)
            return run_async

        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return run

    def __repr__(self) -> str:
        return f"batch(n={self.n!r}, name={self.name!r}, domain={self.domain!r})"


def push(name: str, domain: str = DEFAULT_DOMAIN, payload: int | None = None) -> None:
    """Open range `name` (registered once per domain) on this thread; close it with pop()."""
    e = _names.get((name, domain))
    if e is None:
        d = _nc.Domain(domain)
        e = _names.setdefault((name, domain), (d, d.register(name)) if _nc.enabled() else ())
    if e:
        e[0].push(e[1], payload)
    if _TORCH_ON:
        _rf_enter(name)


def pop(domain: str = DEFAULT_DOMAIN) -> None:
    """Close this thread's innermost range of `domain`."""
    if _nc._ON:
        _nc.Domain(domain).pop()
    if _RF_USED:
        st = getattr(_rf_local, "stack", None)
        if st:
            st.pop()[1].__exit__(None, None, None)


class Request:
    """A request's range, `request rid=ID`, from handler entry to exit (made by `request`).

    `with clef_prof.request(rid):` (a push/pop range on this thread) or `async with` (a
    start/end range: tasks interleave on one thread). As a decorator, `rid` is the id or a
    callable that takes the decorated function's arguments and returns the id:
    `@clef_prof.request(lambda req: req.headers["X-Request-Id"])`. With no profiler attached
    the id is not computed and every call returns after one flag check. Under a torch profiler
    the range is also a record_function of the same name (see the module's docstring).
    """

    __slots__ = ("rid", "domain", "_id", "_msg")

    def __init__(self, rid, *, domain: str = DEFAULT_DOMAIN):
        self.rid, self.domain, self._id, self._msg = rid, domain, 0, ""

    def _message(self, args=(), kwargs=None) -> str:
        rid = self.rid(*args, **(kwargs or {})) if callable(self.rid) else self.rid
        return f"{REQUEST} rid={rid_text(rid)}"

    def __enter__(self):
        if _nc._ON or _TORCH_ON:
            m = self._msg = self._message()
            if _nc._ON:
                _nc.Domain(self.domain).push(m)
            if _TORCH_ON:
                _rf_enter(m)
        return self

    def __exit__(self, *exc):
        if _nc._ON:
            _nc.Domain(self.domain).pop()
        if _RF_USED and self._msg:
            _rf_exit(self._msg)
        return False

    async def __aenter__(self):
        if _nc._ON or _TORCH_ON:
            m = self._msg = self._message()
            if _nc._ON:
                self._id = _nc.Domain(self.domain).start(m)
            if _TORCH_ON:
                _rf_start(m)
        return self

    async def __aexit__(self, *exc):
        if self._id:
            _nc.Domain(self.domain).end(self._id)
            self._id = 0
        if _RF_USED and self._msg:
            _rf_end(self._msg)
        return False

    def __call__(self, fn):
        """Decorate `fn`; each call is a request range (NVTX and/or record_function, whichever
        profiler is on at that call), its message made from the call's arguments."""
        import inspect
        msg, domain = self._message, self.domain
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args, **kwargs):
                if _QUIET or not (_nc._ON or _TORCH_ON):
                    return await fn(*args, **kwargs)
                m = msg(args, kwargs)
                rid = _nc.Domain(domain).start(m) if _nc._ON else 0
                rf = _TORCH_ON
                if rf:
                    _rf_start(m)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    if rid:
                        _nc.Domain(domain).end(rid)
                    if rf:
                        _rf_end(m)
            return run_async

        @functools.wraps(fn)
        def run(*args, **kwargs):
            if _QUIET or not (_nc._ON or _TORCH_ON):
                return fn(*args, **kwargs)
            m = msg(args, kwargs)
            on = _nc._ON
            if on:
                _nc.Domain(domain).push(m)
            rf = _TORCH_ON
            if rf:
                _rf_enter(m)
            try:
                return fn(*args, **kwargs)
            finally:
                if on:
                    _nc.Domain(domain).pop()
                if rf:
                    _rf_exit(m)
        return run

    def __repr__(self) -> str:
        return f"request({self.rid!r}, domain={self.domain!r})"


class _NoRequest:
    """What `request` gives with no profiler attached: one shared object whose `with` does nothing
    and whose decorator only forwards the call."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def __call__(self, fn):
        import inspect
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def forward_async(*args, **kwargs):
                return await fn(*args, **kwargs)
            return forward_async

        @functools.wraps(fn)
        def forward(*args, **kwargs):
            return fn(*args, **kwargs)
        return forward


_NO_REQUEST = _NoRequest()


def request(rid, *, domain: str = DEFAULT_DOMAIN):
    """A request's range `request rid=ID` (see `Request`): `with`, `async with` or a decorator whose
    `rid` is a callable of the call's arguments. With no profiler attached, one shared object that
    does nothing (the flag check is the whole cost, and the id is never computed). A callable `rid`
    (the decorator form) always gets a Request, whose calls look at the flags each time: a torch
    profiler started after the decoration is seen (a fixed id used as a decorator while no profiler
    is attached gets the shared object, which only forwards the call)."""
    if _QUIET and not callable(rid):
        return _NO_REQUEST
    if _nc._ON or _TORCH_ON or callable(rid):
        return Request(rid, domain=domain)
    if _nc._state == "fresh":
        _nc.enabled()
    return _NO_REQUEST if _quiet_now() else Request(rid, domain=domain)


def enqueued(rid, domain: str = DEFAULT_DOMAIN) -> None:
    """Mark the moment request `rid` joins the batcher's queue (an NVTX mark `enqueued rid=ID` on
    the calling thread; under a torch profiler a record_function of that name, opened and closed)."""
    if _QUIET:
        return
    if not (_nc._ON or _TORCH_ON):
        if _nc._state == "fresh":
            _nc.enabled()
        if _quiet_now():
            return
    msg = f"{ENQUEUED} rid={rid_text(rid)}"
    if _nc._ON:
        _nc.Domain(domain).mark(msg)
    if _TORCH_ON:
        _rf_mark(msg)
