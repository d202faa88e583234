"""Analyze many captures at once: one capture per task, results in input order.

`map_captures` maps a per-capture function over paths, `jobs` captures at a time: on threads of
this process (the default), each analysis reading with usable CPUs // jobs reader threads (SQLite
and NumPy run without the GIL: no process to start, no result to pickle), or in worker processes
(ProcessPoolExecutor from a forkserver; `pool="processes"` or CLEF_PROF_POOL=processes), and in
this process, one after another, when the input is small. It returns what the function returned,
in the order of `paths`; `analyze_many` maps `analyze` so, or with `dask=ADDRESS` on a Dask
cluster (the way nsys recipes distribute one report per task), and returns the results
(`Analysis.result`, a `model.Result`); `compare` maps its own loader (analyze's result and
per-batch table). Each task reads one export and returns a small result of plain values
(results pickle, for processes and Dask).

A capture that fails becomes a `ClefError` naming its path: raised (the first failing capture
in input order) with `errors="raise"`, or left in its place in the list with `errors="return"`.
Leaving early (that failure, Ctrl-C) stops the analyses still running at their next read.
Dask is optional: `pip install 'dask[distributed]'` on the client and the workers, which must
see the capture paths (a shared file system) and have clef-prof installed.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Iterable, Literal

from ..base.config import StageConfig
from ..base.errors import ClefError

Outcome = tuple  # ("ok", result) or ("error", exception class name, message, exit code)
SMALL_BYTES = 64 << 20      # jobs=None below this much input: analyze in this process
POOLS = ("threads", "processes")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _readers_per_job(jobs: int) -> int:
    from .read.export import usable_cpus
    return max(1, usable_cpus() // max(1, jobs))


def _init_worker(readers: int) -> None:
    """A worker process: its readers' share of the CPUs; Ctrl-C (SIGINT to the terminal's whole
    process group) ends it at once, with no traceback of its own: the parent says "interrupted"
    (it comes from a forkserver that ignores SIGINT, and would ignore it too)."""
    import signal

    from .read import export as capture
    capture.READERS = readers
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _result(path: str, config: StageConfig, requests: int | None):
    """analyze's result (`model.Result`) of one capture; module level, so that it pickles by name."""
    from .pipeline import analyze
    return analyze(path, config, requests=requests).result


def _run_one(fn: Callable, path: str, *args) -> Outcome:
    """fn(path, *args), never raising: errors travel back as plain data (they pickle anywhere)."""
    try:
        return ("ok", fn(path, *args))
    except ClefError as exc:
        return ("error", type(exc).__name__, str(exc), exc.exit_code)
    except Exception as exc:  # an internal error on one capture must not take the others down
        return ("error", "ClefError", f"internal error: {type(exc).__name__}: {exc}", 1)


def _as_error(path: str, outcome: Outcome) -> ClefError:
    _, cls_name, message, exit_code = outcome
    from ..base import errors
    cls = getattr(errors, cls_name, ClefError)
    if not (isinstance(cls, type) and issubclass(cls, ClefError)):
        cls = ClefError
    text = message if message.startswith(str(path)) else f"{path}: {message}"
    err = cls(text)
    err.exit_code = exit_code
    err.path = str(path)
    return err


def _finish(paths: list[str], outcomes: Iterable[Outcome], errors: str) -> list:
    out = []
    for path, outcome in zip(paths, outcomes):
        if outcome[0] == "ok":
            out.append(outcome[1])
        else:
            err = _as_error(path, outcome)
            if errors == "raise":
                raise err
            out.append(err)
    return out


def _outcome(future) -> Outcome:
    try:
        return future.result()
    except Exception as exc:  # the worker died (killed, out of memory) or could not start
        return ("error", "ClefError", f"analysis process failed: {type(exc).__name__}: {exc}", 1)


def _context():
    """forkserver where there is one (safe with threads, and workers start from a server that
    has clef_prof imported already), else spawn."""
    import multiprocessing
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["clef_prof.base._sigint_default", "clef_prof.analyze.pipeline"])
        return ctx
    return multiprocessing.get_context("spawn")


def _checked(paths: Iterable[str | os.PathLike], errors: str) -> list[str]:
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")
    return [os.fspath(p) for p in paths]


