"""`clef-prof record`: one repeatable command for the manual capture procedure.

    clef-prof record --out DIR [--spec annotations/X.toml] [options] -- <server command>
    clef-prof record --out DIR -- clef-prof demo-server --variant pr

1. Builds the nsys command (CUDA, NVTX and OS-runtime trace, Python sampling, CUDA-graph
   granularity, fork tracing, a capture range, the output name) and prints it; `--dry-run`
   stops there.
2. Starts the server under nsys (with the stage spec injected when --spec is given), waits
   until it is healthy, warms it up under load, opens the window, holds it for --duration,
   closes it, stops the server (SIGINT, then SIGTERM, then SIGKILL, with timeouts) and exports
   the report to SQLite. The window is opened one of three ways (`--window`):
   - `profiler-api`: POST /start_profile -> cudaProfilerStart in the server, nsys
     `--capture-range=cudaProfilerApi` (a GPU server with profiling endpoints);
   - `nsys`: `nsys launch` at start-up, then `nsys start` / `nsys stop --session` from here
     (any server, no GPU needed; the endpoints are called too when the server has them);
   - `nvtx`: nsys `--capture-range=nvtx` on a range the server opens in /start_profile
     (the demo server's `window@clef-prof`).
   `auto`: nsys without an NVIDIA GPU or without endpoints; profiler-api with the vllm preset
   (which mounts the endpoints); otherwise the server starts under `nsys launch` and, once
   healthy, is probed for /start_profile: found, the session's window is the profiler API's
   (`nsys start --capture-range=cudaProfilerApi`); absent, nsys' own start/stop.
3. Drives the load with the built-in closed-loop generator (or `--client-cmd`), and keeps the
   client's completions, latency percentiles and errors inside the window.
4. Writes `manifest.json` beside the export (see clef_prof.record.manifest).

It never leaves the server or nsys running: every process of the capture carries a marker in
its environment, the children of the server and of nsys are remembered by parent id (a child
that drops the marker, `setsid env -i ...`, included), and whatever is still alive at the
end, on Ctrl-C, SIGTERM or any failure, is signalled until it is gone.

Standard library only (runs on GPU machines without pandas).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from ..base import cupti
from . import manifest as mf
from . import procs
from ..base.errors import ClefError
from .load import Load
from ..base.nsys import (ENV_IMPORTER_LIBS, Nsys, NsysMissing, import_command, importer_path, quote, session_state,
                   start_command)
from ..base.redact import redact_text
from .control import http, port_in_use
from .plan import Plan, RecordConfig, gpu_present, plan, redact_commands, server_env
from .presets import VLLM_HINT, max_iterations

AGENT_EXIT_S = 10.0     # how long nsys' agent gets to exit by itself after nsys, before it is ended


class Interrupted(KeyboardInterrupt):
    """SIGTERM / SIGHUP to clef-prof record: handled like Ctrl-C."""


class CaptureFailed(ClefError):
    pass


class NoNvtx(CaptureFailed):
    """The export holds no NVTX record though the server was annotated (its manifest says so)."""


class NsysCrashed(CaptureFailed):
    """nsys itself died while starting the server (its exception in the server's log)."""


_NSYS_THROW = re.compile(r"/QuadD/\S*?([\w.]+\.cpp\(\d+\)): Throw in function (.*)")
_NSYS_ERRINFO = re.compile(r"\[(?:QuadDCommon::tag_(\w+)|boost::errinfo_(api_function)_)\*\] = (.*)")
_NSYS_RESUMER = re.compile(r"^(Failed to (?:probe|resume) the process\b.*)$", re.M)   # nsys' ProcessResumer
_NSYS_AGENT_LOST = re.compile(r"^(Connection to the Agent lost\.?|End of file)[ \t]*$", re.M)   # nsys' CLI and its agent
_NSYS_USAGE = re.compile(r"^usage: nsys \w+ \[<args>\]", re.M)     # after nsys' line on a switch it refused


def nsys_crash(text: str) -> str | None:
    """The one line of an nsys exception in a log (`.../QuadD/.../X.cpp(166): Throw in function F`
    and its errinfo lines), or None. nsys 2022.4 and 2023.4 throw at start-up under load: sem_open
    ENOENT in ProcessWaiterImpl, when the agent, told the app's pid through nsys, opens the app's
    semaphore before nsys-launcher has created it. 2022.4 also fails its handshake with the launched
    process now and then under load, with one line of its ProcessResumer ("Failed to probe the
    process (sync)") and no report, or loses its agent ("Connection to the Agent lost."; 2023.4
    prints boost.asio's bare "End of file" when that socket closes, and leaves no report either)."""
    m = _NSYS_THROW.search(text)
    if m is None:
        r = _NSYS_RESUMER.search(text)
        if r:
            return f"ProcessResumer: {r.group(1).strip()}"
        lost = _NSYS_AGENT_LOST.search(text)
        return lost.group(1) if lost else None
    info = {(k or api): v.strip() for k, api, v in _NSYS_ERRINFO.findall(text[m.end():])}
    why = info.get("errno_text") or info.get("message")
    if why and "api_function" in info:
        why = f"{info['api_function']}: {why}"
    return f"{m.group(1)}: {m.group(2).strip()}" + (f": {why}" if why else "")


def _log_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _log_has(path: str, needle: str) -> bool:
    return needle in _log_text(path)


# --------------------------------------------------------------------------------------------
# one capture

class Recording:
    def __init__(self, cfg: RecordConfig, pl: Plan, attempt: int = 1, history: list[str] | None = None):
        self.attempt = attempt
        self.nvtx_rows = None
        self.cfg, self.pl = cfg, pl
        self.out = os.path.abspath(cfg.out)
        self.base = os.path.join(self.out, cfg.name)
        self.log_out = self.base + ".stdout.log"
        self.log_err = self.base + ".stderr.log"
        self.log_nsys = self.base + ".nsys.log"
        self.log_client = self.base + ".client.log"
        self.proc: subprocess.Popen | None = None
        self.client: subprocess.Popen | None = None
        self.load: Load | None = None
        self.roots: list[procs.Proc] = []
        self.tree = procs.Tree(pl.token)        # every descendant seen, marker or not
        self.events: list[dict] = []
        self.notes: list[str] = list(pl.notes) + list(history or [])
        self.status = mf.STATUS_OK
        self.detail: str | None = None
        self.server_info = None
        self.server_counts = None
        self.reimported = False
        self.opened_ns = self.closed_ns = None
        self.outer = [None, None]
        self.died_ns = None
        self.exit_code = None
        self.t_begin = time.time_ns()
        self.window_started_seen = None
        self.capture_client = None
        self.nsys_output: list[str] = []
        self.report: str | None = None
        self.t_server: int | None = None
        self.t_healthy: int | None = None
        self.t_end: int | None = None
        self.report_written_ns: int | None = None

    # -- logging --------------------------------------------------------------------------
    def say(self, text: str) -> None:
        if not self.cfg.quiet:
            print(f"record: {text}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.say(f"note: {text}")

    # -- processes ------------------------------------------------------------------------
    def _env(self, nsys: bool = True) -> dict:
        """The environment of this capture's processes; nsys' (and so the server's, which
        plan.keep_tmpdir gives its own TMPDIR back) with the capture's private TMPDIR."""
        env = dict(os.environ)
        env.update(server_env(self.cfg))
        env.update(self.pl.env)
        env[procs.ENV_MARK] = self.pl.token
        if nsys and self.pl.nsys_tmp:
            env["TMPDIR"] = self.pl.nsys_tmp
        return env

    def start_server(self) -> None:
        os.makedirs(self.out, exist_ok=True)
        for suffix in (".nsys-rep", ".sqlite", ".qdstrm"):
            try:
                os.remove(self.base + suffix)
            except FileNotFoundError:
                pass
        if self.pl.torch_dir:
            # an earlier recording's traces would be read as a second run of this one
            os.makedirs(self.pl.torch_dir, exist_ok=True)
            for f in _torch_traces(self.pl.torch_dir):
                os.remove(f)
        if self.pl.nsys_tmp:
            os.makedirs(self.pl.nsys_tmp, mode=0o700, exist_ok=True)
        self.say("starting: " + quote(self.pl.main))
        self.t_server = time.time_ns()
        with open(self.log_out, "wb") as out, open(self.log_err, "wb") as err:
            self.proc = subprocess.Popen(self.pl.main, env=self._env(), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, start_new_session=True, preexec_fn=procs.pdeathsig)

    def nsys_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def app_procs(self) -> list[procs.Proc]:
        return [p for p in self.tree.left() if not procs.is_tool(p, self.pl.nsys.install_root)]

    def track(self) -> None:
        """Remember the children of the server and of nsys now, while their parents live."""
        self.tree.update([self.proc.pid] if self.proc is not None else [])

    def server_alive(self) -> bool:
        if not self.nsys_alive():
            return False
        if self.roots:
            return any(procs.alive(p.pid) for p in self.roots)
        return True

    def wait_healthy(self) -> None:
        url, deadline = self.cfg.health, time.monotonic() + self.cfg.health_timeout
        last = "no answer"
        self.say(f"waiting for {url} (up to {self.cfg.health_timeout:g} s)")
        while True:
            if not self.nsys_alive():
                self.exit_code = self.proc.returncode
                crash = nsys_crash(_log_text(self.log_err))
                if crash:
                    raise NsysCrashed(f"nsys crashed while starting the server (exit code {self.exit_code}), not the "
                                      f"server: {crash} [log: {self.log_err}]")
                tail = procs.log_tail(self.log_err) or procs.log_tail(self.log_out) or "(no output)"
                if _NSYS_USAGE.search(_log_text(self.log_err)):
                    raise CaptureFailed(f"nsys refused its command line (exit code {self.exit_code}; check --nsys-arg), "
                                        f"the server never started: {tail} [log: {self.log_err}]")
                raise CaptureFailed(f"the server exited during start-up: {tail} [log: {self.log_err}]")
            status, text = http("GET", url, timeout=2.0)
            if status == 200:
                break
            last = f"HTTP {status}" if status else text
            if time.monotonic() > deadline:
                raise CaptureFailed(f"the server did not become healthy within {self.cfg.health_timeout:g} s "
                                    f"(GET {url}: {last}); raise --health-timeout or check --health-url "
                                    f"[log: {self.log_err}]")
            time.sleep(0.25)
        self.t_healthy = time.time_ns()
        self.say(f"healthy after {(self.t_healthy - self.t_server) / 1e9:.1f} s")
        self.roots = procs.app_roots(procs.marked(self.pl.token), self.pl.nsys.install_root)
        self.track()
        vpath = self.cfg.preset_obj.version
        if vpath:
            status, text = http("GET", self.cfg.url.rstrip("/") + vpath, timeout=3.0)
            if status == 200:
                try:
                    self.server_info = json.loads(text)
                except ValueError:
                    self.server_info = text[:2000]

    def start_load(self) -> None:
        if self.cfg.client_cmd:
            env = self._env(nsys=False)
            env["CLEF_PROF_URL"] = self.cfg.url
            self.say(f"client: {self.cfg.client_cmd}")
            with open(self.log_client, "wb") as log:
                self.client = subprocess.Popen(["/bin/sh", "-c", self.cfg.client_cmd], env=env,
                                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True)
        elif self.cfg.load is not None:
            self.load_started_ns = time.time_ns()
            self.load = Load(self.cfg.load).start()

    def check_running(self, phase: str) -> bool:
        """False (and status 'server died') when the server is gone."""
        if self.server_alive():
            return True
        self.died_ns = time.time_ns()
        self.status = mf.STATUS_DIED
        self.detail = f"the server exited {phase}"
        if self.opened_ns:
            self.detail += f", {(self.died_ns - self.opened_ns) / 1e9:.1f} s after it opened"
        return False

    def warm_up(self) -> None:
        cfg = self.cfg
        t_end = time.monotonic() + cfg.warmup_s
        self.say(f"warming up: {cfg.warmup_s:g} s" + (f", {cfg.warmup_requests} requests" if cfg.warmup_requests else ""))
        hard_end = t_end + max(60.0, cfg.warmup_s)
        while True:
            if not self.check_running("during warm-up"):
                raise CaptureFailed(f"the server died during warm-up: {procs.log_tail(self.log_err)} [log: {self.log_err}]")
            done = time.monotonic() >= t_end
            if self.load is not None and cfg.warmup_requests:
                done = done and self.load.ok_count() >= cfg.warmup_requests
            if done:
                break
            if time.monotonic() > hard_end:
                raise CaptureFailed(f"warm-up: only {self.load.ok_count()} of {cfg.warmup_requests} requests "
                                    f"completed in {hard_end - t_end + cfg.warmup_s:.0f} s")
            if self.client is not None and self.client.poll() is not None:
                raise CaptureFailed(f"the client command exited during warm-up (exit code {self.client.returncode}): "
                                    f"{procs.log_tail(self.log_client)}")
            time.sleep(0.05)
        if self.load is not None:
            if self.load._fatal is not None:
                raise CaptureFailed(f"the load generator failed: {self.load._fatal!r}")
            if self.load.ok_count() == 0:
                err = self.load.first_error() or "no answer at all"
                raise CaptureFailed(f"no request succeeded during warm-up ({self.load.error_count()} errors; first: "
                                    f"{err}); check --request-path / --request-body")

    def _event(self, what: str, fn) -> dict:
        ev = {"what": what, "sent_ns": time.time_ns()}
        try:
            ev.update(fn() or {})
        finally:
            ev["ack_ns"] = time.time_ns()
            self.events.append(ev)
        return ev

    def _nsys_ctl(self, cmd: list[str], what: str) -> dict:
        """Run `nsys start` or `nsys stop` (stop returns once the report is written)."""
        def run():
            with open(self.log_nsys, "ab") as log:
                log.write(("$ " + quote(cmd) + "\n").encode())
                log.flush()
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self._env(),
                                     start_new_session=True)
                try:
                    p.wait(self.cfg.finalize_timeout)
                except subprocess.TimeoutExpired:
                    procs.stop_group(p, (3.0, 2.0, 1.0))
                    raise CaptureFailed(f"`nsys {what}` did not return within {self.cfg.finalize_timeout:g} s") from None
                finally:
                    if p.poll() is None:
                        procs.stop_group(p, (3.0, 2.0, 1.0))
            if p.returncode != 0:
                raise CaptureFailed(f"`{quote(cmd[:2])} --session=...` failed (exit code {p.returncode}): "
                                    f"{procs.log_tail(self.log_nsys, 2)}")
            return {"rc": p.returncode}
        return self._event(f"nsys {what}", run)

    def _endpoint(self, which: str, required: bool) -> dict | None:
        url, body = self.cfg.endpoint(which)
        if url is None:
            return None
        timeout = 30.0 if which == "start" else self.cfg.finalize_timeout
        result = {}

        def call():
            status, text = http("POST", url, body, timeout=timeout)
            result.update(status=status, text=text)
            return {"status": status, "url": url}
        self._event(f"POST {urllib.parse.urlsplit(url).path}", call)
        status, text = result["status"], result["text"]
        if status == 404 or status == 405:
            if required:
                raise CaptureFailed(f"POST {url} answered {status}: the server has no profiling endpoints. "
                                    f"{VLLM_HINT}; or record with --window nsys, which needs none")
            self.note(f"POST {url} answered {status}: no profiling endpoints; the window is nsys' own")
            self.cfg.call_endpoints = False
            return None
        if status is None or not 200 <= status < 300:
            msg = f"POST {url} " + (f"answered HTTP {status}: {text.strip()[:200]}" if status else f"failed: {text}")
            if status == 422:
                msg += " (the server rejects the request body: set --start-body/--stop-body, '' for none)"
            if required:
                raise CaptureFailed(msg)
            self.note(msg)
            return None
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            return {"text": text[:500]}

    def probe(self) -> None:
        """--window auto, a server whose endpoints the preset does not guarantee: ask for
        /start_profile without calling it (OPTIONS: 404 when there is no such route, 405 or
        another answer when there is). Found: the session's window is the profiler API's."""
        url = self.cfg.endpoint("start")[0]
        status, _text = http("OPTIONS", url, timeout=5.0)
        if status is None or status == 404:
            self.note(f"--window auto: {url} " + ("answered 404" if status else "did not answer")
                      + "; the window is nsys' own (nsys start/stop)")
            return
        self.pl.window = "profiler-api"
        self.pl.start = start_command(self.pl.nsys, self.cfg.trace, self.base, session=self.pl.session,
                                      capture_range="cudaProfilerApi")
        self.pl.stop = None
        self.note(f"--window auto: {url} exists (OPTIONS answered {status}); the window is the profiler API's "
                  "(nsys start --capture-range=cudaProfilerApi, then POST /start_profile)")

    def open_window(self) -> None:
        self.say(f"opening the window ({self.pl.window})")
        if self.pl.start and self.pl.window != "nsys":
            self._nsys_ctl(self.pl.start, "start")        # a probed session: armed for cudaProfilerStart
            self._endpoint("start", required=True)
        elif self.pl.window == "nsys":
            self._nsys_ctl(self.pl.start, "start")
            self._endpoint("start", required=False)
        else:
            self._endpoint("start", required=True)
        self.opened_mono = time.monotonic()
        self.opened_ns = max(e["ack_ns"] for e in self.events)
        self.outer[0] = min(e["sent_ns"] for e in self.events)
        if self.pl.window != "nsys" and not self.pl.torch_dir:
            self.check_range_opened()

    def state(self) -> str | None:
        return session_state(self.pl.nsys.path, self.pl.session, self._env())

    def check_range_opened(self, wait_s: float = 5.0) -> None:
        """An application-opened window (cudaProfilerStart, an NVTX range) must show in nsys' session
        state as RangeCollection; a server without CUDA never gets there."""
        deadline = time.monotonic() + wait_s
        while True:
            st = self.state()
            if st is None or st.startswith("Range") or st not in ("Configured", "StartRange"):
                # listed in a collecting state, or not listed (an nsys that does not list it): go on
                self.window_started_seen = None if st is None else st.startswith("Range")
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.window_started_seen = False
        if self.pl.window == "profiler-api":
            raise CaptureFailed("the capture window did not open: nsys saw no cudaProfilerStart "
                                f"{wait_s:g} s after POST /start_profile. cudaProfilerStart reaches nsys only from a "
                                "server that uses CUDA" + ("" if gpu_present() else " (this machine has no NVIDIA GPU)")
                                + "; use --window nsys")
        raise CaptureFailed(f"the capture window did not open: the NVTX range {self.cfg.nvtx_capture} did not start in "
                            f"the server {wait_s:g} s after POST /start_profile (its message must be a registered "
                            "string, or NSYS_NVTX_PROFILER_REGISTER_ONLY=0); use --window nsys")

    def _range_started(self) -> bool:
        return _log_has(self.log_out, "Capture range started") or _log_has(self.log_err, "Capture range started")

    def hold(self) -> None:
        end = self.opened_mono + self.cfg.duration_s
        self.say(f"window open for {self.cfg.duration_s:g} s")
        while time.monotonic() < end:
            if not self.check_running("inside the window"):
                return
            if self.client is not None and self.client.poll() is not None and "client" not in (self.detail or ""):
                self.note(f"the client command exited inside the window (exit code {self.client.returncode})")
                self.detail = "client exited"
            time.sleep(0.05)

    def close_window(self) -> None:
        n0 = len(self.events)
        if self.pl.window == "nsys":
            res = self._endpoint("stop", required=False)
            # the load runs on until `nsys stop` has written the report: ending it earlier (its
            # connections' threads exiting in the server while nsys collects their buffers) lost
            # every NVTX and OSRT record of the capture with nsys 2023.4
            self._nsys_ctl(self.pl.stop, "stop")
        else:
            res = self._endpoint("stop", required=True)
        if isinstance(res, dict) and "requests" in res:
            self.server_counts = res
        closing = self.events[n0:]
        if closing:
            self.closed_ns = min(e["sent_ns"] for e in closing)
            self.outer[1] = max(e["ack_ns"] for e in closing)
        if self.pl.torch_dir:
            self.wait_traces()
        elif self.pl.window != "nsys" and self.cfg.capture_range_end == "stop":
            self.wait_report()

    def wait_traces(self) -> None:
        """--profiler torch: the server writes its traces after the stop call (vLLM's workers on
        their own time): wait until trace files are there and none has changed for 2 s."""
        deadline = time.monotonic() + self.cfg.finalize_timeout
        last, stable_since = None, time.monotonic()
        while time.monotonic() < deadline:
            seen = _torch_state(self.pl.torch_dir)
            if seen != last:
                last, stable_since = seen, time.monotonic()
            elif seen and not any(n.endswith(".tmp") for n, _ in seen) and time.monotonic() - stable_since >= 2.0:
                break
            if not self.server_alive():
                break
            time.sleep(0.2)
        else:
            self.note(f"the server's torch traces were still changing {self.cfg.finalize_timeout:g} s after the "
                      "window closed")
        self.report_written_ns = time.time_ns()

    def wait_report(self) -> None:
        """With --capture-range-end=stop, nsys collects the window's data from the running server and
        writes the report after the range ends: the server (and the load) must live until then,
        or the report comes out empty."""
        # nsys' session goes RangeCollection -> RangeGeneration -> RangeImportation -> Launched (the
        # report written, the server still running). Its output is block-buffered in a file, so the
        # state is asked of `nsys sessions list`; the log is the fallback.
        t0 = time.monotonic()
        deadline = t0 + self.cfg.finalize_timeout
        collecting_since = None
        while time.monotonic() < deadline:
            if not self.nsys_alive():
                break
            st = self.state()
            if st is None:
                if os.path.exists(self.pl.report) and (_log_has(self.log_out, "100%]") or _log_has(self.log_err, "100%]")):
                    time.sleep(0.5)
                    break
                if time.monotonic() - t0 > 30.0 and not self._range_started():
                    break
            elif st == "RangeCollection":
                collecting_since = collecting_since or time.monotonic()
                if time.monotonic() - collecting_since > 20.0:
                    self.note("the capture range was still open 20 s after the window closed (the server's stop "
                              "call did not end it); it ends with the server, so the capture is longer than the window")
                    break
            elif not st.startswith("Range"):
                break          # Launched: written (or, from Configured/StartRange, never opened)
            time.sleep(0.1)
        else:
            self.note(f"nsys had not written the report {self.cfg.finalize_timeout:g} s after the window closed")
        self.report_written_ns = time.time_ns()

    def stop_load(self) -> None:
        if self.load is not None and self.load.running:
            self.load.stop(grace_s=3.0)
        if self.client is not None and self.client.poll() is None:
            procs.stop_group(self.client, (5.0, 3.0, 2.0))

    def stop_server(self, quick: bool = False) -> None:
        """SIGINT the server's process groups, then SIGTERM, then SIGKILL; then wait for nsys."""
        steps = ((signal.SIGINT, 5.0 if quick else self.cfg.stop_timeout),
                 (signal.SIGTERM, 5.0 if quick else self.cfg.stop_timeout / 2),
                 (signal.SIGKILL, 5.0))
        for sig, wait in steps:
            self.track()
            app = self.app_procs()
            if not app:
                break
            roots = procs.app_roots(app, self.pl.nsys.install_root) or self.roots
            if sig != signal.SIGINT:
                self.note(f"the server did not stop on {procs.sig_name(steps[0][0]) if sig == signal.SIGTERM else 'SIGTERM'}"
                          f"; sending {procs.sig_name(sig)}")
            procs.signal_groups([p.pgid for p in roots], sig)
            groups = {p.pgid for p in roots}      # a child in a session of its own: by pid
            procs.signal_pids([p.pid for p in app if p.pgid not in groups], sig)
            if sig == signal.SIGKILL:
                procs.signal_pids([p.pid for p in app], sig)
            procs.wait_gone(lambda: not self.app_procs(), wait)
        if self.proc is not None:
            try:
                self.proc.wait(30.0 if quick else self.cfg.finalize_timeout)
            except subprocess.TimeoutExpired:
                self.note("nsys did not exit after the server stopped; interrupting it")
                procs.stop_group(self.proc, (10.0, 5.0, 5.0))
            self.exit_code = self.proc.returncode

    def reap(self) -> None:
        """Nothing of this capture may outlive it."""
        if self.load is not None and self.load.running:
            self.load.stop(grace_s=0.5)
        if self.client is not None and self.client.poll() is None:
            procs.stop_group(self.client, (2.0, 2.0, 1.0))
        self.track()
        if self.proc is not None and self.proc.poll() is None:
            procs.stop_group(self.proc, (5.0, 3.0, 2.0))
        if not self.app_procs():        # nsys' agent may still be finishing: a while to exit, then ended
            procs.wait_gone(lambda: not self.tree.left(), AGENT_EXIT_S)
        left = procs.terminate_marked(self.pl.token, tree=self.tree)
        if left:
            self.say(f"warning: processes left that could not be ended: {procs.describe(left)}")
        if self.pl.nsys_tmp:
            shutil.rmtree(self.pl.nsys_tmp, ignore_errors=True)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> dict:
        cfg = self.cfg
        busy = port_in_use(cfg.health)
        if busy:
            raise ClefError(f"port {busy[1]} on {busy[0]} already answers: another server is running there; "
                            "stop it, or pick a free port and give it to both: --url (and --health-url) here and "
                            "the server's own --port after --")
        error: BaseException | None = None
        interrupted = False
        try:
            self.start_server()
            self.wait_healthy()
            if self.pl.probe:
                self.probe()
            self.start_load()
            self.warm_up()
            self.open_window()
            self.hold()
            if self.status == mf.STATUS_OK:
                self.close_window()
            else:
                self.closed_ns = self.died_ns
                self.outer[1] = self.died_ns
        except KeyboardInterrupt as exc:
            interrupted, error = True, exc
            self.status, self.detail = mf.STATUS_INTERRUPTED, "interrupted (Ctrl-C or SIGTERM)"
        except ClefError as exc:
            error = exc
            if self.status == mf.STATUS_OK:
                self.status, self.detail = mf.STATUS_FAILED, str(exc)
        except BaseException as exc:
            error = exc
            self.status, self.detail = mf.STATUS_FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            old = _hold_signals(self)
            try:
                self.stop_load()
                self.say("stopping the server")
                self.stop_server(quick=interrupted or self.status == mf.STATUS_FAILED)
            finally:
                self.reap()
                _restore_signals(old)
        self.t_end = time.time_ns()
        if self.status == mf.STATUS_DIED and error is None:
            self.notes.append(f"{self.detail}; the partial capture is kept")
        exported, problem = None, None
        try:
            exported, problem = self.finish_files(error)
        except ClefError as exc:
            problem = str(exc)
        if problem:
            self.notes.append(problem)
            if error is None and self.status == mf.STATUS_OK:
                self.status, self.detail = mf.STATUS_FAILED, problem
                error = CaptureFailed(problem)
        if exported and not self.pl.torch_dir and "nvtx" in self.cfg.trace.trace.split(","):
            n = self.nvtx_rows = mf.count_rows(exported, "NVTX_EVENTS") or 0
            why = self.annotated() if not n and error is None and self.status == mf.STATUS_OK else None
            if why:
                self.status = mf.STATUS_FAILED
                self.detail = (f"the export holds no NVTX record though {why}: nsys recorded none of the server's "
                               f"annotations (see {mf.relative_to(self.log_nsys, self.out)}); {exported} is not a "
                               "usable capture")
                self.notes.append(self.detail)
                error = NoNvtx(self.detail)
            elif not n:
                self.note("the export holds no NVTX record: nsys collected nothing from the server's annotations "
                          "(not annotated, or the capture's data was lost; see " + mf.relative_to(self.log_nsys, self.out)
                          + ")")
        if exported and self.load is not None and not self.pl.torch_dir:
            span = mf.collected_span(exported)
            if span:
                t0, first, last, duration = span
                a, b, clock = mf.place_span(t0, first, last, mf.clock_marks(exported), self.outer[0], self.outer[1])
                if a is None:
                    self.capture_client = {"start_ns": t0, "duration_s": duration / 1e9, "clock": clock}
                    self.note(f"no client bounds on the capture's request count: {clock['refused']}")
                else:
                    inside, overlapping = self.load.bounds(a, b)
                    self.capture_client = self.load.summary(a, b)
                    self.capture_client.update(start_ns=t0, duration_s=duration / 1e9, recorded_ns=[a, b],
                                               recorded_s=(b - a) / 1e9, requests_inside=inside,
                                               requests_overlapping=overlapping, clock=clock)
        path = mf.write(self.manifest(exported), self.out)
        if error is not None:
            raise error
        if self.status == mf.STATUS_DIED:
            where = f"partial export kept: {exported}" if exported else "no report was written"
            tail = procs.log_tail(self.log_err, 2, 200)
            raise CaptureFailed(f"{self.detail}{' (its last output: ' + tail + ')' if tail else ''}; {where}, marked "
                                f"\"status\": \"server died\" in {path}")
        self.summary(exported, path)
        return {"manifest": path, "export": exported, "status": self.status, "nvtx_rows": self.nvtx_rows}

    def annotated(self) -> str | None:
        """Why this server's window must hold NVTX ranges (a stage spec was injected, or the server's
        stop call counted batches it ran, which clef-prof's servers annotate), or None."""
        if self.cfg.spec:
            return f"the stage spec {os.path.basename(self.cfg.spec)} was injected"
        batches = (self.server_counts or {}).get("batches")
        if isinstance(batches, int) and not isinstance(batches, bool) and batches > 0:
            return f"the server ran {batches} annotated batches in its window"
        return None

    def finish_files(self, error) -> tuple[str | None, str | None]:
        """(export, problem): export the report when there is one; explain when there is none.
        --profiler torch: the trace folder, read by analyze as it is."""
        if self.pl.torch_dir:
            if self.opened_ns is None:
                return None, None
            if _torch_traces(self.pl.torch_dir):
                return self.pl.torch_dir, None
            return None, (f"the server wrote no PyTorch profiler trace into {self.pl.torch_dir} (see "
                          f"{self.log_err}): does its /start_profile start a torch profiler writing there?")
        self.report = self.pl.report if os.path.exists(self.pl.report) else None
        if self.report is None and self.opened_ns is None:
            return None, None          # it failed before the window: no report was expected
        if self.report is None and os.path.exists(self.base + ".qdstrm"):
            self.report = self.import_qdstrm(self.base + ".qdstrm")
        if self.report is None:
            qd = self.base + ".qdstrm"
            if os.path.exists(qd):
                imp = importer_path(self.pl.nsys.path)
                msg = (f"nsys left {qd} but no .nsys-rep: " + (
                    f"its QdstrmImporter ({imp}) failed (see the notes above); once it runs, convert with "
                    f"`{imp} -i {qd}`" if imp else
                    f"no QdstrmImporter was found beside {self.pl.nsys.path} (nsys looks for it in "
                    f"{os.path.join(self.pl.nsys.install_root, 'host-linux-x64')})"))
            elif self.pl.window == "profiler-api":
                msg = ("nsys wrote no report: the capture range never opened. cudaProfilerStart reaches nsys only "
                       "from a server that uses CUDA" + ("" if gpu_present() else " (this machine has no NVIDIA GPU)")
                       + "; use --window nsys")
            elif self.pl.window == "nvtx":
                msg = (f"nsys wrote no report: the NVTX range {self.cfg.nvtx_capture} never opened in the server "
                       "(it must be a registered string, or NSYS_NVTX_PROFILER_REGISTER_ONLY=0); use --window nsys")
            else:
                msg = f"nsys wrote no report [logs: {self.log_err}, {self.log_nsys}]"
            return None, msg
        if not self.cfg.export or self.status in (mf.STATUS_INTERRUPTED,) or \
                (error is not None and self.status == mf.STATUS_FAILED):
            return None, None
        self.say("exporting: " + quote(self.pl.export))
        try:
            p = subprocess.run(self.pl.export, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               errors="replace", timeout=self.cfg.finalize_timeout)
        except subprocess.TimeoutExpired:
            raise CaptureFailed(f"nsys export did not finish within {self.cfg.finalize_timeout:g} s") from None
        self.nsys_output.append(p.stdout + p.stderr)
        if p.returncode != 0 or not os.path.exists(self.pl.sqlite):
            tail = (p.stderr or p.stdout).strip().splitlines()
            return None, f"nsys export failed (exit code {p.returncode}): {tail[-1] if tail else ''}"
        return self.pl.sqlite, None

    def import_qdstrm(self, qdstrm: str) -> str | None:
        """Run QdstrmImporter on a .qdstrm that nsys could not import, with --importer-libs on its
        LD_LIBRARY_PATH only (never the server's); the .nsys-rep, or None."""
        importer = importer_path(self.pl.nsys.path)
        if importer is None:
            return None
        argv, env = import_command(importer, qdstrm, self.cfg.importer_libs)
        self.say("importing: " + (f"LD_LIBRARY_PATH={self.cfg.importer_libs} " if self.cfg.importer_libs else "")
                 + quote(argv))
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                               env=env, timeout=self.cfg.finalize_timeout, cwd=os.path.dirname(qdstrm))
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.note(f"QdstrmImporter did not run ({exc})")
            return None
        self.nsys_output.append(p.stdout + p.stderr)
        rep = os.path.splitext(qdstrm)[0] + ".nsys-rep"
        if p.returncode != 0 or not os.path.exists(rep):
            tail = (p.stderr or p.stdout).strip().splitlines()
            self.note(f"QdstrmImporter failed (exit code {p.returncode}): {tail[-1] if tail else ''}"
                      + ("" if self.cfg.importer_libs else
                         f"; if it lacks libdw.so.1/libelf.so.1, give a folder holding them with --importer-libs "
                         f"or ${ENV_IMPORTER_LIBS}"))
            return None
        self.note(f"nsys left {os.path.basename(qdstrm)}; imported it with {importer}")
        self.reimported = True
        return rep

    def nsys_messages(self) -> list[str]:
        """nsys's lines about lost or misread records, from its logs and the import/export output."""
        text = list(self.nsys_output)
        for path in (self.log_out, self.log_err, self.log_nsys):
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text.append(fh.read())
            except OSError:
                pass
        lines = cupti.problem_lines("\n".join(text))
        if self.reimported:     # nsys's own import failed, and record's import replaced it
            lines = [ln for ln in lines if not ln.startswith("Importer error status")]
        return lines

    def manifest(self, exported: str | None) -> dict:
        cfg, pl = self.cfg, self.pl
        inner = outer = None
        if self.load is not None and self.opened_ns and self.closed_ns:
            inner = self.load.summary(self.opened_ns, self.closed_ns)
            outer = self.load.summary(self.outer[0], self.outer[1])
        whole = self.load.summary() if self.load is not None else None
        before = self.before_window()
        from ..base.defaults import VERSION as __version__
        commands = {
            "clef_prof": cfg.argv,
            "server": pl.server,
            "nsys": pl.main,
            "nsys_start": pl.start,
            "nsys_stop": pl.stop,
            "export": pl.export,
            "client": cfg.client_cmd,
            "env": pl.env,
            "cwd": os.getcwd(),
        }
        m = {
            "schema": mf.SCHEMA,
            "profiler": cfg.profiler,
            "status": self.status,
            "status_detail": self.detail,
            "export": mf.relative_to(exported, self.out),
            "report": mf.relative_to(self.report, self.out),
            "arm": cfg.arm,
            "round": cfg.round,
            "started_ns": self.t_begin,
            "finished_ns": self.t_end or time.time_ns(),
            "commands": commands if cfg.keep_env else redact_commands(commands),
            "nsys": {"path": pl.nsys.path, "version": pl.nsys.version, "version_text": pl.nsys.version_text,
                     "session": pl.session, "exit_code": self.exit_code, "messages": self.nsys_messages(),
                     "importer_libs": cfg.importer_libs},
            "server": {"preset": cfg.preset, "url": cfg.url, "health_url": cfg.health, "info": self.server_info,
                       "healthy_after_s": ((self.t_healthy - self.t_server) / 1e9)
                       if self.t_healthy is not None else None},
            "spec": os.path.abspath(cfg.spec) if cfg.spec else None,
            "stage_config": recorded_stage_config(cfg.spec),
            "trace": {"trace": cfg.trace.trace, "python_sampling_hz": cfg.py_sampling_hz if cfg.profiler == "nsys" else 0,
                      "python_sampler": "clef-prof" if cfg.py_sampling_hz and cfg.profiler == "nsys" else None,
                      "nsys_python_sampling_hz": cfg.trace.python_sampling_hz,
                      "torch_with_stack": cfg.torch_stack if cfg.profiler == "torch" else None,
                      "cuda_graph_trace": cfg.trace.cuda_graph_trace, "trace_fork_before_exec": cfg.trace.trace_fork,
                      "capture_range_end": cfg.capture_range_end if pl.window != "nsys" else None},
            "load": ({"generator": "client-cmd", "command": cfg.client_cmd if cfg.keep_env else
                      redact_text(cfg.client_cmd)[0], "concurrency": None}
                     if cfg.client_cmd else
                     {"generator": "builtin", **(cfg.load.describe() if cfg.load else {}),
                      "warmup_s": cfg.warmup_s, "warmup_requests": cfg.warmup_requests,
                      "duration_s": cfg.duration_s}),
            "window": {"mode": pl.window, "opened_ns": self.opened_ns, "closed_ns": self.closed_ns,
                       "outer_ns": self.outer, "duration_s": (self.closed_ns - self.opened_ns) / 1e9
                       if self.opened_ns and self.closed_ns else None,
                       "events": self.events,
                       "nvtx_capture": cfg.nvtx_capture if pl.window == "nvtx" else None,
                       "max_iterations": max_iterations(cfg.endpoint("start")[1], pl.server, cfg.preset)
                       if pl.window == "profiler-api" else None,
                       "capture_range_seen": self.window_started_seen,
                       "report_written_ns": self.report_written_ns},
            "client": {"window": inner, "window_outer": outer, "capture": self.capture_client, "all": whole,
                       "before_window": before, "profiler_cost": profiler_cost(before, inner, cfg.profiler),
                       "cancelled_at_stop": self.load.cancelled} if self.load else
                      {"window": {"completions": None},
                       "note": "the load came from --client-cmd: not counted" if cfg.client_cmd else "no load ran"},
            "server_counts": self.server_counts,
            "git": {"cwd": mf.git_info(os.getcwd()), "clef_prof": mf.git_info(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))},
            "clef_prof": {"version": __version__},
            "host": {"hostname": socket.gethostname(), "python": mf.python_info(), "gpu": gpu_present()},
            "logs": {k: mf.relative_to(v, self.out) for k, v in (("stdout", self.log_out), ("stderr", self.log_err),
                                                                  ("nsys", self.log_nsys), ("client", self.log_client))
                     if os.path.exists(v)},
            "notes": self.notes,
            "attempt": self.attempt,
        }
        return m

    def before_window(self) -> dict | None:
        """The client just before the window was asked to open (the first start call's send: a
        profiler's start can stall the server for seconds), over a span as long as the window (at
        most the second half of the warm-up): the same server and load without the profiler
        recording, the reference for what recording cost."""
        if self.load is None or not self.opened_ns or not self.closed_ns or not self.outer[0]:
            return None
        end = self.outer[0]
        settled = getattr(self, "load_started_ns", end) + int(self.cfg.warmup_s * 1e9 / 2)
        t0 = max(end - (self.closed_ns - self.opened_ns), settled)
        if t0 >= end:
            return None
        return {**self.load.summary(t0, end), "start_ns": t0, "end_ns": end}

    def summary(self, exported: str | None, path: str) -> None:
        """The capture's summary lines, each wrapped at spaces to the terminal's width (a number
        or path is never split), with paths inside the working folder given relative to it."""
        import shutil
        import textwrap

        cols = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else \
            shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else 80

        def say(line: str) -> None:
            sys.stdout.write("\n".join(textwrap.wrap(line, max(cols, 40), subsequent_indent="  ", break_long_words=False,
                                                     break_on_hyphens=False)) + "\n")

        def rel(p: str) -> str:
            r = os.path.relpath(p)
            return r if not r.startswith("..") and len(r) < len(p) else p

        if exported:
            files = _torch_traces(exported) if os.path.isdir(exported) else [exported]
            size = sum(os.path.getsize(f) for f in files) / 1e6
            say(f"capture: {rel(exported)} ({len(files)} file(s), {size:.1f} MB)")
        if self.load is not None and self.opened_ns and self.closed_ns:
            s = self.load.summary(self.opened_ns, self.closed_ns)
            span = (self.closed_ns - self.opened_ns) / 1e9

            def ms(v):
                return "-" if v is None else f"{v:.2f} ms"
            say(f"window: {span:.2f} s ({self.pl.window}); client: {s['completions']} completions, "
                f"{s['errors']} errors, latency p50 {ms(s['latency_ms_p50'])}, p99 {ms(s['latency_ms_p99'])}")
            cost = profiler_cost(self.before_window(), s, self.cfg.profiler)
            if cost:
                tci, lci = cost["throughput_change_pct_ci"], cost["latency_ms_mean_change_ci"]
                conf = f"{100 * cost['confidence']:g}%"
                say(f"profiler cost: {cost['throughput_change_pct']:+.1f}% throughput"
                    + (f" ({conf} CI {tci[0]:+.1f}% to {tci[1]:+.1f}%)" if tci else " (no interval: too short)")
                    + f", {cost['latency_ms_mean_change']:+.3f} ms mean latency per request"
                    + (f" ({conf} CI {lci[0]:+.3f} to {lci[1]:+.3f} ms)" if lci else "")
                    + f", against {cost['before_s']:.2f} s just before the window ({cost['reference']}); "
                    "the intervals are over 0.1 s bins of each span")
        if self.server_counts:
            say(f"server: {self.server_counts.get('requests')} requests in {self.server_counts.get('batches')} "
                "batches inside its window")
        if self.load is not None and (self.server_counts or self.capture_client):
            say(count_line(self.capture_client))
        say(f"manifest: {rel(path)}")


