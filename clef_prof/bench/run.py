"""`clef-prof bench`: the serving A/B without the profiler, with the uncertainty of every change.

    clef-prof bench --arm main='clef-prof demo-server --variant main' --arm pr='clef-prof demo-server --variant pr' \\
                    --rounds 8 --concurrency 8,16 --words 200,1000 --windows 1 --window-s 20 --warmup 10

Per round, a fresh server per arm (in ABBA order across rounds, as `ab` does), no nsys: health,
warm-up, optional parity bodies, then every case of the matrix (reversed on every other server)
in fixed-length windows. Each window's requests/s, latency percentiles and errors by kind come
from `benchload`; device memory, clocks and host RSS from `monitor`; the table and the
intervals between servers in run order from `stats`. Every server started is stopped, its whole process tree
included (a marker in its environment and the tree of its descendants, as `record` does; bench
is their subreaper, so a child that detaches is still found), on any failure and on Ctrl-C.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import load as bl
from ..record import procs
from ..record.ab import parse_arms, schedule
from ..base.errors import ClefError
from ..record.control import http, port_in_use
from ..record.load import check_url, client_session
from ..record.plan import gpu_present
from ..record.session import Interrupted


class BenchError(ClefError):
    pass


# ---------------------------------------------------------------------------------------------
# one server


class Server:
    """A server command started in its own session with a marker in its environment."""

    def __init__(self, argv: list[str], label: str, logs: str, health: str, timeout: float, stop_s: float,
                 cpus: set[int] | None = None, env: dict[str, str] | None = None):
        self.argv, self.label, self.health, self.timeout, self.stop_s = argv, label, health, timeout, stop_s
        self.cpus, self.extra_env = cpus, dict(env or {})
        self.token = secrets.token_hex(8)
        self.tree = procs.Tree(self.token)     # every descendant seen, marker or not (`setsid env -i`)
        self._before: set[int] = set()
        self._tree_lock = threading.Lock()     # the watch and monitor threads read the tree too
        self._watcher: threading.Thread | None = None
        self.log_out, self.log_err = os.path.join(logs, label + ".stdout.log"), os.path.join(logs, label + ".stderr.log")
        self.proc: subprocess.Popen | None = None
        self.died = threading.Event()
        self._watch_stop = threading.Event()

    def start(self) -> None:
        busy = port_in_use(self.health)
        if busy:
            raise BenchError(f"port {busy[1]} on {busy[0]} already answers before {self.label} started: another "
                             "server is running there; stop it or point --url at the arms' port")
        env = dict(os.environ, **self.extra_env, **{procs.ENV_MARK: self.token})
        self._before = set(procs.children(os.getpid()))
        with open(self.log_out, "wb") as out, open(self.log_err, "wb") as err:
            try:
                self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                             start_new_session=True, preexec_fn=self._preexec)
            except OSError as exc:
                raise BenchError(f"{self.label}: cannot start {shlex.join(self.argv)}: {exc.strerror or exc}") from None
        self._watcher = threading.Thread(target=self._watch, name="clef-prof-watch", daemon=True)
        self._watcher.start()

    def _preexec(self) -> None:
        procs.pdeathsig()
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)      # inherited by every process the server starts

    def track(self) -> None:
        """Remember the server's descendants now, and the orphans bench adopted as subreaper."""
        if self.proc is not None:
            with self._tree_lock:
                orphans = adopted(self.proc.pid, self._before)
                self.tree.update([self.proc.pid, *orphans])
                for p in filter(None, map(procs.read, orphans)):
                    if p.alive:
                        self.tree.known[p.pid] = p.start

    def _watch(self) -> None:
        ticks = 0
        while not self._watch_stop.wait(0.1):
            if self.proc.poll() is not None:
                self.died.set()
                return
            ticks += 1
            if ticks % 10 == 0:             # once a second: a scan of /proc costs a few ms
                self.track()

    def exit_text(self) -> str:
        code = self.proc.poll() if self.proc else None
        how = f"killed by {procs.sig_name(-code)}" if code is not None and code < 0 else f"exit code {code}"
        return f"{how}: {procs.log_tail(self.log_err) or procs.log_tail(self.log_out) or '(no output)'} [log: {self.log_err}]"

    def wait_healthy(self) -> float:
        t0 = time.monotonic()
        last = "no answer"
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.label}: the server exited during start-up ({self.exit_text()})")
            self.track()
            status, text = http("GET", self.health, timeout=2.0)
            if status == 200:
                return time.monotonic() - t0
            last = f"HTTP {status}" if status else text
            if time.monotonic() - t0 > self.timeout:
                raise BenchError(f"{self.label}: not healthy within {self.timeout:g} s (GET {self.health}: {last}); "
                                 f"raise --health-timeout or check --url/--health-url [log: {self.log_err}]")
            time.sleep(0.25)

    def pids(self) -> list[int]:
        with self._tree_lock:
            return sorted(p.pid for p in self.tree.left())

    def stop(self) -> list[str]:
        """SIGINT its group, then SIGTERM, SIGKILL; then every marked process. Notes on what it took."""
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(5.0)
        notes = []
        if self.proc is not None:
            self.track()
        if self.proc is not None and self.proc.poll() is None:
            procs.stop_group(self.proc, (self.stop_s, self.stop_s / 2, 5.0))
            if self.proc.returncode is not None and self.proc.returncode == -signal.SIGKILL:
                notes.append(f"{self.label}: did not stop on SIGINT or SIGTERM; killed")
        left = procs.terminate_marked(self.token, tree=self.tree)
        if left:
            notes.append(f"{self.label}: processes that could not be ended: {procs.describe(left)}")
        for pid in self.tree.known:                 # orphans bench adopted as subreaper: no zombies left
            if self.proc is None or pid != self.proc.pid:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except (ChildProcessError, OSError):
                    pass
        return notes