def worker_count(paths: list[str], jobs: int | None) -> int:
    """The captures `map_captures` analyzes at a time: `jobs`, or by default one per
    `export.READERS` CPUs (an analysis keeps that many busy with its reader threads, so more at
    once would only share the same CPUs and hold more analyses in memory) and one when the
    captures add up to less than 64 MB; at most one per capture."""
    if jobs is None:
        if sum(_size(p) for p in paths) < SMALL_BYTES:
            return 1            # a small analysis is mostly Python: the GIL or a process's start-up eats the gain
        from .read.export import READERS, usable_cpus
        jobs = usable_cpus() // max(1, READERS)
    return max(1, min(jobs, len(paths)))


def pool_kind(pool: str | None = None) -> str:
    """`pool`, else $CLEF_PROF_POOL, else "threads"; anything but "threads" or "processes" is refused."""
    raw = pool if pool is not None else os.environ.get("CLEF_PROF_POOL", "").strip() or "threads"
    if raw not in POOLS:
        where = "pool" if pool is not None else "CLEF_PROF_POOL"
        raise ClefError(f"{where}={raw!r}: expected threads or processes")
    return raw


def map_captures(fn: Callable, paths: Iterable[str | os.PathLike], args: tuple = (), jobs: int | None = None, *,
                 errors: Literal["raise", "return"] = "raise", pool: str | None = None) -> list:
    """`fn(path, *args)` for each path, in input order, `worker_count(paths, jobs)` captures at a
    time, on threads or in worker processes (`pool_kind(pool)`; for processes fn and args must
    pickle: a module-level function). A capture whose fn raises becomes a `ClefError` naming its
    path: raised (the first in input order) or returned in its place."""
    paths = _checked(paths, errors)
    kind = pool_kind(pool)
    if not paths:
        return []
    jobs = worker_count(paths, jobs)
    if jobs == 1:
        return _finish(paths, (_run_one(fn, p, *args) for p in paths), errors)
    if kind == "threads":
        return _on_threads(fn, paths, args, jobs, errors)
    from concurrent.futures import ProcessPoolExecutor
    ctx = _context()
    if ctx.get_start_method() == "forkserver":
        import signal
        from multiprocessing import forkserver

        # the forkserver starts with SIGINT ignored (an ignored signal stays ignored across exec,
        # and Python then keeps it so), then takes SIGINT's default action (its first preload,
        # clef_prof.base._sigint_default) and hands that to its workers: a Ctrl-C while it started
        # or imported its preload, or while a worker started, printed a KeyboardInterrupt (or,
        # the parent gone, a FileNotFoundError) traceback. This process ignores SIGINT only
        # while it forks the server (a few ms; a blocked mask would not do: the spawn resets it)
        if threading.current_thread() is threading.main_thread():
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                forkserver.ensure_running()
            finally:
                signal.signal(signal.SIGINT, old)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                               initargs=(_readers_per_job(jobs),))
    futures: list = []
    try:
        futures += [pool.submit(_run_one, fn, p, *args) for p in paths]
        # in input order; with errors="raise" the first failure cancels what has not started
        return _finish(paths, (_outcome(f) for f in futures), errors)
    except KeyboardInterrupt:
        # Ctrl-C, or a SIGINT to this process alone: the workers and the forkserver go at once
        # (SIGKILL: nothing of theirs to keep). A server still starting when the terminal's
        # SIGINT came (it ignores it then) would else fork the workers asked of it after this
        # process is gone, and each would print a traceback for the queue it cannot find;
        # the next map_captures starts a new server (forkserver.ensure_running)
        _kill(pool, ctx)
        raise
    finally:
        for f in futures:
            f.cancel()
        _shut_down(pool, ctx)