def _torch_traces(folder: str) -> list[str]:
    """The Kineto trace files (`*.json`, `*.json.gz`, `*.json.xz`) in a --profiler torch trace folder."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.endswith((".json", ".json.gz", ".json.xz")))


def _torch_state(folder: str) -> list[tuple[str, int]]:
    out = []
    for n in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            out.append((n, os.path.getsize(os.path.join(folder, n))))
        except OSError:
            pass
    return out


def profiler_cost(before: dict | None, inside: dict | None, profiler: str) -> dict | None:
    """What recording cost the served load: the client's throughput and mean latency in the window
    against the span just before it (same server, same load, same session). With --profiler torch
    nothing profiles before the window; with nsys, the server runs under nsys there but nsys is
    not collecting (launch before start, or a capture range not yet open), so the figure is the
    cost of recording, not of running under nsys. One window against one span: noisy, no verdict."""
    if not before or not inside or not before.get("throughput_rps") or not inside.get("throughput_rps") \
            or before.get("latency_ms_mean") is None or inside.get("latency_ms_mean") is None:
        return None
    ref = "no profiler" if profiler == "torch" else "nsys attached, not recording"
    out = {"throughput_change_pct": 100.0 * (inside["throughput_rps"] / before["throughput_rps"] - 1.0),
           "latency_ms_mean_change": inside["latency_ms_mean"] - before["latency_ms_mean"],
           "before_s": (before["end_ns"] - before["start_ns"]) / 1e9, "reference": ref}
    # its uncertainty: Welch intervals (COST_CONFIDENCE) over each span's bins (load.summary), the
    # throughput's on the ratio of mean req/s (delta method on logs), the latency's on the difference
    # of the bins' mean latencies; None where a span has fewer than COST_MIN_BINS bins (0.4 s)
    a, b = before.get("bins_throughput_rps") or [], inside.get("bins_throughput_rps") or []
    ci = _welch(a, b, log=True)
    out["throughput_change_pct_ci"] = None if ci is None else [100.0 * (math.exp(x) - 1.0) for x in ci]
    la = [x for x in before.get("bins_latency_ms_mean") or [] if x is not None]
    lb = [x for x in inside.get("bins_latency_ms_mean") or [] if x is not None]
    out["latency_ms_mean_change_ci"] = _welch(la, lb)
    out["confidence"] = COST_CONFIDENCE
    return out


COST_CONFIDENCE = 0.95
COST_MIN_BINS = 4         # fewer bins a side: under its stated coverage (92.5% at 3 bins, seeded simulation)


def _welch(a: list, b: list, log: bool = False) -> list | None:
    """The COST_CONFIDENCE Welch interval of mean(b) - mean(a) (log: of log(mean b / mean a), by
    the delta method), Satterthwaite df; None with fewer than COST_MIN_BINS values a side or a mean of 0."""
    if len(a) < COST_MIN_BINS or len(b) < COST_MIN_BINS:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    if log:
        if ma <= 0 or mb <= 0:
            return None
        va, vb, mid = va / ma ** 2, vb / mb ** 2, math.log(mb / ma)
    else:
        mid = mb - ma
    se2 = va + vb
    if se2 == 0:
        return [mid, mid]
    df = se2 ** 2 / ((va ** 2 / (len(a) - 1) if va else 0.0) + (vb ** 2 / (len(b) - 1) if vb else 0.0))
    h = _t_quantile(0.5 + COST_CONFIDENCE / 2, df) * math.sqrt(se2)
    return [mid - h, mid + h]


def _t_quantile(p: float, df: float) -> float:
    """Student's t quantile (0.5 < p < 1), by bisection on its tail, P(|T| > t) = I_x(df/2, 1/2) with
    x = df / (df + t^2) (standard library only: record imports no numpy)."""
    def betai(a: float, b: float, x: float) -> float:
        front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
        if x > (a + 1) / (a + b + 2):
            return 1.0 - betai(b, a, 1.0 - x)
        c, d = 1.0, 1.0 - (a + b) * x / (a + 1)          # Lentz's continued fraction
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        f = d
        for m in range(1, 300):
            for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                        -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
                d = 1.0 + num * d
                d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
                c = 1.0 + num / c
                c = c if abs(c) > 1e-300 else 1e-300
                f *= c * d
            if abs(c * d - 1.0) < 1e-12:
                break
        return front * f / a

    tail = 2.0 * (1.0 - p)
    lo, hi = 0.0, 1.0
    while betai(df / 2, 0.5, df / (df + hi * hi)) > tail:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if betai(df / 2, 0.5, df / (df + mid * mid)) > tail else (lo, mid)
    return (lo + hi) / 2


def count_line(capture_client: dict | None) -> str:
    """Why the request counts of one capture differ: each counts something else."""
    bounds = ""
    if capture_client and isinstance(capture_client.get("requests_inside"), int):
        bounds = (f": between {capture_client['requests_inside']} (sent and answered inside the recorded span) and "
                  f"{capture_client.get('requests_overlapping')} (in flight during it)")
    return ("counts: the client's completions are requests answered between the window's open and close; the "
            "server's, requests its batches ran between its own start and stop calls; analyze counts the rows of "
            "the batch ranges nsys recorded, from the first range to the last, which also holds requests in flight "
            f"at the edges{bounds}")


def _hold_signals(cap: Recording):
    """While cleaning up, a further Ctrl-C only prints a line: the cleanup has its own timeouts."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def later(signum, frame):
        cap.say("still stopping the server and nsys; a few seconds more")
    old = {}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, later)
        except (ValueError, OSError):
            pass
    return old


