"""clef_prof.record.procs on real processes (Python sleepers, process groups with grandchildren,
children that ignore SIGINT or SIGTERM): reading a process from /proc (checked against the kernel's
own calls and psutil), finding a capture's processes by their marker, remembering descendants that
drop it, ending them with SIGINT, SIGTERM, then SIGKILL (`terminate_marked`, `stop_group`),
`pdeathsig`, and the log tail that failures quote. Every wait is on a condition with a deadline."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from clef_prof.record import procs

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
DEADLINE_S = 20.0

# a sleeper: sets its signal dispositions (SETUP), says so, sleeps
SLEEPER = "import signal, sys, time\n{setup}print('ready', flush=True)\ntime.sleep(300)\n"
# a group leader: starts N sleepers (argv[2]) in its own group, prints their pids once they are ready
LEADER = ("import subprocess, sys, time\n"
          "kids = [subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE, text=True)\n"
          "        for _ in range(int(sys.argv[2]))]\n"
          "assert all(k.stdout.readline().strip() == 'ready' for k in kids)\n"
          "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
          "time.sleep(300)\n")


def sleeper_code(ignore=()) -> str:
    return SLEEPER.format(setup="".join(f"signal.signal(signal.{s}, signal.SIG_IGN)\n" for s in ignore))


@pytest.fixture
def spawn():
    """spawn(argv, **popen_kw) -> a started Popen (text stdout pipe); spawn.track(pid) for a
    grandchild. Whatever of them still runs at the end is SIGKILLed, by pid and start time."""
    started: list[subprocess.Popen] = []
    tracked: list[tuple[int, int]] = []

    def start(argv, **kw):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
        started.append(p)
        return p

    def track(pid: int) -> int:
        tracked.append((pid, procs.read(pid).start))
        return pid

    start.track = track
    yield start
    for pid, start_ticks in tracked:
        p = procs.read(pid)
        if p is not None and p.alive and p.start == start_ticks:
            os.kill(pid, signal.SIGKILL)
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def ready_sleeper(spawn, ignore=(), **kw) -> subprocess.Popen:
    """A sleeper that ignores the signals named in `ignore`, once its handlers are set."""
    p = spawn([PY, "-c", sleeper_code(ignore)], **kw)
    assert p.stdout.readline().strip() == "ready"
    return p


def leader_with_grandchildren(spawn, n=2, ignore=(), **kw) -> tuple[subprocess.Popen, list[int]]:
    """A leader of its own process group (and session) with n sleeping children in that group."""
    p = spawn([PY, "-c", LEADER, sleeper_code(ignore), str(n)], start_new_session=True, **kw)
    kids = [spawn.track(int(x)) for x in p.stdout.readline().split()]
    assert len(kids) == n
    return p, kids


def gone(pids) -> bool:
    return not any(procs.alive(pid) for pid in pids)


# --------------------------------------------------------------------------------------------
# reading /proc


def test_read_matches_the_kernel_and_psutil(spawn):
    """A comm with ') (' in it: /proc/PID/stat is split at the last ')'."""
    code = "import ctypes; ctypes.CDLL(None).prctl(15, b'a) b (c', 0, 0, 0)\n" + sleeper_code()
    p = spawn([PY, "-c", code], start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    r = procs.read(p.pid)
    ps = psutil.Process(p.pid)
    assert r.comm == ps.name() == "a) b (c"
    assert (r.pid, r.ppid, r.pgid, r.sid) == (p.pid, os.getpid(), os.getpgid(p.pid), os.getsid(p.pid)) \
        and r.pgid == r.sid == p.pid
    assert r.exe == ps.exe() == os.path.realpath(PY) and r.cmdline == " ".join(ps.cmdline()).strip() and r.alive
    assert r.start > 0 and procs.read(p.pid).start == r.start
    assert procs.alive(p.pid)
    p.kill()
    p.wait()
    assert procs.read(p.pid) is None and not procs.alive(p.pid)


def test_descendants_and_app_roots(spawn):
    token = uuid.uuid4().hex
    leader, kids = leader_with_grandchildren(spawn, 3, env={**os.environ, procs.ENV_MARK: token})
    assert {p.pid for p in procs.descendants([leader.pid])} == set(kids)
    found = procs.marked(token)
    assert {p.pid for p in found} == {leader.pid, *kids}       # the marker is inherited
    assert [p.pid for p in procs.app_roots(found, None)] == [leader.pid]
    # python's own folder as the tool's: every one of them is the tool's, none is the application
    tool_root = os.path.dirname(os.path.realpath(PY))
    assert all(procs.is_tool(p, tool_root) for p in found) and procs.app_roots(found, tool_root) == []


# --------------------------------------------------------------------------------------------
# markers


def test_marked_processes_are_found_and_ended():
    token = uuid.uuid4().hex
    env = dict(os.environ, **{procs.ENV_MARK: token})
    # a child that ignores SIGINT and SIGTERM, in a session of its own (as nsys' agent is)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                              "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                             env=env, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert [p.pid for p in procs.marked(token)] == [child.pid]
        assert procs.terminate_marked(token, timeouts=(0.3, 0.3, 2.0)) == []
        assert child.wait(5) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()


def test_marker_matches_whole_entries_and_names(spawn):
    token = uuid.uuid4().hex
    mine = ready_sleeper(spawn, env={**os.environ, procs.ENV_MARK: token})
    ready_sleeper(spawn, env={**os.environ, procs.ENV_MARK: token + "0"})
    ready_sleeper(spawn, env={**os.environ, procs.ENV_MARK: token[:-1]})
    other = ready_sleeper(spawn, env={**os.environ, "OTHER_MARK": token})
    assert [p.pid for p in procs.marked(token)] == [mine.pid]
    assert [p.pid for p in procs.marked(token, name="OTHER_MARK")] == [other.pid]
    assert procs.has_env(mine.pid, procs.ENV_MARK, token) and not procs.has_env(mine.pid, procs.ENV_MARK, token[:-1])


def test_zombies_are_not_marked(spawn):
    token = uuid.uuid4().hex
    p = spawn([PY, "-c", "pass"], env={**os.environ, procs.ENV_MARK: token})
    assert procs.wait_gone(lambda: procs.read(p.pid).state == "Z", DEADLINE_S)    # exited, not reaped yet
    assert procs.marked(token) == [] and not procs.alive(p.pid)
    assert p.wait() == 0


@pytest.mark.parametrize("ignore, ended_by", [((), signal.SIGINT), (("SIGINT",), signal.SIGTERM),
                                              (("SIGINT", "SIGTERM"), signal.SIGKILL)])
def test_terminate_marked_escalates(spawn, ignore, ended_by):
    token = uuid.uuid4().hex
    p = ready_sleeper(spawn, ignore, env={**os.environ, procs.ENV_MARK: token}, start_new_session=True)
    assert procs.terminate_marked(token, timeouts=(0.5, 0.5, DEADLINE_S)) == []
    assert p.wait(DEADLINE_S) == -ended_by


def test_tree_remembers_a_descendant_without_the_marker(spawn):
    """`setsid env -i` under a marked process: no marker, another session, and its parent gone."""
    token = uuid.uuid4().hex
    code = ("import subprocess, sys, time\n"
            "gc = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env={}, start_new_session=True,\n"
            "                      stdout=subprocess.PIPE, text=True)\n"
            "assert gc.stdout.readline().strip() == 'ready'\n"
            "print(gc.pid, flush=True)\n"
            "time.sleep(300)\n")
    parent = spawn([PY, "-c", code, sleeper_code()], env={**os.environ, procs.ENV_MARK: token})
    gc = spawn.track(int(parent.stdout.readline()))
    assert [p.pid for p in procs.marked(token)] == [parent.pid]
    tree = procs.Tree(token)
    tree.update()
    parent.kill()
    parent.wait()
    assert procs.marked(token) == [] and procs.alive(gc)
    assert [p.pid for p in tree.left()] == [gc]
    stale = procs.Tree(token)                  # the same pid with another start time: another process
    stale.known = {gc: tree.known[gc] + 1}
    assert stale.left() == []
    assert procs.terminate_marked(token, timeouts=(DEADLINE_S, 1.0, 1.0), tree=tree) == []
    assert not procs.alive(gc)


def test_wait_gone_polls_until_true_or_the_deadline():
    answers = iter([False, False, True])
    calls = []
    assert procs.wait_gone(lambda: calls.append(1) or next(answers), DEADLINE_S, step=0.001)
    assert len(calls) == 3
    assert procs.wait_gone(lambda: True, 0.0)                   # checked once even with no time
    assert not procs.wait_gone(lambda: False, 0.05, step=0.01)


def test_signal_groups_spares_its_own_group(spawn):
    code = ("import os, signal\n"
            "from clef_prof.record import procs\n"
            "procs.signal_groups([0, os.getpgrp()], signal.SIGTERM)\n"
            "print('alive', flush=True)\n")
    p = spawn([PY, "-c", code], start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.stdout.read().strip() == "alive" and p.wait(DEADLINE_S) == 0


def test_sig_name():
    assert (procs.sig_name(signal.SIGKILL), procs.sig_name(signal.SIGTERM), procs.sig_name(999)) == \
        ("SIGKILL", "SIGTERM", "999")


# --------------------------------------------------------------------------------------------
# stop_group


@pytest.mark.parametrize("ignore, ended_by", [((), signal.SIGINT), (("SIGINT",), signal.SIGTERM),
                                              (("SIGINT", "SIGTERM"), signal.SIGKILL)])
def test_stop_group_escalates(spawn, ignore, ended_by):
    p = ready_sleeper(spawn, ignore, start_new_session=True)
    procs.stop_group(p, (0.5, 0.5, DEADLINE_S))
    assert p.returncode == -ended_by


def test_stop_group_ends_the_whole_group(spawn):
    leader, kids = leader_with_grandchildren(spawn, 2)
    assert all(procs.read(k).pgid == leader.pid for k in kids)
    procs.stop_group(leader, (DEADLINE_S, DEADLINE_S, DEADLINE_S))
    assert leader.returncode == -signal.SIGINT and gone(kids)


def test_stop_group_kills_a_grandchild_that_ignores_sigterm(spawn):
    """The leader ends on SIGINT; its children ignore SIGINT and SIGTERM: the group still ends."""
    leader, kids = leader_with_grandchildren(spawn, 2, ignore=("SIGINT", "SIGTERM"))
    procs.stop_group(leader, (0.5, 0.5, DEADLINE_S))
    assert leader.returncode == -signal.SIGINT and gone(kids)


def test_stop_group_of_a_child_in_our_group(spawn):
    """Not a group leader: only the child is signalled (this process, in the same group, lives)."""
    p = ready_sleeper(spawn)
    assert os.getpgid(p.pid) == os.getpgrp()
    procs.stop_group(p, (DEADLINE_S, DEADLINE_S, DEADLINE_S))
    assert p.returncode == -signal.SIGINT
    done = spawn([PY, "-c", "pass"], start_new_session=True)
    assert done.wait(DEADLINE_S) == 0
    procs.stop_group(done)                         # already ended: nothing to do
    assert done.returncode == 0


def test_stop_group_after_the_leader_was_reaped(spawn):
    """The leader exited and was reaped; its child lives on in the group: that child is ended."""
    leader = spawn([PY, "-c", LEADER.replace("time.sleep(300)\n", ""), sleeper_code(), "1"], start_new_session=True)
    kids = [spawn.track(int(x)) for x in leader.stdout.readline().split()]
    assert leader.wait(DEADLINE_S) == 0 and procs.read(kids[0]).pgid == leader.pid
    procs.stop_group(leader, (DEADLINE_S, DEADLINE_S, DEADLINE_S))
    assert gone(kids) and procs.group_members(leader.pid) == []


# --------------------------------------------------------------------------------------------
# pdeathsig


def test_pdeathsig_ends_the_child_when_its_parent_dies(spawn, tmp_path):
    mark = tmp_path / "signal"
    child = ("import signal, sys, time\n"
             "def on(signum, frame):\n"
             "    open(sys.argv[1], 'w').write(signal.Signals(signum).name)\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, on)\n" + sleeper_code())
    parent = ("import subprocess, sys, time\n"
              "from clef_prof.record import procs\n"
              "c = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], preexec_fn=procs.pdeathsig,\n"
              "                     stdout=subprocess.PIPE, text=True)\n"
              "assert c.stdout.readline().strip() == 'ready'\n"
              "print(c.pid, flush=True)\n"
              "time.sleep(300)\n")
    p = spawn([PY, "-c", parent, child, str(mark)], env={**os.environ, "PYTHONPATH": str(ROOT)})
    pid = spawn.track(int(p.stdout.readline()))
    assert procs.read(pid).ppid == p.pid
    p.kill()
    p.wait()
    assert procs.wait_gone(lambda: not procs.alive(pid), DEADLINE_S)
    assert mark.read_text() == "SIGTERM"


@pytest.mark.parametrize("with_pdeathsig", [True, False])
def test_pdeathsig_restores_sigint(spawn, with_pdeathsig):
    """A clef-prof started in the background ignores SIGINT; its servers must not inherit that."""
    def pre():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if with_pdeathsig:
            procs.pdeathsig()
    p = spawn([PY, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
              preexec_fn=pre)
    assert p.stdout.read().strip() == str(with_pdeathsig) and p.wait(DEADLINE_S) == 0


# --------------------------------------------------------------------------------------------
# log_tail


def test_log_tail_keeps_the_last_meaningful_lines(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("starting\n\n"
                   "Collecting data...\n"
                   "loading 10%\rloading 50%\rloading done\n"
                   "Traceback (most recent call last):\n"
                   "  File \"srv.py\", line 3\n"
                   "Generating '/tmp/nsys-report-1a2b.qdstrm'\n"
                   "[1/8] [=====              ] 30%\n"
                   "RuntimeError: simulated start-up failure   \n"
                   "Generated:\n"
                   "    /runs/x/capture.nsys-rep\n"
                   "\n")
    assert procs.log_tail(str(log), 3) == ('Traceback (most recent call last): | File "srv.py", line 3 | '
                                           "RuntimeError: simulated start-up failure")
    assert procs.log_tail(str(log), 100) == ('starting | loading 10% | loading 50% | loading done | Traceback (most '
                                             'recent call last): | File "srv.py", line 3 | RuntimeError: simulated '
                                             "start-up failure")


def test_log_tail_of_a_long_log_and_long_lines(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert log.stat().st_size > 500_000
    assert procs.log_tail(str(log), 2) == "line 99998 | line 99999"
    log.write_text("first\n" + "x" * 100_000 + "\n")
    out = procs.log_tail(str(log), 2, width=400)
    assert out == "..." + "x" * 400


def test_log_tail_of_binary_missing_and_unreadable(tmp_path):
    log = tmp_path / "bin.log"
    log.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80garbage\n" + bytes(range(256)) + b"\nlast line\n")
    out = procs.log_tail(str(log), 1)
    assert out == "last line"
    assert "\ufffd" in procs.log_tail(str(log), 4)
    assert procs.log_tail(str(tmp_path / "missing.log")) == ""
    assert procs.log_tail(str(tmp_path)) == ""                  # a folder