def _kill(pool, ctx) -> None:
    """SIGKILL to the pool's workers and, from a forkserver, to the server."""
    import signal

    from multiprocessing import forkserver
    pids = [p.pid for p in (getattr(pool, "_processes", None) or {}).values()]
    server = getattr(forkserver._forkserver, "_forkserver_pid", None) if ctx.get_start_method() == \
        "forkserver" else None
    for pid in pids + ([server] if server else []):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _shut_down(pool, ctx) -> None:
    """pool.shutdown() with SIGINT held: the pool's queues are freed there, and a Ctrl-C inside
    their semaphores' finalizers printed "Exception ignored ... Traceback" (the resource tracker
    then warned of a semaphore it could not find) after a complete analysis. A Ctrl-C meanwhile
    kills the workers (nothing left to wait for) and is raised once the pool is down."""
    import gc
    import signal
    if threading.current_thread() is not threading.main_thread():
        pool.shutdown()
        return
    caught: list = []

    def hold(signum, frame) -> None:
        caught.append(signum)
        _kill(pool, ctx)

    old = signal.signal(signal.SIGINT, hold)
    try:
        pool.shutdown()
        gc.collect()            # a queue held in a reference cycle is freed here too, not later
    finally:
        signal.signal(signal.SIGINT, old)
    if caught:
        raise KeyboardInterrupt


def _on_threads(fn: Callable, paths: list[str], args: tuple, jobs: int, errors: str) -> list:
    """map_captures on `jobs` threads of this process, each analysis reading with its share of
    the CPUs (`export.Task`). Leaving early (a failure with errors="raise", Ctrl-C) cancels the
    task and returns at once: the reads running are interrupted, and an analysis between reads
    stops at its next one on its own (daemon) thread, which nothing waits for."""
    from .read import export
    task = export.Task(_readers_per_job(jobs))
    outcomes: list = [None] * len(paths)
    done = [threading.Event() for _ in paths]
    todo = iter(range(len(paths)))
    lock = threading.Lock()

    def work() -> None:
        export.TASK.set(task)
        while not task.stop.is_set():
            with lock:
                i = next(todo, None)
            if i is None:
                return
            outcomes[i] = _run_one(fn, paths[i], *args)
            done[i].set()

    for k in range(jobs):
        threading.Thread(target=work, name=f"clef-capture-{k}", daemon=True).start()

    def in_order():
        for i, ready in enumerate(done):
            ready.wait()
            yield outcomes[i]

    try:
        return _finish(paths, in_order(), errors)
    finally:
        task.cancel()


def analyze_many(paths: Iterable[str | os.PathLike], config: StageConfig = StageConfig(),
                 requests: int | None = None, jobs: int | None = None, *,
                 errors: Literal["raise", "return"] = "raise", dask: str | None = None,
                 pool: str | None = None) -> list:
    """`analyze(path).result` (a `model.Result`) for each path, in input order, `jobs` captures at a time.

    jobs: captures at a time (default: one per two CPUs, as an analysis reads with two threads; at
    most one per capture, and one, i.e. one after another, when the captures add up to less than
    64 MB).
    pool: "threads" (the default; $CLEF_PROF_POOL) or "processes" (each capture in a worker process).
    Each analysis reads with usable CPUs // jobs threads (export.usable_cpus), so the machine is not oversubscribed.
    dask: a Dask scheduler address ("tcp://host:8786"), or "local" for a local cluster of
    `jobs` single-threaded workers; one capture per task, gathered in order.
    """
    if dask is None:
        return map_captures(_result, paths, (config, requests), jobs, errors=errors, pool=pool)
    paths = _checked(paths, errors)
    return _finish(paths, _dask_outcomes(paths, config, requests, jobs, dask), errors) if paths else []


def _dask_outcomes(paths: list[str], config: StageConfig, requests: int | None, jobs: int | None,
                   address: str) -> list[Outcome]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ClefError("--dask needs Dask: pip install 'dask[distributed]' (on the workers too)") from None
    cluster = None
    try:
        if address == "local":
            from .read.export import usable_cpus
            n = max(1, min(jobs or usable_cpus(), len(paths)))
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(address, timeout=10)
    except Exception as exc:
        if cluster is not None:
            cluster.close()
        raise ClefError(f"cannot reach the Dask scheduler {address!r}: {type(exc).__name__}: {exc}") from None
    try:
        # map: one capture per task (pure=False: a capture file can change under the same path);
        # reduce: the small results back here, in input order
        n = len(paths)
        futures = client.map(_run_one, [_result] * n, paths, [config] * n, [requests] * n, pure=False)
        return [_outcome(f) for f in futures]      # a task whose workers all died names its capture
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
