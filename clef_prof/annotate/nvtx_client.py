"""A pure-ctypes NVTX v3 client: emit NVTX ranges and marks without the `nvtx` package.

Why: Nsight Systems 2022.4 and 2023.4 drop every range emitted by the Python `nvtx`
package >= 0.2.12 (they reject its payload-extension handshake, "compatibility ID 260 !=
259"), while current nsys needs nothing special. Talking the NVTX injection protocol
directly, with only the core API, is understood by every nsys from 2022.4 on, whatever
`nvtx` version (or none) is installed, and needs no compiled code.

How (the load sequence of the NVTX v3 headers, nvtxDetail/nvtxInit.h and nvtxImpl.h):

1. The tool (nsys) sets NVTX_INJECTION64_PATH in the profiled process. The client dlopens
   that library and calls its `InitializeInjectionNvtx2(nvtxGetExportTable)`. When the
   variable is unset, a process-wide `InitializeInjectionNvtx2Preinject` symbol is used
   if one exists (the headers' optional "already injected" path).
2. `nvtxGetExportTable` is a ctypes callback. For NVTX_ETID_CALLBACKS it returns a table
   whose `GetModuleFunctionTable(module)` hands out, per module, an array of pointers to
   function-pointer slots owned by this client; the injection writes its implementations
   into the slots it supports. NVTX_ETID_VERSIONINFO returns the API version (3).
3. The client reads the CORE2 slots (domain create, register string, push/pop, start/end,
   mark) and wraps the non-null ones as ctypes functions. A null slot stays a no-op.

Initialisation runs once, under a lock, when the first Domain is created (or enabled() is
called). With no injection configured, or when loading fails, the module flag `_ON` stays
False and every Domain method returns after that single check: no ctypes call is made.

The injection's functions are called through PYFUNCTYPE prototypes, which keep the GIL
during the (sub-microsecond) call, as the compiled `nvtx` package does. CFUNCTYPE would
release it around each call, and when another Python thread took it meanwhile, the
annotated thread would wait to get it back (up to the 5 ms switch interval) right at a
range boundary, inflating the very spans being measured.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, PYFUNCTYPE, Structure, Union, c_char_p, c_double, c_int,
                    c_int32, c_int64, c_size_t, c_uint, c_uint16, c_uint32, c_uint64, c_void_p)

__all__ = ["enabled", "Domain", "StringHandle", "init_error"]

NVTX_VERSION = 3

# NvtxExportTableID
ETID_CALLBACKS = 1
ETID_VERSIONINFO = 3

# NvtxCallbackModule -> NVTX_CBID_<module>_SIZE (slot 0 is invalid; slots 1..SIZE-1 are API
# functions). Every module the headers know gets a table, as the reference implementation
# does, so that an injection probing all of them finds what it expects.
MODULE_CORE, MODULE_CUDA, MODULE_OPENCL, MODULE_CUDART, MODULE_CORE2, MODULE_SYNC = 1, 2, 3, 4, 5, 6
MODULE_SIZES = {MODULE_CORE: 16, MODULE_CUDA: 9, MODULE_OPENCL: 15, MODULE_CUDART: 7,
                MODULE_CORE2: 16, MODULE_SYNC: 7}

# NvtxCallbackIdCore2
CBID_CORE2_DomainMarkEx = 1
CBID_CORE2_DomainRangeStartEx = 2
CBID_CORE2_DomainRangeEnd = 3
CBID_CORE2_DomainRangePushEx = 4
CBID_CORE2_DomainRangePop = 5
CBID_CORE2_DomainRegisterStringA = 10
CBID_CORE2_DomainCreateA = 12

COLOR_ARGB = 1
PAYLOAD_TYPE_INT64 = 2
MESSAGE_TYPE_ASCII = 1
MESSAGE_TYPE_REGISTERED = 3


class _Payload(Union):
    _fields_ = [("ullValue", c_uint64), ("llValue", c_int64), ("dValue", c_double)]


class _Message(Union):
    _fields_ = [("ascii", c_char_p), ("registered", c_void_p)]


class EventAttributes(Structure):
    """nvtxEventAttributes_v2 (nvToolsExt.h); 48 bytes on LP64."""

    _fields_ = [("version", c_uint16), ("size", c_uint16), ("category", c_uint32),
                ("colorType", c_int32), ("color", c_uint32),
                ("payloadType", c_int32), ("reserved0", c_int32), ("payload", _Payload),
                ("messageType", c_int32), ("message", _Message)]


ATTR_SIZE = ctypes.sizeof(EventAttributes)
assert ATTR_SIZE == 48 and EventAttributes.payload.offset == 24 and EventAttributes.message.offset == 40

_FnTable = POINTER(POINTER(c_void_p))                       # NvtxFunctionTable: array of slot pointers
_GetModuleFunctionTable = CFUNCTYPE(c_int, c_int, POINTER(_FnTable), POINTER(c_uint))
_SetInjectionNvtxVersion = CFUNCTYPE(None, c_uint32)
_GetExportTable = CFUNCTYPE(c_void_p, c_uint32)
_InitializeInjection = CFUNCTYPE(c_int, _GetExportTable)


class _ExportTableCallbacks(Structure):
    _fields_ = [("struct_size", c_size_t), ("GetModuleFunctionTable", _GetModuleFunctionTable)]


class _ExportTableVersionInfo(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("reserved0", c_uint32),
                ("SetInjectionNvtxVersion", _SetInjectionNvtxVersion)]


_P_ATTR = POINTER(EventAttributes)
_PROTOS = {
    CBID_CORE2_DomainCreateA: PYFUNCTYPE(c_void_p, c_char_p),
    CBID_CORE2_DomainRegisterStringA: PYFUNCTYPE(c_void_p, c_void_p, c_char_p),
    CBID_CORE2_DomainRangePushEx: PYFUNCTYPE(c_int, c_void_p, _P_ATTR),
    CBID_CORE2_DomainRangePop: PYFUNCTYPE(c_int, c_void_p),
    CBID_CORE2_DomainMarkEx: PYFUNCTYPE(None, c_void_p, _P_ATTR),
    CBID_CORE2_DomainRangeStartEx: PYFUNCTYPE(c_uint64, c_void_p, _P_ATTR),
    CBID_CORE2_DomainRangeEnd: PYFUNCTYPE(None, c_void_p, c_uint64),
}

_ON = False                 # True once an injection accepted us; the only check on the no-op path
_lock = threading.Lock()
_state = "fresh"            # "done" once _initialize has run (set under _lock)
_error: str | None = None   # why the client is off, when a load was attempted and failed
_keep: list[object] = []    # ctypes objects the injection holds pointers to: never freed
_domains: dict[str, "Domain"] = {}

# The injection's functions once loaded; a slot the injection left null stays a Python no-op.
_create = _register = _start = None
_push = _pop = _mark = _end = None


def _noop() -> None:
    return None


def _load_injection():
    """The injection's init function and a label, or (None, reason)."""
    path = os.environ.get("NVTX_INJECTION64_PATH")
    if path:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            return None, f"cannot load NVTX_INJECTION64_PATH={path}: {e}"
        try:
            return _InitializeInjection(("InitializeInjectionNvtx2", lib)), path
        except AttributeError:
            return None, f"{path} has no InitializeInjectionNvtx2"
    try:
        return _InitializeInjection(("InitializeInjectionNvtx2Preinject", ctypes.CDLL(None))), "preinjected"
    except (AttributeError, OSError):
        return None, None