_PR_SET_CHILD_SUBREAPER = 36


def subreaper(on: bool) -> None:
    """Linux: make this process the reaper of its orphaned descendants, so that a server's child
    that detaches (`setsid`, a double fork) is re-parented here, not to init, and `Tree` still
    finds it under bench. Best effort: elsewhere the marker and the tree's memory remain."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
    except Exception:
        pass


def adopted(server_pid: int, before: set[int]) -> list[int]:
    """This process's children that are neither the server nor there before it started: the
    orphans of the server's tree that bench adopted as subreaper (one server runs at a time)."""
    return [p for p in procs.children(os.getpid()) if p != server_pid and p not in before]


# ---------------------------------------------------------------------------------------------
# the run


class Hooks:
    """What a caller of `run` (whatif) adds per server; bench itself uses these no-ops.

    `env(seq, arm)`: extra environment of the server; `before_windows(meta)` and
    `after_windows(meta, windows)`: called while the server is idle just before its first window
    and just after its last one drained (with that server's window records); `after_server(meta)`: after it stopped (raise to end the
    run; every server is stopped either way)."""

    def env(self, seq: int, arm: str) -> dict[str, str]:
        return {}

    def before_windows(self, meta: dict) -> None:
        pass

    def after_windows(self, meta: dict, windows: list[dict]) -> None:
        pass

    def after_server(self, meta: dict) -> None:
        pass


def _ints(text: str, what: str, low: int) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BenchError(f"--{what} {text!r}: expected comma-separated integers, e.g. 8,16,32") from None
    if not vals or min(vals) < low:
        raise BenchError(f"--{what} {text!r}: every value must be at least {low}")
    return vals


