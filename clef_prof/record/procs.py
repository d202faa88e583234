"""Find and end the processes of one capture, from /proc, without psutil; and the helpers for the
servers and clients clef-prof starts (record and bench): `pdeathsig`, `stop_group`, `log_tail`.

nsys scatters a profiled server over several process groups and sessions: `nsys profile` /
`nsys launch` stays in the group we start it in, its `--start-agent` daemon calls setsid and
is re-parented to init, and `nsys-launcher` starts the application in a session of its own.
Neither a process group nor the parent chain reaches all of them, so every process of a
capture carries a marker in its environment (`CLEF_PROF_RUN=<token>`, inherited through
fork and exec), and /proc/<pid>/environ is scanned for it. A child that drops the marker
(`setsid env -i ...`) is still a child: `Tree` remembers every descendant (by parent id) of
the marked processes and of nsys, so it can be ended after its parent is gone.

Standard library only.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass

ENV_MARK = "CLEF_PROF_RUN"


DEAD = ("Z", "X")       # /proc states of a process that has ended (zombie, dead)


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
    start: int = 0         # start time in clock ticks since boot: (pid, start) names one process

    @property
    def alive(self) -> bool:
        return self.state not in DEAD


def _stat(pid: int) -> tuple[str, str, int, int, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    lp, rp = raw.find("("), raw.rfind(")")
    comm = raw[lp + 1:rp]
    rest = raw[rp + 2:].split()
    try:
        return comm, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None


def read(pid: int) -> Proc | None:
    st = _stat(pid)
    if st is None:
        return None
    comm, state, ppid, pgid, sid, start = st
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        cmdline = ""
    return Proc(pid, ppid, pgid, sid, state, comm, exe, cmdline, start)


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


def children(pid: int) -> list[int]:
    """Pids of the live processes whose parent is `pid` (one scan of /proc/PID/stat)."""
    out = []
    for p in _pids():
        st = _stat(p)
        if st is not None and st[2] == pid and st[1] not in DEAD:
            out.append(p)
    return out


def descendants(pids) -> list[Proc]:
    """Every live descendant of `pids` (by parent id, from one scan of /proc)."""
    children: dict[int, list[Proc]] = {}
    for pid in _pids():
        p = read(pid)
        if p is not None:
            children.setdefault(p.ppid, []).append(p)
    out, todo, seen = [], list(pids), set(pids)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c.pid not in seen:
                seen.add(c.pid)
                out.append(c)
                todo.append(c.pid)
    return [p for p in out if p.alive]


class Tree:
    """The processes of one capture: the marked ones and, remembered at each `update()`, every
    descendant of them and of `roots` (nsys), marker or not."""

    def __init__(self, token: str, name: str = ENV_MARK):
        self.token, self.name = token, name
        self.known: dict[int, int] = {}        # pid -> start time

    def update(self, roots=()) -> None:
        top = [*roots, *(p.pid for p in marked(self.token, self.name))]
        for p in descendants(top):
            self.known[p.pid] = p.start

    def left(self) -> list[Proc]:
        """Marked processes, and remembered descendants that still run (the same process: pid
        and start time)."""
        out = {p.pid: p for p in marked(self.token, self.name)}
        for pid, start in self.known.items():
            p = read(pid)
            if p is not None and p.alive and p.start == start and pid != os.getpid():
                out[pid] = p
        return list(out.values())


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


def terminate_marked(token: str, timeouts=(3.0, 3.0, 2.0), name: str = ENV_MARK, tree: Tree | None = None) -> list[Proc]:
    """SIGINT, then SIGTERM, then SIGKILL every marked process (and its group), and every
    process `tree` remembers; what is left."""
    def left():
        return tree.left() if tree is not None else marked(token, name)

    for sig, wait in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), timeouts):
        procs = left()
        if not procs:
            return []
        signal_pids([p.pid for p in procs], sig)
        if sig == signal.SIGKILL:
            signal_groups([p.pgid for p in procs], sig)
        if wait_gone(lambda: not left(), wait):
            return []
    return left()


def describe(procs: list[Proc]) -> str:
    return ", ".join(f"{p.pid} ({p.cmdline[:60] or p.comm})" for p in procs)


def sig_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


# --------------------------------------------------------------------------------------------
# the processes clef-prof starts: their signals, their stop, their logs

def pdeathsig():
    """In the child before exec: get SIGTERM when clef-prof dies (Linux), so nsys stops too; and
    SIGINT back to its default, which a clef-prof started in the background (`&`, nohup) ignores
    and would hand on, so the server's graceful stop (SIGINT) would never reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except Exception:
        pass


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes of process group `pgid` (zombies left out). stop_group polls
    it every 50 ms: only /proc/PID/stat is read, not each process's exe and command line."""
    out = []
    for pid in _pids():
        st = _stat(pid)
        if st is not None and st[3] == pgid and st[1] not in DEAD:
            out.append(pid)
    return out


def stop_group(popen: subprocess.Popen, waits=(5.0, 3.0, 2.0)) -> None:
    """SIGINT, then SIGTERM, then SIGKILL the process group that `popen` leads (started with
    start_new_session=True; else `popen` alone), each until `popen` and every other process of
    the group are gone: children that outlive the leader are ended too."""
    def done() -> bool:
        return popen.poll() is not None and not group_members(popen.pid)

    for sig, wait in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), waits):
        if done():
            return
        try:
            os.killpg(popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                popen.send_signal(sig)
            except ProcessLookupError:
                pass
        if wait_gone(done, wait):
            return


# nsys' own lines in the server's streams: left out of the tail shown on failure
_NSYS_NOISE = re.compile(r"^(\[\d+/\d+\]|Generating '|Generated:|Collecting data|Processing events|Capture range "
                         r"(started|ended)|WARNING: CUDA graph-level trace|Changing to node-level trace|terminate called "
                         r"without|The target application terminated|Process .* was terminated|Failed to create|"
                         r"No reports were generated|\$ )")


def log_tail(path: str, n: int = 6, width: int = 400) -> str:
    """The last meaningful lines of a log (nsys progress bars dropped), joined with ' | '."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = []
    for raw in text.replace("\r", "\n").splitlines():
        s = raw.strip()
        if not s or _NSYS_NOISE.search(s) or s.endswith((".nsys-rep", ".qdstrm")):
            continue
        lines.append(s)
    out = " | ".join(lines[-n:])
    return out if len(out) <= width else "..." + out[-width:]
