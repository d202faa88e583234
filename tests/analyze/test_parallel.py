"""Many captures at once (analyze_many, compare's loader): how many processes, how many reader
threads each, which start method, and how a failing capture comes back, against figures worked
out here from the machine's CPU count and the files' sizes."""
import os
import sys
import threading
import time
from concurrent.futures import Future

import pytest

from clef_prof.base import errors
from clef_prof.analyze.read import export
from clef_prof.analyze import parallel
from clef_prof.analyze.parallel import map_captures, worker_count
from clef_prof.base.errors import CaptureError, ClefError


@pytest.mark.parametrize("cpus,jobs,readers", [(8, 2, 4), (8, 3, 2), (8, 8, 1), (8, 16, 1), (8, 0, 8), (8, 1, 8),
                                               (None, 2, 1), (None, 1, 1), (2, 1, 2), (16, 4, 4)])
def test_reader_threads_split_the_cpus_between_processes(monkeypatch, cpus, jobs, readers):
    monkeypatch.setattr(export, "usable_cpus", lambda: cpus or 1)
    assert parallel._readers_per_job(jobs) == readers


def test_a_worker_reads_with_the_threads_it_is_given(monkeypatch):
    monkeypatch.setattr(export, "READERS", export.READERS)         # put back after the test
    parallel._init_worker(3)
    assert export.READERS == 3


SMALL = 64 << 20              # the documented threshold, 64 MB: written out, not read from the module


def _sparse(path, size):
    with open(path, "wb") as fh:
        fh.truncate(size)                   # no blocks on disk: only the size counts
    return str(path)


# (CPUs, reader threads an analysis uses, the processes for 6 captures, for 2, for 7)
@pytest.mark.parametrize("cpus,readers,six,two,seven", [(8, 2, 4, 2, 4), (16, 2, 6, 2, 7), (8, 3, 2, 2, 2),
                                                        (2, 2, 1, 1, 1), (1, 2, 1, 1, 1), (None, 1, 1, 1, 1),
                                                        (6, 1, 6, 2, 6)])
def test_default_processes_one_per_readers_cpus_only_for_64_mb_or_more(monkeypatch, tmp_path, cpus, readers,
                                                                      six, two, seven):
    monkeypatch.setattr(export, "usable_cpus", lambda: cpus or 1)
    monkeypatch.setattr(export, "READERS", readers)
    paths = [_sparse(tmp_path / f"c{i}.sqlite", 0) for i in range(6)]
    _sparse(paths[0], SMALL - 1)
    assert worker_count(paths, None) == 1                           # under 64 MB: this process
    _sparse(paths[0], SMALL - 5)
    _sparse(paths[1], 5)                                            # the sum that counts: exactly 64 MB
    assert worker_count(paths, None) == six
    assert worker_count(paths[:2], None) == two                     # at most one per capture
    missing = str(tmp_path / "missing.sqlite")                      # counts 0 bytes
    assert worker_count(paths + [missing], None) == seven
    _sparse(paths[1], 4)
    assert worker_count(paths + [missing], None) == 1


def test_asked_processes_at_most_one_per_capture(tmp_path):
    paths = [_sparse(tmp_path / f"c{i}.sqlite", 10) for i in range(3)]
    assert [worker_count(paths, j) for j in (1, 2, 3, 4, 50)] == [1, 2, 3, 3, 3]
    assert worker_count(paths, 0) == 1 and worker_count(paths, -4) == 1
    assert worker_count(paths[:1], 8) == 1


def test_one_capture_run_never_raises():
    assert parallel._run_one(os.path.basename, "/a/b.sqlite") == ("ok", "b.sqlite")

    def bad(path, code):
        err = CaptureError(f"{path}: lacks table X")
        err.exit_code = code
        raise err

    assert parallel._run_one(bad, "c.sqlite", 7) == ("error", "CaptureError", "c.sqlite: lacks table X", 7)

    def crash(path):
        raise KeyError("slot")

    assert parallel._run_one(crash, "c.sqlite") == ("error", "ClefError", "internal error: KeyError: 'slot'", 1)


def test_an_error_comes_back_as_its_own_class_naming_its_path():
    err = parallel._as_error("/x/c.sqlite", ("error", "CaptureError", "lacks table X", 5))
    assert type(err) is CaptureError and str(err) == "/x/c.sqlite: lacks table X"
    assert (err.exit_code, err.path) == (5, "/x/c.sqlite")
    same = parallel._as_error("/x/c.sqlite", ("error", "SpecError", "/x/c.sqlite: bad", 1))
    assert type(same) is errors.SpecError and str(same) == "/x/c.sqlite: bad"     # not named twice
    # a name that is no ClefError class (another module's, a function, a constant, unknown): ClefError
    for name in ("KeyError", "one_line", "EXIT_INPUT", "NoSuchError"):
        err = parallel._as_error("c.sqlite", ("error", name, "m", 1))
        assert type(err) is ClefError and str(err) == "c.sqlite: m"