def cases_from(args) -> list[bl.Case]:
    if args.cases:
        try:
            with open(args.cases) as fh:
                items = json.load(fh)
        except OSError as exc:
            raise BenchError(f"--cases {args.cases}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise BenchError(f"--cases {args.cases}: not JSON ({exc})") from None
        if not isinstance(items, list) or not items:
            raise BenchError(f"--cases {args.cases}: expected a JSON list of cases, e.g. "
                             '[{"concurrency": 8, "words": 200, "questions": 1}]')
        out = []
        for i, it in enumerate(items, 1):
            extra = set(it) - {"concurrency", "words", "questions", "rate"} if isinstance(it, dict) else {"?"}
            try:
                case = bl.Case(int(it["concurrency"]), int(it.get("words", 200)), int(it.get("questions", 1)),
                               float(it["rate"]) if it.get("rate") else None)
            except (KeyError, TypeError, ValueError):
                case = None
            if extra or case is None or case.concurrency < 1 or case.words < 1 or case.questions < 1 or \
                    (case.rate is not None and case.rate <= 0):
                raise BenchError(f"--cases {args.cases}: case {i} must be an object with concurrency >= 1 and "
                                 "optional words >= 1, questions >= 1, rate > 0 (and no other key)")
            out.append(case)
        return out
    rates = [None]
    if args.rate:
        try:
            rates = [float(v) for v in args.rate.split(",") if v.strip()]
        except ValueError:
            raise BenchError(f"--rate {args.rate!r}: expected requests per second, e.g. 200 or 100,200") from None
        if not rates or min(rates) <= 0:
            raise BenchError(f"--rate {args.rate!r}: rates must be positive")
    return [bl.Case(c, w, q, r) for c, w, q, r in itertools.product(
        _ints(args.concurrency, "concurrency", 1), _ints(args.words, "words", 1), _ints(args.questions, "questions", 1),
        rates)]


def _say(args, text: str, live: bool = False) -> None:
    """A progress line on stderr (none with --quiet); `live` lines (each window's) only on a terminal."""
    if not args.quiet and (not live or sys.stderr.isatty()):
        print(f"bench: {text}", file=sys.stderr, flush=True)


def eta(t_start: float, done: int, total: int, per_server_s: float) -> str:
    """The time the run has left as server `done + 1` of `total` starts: the mean time of the servers
    done so far times those left, or before the first the plan (warm-up and windows; start-up unknown)."""
    if not done:
        return f"ETA ≈ {_duration(total * per_server_s)} plus start-up"
    return f"ETA {_duration((time.monotonic() - t_start) / done * (total - done))}"


def _model(args, url: str) -> str | None:
    if args.model or not args.preset.startswith("vllm"):
        return args.model
    status, text = http("GET", url.rstrip("/") + "/v1/models", timeout=5.0)
    try:
        return json.loads(text)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise BenchError(f"--preset {args.preset}: give --model (GET /v1/models answered "
                         f"{f'HTTP {status}' if status else text[:80]})") from None


def _scraper(args, url: str, asked: bool, warned: set[str], notes: list[str]):
    """A started Scraper of the server's /metrics when one scrape now answers with queue depth or
    running requests; else None, said once (a warning when --metrics-url asked for it; a note
    when the default URL answers without them; nothing when it does not answer)."""
    from .scrape import GAUGES, ScrapeError, Scraper, fetch

    try:
        got = fetch(url)
    except ScrapeError as exc:
        if asked and url not in warned:
            warned.add(url)
            text = f"--metrics-url {url}: {exc}; server-side metrics not scraped"
            print(f"clef-prof: warning: {text}", file=sys.stderr, flush=True)
            notes.append(text)
        return None
    if not got:
        if url not in warned:
            warned.add(url)
            notes.append(f"GET {url} has none of {', '.join(n for names in GAUGES.values() for n in names)}: "
                         "no queue depth or running requests")
        return None
    _say(args, f"scraping {url} ({', '.join(sorted(got))})")
    return Scraper(url).start()


async def _session(args, srv: Server, mon, scr, url: str, cases: list[bl.Case], order: list[int], bodies: dict,
                   parity_bodies: list[bytes], check, meta: dict, hooks: Hooks) -> tuple[list[dict], list | None]:
    """Warm-up, parity, then the windows of every case in `order`, on one server."""
    first = cases[order[0]]
    cmax = max(c.concurrency for c in cases)
    async with client_session(cmax) as s:
        wu = await bl.warm_up(s, url, bodies[order[0]], cmax, args.warmup, args.request_timeout, check, srv.died)
        meta["warmup"] = wu
        if srv.died.is_set():
            raise BenchError(f"{srv.label}: the server exited during warm-up ({srv.exit_text()})")
        if wu["completions"] == 0:
            raise BenchError(f"{srv.label}: no request succeeded during warm-up ({wu['errors']} errors; first: "
                             f"{wu['first_error']}); check --preset, --path, --body and --check-response")
        answers = await bl.fetch_all(s, url, parity_bodies, args.request_timeout) if parity_bodies else None
    _say(args, f"{srv.label}: warmed up ({wu['completions']} requests in {wu['seconds']:.1f} s, C={cmax}, "
               f"{first.label()})")
    out = []
    hooks.before_windows(meta)
    for i, ci in enumerate(order):
        case = cases[ci]
        async with client_session(case.concurrency) as s:
            for w in range(args.windows):
                seed = args.seed * 1_000_003 + ci * 1009 + w
                mon.sample()
                win = await bl.run_window(s, url, bodies[ci], case, args.window_s, args.request_timeout, check,
                                          srv.died, seed=seed, start_at=w * 7919)
                t_last = max((d for _, d, _ in win.records), default=win.t_end_ns)
                mon.sample()
                if srv.died.is_set():
                    raise BenchError(f"{srv.label}: the server exited during window {w + 1} of case "
                                     f"{case.label()} ({srv.exit_text()})")
                rec = {"case": ci, "window": w + 1, **win.summary(good_ms(args)),
                       **mon.window(win.t0_ns, t_last), **(scr.window(win.t0_ns, t_last) if scr else {})}
                out.append(rec)
                _say(args, f"{srv.label}: load point {i + 1}/{len(order)}, {case.label()}, window {w + 1}/"
                           f"{args.windows}: {rec['throughput_rps']:.1f} req/s, p50 {_ms(rec['latency_ms_p50'])}, "
                           f"p99 {_ms(rec['latency_ms_p99'])}, {rec['errors']} errors", live=True)
    hooks.after_windows(meta, out)
    return out, answers


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f} ms"