def _after_fork_in_child() -> None:
    """A new lock (a fork while another thread held it would leave it held forever), then every
    domain created and every string registered again, in the parent's order, their handles
    updated in place.

    Why: a tool that traces a forked child (nsys with --trace-fork-before-exec, as record runs
    it) starts the child's domains and registered strings afresh. A handle the parent got names
    nothing in the child (its domain has no create event there, so its ranges belong to no
    domain) or, once the child registers strings of its own, another string (a stage named as a
    sampler frame). The objects callers hold (a Stage's bound push, a StringHandle) keep working:
    their handles are the same ctypes objects, with new values. Strings registered with
    `replay=False` (the sampler's, stamped with the parent's pid) are dropped instead."""
    global _lock
    _lock = threading.Lock()
    if not _ON:
        return
    for d in list(_domains.values()):
        d._handle.value = (_create(d.name.encode()) or None) if _create and d.name else None
        d._strings = {t: h for t, h in d._strings.items() if h.replay}
        for h in d._strings.values():
            h._set(_register(d._handle, h.text.encode()) if _register else None)


os.register_at_fork(after_in_child=_after_fork_in_child)


def _initialize() -> None:
    global _state
    attached = False
    with _lock:
        if _state == "fresh":
            try:
                _attach()
                attached = _ON
            finally:
                _state = "done"     # after _ON: a reader that sees "done" sees the final _ON
    if attached and os.environ.get("CLEF_PROF_PY_SAMPLING_HZ"):    # config.ENV_PY_SAMPLING_HZ
        _helper("sampler").start_from_env()     # clef-prof's Python sampler, when asked for
    if attached and os.environ.get("CLEF_PROF_CLOCK_MARKS") == "1":  # annotate.clock.ENV
        _helper("clock").start_from_env()       # the wall clock in the capture, for record