def test_results_in_input_order_and_the_first_failure_in_that_order():
    outcomes = [("ok", 1), ("error", "CaptureError", "late", 1), ("error", "SpecError", "first? no", 2)]
    paths = ["a", "b", "c"]
    got = parallel._finish(paths, outcomes, "return")
    assert got[0] == 1 and [type(e) for e in got[1:]] == [CaptureError, errors.SpecError]
    assert [e.path for e in got[1:]] == ["b", "c"]
    with pytest.raises(CaptureError, match="^b: late$"):
        parallel._finish(paths, outcomes, "raise")
    with pytest.raises(ValueError, match="errors must be"):
        map_captures(os.path.basename, ["a"], errors="ignore")
    assert map_captures(os.path.basename, []) == []


def test_a_dead_worker_is_a_failed_capture():
    done, dead = Future(), Future()
    done.set_result(("ok", 3))
    dead.set_exception(RuntimeError("worker killed"))
    assert parallel._outcome(done) == ("ok", 3)
    assert parallel._outcome(dead) == ("error", "ClefError", "analysis process failed: RuntimeError: worker killed", 1)


def test_start_method_forkserver_where_there_is_one_else_spawn(monkeypatch):
    import multiprocessing
    if "forkserver" in multiprocessing.get_all_start_methods():
        assert parallel._context().get_start_method() == "forkserver"
    import multiprocessing
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn", "fork"])
    assert parallel._context().get_start_method() == "spawn"


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes from a forkserver")
def test_worker_processes_give_what_this_process_gives(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEF_PROF_POOL", "processes")
    paths = [_sparse(tmp_path / f"c{i}.sqlite", 10 * i) for i in range(4)]
    missing = str(tmp_path / "gone.sqlite")
    assert map_captures(os.path.getsize, paths, jobs=2) == [0, 10, 20, 30] == map_captures(os.path.getsize, paths, jobs=1)
    got = map_captures(os.path.getsize, [paths[1], missing, paths[2]], jobs=3, errors="return")
    assert got[0] == 10 and got[2] == 20
    assert type(got[1]) is ClefError and got[1].path == missing and "FileNotFoundError" in str(got[1])
    with pytest.raises(ClefError, match="FileNotFoundError"):
        map_captures(os.path.getsize, [paths[1], missing], jobs=2)


def test_a_process_pinned_to_one_cpu_plans_for_one():
    """Under taskset or a container's cpuset the machine may have many CPUs and the process one:
    readers, jobs and readers per job follow the affinity (os.cpu_count() counts the machine's)."""
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    code = ("import os; from clef_prof.analyze.read import export; from clef_prof.analyze import parallel; "
            "print(os.cpu_count(), export.usable_cpus(), export.READERS, parallel._readers_per_job(1))")
    first = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {first})).stdout.split()
    assert out[1:] == ["1", "1", "1"], out


def test_threads_give_what_this_process_gives_each_with_its_share_of_readers(tmp_path, monkeypatch):
    """On threads (the default pool) each call runs with usable CPUs // jobs reader threads
    (export.readers(), set per thread), and results and errors come back as one after another."""
    monkeypatch.setattr(export, "usable_cpus", lambda: 8)
    monkeypatch.delenv("CLEF_PROF_POOL", raising=False)
    paths = [_sparse(tmp_path / f"c{i}.sqlite", 10 * i) for i in range(4)]
    missing = str(tmp_path / "gone.sqlite")
    seen = []

    def size_and_readers(path):
        seen.append((threading.current_thread().name.startswith("clef-capture"), export.readers()))
        return os.path.getsize(path)

    assert map_captures(size_and_readers, paths, jobs=2) == [0, 10, 20, 30]
    assert seen == [(True, 4)] * 4 and export.readers() == export.READERS
    seen.clear()
    assert map_captures(size_and_readers, paths, jobs=1) == [0, 10, 20, 30]
    assert seen == [(False, export.READERS)] * 4
    got = map_captures(os.path.getsize, [paths[1], missing, paths[2]], jobs=3, errors="return")
    assert got[0] == 10 and got[2] == 20
    assert type(got[1]) is ClefError and got[1].path == missing and "FileNotFoundError" in str(got[1])


def test_the_first_failure_stops_the_analyses_still_running(capture):
    """With errors="raise" the first failing capture (input order) is raised and the analyses
    still running on other threads stop at their next read (export.Cancelled), not run to the end."""
    path = str(capture("gpu-q1c16-main"))
    finished, started = [], threading.Event()

    def fn(p):
        if p == "bad":
            started.wait(10)
            raise CaptureError("bad: lacks table X")
        started.set()
        assert export.TASK.get().stop.wait(10)       # told to stop before its first read
        from clef_prof.analyze.pipeline import analyze
        analyze(p)
        finished.append(p)

    t0 = time.monotonic()
    with pytest.raises(CaptureError, match="^bad: lacks table X$"):
        map_captures(fn, ["bad", path], jobs=2, pool="threads")
    assert finished == [] and time.monotonic() - t0 < 10