def _parity(arm_names: list[str], answers: dict, bodies: list[bytes], tol: float) -> dict:
    """Every server's answers against the baseline's first server."""
    base = arm_names[0]
    ref_key = min(k for k in answers if k[0] == base)
    ref = answers[ref_key]
    out = {"reference": f"{base} server 1", "bodies": len(bodies), "tolerance": tol, "arms": {}, "mismatches": []}
    for name in arm_names:
        keys = sorted(k for k in answers if k[0] == name and k != ref_key)
        bad = set()
        for key in keys:
            for i, got in enumerate(answers[key]):
                why = bl.compare_answers(ref[i], got, tol)
                if why:
                    bad.add(i)
                    out["mismatches"].append({"arm": name, "server": key[1], "body_index": i, "difference": why,
                                              "body": bodies[i][:300].decode("utf-8", "replace")})
        out["arms"][name] = {"bodies": len(bodies), "matched": len(bodies) - len(bad), "servers": len(keys)}
    return out


def run(args, *, arms: list[tuple[str, list[str]]] | None = None, hooks: Hooks | None = None,
        keep_going: bool = False) -> dict:
    """The bench run. `arms` (name, argv) instead of --arm, `hooks` per server (whatif); with
    `keep_going` a server that fails is recorded (its meta's "failed") and the run goes on."""
    t_start = time.monotonic()
    hooks = hooks or Hooks()
    if arms is None:
        if len(args.arm) < 2:
            raise BenchError("give at least two arms: --arm main=CMD --arm pr=CMD")
        arms = parse_arms(args.arm)
    names = [a for a, _ in arms]
    cases = cases_from(args)
    for opt, low in (("rounds", 1), ("windows", 1)):
        if getattr(args, opt) < low:
            raise BenchError(f"--{opt} must be at least {low}")
    if not (0 < args.window_s < math.inf and 0 <= args.warmup < math.inf and 0 < args.request_timeout < math.inf):
        raise BenchError("--window-s and --request-timeout must be positive, --warmup not negative")
    if args.parity < 0 or args.parity_tol < 0:
        raise BenchError("--parity and --parity-tol must not be negative")
    check_stats_options(args)
    if (args.preset == "raw") != bool(args.body):
        raise BenchError("--preset raw needs --body FILE, and --body needs --preset raw")
    raw = bl.read_raw_bodies(args.body) if args.body else None
    check = bl.make_check(args.check_response)
    slos = parse_slos(args)
    gates = parse_gates(args.fail_if, slos)
    check_url(args.url, "--url")
    if args.health_url:
        check_url(args.health_url, "--health-url")
    metrics_url = getattr(args, "metrics_url", None)
    if metrics_url and metrics_url != "none":
        check_url(metrics_url, "--metrics-url")
    check_outputs(args)
    server_cpus, load_cpus = parse_cpus(args.cpus, "--cpus"), parse_cpus(args.load_cpus, "--load-cpus")
    path, health_path = bl.PRESETS[args.preset]
    base_url = args.url.rstrip("/")
    url = base_url + (args.path or path)
    health = args.health_url or base_url + health_path
    scrape_url = None if metrics_url == "none" else metrics_url or base_url + "/metrics"
    warned: set[str] = set()

    logs = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="clef-prof-bench-")
    os.makedirs(logs, exist_ok=True)
    notes: list[str] = []
    if not gpu_present():
        notes.append("no NVIDIA GPU here: device memory, clocks, utilisation and temperature not measured")
    runs = schedule(names, args.rounds, args.order)
    _say(args, estimate(len(runs), len(names), len(cases), args))
    per_server_s = args.warmup + len(cases) * args.windows * args.window_s
    t_first = time.monotonic()
    if server_cpus and load_cpus and server_cpus & load_cpus:
        notes.append(f"--cpus and --load-cpus share CPUs {_cpu_text(server_cpus & load_cpus)}: the load generator "
                     "competes with the servers there")
    servers, windows, answers = [], [], {}
    bodies: dict[int, list[bytes]] | None = None
    parity_bodies: list[bytes] = []
    served: dict[str, int] = {}
    ok = False
    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)} \
        if threading.current_thread() is threading.main_thread() else {}
    own_cpus = os.sched_getaffinity(0) if load_cpus else None
    subreaper(True)
    try:
        if load_cpus:
            os.sched_setaffinity(0, load_cpus)      # this process runs the load generator
        for k, (rnd, arm) in enumerate(runs):
            served[arm] = served.get(arm, 0) + 1
            order = list(range(len(cases)))[::-1 if k % 2 else 1]
            label = f"{k + 1:02d}-{arm}-r{rnd}"
            srv = Server(dict(arms)[arm], label, logs, health, args.health_timeout, args.stop_timeout, server_cpus,
                         hooks.env(k + 1, arm))
            meta = {"seq": k + 1, "arm": arm, "round": rnd, "server": served[arm], "case_order": order,
                    "command": dict(arms)[arm], "log": srv.log_err}
            servers.append(meta)
            _say(args, f"server {k + 1}/{len(runs)}: round {rnd}, {arm}, {eta(t_first, k, len(runs), per_server_s)}: "
                       f"{shlex.join(srv.argv)}")
            mon = scr = None
            try:
                srv.start()
                meta["healthy_s"] = round(srv.wait_healthy(), 3)
                if bodies is None:
                    model = _model(args, base_url)
                    bodies = {i: bl.bodies_for(args.preset, c, 64, seed=args.seed * 1000 + i, model=model, raw=raw)
                              for i, c in enumerate(cases)}
                    parity_bodies = [bl.bodies_for(args.preset, cases[i % len(cases)], 1, seed=10_000 + i,
                                                   model=model, raw=raw)[0] if not raw else raw[i % len(raw)]
                                     for i in range(args.parity)]
                from .monitor import Monitor
                mon = Monitor(srv.pids).start()
                notes += [n for n in mon.notes if n not in notes]
                if scrape_url:
                    scr = _scraper(args, scrape_url, bool(metrics_url), warned, notes)
                recs, ans = asyncio.run(_session(args, srv, mon, scr, url, cases, order, bodies, parity_bodies,
                                                 check, meta, hooks))
                for r in recs:
                    windows.append({"seq": len(windows) + 1, "arm": arm, "round": rnd, "server": served[arm],
                                    "server_seq": k + 1, **r})
                if ans is not None:
                    answers[(arm, served[arm])] = ans
            except BenchError as exc:
                if not keep_going:
                    raise
                meta["failed"] = str(exc)
                _say(args, f"{label}: failed, going on: {exc}")
            finally:
                if mon is not None:
                    mon.stop()
                if scr is not None:
                    scr.stop()
                    if scr.note():
                        notes.append(f"{label}: {scr.note()}")
                notes += srv.stop()
            hooks.after_server(meta)
        ok = True
    finally:
        subreaper(False)
        if own_cpus:
            os.sched_setaffinity(0, own_cpus)
        for s, h in old.items():
            signal.signal(s, h)
        if not ok and args.out:
            from .stats import SCHEMA
            write_json(os.path.join(logs, "bench.json"), {"schema": SCHEMA, "status": "failed",
                                                      "servers": servers, "windows": windows, "notes": notes})
        elif ok and not args.out:
            shutil.rmtree(logs, ignore_errors=True)
    parity = _parity(names, answers, parity_bodies, args.parity_tol) if parity_bodies else None
    design = {"rounds": args.rounds, "order": args.order, "windows": args.windows, "window_s": args.window_s,
              "warmup_s": args.warmup, "seed": args.seed, "cpus": _cpu_text(server_cpus),
              "load_cpus": _cpu_text(load_cpus), "family": getattr(args, "family", "none"), "slos": slos,
              "metrics_url": scrape_url}
    return _result(names, dict(arms), cases, servers, windows, parity, gates, args.gate_on, args.confidence, design,
                   notes, time.monotonic() - t_start)