def _restore_signals(old) -> None:
    for s, h in (old or {}).items():
        try:
            signal.signal(s, h)
        except (ValueError, OSError):
            pass


def _interrupt(signum, frame):
    raise Interrupted()


def record(cfg: RecordConfig, dry_run: bool = False) -> dict | None:
    """Run one capture (or only print its commands). Raises ClefError with one line on failure."""
    try:
        nsys = Nsys.find(cfg.nsys)
    except NsysMissing:
        if not dry_run and cfg.profiler != "torch":
            raise
        nsys = Nsys.assumed()
    pl = plan(cfg, nsys)
    out = sys.stdout if dry_run else sys.stderr
    if not cfg.quiet or dry_run:
        if not nsys.probed:
            print("# nsys not found here: switches shown as for a recent nsys", file=out)
        for n in pl.notes:
            print(f"# {n}", file=out)
        for line in pl.lines():
            print(line, file=out)
    if dry_run:
        return None
    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGHUP):
            old[s] = signal.signal(s, _interrupt)
    try:
        history: list[str] = []
        lost = crashed = 0              # each kind of failure has --retries tries of its own
        while True:
            attempt = 1 + lost + crashed
            if attempt > 1:
                pl = plan(cfg, nsys)          # a fresh session name and process marker
            try:
                res = Recording(cfg, pl, attempt, history).run()
            except NsysCrashed as exc:
                if crashed >= cfg.retries:
                    raise
                crashed += 1
                msg = f"attempt {attempt}: {exc}; recorded again (--retries {cfg.retries})"
            except NoNvtx as exc:
                if lost >= cfg.retries:
                    raise NoNvtx(f"{exc}" + (f" (after {lost + 1} attempts, --retries {cfg.retries})" if lost else ""))
                lost += 1
                msg = f"attempt {attempt}: {exc}; recorded again with a fresh server (--retries {cfg.retries})"
            else:
                if res["nvtx_rows"] != 0 or lost >= cfg.retries:
                    return res
                lost += 1
                msg = (f"attempt {attempt}: the export held no NVTX record; recorded again with a fresh server "
                       f"(--retries {cfg.retries})")
            history.append(msg)
            # said under --quiet too: a retry doubles the recording's time, and a failed attempt is news
            print(f"record: {msg}", file=sys.stderr, flush=True)
    finally:
        _restore_signals(old)


def recorded_stage_config(spec: str | None) -> dict | None:
    """The stage configuration of the injected spec, as analyze reads it back from the manifest
    (analyze.read.manifest.recorded_config): the spec file may move or change after the recording."""
    if not spec:
        return None
    from ..annotate.spec import load
    return load(spec).config.to_dict()