def test_a_stopped_task_stops_an_analysis_and_its_stream(capture):
    from clef_prof.analyze.pipeline import analyze
    task = export.Task(1)
    task.cancel()
    token = export.TASK.set(task)
    try:
        with pytest.raises(export.Cancelled, match="^stopped: the run ended before this capture's analysis$"):
            analyze(str(capture("gpu-q1c16-main")))
    finally:
        export.TASK.reset(token)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("clef-read")]


def test_pool_is_threads_or_processes(monkeypatch):
    monkeypatch.delenv("CLEF_PROF_POOL", raising=False)
    assert parallel.pool_kind() == "threads" and parallel.pool_kind("processes") == "processes"
    monkeypatch.setenv("CLEF_PROF_POOL", "processes")
    assert parallel.pool_kind() == "processes" and parallel.pool_kind("threads") == "threads"
    monkeypatch.setenv("CLEF_PROF_POOL", "fork")
    with pytest.raises(ClefError, match="^CLEF_PROF_POOL='fork': expected threads or processes$"):
        map_captures(os.path.basename, ["a"])
    with pytest.raises(ClefError, match="^pool='dask': expected threads or processes$"):
        map_captures(os.path.basename, ["a"], pool="dask")


def test_leaving_early_waits_for_no_analysis(tmp_path):
    """An analysis between reads (a long stretch of Python, here a wait) cannot be interrupted:
    the first failure is raised at once all the same, and that analysis stops on its own thread."""
    release, waited = threading.Event(), []

    def fn(p):
        if p == "bad":
            raise CaptureError("bad: lacks table X")
        waited.append(release.wait(30))

    t0 = time.monotonic()
    try:
        with pytest.raises(CaptureError, match="^bad: lacks table X$"):
            map_captures(fn, ["bad", "slow"], jobs=2, pool="threads")
        assert time.monotonic() - t0 < 10 and waited == []
    finally:
        release.set()


@pytest.mark.native
def test_cancel_interrupts_a_read_on_the_analysis_own_thread(capture):
    """With one reader thread an analysis reads on its own connection; `Task.cancel` from another
    thread interrupts that read too (an endless query here), not only the reader threads'."""
    path = str(capture("gpu-q1c16-main"))
    task, out = export.Task(1), {}
    endless = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) AS n FROM (SELECT x FROM c LIMIT 4000000000000)")

    def read():
        export.TASK.set(task)
        t0 = time.monotonic()
        try:
            with export.Export.open(path) as cap:
                assert cap._native is not None
                cap.read(endless, ["n"])
        except Exception as exc:  # noqa: BLE001 - what the interrupted read raises
            out["error"] = exc
        out["s"] = time.monotonic() - t0

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.5)
    task.cancel()
    t.join(30)
    assert not t.is_alive() and "error" in out and out["s"] < 10, out
    assert task._open == {}                      # the export unregistered itself when closed


def _marked(mark: str) -> list[int]:
    """Processes whose environment holds CLEF_TEST_PARALLEL=mark (the CLI, its forkserver, its workers)."""
    needle = f"CLEF_TEST_PARALLEL={mark}".encode()
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    out.append(int(pid))
        except OSError:
            pass
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes from a forkserver")
def test_ctrl_c_with_the_process_pool_prints_no_traceback(capture):
    """A real SIGINT to the CLI's whole process group (what Ctrl-C sends: the CLI, its forkserver
    and its workers), at seeded times spread over the forkserver's start, its preload and the
    workers' analyses and the pool's shutdown (spread over this machine's own uninterrupted run),
    repeated: "clef-prof: interrupted" and exit 130 (or, too late, exit 0), never a traceback (4
    runs in 8 printed the forkserver's KeyboardInterrupt, or a late worker's FileNotFoundError for
    its parent's queue; 1 run in about 40 the pool's semaphore finalizer's, or died of SIGINT at
    the interpreter's exit), and no process of the run left behind."""
    import random
    import signal
    import subprocess
    import uuid

    paths = [str(capture("gpu-q1c16-main")), str(capture("gpu-q1c16-pr"))]
    command = [sys.executable, "-m", "clef_prof", "analyze", "--jobs", "2", *paths]
    env = {**os.environ, "CLEF_PROF_POOL": "processes"}
    start = time.monotonic()
    subprocess.run(command, stdout=subprocess.DEVNULL, env=env, check=True)
    whole = time.monotonic() - start       # this machine's run, so the signals land inside it
    rng = random.Random(35)
    codes = []
    for delay in sorted(rng.uniform(0.1, 1.0) * whole for _ in range(8)):
        mark = uuid.uuid4().hex
        env = {**os.environ, "CLEF_PROF_POOL": "processes", "CLEF_TEST_PARALLEL": mark}
        p = subprocess.Popen(command,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
        time.sleep(delay)
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        err = p.communicate(timeout=120)[1]
        assert "Traceback" not in err and p.returncode in (0, 130), (delay, p.returncode, err)
        assert p.returncode == 0 or err.strip().splitlines() == ["clef-prof: interrupted"], (delay, err)
        codes.append(p.returncode)
        for _ in range(50):
            if not _marked(mark):
                break
            time.sleep(0.1)
        assert _marked(mark) == [], delay
    assert codes.count(130) >= 4, codes