def parse_slos(args) -> list[dict]:
    from .stats import SloError, parse_slo
    try:
        return [parse_slo(t) for t in getattr(args, "slo", None) or []]
    except SloError as exc:
        raise BenchError(str(exc)) from None


def good_ms(args) -> float | None:
    """The latency a request must answer within to count in goodput: the tightest --slo (every SLO
    is a latency bound), or whatif's --slo-ms."""
    slos = parse_slos(args)
    return min(s["max_ms"] for s in slos) if slos else getattr(args, "slo_ms", None)


def parse_gates(texts: list[str], slos: list[dict]) -> list:
    """--fail-if on bench's figures; `goodput` (goodput_rps) only with --slo."""
    from ..compare.gates import parse_gate
    from .stats import FIGURES, METRICS

    known = {m: m for m in (FIGURES if slos else METRICS)}
    if slos:
        known["goodput"] = "goodput_rps"
    out = []
    for g in texts:
        if not slos and g.strip().startswith("goodput"):
            raise BenchError(f"--fail-if {g!r}: goodput needs --slo (e.g. --slo \"p99_ms<=200\"): the requests "
                             "that meet it are what it counts")
        out.append(parse_gate(g, known))
    return out


def check_outputs(args) -> None:
    """Refuse, before any server starts, a report (-o) or an --out folder's bench.json that would
    be written over an input (--body, --cases) or that cannot be written."""
    from ..base.safeio import check_output

    inputs = [p for p in (args.body, args.cases) if p]
    try:
        if args.output:
            check_output(args.output, inputs)
        if args.out:
            if os.path.exists(args.out) and not os.path.isdir(args.out):
                raise BenchError(f"--out {args.out}: not a folder")
            bj = os.path.join(args.out, "bench.json")
            if os.path.isdir(args.out):
                check_output(bj, inputs)
            elif any(os.path.realpath(bj) == os.path.realpath(i) for i in inputs):
                raise BenchError(f"{bj}: is an input of this command; refusing to write over it")
            if args.output and os.path.realpath(args.output) == os.path.realpath(bj):
                raise BenchError(f"-o {args.output}: --out writes its own bench.json there; give another path")
    except ClefError as exc:
        raise BenchError(str(exc)) from None


