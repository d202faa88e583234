"""Find and end the processes of one capture, from /proc, without psutil.

nsys scatters a profiled server over several process groups and sessions: `nsys profile` /
`nsys launch` stays in the group we start it in, its `--start-agent` daemon calls setsid and
is re-parented to init, and `nsys-launcher` starts the application in a session of its own.
Neither a process group nor the parent chain reaches all of them, so every process of a
capture carries a marker in its environment (`CLEF_PROF_RUN=<token>`, inherited through
fork and exec), and /proc/<pid>/environ is scanned for it.

Standard library only.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

ENV_MARK = "CLEF_PROF_RUN"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    comm: str
    exe: str
    cmdline: str

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def _stat(pid: int) -> tuple[str, str, int, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    lp, rp = raw.find("("), raw.rfind(")")
    comm = raw[lp + 1:rp]
    rest = raw[rp + 2:].split()
    try:
        return comm, rest[0], int(rest[1]), int(rest[2]), int(rest[3])
    except (IndexError, ValueError):
        return None


def read(pid: int) -> Proc | None:
    st = _stat(pid)
    if st is None:
        return None
    comm, state, ppid, pgid, sid = st
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmdline = ""
    return Proc(pid, ppid, pgid, sid, state, comm, exe, cmdline)


def _pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def has_env(pid: int, name: str, value: str) -> bool:
    needle = f"{name}={value}".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return needle in fh.read().split(b"\0")
    except OSError:
        return False


def marked(token: str, name: str = ENV_MARK) -> list[Proc]:
    """Live processes whose environment holds name=token (zombies left out), the caller excluded."""
    me = os.getpid()
    out = []
    for pid in _pids():
        if pid == me or not has_env(pid, name, token):
            continue
        p = read(pid)
        if p is not None and p.alive:
            out.append(p)
    return out


def alive(pid: int) -> bool:
    p = read(pid)
    return p is not None and p.alive


def is_tool(p: Proc, tool_root: str | None) -> bool:
    """One of nsys' own processes (nsys, its agent, nsys-launcher, nsys-tee, binaries under tool_root)."""
    if p.comm.startswith("nsys"):
        return True
    if not tool_root or not p.exe:
        return False
    return os.path.realpath(p.exe).startswith(os.path.realpath(tool_root) + os.sep)


def app_roots(procs: list[Proc], tool_root: str | None) -> list[Proc]:
    """The profiled application's top processes: marked processes that are not nsys' own, whose
    parent is not one of them."""
    app = [p for p in procs if not is_tool(p, tool_root)]
    pids = {p.pid for p in app}
    return [p for p in app if p.ppid not in pids]


def signal_pids(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def signal_groups(pgids, sig: int) -> None:
    for g in set(pgids):
        if g <= 1 or g == os.getpgrp():
            continue
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(check, timeout: float, step: float = 0.05) -> bool:
    """Poll `check()` (True when done) until it holds or the timeout passes."""
    end = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


def terminate_marked(token: str, timeouts=(3.0, 3.0, 2.0), name: str = ENV_MARK) -> list[Proc]:
    """SIGINT, then SIGTERM, then SIGKILL every marked process (and its group); what is left."""
    for sig, wait in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), timeouts):
        left = marked(token, name)
        if not left:
            return []
        signal_pids([p.pid for p in left], sig)
        if sig == signal.SIGKILL:
            signal_groups([p.pgid for p in left], sig)
        if wait_gone(lambda: not marked(token, name), wait):
            return []
    return marked(token, name)


def describe(procs: list[Proc]) -> str:
    return ", ".join(f"{p.pid} ({p.cmdline[:60] or p.comm})" for p in procs)


def sig_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
