"""The stage specs installed in this process and what became of each target: the part that the
post-import hook (`importhook`) and the main-module hook (`mainhook`) share, so that neither
imports the other's internals. Standard library only: it runs in every profiled process."""
from __future__ import annotations

import os
import sys
import threading

from ..base.errors import SpecError
from .wrap import Prepared, TargetError, prepare, say

ENV_LENIENT = "CLEF_PROF_LENIENT"      # 1: warn and skip unresolvable targets
ENV_VERBOSE = "CLEF_PROF_VERBOSE"      # 1: one stderr line per installed wrapper
EXIT_UNRESOLVED = 1

lock = threading.RLock()
_installed: dict[str, object] = {}     # spec path -> Spec, specs installed in this process
_states: dict[str, "State"] = {}       # spec path -> its State


def report_error(on_error: str, err: SpecError) -> None:
    """Raise `err`, or print it as one line and go on ("warn") or end the process ("exit")."""
    if on_error == "raise":
        raise err
    message = str(err)
    if on_error == "warn":
        say(f"clef-prof inject: warning: {message}; skipped ({ENV_LENIENT}=1)")
        return
    say(f"clef-prof inject: error: {message} (set {ENV_LENIENT}=1 to skip unresolvable targets)")
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os._exit(EXIT_UNRESOLVED)


class State:
    """One installed spec in this process: how to report, and why each target is not wrapped
    yet (None once wrapped; left out once a line about it was printed)."""

    def __init__(self, spec, on_error: str, verbose: bool):
        self.spec, self.on_error, self.verbose = spec, on_error, verbose
        self.pending = {b.where: (f"{b.target.path} was never run" if b.target.path else
                                  f"module {b.target.module} was never imported") for b in spec.bindings()}

    def report(self, b, err: SpecError) -> None:
        self.pending.pop(b.where, None)
        report_error(self.on_error, err)

    def apply(self, b, owner) -> Prepared | None:
        """Wrap binding `b` below `owner` (a module, or a main module's namespace): the Prepared
        wrapper it set, or None when it was wrapped already. Raises TargetError."""
        p = prepare(b, self.spec, owner)
        if p is not None:
            try:
                p.apply()
            except (AttributeError, TypeError) as exc:
                raise TargetError(self.spec.path, b.where, str(b.target), f"cannot be replaced: {exc}") from None
            if self.verbose:
                say(f"clef-prof inject[{os.getpid()}]: {b.where} {b.target} ({p.kind}) -> {b.role} range "
                    f"{b.name!r} in domain {self.spec.domain!r}")
        if b.where in self.pending:
            self.pending[b.where] = None
        return p

    def wrap(self, b, owner) -> None:
        """apply(), reporting a target that cannot be wrapped as `on_error` says."""
        try:
            self.apply(b, owner)
        except TargetError as exc:
            self.report(b, exc)


def register(spec, on_error: str, verbose: bool) -> State | None:
    """The new State of `spec` in this process, or None when it is installed already."""
    key = os.path.abspath(spec.path) if spec.path and not spec.path.startswith("<") else f"{spec.path}#{id(spec)}"
    with lock:
        if key in _installed:
            return None
        _installed[key] = spec
        state = _states[key] = State(spec, on_error, verbose)
    return state


def installed() -> list:
    """The specs installed in this process."""
    with lock:
        return list(_installed.values())


def states() -> list:
    """The installed specs' states in this process."""
    with lock:
        return list(_states.values())