def parse_cpus(text: str | None, what: str) -> set[int] | None:
    """`0-3,6` to {0, 1, 2, 3, 6}, every CPU one this process may run on."""
    if not text:
        return None
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi) if hi else int(lo)
            if a < 0 or b < a:
                raise ValueError
            cpus.update(range(a, b + 1))
    except ValueError:
        raise BenchError(f"{what} {text!r}: expected CPU numbers and ranges, e.g. 2-7 or 0,2,4") from None
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
        raise BenchError(f"{what} {text!r}: CPU {_cpu_text(cpus - allowed)} not available here (this process may "
                         f"run on {_cpu_text(allowed)})")
    return cpus


def _cpu_text(cpus) -> str | None:
    """{0, 1, 2, 5} to '0-2,5'."""
    if not cpus:
        return None
    out, run = [], []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def estimate(n_servers: int, n_arms: int, n_cases: int, args) -> str:
    """The run's length before it starts: measured time per server, start-up not counted."""
    per = args.warmup + n_cases * args.windows * args.window_s
    total = n_servers * per
    return (f"{n_servers} servers ({n_servers // n_arms} per arm) × ({args.warmup:g} s warm-up + {n_cases} case"
            f"{'s' if n_cases != 1 else ''} × {args.windows} window{'s' if args.windows != 1 else ''} × "
            f"{args.window_s:g} s) ≈ {_duration(total)}, plus each server's start-up")


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _interrupt(signum, frame):
    raise Interrupted()