def _helper(name: str):
    """annotate.sampler or annotate.clock, which mark through this module: imported by name when
    the profiler attaches, so that this module (below them) imports neither (no import circle)."""
    import importlib

    return importlib.import_module(f"{__package__}.{name}")


def _attach() -> None:
    global _ON, _error
    init, label = _load_injection()
    if init is None:
        _error = label
        return
    slots = {m: (c_void_p * n)() for m, n in MODULE_SIZES.items()}
    tables = {}
    for m, n in MODULE_SIZES.items():
        t = (POINTER(c_void_p) * (n + 1))()   # [0] and [n] stay NULL, as in nvtxImpl.h
        for i in range(1, n):
            t[i] = ctypes.pointer(c_void_p.from_buffer(slots[m], i * ctypes.sizeof(c_void_p)))
        tables[m] = t

    def get_module_function_table(module, out_table, out_size):
        t = tables.get(module)
        if t is None:
            return 0
        if out_size:
            out_size[0] = MODULE_SIZES[module]
        if out_table:
            out_table[0] = ctypes.cast(t, _FnTable)
        return 1

    callbacks = _ExportTableCallbacks(ctypes.sizeof(_ExportTableCallbacks),
                                      _GetModuleFunctionTable(get_module_function_table))
    version = _ExportTableVersionInfo(ctypes.sizeof(_ExportTableVersionInfo), NVTX_VERSION, 0,
                                      _SetInjectionNvtxVersion(lambda v: None))
    exports = {ETID_CALLBACKS: ctypes.addressof(callbacks), ETID_VERSIONINFO: ctypes.addressof(version)}
    get_export_table = _GetExportTable(lambda etid: exports.get(etid))
    _keep.extend((slots, tables, callbacks, version, get_export_table, init))
    try:
        ok = init(get_export_table)
    except Exception as e:  # a foreign library: never let profiling break the program
        _error = f"InitializeInjectionNvtx2 raised {e!r} ({label})"
        return
    if not ok:
        _error = f"InitializeInjectionNvtx2 returned 0 ({label})"
        return
    _bind(slots[MODULE_CORE2])
    _ON = True


def _bind(core2) -> None:
    global _create, _register, _push, _pop, _mark, _start, _end
    fn = {cbid: proto(core2[cbid]) for cbid, proto in _PROTOS.items() if core2[cbid]}
    _create = fn.get(CBID_CORE2_DomainCreateA)
    _register = fn.get(CBID_CORE2_DomainRegisterStringA)
    _push = fn.get(CBID_CORE2_DomainRangePushEx, lambda d, a: -2)
    _pop = fn.get(CBID_CORE2_DomainRangePop, lambda d: -2)
    _mark = fn.get(CBID_CORE2_DomainMarkEx, lambda d, a: None)
    _start = fn.get(CBID_CORE2_DomainRangeStartEx, lambda d, a: 0)
    _end = fn.get(CBID_CORE2_DomainRangeEnd, lambda d, r: None)


def enabled() -> bool:
    """True when an NVTX tool (nsys) is attached and accepted this client."""
    if _state == "fresh":
        _initialize()
    return _ON


def init_error() -> str | None:
    """Why the client is off after a failed load attempt; None when on or when no tool is configured."""
    enabled()
    return _error


