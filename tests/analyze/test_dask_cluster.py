"""`analyze --dask ADDRESS` against a real dask.distributed cluster: a scheduler and two worker
processes on localhost, started and stopped here as a CI job would. The figures must be the local
run's byte for byte; a worker killed while it analyses a capture costs nothing but time (the
scheduler gives its task to the other); an address nobody serves is one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed import Client

from clicheck import assert_one_line, run_main
from httpcheck import free_port

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted((ROOT / "traces").glob("*.sqlite"))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           DASK_DISTRIBUTED__WORKER__DAEMON="False")


@pytest.fixture
def cluster():
    """tcp://127.0.0.1:PORT with two single-threaded workers (no nanny: a killed worker stays dead)."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], env=ENV, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads",
                                           "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0"], env=ENV,
                                          cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def local_json(paths) -> str:
    p = run_main("analyze", *paths, "-f", "json", "--jobs", "1")
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_clusters_figures_are_the_local_ones_byte_for_byte(cluster):
    paths = TRACES * 2
    p = run_main("analyze", *paths, "-f", "json", "--dask", cluster)
    assert p.returncode == 0, p.stderr
    assert p.stdout == local_json(paths)


def test_a_worker_killed_mid_analysis_is_retried_on_the_other(cluster):
    paths = TRACES * 3
    cmd = subprocess.Popen([sys.executable, "-m", "clef_prof", "analyze", *map(str, paths), "-f", "json", "--dask",
                            cluster], env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    with Client(cluster, timeout=30) as client:
        deadline = time.monotonic() + 120
        while killed is None and cmd.poll() is None and time.monotonic() < deadline:
            busy = {w: t for w, t in client.processing().items() if t}
            if busy:
                worker = next(iter(busy))
                pid = client.run(os.getpid, workers=[worker])[worker]
                os.kill(pid, signal.SIGKILL)
                killed = (worker, busy[worker])
            else:
                time.sleep(0.01)
    out, err = cmd.communicate(timeout=300)
    assert killed is not None, "no worker was seen analysing a capture"
    assert cmd.returncode == 0, err
    assert out == local_json(paths)


def test_an_address_nobody_serves_is_one_line():
    p = run_main("analyze", TRACES[0], "--dask", f"tcp://127.0.0.1:{free_port()}")
    assert_one_line(p, 1, "cannot reach the Dask scheduler")