def _result(names, commands, cases, servers, windows, parity, gates, gate_on: str, confidence: float, design: dict,
            notes, duration) -> dict:
    """The report from the windows: per case each arm's figures and the changes with their verdicts.
    `design`: how the windows were measured (rounds, order, windows, window_s, warmup_s, seed, cpus)."""
    from . import stats as bs
    from ..compare.gates import evaluate_gates
    from ..compare.welch import MIN_UNITS

    base = names[0]
    windows, refused = bs.usable(windows)
    out_cases = []
    for ci, case in enumerate(cases):
        per_arm = {n: [w for w in windows if w["case"] == ci and w["arm"] == n] for n in names}
        c = {"case": case.as_dict(), "label": case.label(), "baseline": base,
             "arms": {n: bs.arm_figures(ws) for n, ws in per_arm.items()},
             "changes": bs.changes(per_arm, base, confidence)}
        out_cases.append(c)
    slos = design.get("slos") or []
    for c in out_cases:
        if slos:
            c["slo"] = bs.slo_case(c["arms"], slos)
    bs.saturation(out_cases)
    notes = list(notes) + [n for n in refused if n not in notes]
    if any(w.get("device_memory_peak_mib") is not None for w in windows) and \
            all(w.get("server_device_memory_peak_mib") is None for w in windows):
        note = "NVML listed no process of the servers (another PID namespace?): whole-device memory only"
        if note not in notes:
            notes.append(note)
    from ..compare.family import apply_family, family_gates
    family = design.get("family", "none")
    fam = {n: apply_family([c for case in out_cases for c in case["changes"] if c["arm"] == n], family, confidence)
           for n in names[1:]}
    verdicts = []
    for c in out_cases:
        for v in evaluate_gates(gates, bs.gate_view(c, confidence), gate_on):
            verdicts.append({"case": c["label"], **v})
    verdicts = family_gates(verdicts, family, confidence)
    load = "; ".join(t for t, on in (
        ("closed loop: C clients each with one request in flight", any(not c.rate for c in cases)),
        ("open loop (C @ R/s): Poisson arrivals at R/s over at most C connections, latency from the scheduled "
         "send time", any(c.rate for c in cases))) if on)
    return {
        "schema": bs.SCHEMA, "status": "ok", "baseline": base,
        "arms": {n: {"command": commands[n], "servers": sum(1 for s in servers if s["arm"] == n)} for n in names},
        "cases": out_cases,
        "parity": parity,
        "slo": {"slos": slos, "per_request_ms": min(x["max_ms"] for x in slos), "loads": bs.slo_loads(out_cases, slos)}
        if slos else None,
        "capacity": bs.capacity(out_cases, confidence),
        "gates": verdicts,
        "family": fam,
        "servers": servers,
        "method": {**design, "confidence": confidence, "load": load, "gate_on": gate_on,
                   "min_servers": MIN_UNITS,
                   "interval": "servers as units in run order: each server's figure (its windows' ratio of sums, "
                               "on logs where positive) by least squares on its arm and its slot in the run order "
                               "(a linear drift fitted beside the change, df = servers - 3; `drift`: its size); "
                               "Welch t (Satterthwaite df) where the windows carry no run order; ci in % of the baseline (exp(CI) - 1), "
                               "ci_abs in the metric's unit (baseline figure × ci / 100); no interval below "
                               f"{MIN_UNITS} servers per arm; mdc: the change found 80% of the time, its spread being measured (noncentral t)"},
        "notes": notes, "duration_s": round(duration, 1),
    }