class StringHandle:
    """A string registered in a domain, with a prebuilt event-attributes struct naming it.

    value is the tool's handle; 0 when the client is off or the tool does not register
    strings, and then the struct carries the text as an ASCII message instead."""

    __slots__ = ("text", "value", "attr", "replay")

    def __init__(self, text: str, value: int | None, replay: bool = True):
        self.text = text
        self.replay = replay
        self.attr = EventAttributes(NVTX_VERSION, ATTR_SIZE)
        self._set(value)

    def _set(self, value: int | None) -> None:
        """Name the string by `value` (registered again after a fork), in the same struct."""
        self.value = value or 0
        self.attr.messageType = MESSAGE_TYPE_REGISTERED if value else MESSAGE_TYPE_ASCII
        if value:
            self.attr.message.registered = value
        else:
            self.attr.message.ascii = self.text.encode()

    def __repr__(self) -> str:
        return f"StringHandle({self.text!r}, 0x{self.value:x})"


def _attributes(message, payload: int | None, color: int | None) -> EventAttributes:
    if type(message) is StringHandle:
        if payload is None and color is None:
            return message.attr
        a = EventAttributes.from_buffer_copy(message.attr)
    else:
        a = EventAttributes(NVTX_VERSION, ATTR_SIZE)
        a.messageType = MESSAGE_TYPE_ASCII
        a.message.ascii = str(message).encode()
    if payload is not None:
        a.payloadType = PAYLOAD_TYPE_INT64
        a.payload.llValue = int(payload)
    if color is not None:
        a.colorType = COLOR_ARGB
        a.color = int(color) & 0xFFFFFFFF
    return a


class Domain:
    """An NVTX domain, one object per name (Domain("clef") is Domain("clef")); the name ""
    is NVTX's default domain.

    Messages are a str (sent as ASCII each time) or a StringHandle from register() (sent as
    a registered-string id: cheaper, and what nsys stores once in StringIds). Push and pop
    nest per thread; they must be balanced on the thread that pushed.
    """

    __slots__ = ("name", "_handle", "_strings")

    def __new__(cls, name: str):
        d = _domains.get(name)
        if d is not None:
            return d
        enabled()
        with _lock:
            d = _domains.get(name)
            if d is None:
                d = object.__new__(cls)
                d.name = name
                d._strings = {}
                # one ctypes object for the domain's life: bound calls hold it, a fork updates it
                d._handle = c_void_p((_create(name.encode()) or None) if _create and name else None)
                _domains[name] = d
        return d

    @property
    def handle(self) -> int | None:
        """The tool's handle of this domain (None: the default domain, or no tool)."""
        return self._handle.value

    def register(self, text: str, replay: bool = True) -> StringHandle:
        """The registered handle of `text` in this domain (registered once, then cached).
        replay=False: a string that means nothing in a forked child (one stamped with this
        process's pid), dropped there instead of registered again."""
        h = self._strings.get(text)
        if h is None:
            with _lock:
                h = self._strings.get(text)
                if h is None:
                    h = StringHandle(text, _register(self._handle, text.encode()) if _register else None, replay)
                    self._strings[text] = h
        return h

    def push(self, message: "str | StringHandle", payload: int | None = None, color: int | None = None) -> int:
        """Open a nested range on this thread; returns the tool's answer (a nesting level, or
        a negative value when it does not track levels; -2 when off)."""
        if not _ON:
            return -2
        return _push(self._handle, _attributes(message, payload, color))

    def bind(self, message: "str | StringHandle"):
        """(push, pop): zero-argument callables that open a range of `message` and close it.

        The attributes are built once (a StringHandle's own struct, which a fork updates) and
        the callables are C-level partials of the injection's functions, so a range costs the
        two foreign calls and nothing more. Both are no-ops when the client is off.
        """
        if not _ON:
            return _noop, _noop
        return (functools.partial(_push, self._handle, _attributes(message, None, None)),
                functools.partial(_pop, self._handle))

    def pop(self) -> int:
        """Close this thread's innermost range of this domain."""
        if not _ON:
            return -2
        return _pop(self._handle)

    def mark(self, message: "str | StringHandle", payload: int | None = None, color: int | None = None) -> None:
        """An instantaneous marker."""
        if not _ON:
            return
        _mark(self._handle, _attributes(message, payload, color))

    def start(self, message: "str | StringHandle", payload: int | None = None, color: int | None = None) -> int:
        """Open a range that may end on another thread; returns its id for end() (0 when off)."""
        if not _ON:
            return 0
        return _start(self._handle, _attributes(message, payload, color))

    def end(self, range_id: int) -> None:
        """Close a range opened by start()."""
        if _ON and range_id:
            _end(self._handle, range_id)

    def __repr__(self) -> str:
        return f"Domain({self.name!r})"
