"""`clef-prof bench`: the serving A/B without the profiler, with the uncertainty of every change.

    clef-prof bench --arm main='clef-prof demo-server --variant main' --arm pr='clef-prof demo-server --variant pr' \\
                    --rounds 2 --concurrency 8,16 --words 200,1000 --windows 2 --window-s 30 --warmup 10

Per round, a fresh server per arm (in ABBA order across rounds, as `ab` does), no nsys: health,
warm-up, optional parity bodies, then every case of the matrix (reversed on every other server)
in fixed-length windows. Each window's requests/s, latency percentiles and errors by kind come
from `benchload`; device memory, clocks and host RSS from `monitor`; the table and the bootstrap
intervals from `benchstats`. Every server started is stopped, its whole process tree included
(a marker in its environment, as `record` does), on any failure and on Ctrl-C.
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
from ..errors import ClefError
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

    def __init__(self, argv: list[str], label: str, logs: str, health: str, timeout: float, stop_s: float):
        self.argv, self.label, self.health, self.timeout, self.stop_s = argv, label, health, timeout, stop_s
        self.token = secrets.token_hex(8)
        self.log_out, self.log_err = os.path.join(logs, label + ".stdout.log"), os.path.join(logs, label + ".stderr.log")
        self.proc: subprocess.Popen | None = None
        self.died = threading.Event()
        self._watch_stop = threading.Event()

    def start(self) -> None:
        busy = port_in_use(self.health)
        if busy:
            raise BenchError(f"port {busy[1]} on {busy[0]} already answers before {self.label} started: another "
                             "server is running there; stop it or point --url at the arms' port")
        env = dict(os.environ, **{procs.ENV_MARK: self.token})
        with open(self.log_out, "wb") as out, open(self.log_err, "wb") as err:
            try:
                self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                             start_new_session=True, preexec_fn=procs.pdeathsig)
            except OSError as exc:
                raise BenchError(f"{self.label}: cannot start {shlex.join(self.argv)}: {exc.strerror or exc}") from None
        threading.Thread(target=self._watch, name="clef-prof-watch", daemon=True).start()

    def _watch(self) -> None:
        while not self._watch_stop.wait(0.1):
            if self.proc.poll() is not None:
                self.died.set()
                return

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
            status, text = http("GET", self.health, timeout=2.0)
            if status == 200:
                return time.monotonic() - t0
            last = f"HTTP {status}" if status else text
            if time.monotonic() - t0 > self.timeout:
                raise BenchError(f"{self.label}: not healthy within {self.timeout:g} s (GET {self.health}: {last}); "
                                 f"raise --health-timeout or check --url/--health-url [log: {self.log_err}]")
            time.sleep(0.25)

    def pids(self) -> list[int]:
        return [p.pid for p in procs.marked(self.token)]

    def stop(self) -> list[str]:
        """SIGINT its group, then SIGTERM, SIGKILL; then every marked process. Notes on what it took."""
        self._watch_stop.set()
        notes = []
        if self.proc is not None and self.proc.poll() is None:
            procs.stop_group(self.proc, (self.stop_s, self.stop_s / 2, 5.0))
            if self.proc.returncode is not None and self.proc.returncode == -signal.SIGKILL:
                notes.append(f"{self.label}: did not stop on SIGINT or SIGTERM; killed")
        left = procs.terminate_marked(self.token)
        if left:
            notes.append(f"{self.label}: processes that could not be ended: {procs.describe(left)}")
        return notes


# ---------------------------------------------------------------------------------------------
# the run


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


def _say(args, text: str) -> None:
    if not args.quiet:
        print(f"bench: {text}", file=sys.stderr, flush=True)


def _model(args, url: str) -> str | None:
    if args.model or not args.preset.startswith("vllm"):
        return args.model
    status, text = http("GET", url.rstrip("/") + "/v1/models", timeout=5.0)
    try:
        return json.loads(text)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise BenchError(f"--preset {args.preset}: give --model (GET /v1/models answered "
                         f"{f'HTTP {status}' if status else text[:80]})") from None


async def _session(args, srv: Server, mon, url: str, cases: list[bl.Case], order: list[int], bodies: dict,
                   parity_bodies: list[bytes], check, meta: dict) -> tuple[list[dict], list | None]:
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
    for ci in order:
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
                rec = {"case": ci, "window": w + 1, **win.summary(), **mon.window(win.t0_ns, t_last)}
                out.append(rec)
                _say(args, f"{srv.label}: {case.label()} window {w + 1}/{args.windows}: "
                           f"{rec['throughput_rps']:.1f} req/s, p50 {_ms(rec['latency_ms_p50'])}, "
                           f"p99 {_ms(rec['latency_ms_p99'])}, {rec['errors']} errors")
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


def run(args) -> dict:
    t_start = time.monotonic()
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
    if args.bootstrap < 100 or not 0.5 <= args.confidence < 1:
        raise BenchError("--bootstrap needs at least 100 replicates and --confidence a fraction in [0.5, 1)")
    if (args.preset == "raw") != bool(args.body):
        raise BenchError("--preset raw needs --body FILE, and --body needs --preset raw")
    raw = bl.read_raw_bodies(args.body) if args.body else None
    check = bl.make_check(args.check_response)
    from ..compare.gates import parse_gate
    from .stats import METRICS
    gates = [parse_gate(g, {m: m for m in METRICS}) for g in args.fail_if]
    check_url(args.url, "--url")
    if args.health_url:
        check_url(args.health_url, "--health-url")
    path, health_path = bl.PRESETS[args.preset]
    base_url = args.url.rstrip("/")
    url = base_url + (args.path or path)
    health = args.health_url or base_url + health_path

    logs = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="clef-prof-bench-")
    os.makedirs(logs, exist_ok=True)
    notes: list[str] = []
    if not gpu_present():
        notes.append("no NVIDIA GPU here: device memory, clocks, utilisation and temperature not measured")
    runs = schedule(names, args.rounds, args.order)
    servers, windows, answers = [], [], {}
    bodies: dict[int, list[bytes]] | None = None
    parity_bodies: list[bytes] = []
    served: dict[str, int] = {}
    ok = False
    old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        for k, (rnd, arm) in enumerate(runs):
            served[arm] = served.get(arm, 0) + 1
            order = list(range(len(cases)))[::-1 if k % 2 else 1]
            label = f"{k + 1:02d}-{arm}-r{rnd}"
            srv = Server(dict(arms)[arm], label, logs, health, args.health_timeout, args.stop_timeout)
            meta = {"seq": k + 1, "arm": arm, "round": rnd, "server": served[arm], "case_order": order,
                    "command": dict(arms)[arm], "log": srv.log_err}
            servers.append(meta)
            _say(args, f"server {k + 1}/{len(runs)}: round {rnd}, {arm}: {shlex.join(srv.argv)}")
            mon = None
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
                recs, ans = asyncio.run(_session(args, srv, mon, url, cases, order, bodies, parity_bodies, check, meta))
                for r in recs:
                    windows.append({"seq": len(windows) + 1, "arm": arm, "round": rnd, "server": served[arm],
                                    "server_seq": k + 1, **r})
                if ans is not None:
                    answers[(arm, served[arm])] = ans
            finally:
                if mon is not None:
                    mon.stop()
                notes += srv.stop()
        ok = True
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if not ok and args.out:
            write_json(os.path.join(logs, "bench.json"), {"schema": "clef-prof/bench/1", "status": "failed",
                                                      "servers": servers, "windows": windows, "notes": notes})
        elif ok and not args.out:
            shutil.rmtree(logs, ignore_errors=True)
    return _result(args, names, dict(arms), cases, servers, windows, answers, parity_bodies, gates, notes,
                   time.monotonic() - t_start)


def _interrupt(signum, frame):
    raise Interrupted()


def _result(args, names, commands, cases, servers, windows, answers, parity_bodies, gates, notes, duration) -> dict:
    from . import stats as bs
    from ..compare.gates import evaluate_gates

    base = names[0]
    out_cases = []
    for ci, case in enumerate(cases):
        per_arm = {n: [w for w in windows if w["case"] == ci and w["arm"] == n] for n in names}
        c = {"case": case.as_dict(), "label": case.label(), "baseline": base,
             "arms": {n: bs.arm_figures(ws) for n, ws in per_arm.items()},
             "changes": bs.changes(per_arm, base, args.bootstrap, args.seed, ci, args.confidence)}
        out_cases.append(c)
    if any(w.get("device_memory_peak_mib") is not None for w in windows) and \
            all(w.get("server_device_memory_peak_mib") is None for w in windows):
        notes.append("NVML listed no process of the servers (another PID namespace?): whole-device memory only")
    verdicts = []
    for c in out_cases:
        for v in evaluate_gates(gates, bs.gate_view(c), args.gate_on):
            verdicts.append({"case": c["label"], **v})
    load = "; ".join(t for t, on in (
        ("closed loop: C clients each with one request in flight", any(not c.rate for c in cases)),
        ("open loop (C @ R/s): Poisson arrivals at R/s over at most C connections, latency from the scheduled "
         "send time", any(c.rate for c in cases))) if on)
    return {
        "schema": bs.SCHEMA, "status": "ok", "baseline": base,
        "arms": {n: {"command": commands[n], "servers": sum(1 for s in servers if s["arm"] == n)} for n in names},
        "cases": out_cases,
        "parity": _parity(names, answers, parity_bodies, args.parity_tol) if parity_bodies else None,
        "gates": verdicts,
        "servers": servers,
        "method": {"B": args.bootstrap, "seed": args.seed, "confidence": args.confidence, "rounds": args.rounds,
                   "order": args.order, "windows": args.windows, "window_s": args.window_s, "warmup_s": args.warmup,
                   "load": load, "gate_on": args.gate_on,
                   "interval": "two-level percentile bootstrap: servers within each arm, then windows within each "
                               "drawn server; ci in % of the baseline, ci_abs in the metric's unit"},
        "notes": notes, "duration_s": round(duration, 1),
    }


def write_json(path: str, obj) -> None:
    """`obj` as indented JSON at `path`, through safeio's temporary file and rename."""
    from ..safeio import write_text

    write_text(path, json.dumps(obj, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# command line