def rejudge(args) -> dict:
    """The report of an earlier run recomputed from its saved windows (`--from DIR`), with this
    run's --confidence, --fail-if and --gate-on: no server is started."""
    path = args.from_dir
    if os.path.isdir(path):
        path = os.path.join(path, "bench.json")
    try:
        with open(path, encoding="utf-8") as fh:
            saved = json.load(fh)
    except OSError as exc:
        raise BenchError(f"--from {args.from_dir}: cannot read {path} ({exc.strerror or exc}); give the --out "
                         "folder of a bench run or its JSON report") from None
    except ValueError as exc:
        raise BenchError(f"--from {path}: not JSON ({exc})") from None
    if not isinstance(saved, dict) or not str(saved.get("schema", "")).startswith("clef-prof/bench/"):
        raise BenchError(f"--from {path}: not a report of clef-prof bench (no clef-prof/bench schema)")
    if saved.get("status") != "ok":
        raise BenchError(f"--from {path}: that run did not finish (status {saved.get('status')!r}): its windows "
                         "do not cover every server and case")
    try:
        cases = [bl.Case(int(c["case"]["concurrency"]), int(c["case"]["words"]), int(c["case"]["questions"]),
                     c["case"]["rate"]) for c in saved["cases"]]
        windows = sorted((w for c in saved["cases"] for a in c["arms"].values() for w in a["windows"]),
                         key=lambda w: w["seq"])
        names = list(saved["arms"])
        commands = {n: a["command"] for n, a in saved["arms"].items()}
        design = {k: saved["method"][k] for k in ("rounds", "order", "windows", "window_s", "warmup_s")}
        design.update({"seed": saved["method"].get("seed"), "cpus": saved["method"].get("cpus"),
                       "load_cpus": saved["method"].get("load_cpus"), "from": os.path.abspath(path)})
        servers = saved["servers"]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise BenchError(f"--from {path}: the report lacks its windows, cases or method (written by another "
                         "version?)") from None
    saved_slos = (saved.get("slo") or {}).get("slos") or []
    slos = parse_slos(args)
    if slos and [x["text"] for x in slos] != [x["text"] for x in saved_slos]:
        raise BenchError(f"--from {path}: --slo {', '.join(x['text'] for x in slos)} differs from the run's ("
                         f"{', '.join(x['text'] for x in saved_slos) or 'none'}): goodput counts requests as they "
                         "were measured, and the windows keep counts, not every request's latency")
    gates = parse_gates(args.fail_if, saved_slos)
    check_stats_options(args)
    design["family"] = getattr(args, "family", "none")
    design.update(slos=saved_slos, metrics_url=saved["method"].get("metrics_url"))
    return _result(names, commands, cases, servers, windows, saved.get("parity"), gates, args.gate_on,
                   args.confidence, design, saved.get("notes", []), float(saved.get("duration_s", 0.0)))


def check_stats_options(args) -> None:
    if not 0.5 <= args.confidence < 1:
        raise BenchError(f"--confidence {args.confidence}: expected a fraction in [0.5, 1), e.g. 0.95")


def write_json(path: str, obj) -> None:
    """`obj` as indented JSON at `path`, through safeio's temporary file and rename."""
    from ..base.safeio import write_text

    write_text(path, json.dumps(obj, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# command line
