"""clef_prof.record.procs on real processes: finding a capture's processes by their marker, ending them."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

from clef_prof.record import procs


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
