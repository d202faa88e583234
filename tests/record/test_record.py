"""`clef-prof record` and `clef-prof ab` with a real nsys (scripts/install-nsys.sh) on this CPU machine.

The window is nsys' own session (`nsys launch` + `nsys start/stop`) or an NVTX range, since
cudaProfilerStart needs a GPU. Every test checks that nothing of the capture outlives it: the
record process gets a marker in its environment, which nsys, its agent, the launcher and the
server all inherit, and /proc is scanned for it afterwards.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from clef_prof.analyze.judge.manifest import check_manifest
from clef_prof.record import manifest as mf
from httpcheck import free_port

ROOT = Path(__file__).resolve().parents[2]
NSYS = {v: ROOT / ".nsys" / v / "nsys" for v in ("2022.4", "2023.4")}
MARK = "CLEF_TEST_MARK"
FAST = ["--warmup", "1", "--duration", "2"]

STAGE_NAMES = ("parse", "index", "transfer", "head", "encode")


def leftovers(mark: str) -> list[str]:
    """Processes (other than this one) whose environment holds the test's marker."""
    needle = f"{MARK}={mark}".encode()
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid}: {cmdline[:120]}")
        except OSError:
            pass
    return out


def assert_no_leftovers(mark: str) -> None:
    left = []
    for _ in range(50):          # a process may take a moment to be reaped
        left = leftovers(mark)
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes left behind: {left}")


def env_for(mark: str, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env[MARK] = mark
    env.pop("CLEF_PROF_NSYS", None)
    env.update(extra)
    return env


def demo(port: int, *args) -> list[str]:
    return [sys.executable, "-m", "clef_prof", "demo-server", "--port", str(port), *args]


def clef(*args, mark: str, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], cwd=ROOT,
                          env=env or env_for(mark), capture_output=True, text=True, timeout=timeout)


def record(out: Path, port: int, *opts, server_args=(), mark: str, env=None, timeout=240):
    return clef("record", "--out", out, "--url", f"http://127.0.0.1:{port}", *opts, "--", *demo(port, *server_args),
                mark=mark, env=env, timeout=timeout)


def one_line(p: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert p.returncode == code, (p.returncode, p.stderr[-3000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert lines[0].startswith("clef-prof: error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def assert_within_client_bounds(r: dict, m: dict, concurrency: int) -> None:
    """The batch ranges count at least the requests the client sent and got answered inside the
    span the server was recorded in, at most those in flight during it; closed-loop clients keep
    at most `concurrency` in flight, so the two differ by the requests crossing the two edges.
    clef-prof's annotations in the server placed the span on the client's clock (annotate.clock)."""
    cap = m["client"]["capture"]
    assert cap["clock"]["source"] == "clef-prof clock marks", cap["clock"]    # the server's pairing of the clocks
    lo, hi = cap["requests_inside"], cap["requests_overlapping"]
    assert 0 < lo <= r["requests"] <= hi <= lo + 2 * concurrency, (r["requests"], lo, hi, cap.get("clock"))
    assert 0 < cap["recorded_s"] <= cap["duration_s"]


def analyze(path: Path, mark: str) -> dict:
    p = clef("analyze", path, "--format", "json", mark=mark, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def manifest_warnings(export: Path, m: dict, spec: Path | None = None) -> list[str]:
    """check_manifest on analyze's typed result of `export` (`analyze` above reads the CLI's JSON)."""
    from clef_prof.analyze.pipeline import analyze as analyze_export
    from clef_prof.annotate.spec import stage_config

    return check_manifest(analyze_export(str(export), stage_config(str(spec) if spec else None)).result, m)


@pytest.fixture
def mark():
    m = uuid.uuid4().hex
    yield m
    assert_no_leftovers(m)


# --------------------------------------------------------------------------------------------
# command lines

@pytest.mark.nsys("2022.4", "2023.4")
def test_dry_run_prints_the_nsys_commands(tmp_path, mark):
    p = clef("record", "--out", tmp_path / "o", "--dry-run", "--window", "profiler-api", "--nsys-python-sampling", "250",
             "--cuda-graph-trace", "node", "--", "python", "-m", "srv", "--flag", mark=mark)
    assert p.returncode == 0, p.stderr
    cmd = [ln for ln in p.stdout.splitlines() if " profile " in ln][0]
    for switch in ("--trace=cuda,nvtx,osrt", "--python-sampling=true", "--python-sampling-frequency=250",
                   "--cuda-graph-trace=node", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
                   "--trace-fork-before-exec=true", f"--output={tmp_path / 'o' / 'capture'}", "--force-overwrite=true"):
        assert switch in cmd.split(), switch
    assert cmd.endswith("python -m srv --flag")
    assert not (tmp_path / "o").exists()
    p = clef("record", "--out", tmp_path / "o", "--dry-run", "--window", "nsys", "--", "srv", mark=mark)
    lines = p.stdout.splitlines()
    assert any(" launch --session-new=clefprof-" in ln for ln in lines)
    assert any(" start --session=clefprof-" in ln and "--output=" in ln for ln in lines)
    assert any(" stop --session=clefprof-" in ln for ln in lines)
    assert any(" export --type=sqlite" in ln for ln in lines)
    # older nsys: no Python sampling of its own, said so
    p = clef("record", "--out", tmp_path / "o", "--dry-run", "--nsys", NSYS["2022.4"], "--nsys-python-sampling", "100",
             "--", "srv", mark=mark)
    cmd = [ln for ln in p.stdout.splitlines() if " launch " in ln][0]
    assert "--python-sampling" not in cmd and "--trace=cuda,nvtx,osrt" in cmd
    assert "has no --python-sampling" in p.stdout


def test_nsys_missing(tmp_path, mark):
    p = clef("record", "--out", tmp_path / "o", "--", "srv", mark=mark, env=env_for(mark, CLEF_PROF_NSYS="/nonexistent"))
    one_line(p, 1, "nsys not found at /nonexistent", "CLEF_PROF_NSYS", "install-nsys.sh")
    p = clef("record", "--out", tmp_path / "o", "--nsys", tmp_path, "--", "srv", mark=mark)
    one_line(p, 1, f"nsys not found at {tmp_path}")


NSYS_2022_SEM_OPEN = """\
WARNING: --cuda-graph-trace=graph requires CUDA driver version 11.7 or higher. Setting to --cuda-graph-trace=node.
/build/agent/work/323cb361ab84164c/QuadD/Common/ProcessWaiter/Src/POSIX/ProcessWaiterImpl.cpp(166): Throw in \
function QuadDCommon::ProcessWaiter::ProcessWaiterImpl::ProcessWaiterImpl(QuadDCommon::ProcessId, bool)
Dynamic exception type: boost::wrapexcept<QuadDCommon::SystemException>
std::exception::what: SystemException
[QuadDCommon::tag_errno_text*] = No such file or directory
[boost::errinfo_errno_*] = 2, "No such file or directory"
[boost::errinfo_api_function_*] = sem_open
"""


def test_nsys_crash_is_read_from_its_log():
    """nsys 2022.4's start-up crash under load, verbatim from a failed record (and reproduced by
    delaying nsys-launcher's semaphore creation under strace): one line, nsys' own."""
    from clef_prof.record.session import nsys_crash
    assert nsys_crash(NSYS_2022_SEM_OPEN) == (
        "ProcessWaiterImpl.cpp(166): QuadDCommon::ProcessWaiter::ProcessWaiterImpl::ProcessWaiterImpl("
        "QuadDCommon::ProcessId, bool): sem_open: No such file or directory")
    assert nsys_crash("Traceback (most recent call last):\nRuntimeError: simulated start-up failure\n") is None
    # 2022.4 under load, verbatim (tests/recording.py's nsys profile of a small program, no report)
    assert nsys_crash("Failed to probe the process (sync)\n") == "ProcessResumer: Failed to probe the process (sync)"
    assert nsys_crash("my server: Failed to probe the process\n") is None
    # 2022.4 under load, verbatim twice on stdout and stderr of an nsys profile in CI, no report
    assert nsys_crash("Connection to the Agent lost.\n") == "Connection to the Agent lost."
    assert nsys_crash("my server: Connection to the Agent lost.\n") is None
    # 2023.4 under load with --delay/--duration: boost.asio's end of file on the agent's socket,
    # the whole of what nsys profile printed (CI's log of tests/recording.py), no report
    assert nsys_crash("End of file\n") == "End of file"
    assert nsys_crash("parse: End of file reached\n") is None


@pytest.mark.nsys("2023.4")
def test_port_already_taken(tmp_path, mark):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        p = record(tmp_path / "o", port, "-q", mark=mark)
    one_line(p, 1, f"port {port}", "already answers", "the server's own --port after --")


# --------------------------------------------------------------------------------------------
# the acceptance capture

@pytest.mark.nsys("2023.4")
def test_record_demo_then_analyze(tmp_path, mark):
    out, port = tmp_path / "cap", free_port()
    p = record(out, port, *FAST, "--duration", "2.5", server_args=("--variant", "pr"), mark=mark)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (out / "capture.sqlite").exists() and (out / "capture.nsys-rep").exists()
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["export"] == "capture.sqlite" and m["report"] == "capture.nsys-rep"
    assert m["window"]["mode"] == "nsys" and m["nsys"]["version"].startswith("2023.4")
    assert m["commands"]["server"][-4:] == ["--port", str(port), "--variant", "pr"]
    assert m["server"]["info"]["variant"] == "pr"
    assert m["load"]["concurrency"] == 16 and m["load"]["generator"] == "builtin"
    client = m["client"]
    assert client["window"]["completions"] > 100 and client["window"]["errors"] == 0
    assert client["window"]["latency_ms_p50"] <= client["window"]["latency_ms_p99"]
    assert client["capture"]["completions"] > 100
    assert m["server_counts"]["requests"] > 100
    if m["git"]["clef_prof"]:
        assert len(m["git"]["clef_prof"]["revision"]) == 40
    assert "capture:" in p.stdout and "manifest:" in p.stdout
    # one line says what each request count counts, with the client's bounds for analyze's count
    # (the summary's lines wrap at spaces to the width, continued with two spaces: joined here)
    joined = p.stdout.replace("\n  ", " ")
    counts = [ln for ln in joined.splitlines() if ln.startswith("counts: ")][-1]     # the last attempt's
    cap = client["capture"]
    assert f"between {cap['requests_inside']} (sent and answered" in counts
    assert f"{cap['requests_overlapping']} (in flight during it)" in counts
    # what recording cost: the window against the span just before it was asked to open (the
    # start call's send), as long as the window but not in the first half of the warm-up, with the
    # server under nsys but nsys not collecting
    before, win = client["before_window"], m["window"]
    assert before["end_ns"] == win["outer_ns"][0] <= win["opened_ns"]
    assert before["start_ns"] >= before["end_ns"] - (win["closed_ns"] - win["opened_ns"])
    assert before["completions"] > 10
    cost = client["profiler_cost"]
    assert cost["reference"] == "nsys attached, not recording"
    assert cost["throughput_change_pct"] == pytest.approx(
        100 * (client["window"]["throughput_rps"] / before["throughput_rps"] - 1), rel=1e-9)
    assert cost["latency_ms_mean_change"] == pytest.approx(
        client["window"]["latency_ms_mean"] - before["latency_ms_mean"], rel=1e-9)
    said = " ".join(p.stdout.split())          # the summary wraps at spaces to the width
    assert f"{cost['throughput_change_pct']:+.1f}% throughput" in said
    # with its uncertainty: 95% Welch intervals over the spans' 0.1 s bins, containing the figure
    lo, hi = cost["throughput_change_pct_ci"]
    assert lo <= cost["throughput_change_pct"] <= hi and f"(95% CI {lo:+.1f}% to {hi:+.1f}%)" in said
    lo, hi = cost["latency_ms_mean_change_ci"]
    assert lo <= cost["latency_ms_mean_change"] <= hi
    assert len(before["bins_throughput_rps"]) >= 4
    assert sum(before["bins_throughput_rps"]) * (before["end_ns"] - before["start_ns"]) / 1e9 / \
        len(before["bins_throughput_rps"]) == pytest.approx(before["completions"])

    r = analyze(out / "capture.sqlite", mark)
    assert r["requests_source"] == "message n=K"
    # Python samples by default: clef-prof's sampler asked and recorded, nsys' own off
    assert (m["trace"]["python_sampling_hz"], m["trace"]["python_sampler"], m["trace"]["nsys_python_sampling_hz"]) == (
        100, "clef-prof", 0)
    # every sample placed in one slot; whether any lands in a stage depends on the GIL (the demo's
    # CPU batches are shorter than the switch interval: docs/sampling.md, limits), so not asserted
    smp = r["samples"]
    assert smp["samples"] > 0 and sum(v["samples"] for v in smp["stages"].values()) == smp["samples"]
    for name in ("parse", "index", "transfer", "head", "encode"):
        assert r["stages"][name]["instances"] == r["batches"] > 0
    assert_within_client_bounds(r, m, 16)
    assert r["requests"] >= m["server_counts"]["requests"] - 2 * 16
    assert manifest_warnings(out / "capture.sqlite", m) == []

    # the same capture with batch ranges deleted from a copy of its export: once they held more
    # requests than the client's interval is wide, the check catches it
    lost = tmp_path / "lost"
    lost.mkdir()
    shutil.copy(out / "capture.sqlite", lost / "capture.sqlite")
    (lost / "manifest.json").write_text(json.dumps(m))
    con = sqlite3.connect(lost / "capture.sqlite")
    rows = con.execute("SELECT rowid, text FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'pooler n=%' "
                       "ORDER BY start").fetchall()
    width = client["capture"]["requests_overlapping"] - client["capture"]["requests_inside"]
    gone, removed = [], 0
    for rowid, text in rows[len(rows) // 3:]:                  # from the middle of the capture
        if removed > width:
            break
        gone.append(rowid)
        removed += int(text.split("n=")[1].split()[0])
    con.execute(f"DELETE FROM NVTX_EVENTS WHERE rowid IN ({','.join(map(str, gone))})")
    con.commit()
    con.close()
    q = analyze(lost / "capture.sqlite", mark)
    assert q["batches"] == r["batches"] - len(gone) and q["requests"] == r["requests"] - removed
    assert q["requests"] < client["capture"]["requests_inside"]
    assert any(f"batch ranges count {q['requests']} requests" in w and "were lost" in w for w in q["warnings"])
    assert_clock_placement(out / "capture.sqlite", m, tmp_path)


def assert_clock_placement(export: Path, m: dict, tmp_path: Path) -> None:
    """The recorded span was placed on record's clock by the server's clock marks (annotate.clock),
    which pair the two clocks every 0.25 s; nsys' own session start is only compared with them. A
    copy of the export whose session start is 2 s earlier still (a pairing nsys got wrong) places
    the span the same through its marks; without marks too, the span would begin 2 s before record
    asked for the window: refused, with by how much, instead of bounds that count the wrong 2 s of
    the client's requests. (The copy's session start is set from the marks' placement, not from
    nsys' own, which is what is not trusted.)"""
    cap, win = m["client"]["capture"], m["window"]
    clock = cap["clock"]
    assert clock["source"] == "clef-prof clock marks" and clock["marks"] >= 4, clock
    span = mf.collected_span(str(export))
    marks = mf.clock_marks(str(export))
    assert len(marks) == clock["marks"] and all(s1 > s0 for (s0, _), (s1, _) in zip(marks, marks[1:]))
    a, b, how = mf.place_span(*span[:3], marks, *win["outer_ns"])
    assert ([a, b], how) == (cap["recorded_ns"], clock)
    assert win["outer_ns"][0] <= a < b <= win["outer_ns"][1]

    early = tmp_path / "early.sqlite"
    shutil.copy(export, early)
    t0 = win["outer_ns"][0] - span[1] - 2_000_000_000      # the first range 2 s before record asked
    con = sqlite3.connect(early)
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = ?", (t0,))
    con.commit()
    span2 = mf.collected_span(str(early))
    assert span2 == (t0, *span[1:])
    a2, b2, how2 = mf.place_span(*span2[:3], mf.clock_marks(str(early)), *win["outer_ns"])
    assert (a2, b2) == (a, b)
    assert how2["session_start_error_ms"] == pytest.approx(clock["session_start_error_ms"] + (t0 - span[0]) / 1e6)
    con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 34 AND int64Value IS NOT NULL AND textId IN "
                "(SELECT id FROM StringIds WHERE value = 'clef-prof clock')")
    con.commit()
    con.close()
    assert mf.clock_marks(str(early)) == []
    a3, b3, how3 = mf.place_span(*span2[:3], [], *win["outer_ns"])
    assert (a3, b3) == (None, None) and how3["source"] == "nsys session start"
    assert "begins 2000.0 ms before record asked for the window" in how3["refused"], how3


@pytest.mark.nsys("2023.4")
def test_ab_two_arms_two_rounds(tmp_path, mark):
    out, port = tmp_path / "ab", free_port()
    py = shlex.quote(sys.executable)
    p = clef("ab", "--arm", f"main={py} -m clef_prof demo-server --variant main --port {port}",
             "--arm", f"pr={py} -m clef_prof demo-server --variant pr --port {port}",
             "--rounds", "2", "--order", "ABBA", "--out", out, "--url", f"http://127.0.0.1:{port}",
             "--warmup", "0.5", "--duration", "1", "-q", mark=mark, timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    index = json.loads((out / "ab.json").read_text())
    assert [(c["round"], c["arm"]) for c in index["captures"]] == [(1, "main"), (1, "pr"), (2, "pr"), (2, "main")]
    starts = []
    for c in index["captures"]:
        folder = out / f"{c['round']}-{c['arm']}"
        m = json.loads((folder / "manifest.json").read_text())
        assert m["arm"] == c["arm"] and m["round"] == c["round"] and m["status"] == "ok"
        assert (folder / m["export"]).exists()
        assert m["server"]["info"]["variant"] == c["arm"]
        starts.append(m["started_ns"])
    assert starts == sorted(starts)          # run in the order listed: main, pr, pr, main
    # the layout compare reads
    from clef_prof.compare.arm import read_ab_folder
    assert sorted(a for a, _ in read_ab_folder(str(out))) == ["main", "main", "pr", "pr"]


@pytest.mark.parametrize("variant", [pytest.param("nvtx-2023.4", marks=pytest.mark.nsys("2023.4")),
                                     pytest.param("nsys-2022.4", marks=pytest.mark.nsys("2022.4")),
                                     pytest.param("client-cmd", marks=pytest.mark.nsys("2023.4"))])
def test_other_windows_and_clients(tmp_path, mark, variant):
    out, port = tmp_path / "cap", free_port()
    if variant == "nvtx-2023.4":
        opts = ("--window", "nvtx")
    elif variant == "nsys-2022.4":
        opts = ("--window", "nsys", "--nsys", NSYS["2022.4"])
    else:
        opts = ("--client-cmd", f"{shlex.quote(sys.executable)} -m clef_prof load --url $CLEF_PROF_URL --duration 60 "
                "--concurrency 4")
    p = record(out, port, *FAST, "-q", *opts, mark=mark)
    assert p.returncode == 0, p.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    r = analyze(out / m["export"], mark)
    assert r["batches"] > 0 and all(r["stages"][s]["instances"] > 0 for s in r["stages"])
    assert manifest_warnings(out / m["export"], m) == []
    if variant == "client-cmd":
        assert m["client"]["window"]["completions"] is None and m["load"]["generator"] == "client-cmd"
    else:
        assert_within_client_bounds(r, m, 16)
    if variant == "nsys-2022.4":
        assert m["nsys"]["version"].startswith("2022.4")
        assert any("python-sampling" in n for n in m["notes"])


@pytest.mark.nsys("2023.4")
def test_nsys_window_with_start_only_switches(tmp_path, mark):
    """--nsys-arg switches that nsys launch refuses (CPU sampling, context switches) reach nsys
    start: the capture holds the context switches that record's default --cpuctxsw=none leaves out."""
    out, port = tmp_path / "cap", free_port()
    p = record(out, port, *FAST, "-q", "--window", "nsys", "--concurrency", "4", "--nsys-arg=-s", "--nsys-arg=cpu",
               "--nsys-arg=--cpuctxsw=process-tree", mark=mark)
    assert p.returncode == 0, p.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["client"]["window"]["completions"] > 0
    con = sqlite3.connect(out / m["export"])
    assert con.execute("SELECT count(*) FROM SCHED_EVENTS").fetchone()[0] > 0


# --------------------------------------------------------------------------------------------
# hostile cases: one line, nothing left running

@pytest.mark.nsys("2023.4")
def test_server_exits_at_start(tmp_path, mark):
    p = record(tmp_path / "o", free_port(), *FAST, "-q", server_args=("--fail-at-start",), mark=mark)
    one_line(p, 1, "exited during start-up", "simulated start-up failure", "capture.stderr.log")
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["status"] == "failed" and m["export"] is None


@pytest.mark.nsys("2023.4")
@pytest.mark.parametrize("given, says", [("--trace=", "the argument for option '--trace' should follow"),
                                         ("--no-such-switch=1", "--no-such-switch")])
def test_nsys_refusing_its_command_line_is_not_the_server(tmp_path, mark, given, says):
    """Said as the server exiting during start-up before, though the server never ran."""
    p = record(tmp_path / "o", free_port(), *FAST, "-q", "--window", "nvtx", f"--nsys-arg={given}", mark=mark)
    one_line(p, 1, "nsys refused its command line (exit code 1; check --nsys-arg), the server never started: ", says)


@pytest.mark.nsys("2023.4")
def test_server_never_healthy(tmp_path, mark):
    p = record(tmp_path / "o", free_port(), *FAST, "-q", "--health-timeout", "3", server_args=("--never-healthy",),
               mark=mark)
    one_line(p, 1, "did not become healthy within 3 s", "/health", "HTTP 503")


@pytest.mark.nsys("2023.4")
def test_start_profile_404(tmp_path, mark):
    p = record(tmp_path / "o", free_port(), *FAST, "-q", "--window", "profiler-api",
               server_args=("--no-profile-endpoints",), mark=mark)
    one_line(p, 1, "/start_profile answered 404", "no profiling endpoints", "--profiler-config",
             "VLLM_TORCH_PROFILER_DIR", "--window nsys")


@pytest.mark.nsys("2023.4")
def test_profiler_api_window_without_gpu(tmp_path, mark):
    """The demo server's CPU path (forced, so a GPU on the machine changes nothing) never calls
    cudaProfilerStart."""
    p = record(tmp_path / "o", free_port(), "--warmup", "0.5", "--duration", "1", "-q", "--window", "profiler-api",
               server_args=("--device", "cpu"), mark=mark)
    one_line(p, 1, "window did not open", "no cudaProfilerStart", "--window nsys")


@pytest.mark.nsys("2023.4")
def test_server_dies_inside_the_window(tmp_path, mark):
    out = tmp_path / "o"
    p = record(out, free_port(), "--warmup", "1", "--duration", "4", "-q", server_args=("--die-in-window", "1.5"),
               mark=mark)
    one_line(p, 1, "exited inside the window", "partial export kept", "server died")
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "server died" and m["export"] == "capture.sqlite"
    r = analyze(out / "capture.sqlite", mark)
    assert r["batches"] > 0
    assert any("server died" in w for w in manifest_warnings(out / "capture.sqlite", m))


def _default_sigint() -> None:
    """SIGINT as a terminal delivers it: pytest started in the background (`cmd &`) ignores SIGINT,
    and a child inherits the ignoring, so the record under test would never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.nsys("2023.4")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_inside_the_window(tmp_path, mark, sig):
    out, port = tmp_path / "o", free_port()
    proc = subprocess.Popen([sys.executable, "-m", "clef_prof", "record", "--out", str(out), "--url",
                             f"http://127.0.0.1:{port}", "--warmup", "1", "--duration", "60", "--", *demo(port)],
                            cwd=ROOT, env=env_for(mark), stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_sigint)
    try:
        seen = ""
        deadline = time.monotonic() + 120
        while "window open" not in seen and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen += line
        assert "window open" in seen, seen
        time.sleep(0.5)
        proc.send_signal(sig)
        err = proc.stderr.read()
        assert proc.wait(60) == 130, err
        assert err.strip().splitlines()[-1] == "clef-prof: interrupted"
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted"


# --------------------------------------------------------------------------------------------
# --spec: stage annotations injected into a server that has none

PLAIN_SERVER = '''
import argparse, json
from http.server import BaseHTTPRequestHandler, HTTPServer
from pooler_app.plain import Pooler

pooler = Pooler()


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, body):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 404, b"{}")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/v1/systemone":
            return self._send(404, b"{}")
        req = json.loads(body)
        out = pooler.run([json.dumps({"id": "r", "tokens": 3 + len(req["state"].split()) % 5})])
        self._send(200, json.dumps({"out": out}).encode())


ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int)
srv = HTTPServer(("127.0.0.1", ap.parse_args().port), H)
try:
    srv.serve_forever()
except KeyboardInterrupt:
    pass
'''


@pytest.mark.nsys("2023.4")
def test_spec_injects_stages_into_an_unannotated_server(tmp_path, mark):
    programs = ROOT / "tests" / "programs"
    (tmp_path / "plain_server.py").write_text(PLAIN_SERVER)
    out, port = tmp_path / "cap", free_port()
    env = env_for(mark, PYTHONPATH=os.pathsep.join([str(ROOT), str(programs)]))
    p = clef("record", "--out", out, "--url", f"http://127.0.0.1:{port}", "--spec", programs / "pooler.toml",
             "--window", "nsys", "--concurrency", "4", *FAST, "--", sys.executable, tmp_path / "plain_server.py",
             "--port", port, mark=mark, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "no profiling endpoints" in p.stderr          # a note, not an error: the nsys window needs none
    m = json.loads((out / "manifest.json").read_text())
    assert m["spec"] == str(programs / "pooler.toml") and "CLEF_PROF_SPEC" in m["commands"]["env"]
    q = clef("analyze", out / "capture.sqlite", "--spec", programs / "pooler.toml", "--format", "json", mark=mark,
             env=env)
    assert q.returncode == 0, q.stderr
    r = json.loads(q.stdout)
    assert r["batches"] > 10 and r["requests"] == r["batches"]          # one request per batch
    for name in ("parse", "index", "transfer", "head", "encode"):
        assert r["stages"][name]["instances"] > 0, name
    assert_within_client_bounds(r, m, 4)
    assert manifest_warnings(out / "capture.sqlite", m, programs / "pooler.toml") == []


# --------------------------------------------------------------------------------------------
# a grandchild that drops the marker and leaves the session

ESCAPING_SERVER = '''
import argparse, subprocess, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int)
ap.add_argument("--pidfile")
a = ap.parse_args()
child = subprocess.Popen(["setsid", "env", "-i", "sleep", "3017"])   # no marker, a session of its own
open(a.pidfile, "w").write(str(child.pid))


class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.command == "POST":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_GET


try:
    HTTPServer(("127.0.0.1", a.port), H).serve_forever()
except KeyboardInterrupt:
    pass
'''


@pytest.mark.nsys("2023.4")
def test_record_ends_a_grandchild_without_the_marker(tmp_path, mark):
    (tmp_path / "server.py").write_text(ESCAPING_SERVER)
    out, port, pidfile = tmp_path / "cap", free_port(), tmp_path / "grandchild.pid"
    p = clef("record", "--out", out, "--url", f"http://127.0.0.1:{port}", "--window", "nsys", *FAST, "--",
             sys.executable, tmp_path / "server.py", "--port", port, "--pidfile", pidfile, mark=mark)
    assert p.returncode == 0, p.stderr[-3000:]
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                alive = fh.read() == b"sleep\x003017\x00"
        except OSError:
            alive = False
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"the server's grandchild {pid} (setsid env -i sleep 3017) is still running"


# --------------------------------------------------------------------------------------------
# captures that hold no NVTX


class Clearing:
    """A thread removing what matches `pattern` under `root` every 50 ms, as another nsys on the
    machine removes a session's files under $TMPDIR/nvidia/nsight_systems."""

    def __init__(self, root: Path, pattern: str):
        self.root, self.pattern, self.cleared = root, pattern, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        while not self.stop.is_set():
            for f in self.root.glob(self.pattern):
                shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink(missing_ok=True)
                self.cleared.append(f.name)
            self.stop.wait(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


@pytest.mark.nsys("2023.4")
def test_no_nvtx_from_an_annotated_server_fails(tmp_path, mark):
    """The demo server annotates every batch; with the session's event files removed while it
    runs (what another nsys did to the shared session folder) the export holds no NVTX at all.
    That is no usable capture: one line, exit 1, "failed" in the manifest (it was "ok", exit 0)."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    out, port = tmp_path / "cap", free_port()
    with Clearing(shared, "clef-prof-nsys-*/nvidia/nsight_systems/quadd_session_*/injection_files/*") as c:
        p = record(out, port, *FAST, "-q", "--retries", "0", server_args=("--variant", "pr"), mark=mark,
                   env=env_for(mark, TMPDIR=str(shared)))
    assert any(n.endswith("_storage.dat") for n in c.cleared)
    m = json.loads((out / "manifest.json").read_text())
    batches = m["server_counts"]["batches"]
    assert batches > 0
    line = one_line(p, 1, f"the export holds no NVTX record though the server ran {batches} annotated batches in "
                          "its window", "not a usable capture")
    assert m["status"] == "failed" and m["status_detail"] in line
    con = sqlite3.connect(out / "capture.sqlite")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    assert not tables & {"NVTX_EVENTS", "OSRT_API"}         # nothing at all from the server


@pytest.mark.nsys("2023.4")
def test_capture_survives_another_nsys_clearing_the_shared_session_folder(tmp_path, mark):
    """nsys keeps a session's event files under $TMPDIR/nvidia/nsight_systems/quadd_session_*/, and
    another nsys on the machine may remove them there: the export then held no NVTX, OS-runtime or
    sampling row at all, with status ok (20% of recordings on a machine where other nsys ran).
    Here the test clears that shared folder all through the recording; record's nsys works in a
    TMPDIR of its own, so the capture keeps every batch."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    out, port = tmp_path / "cap", free_port()
    with Clearing(shared, "nvidia/nsight_systems/quadd_session_*") as c:
        p = record(out, port, *FAST, "--retries", "0", server_args=("--variant", "pr"), mark=mark,
                   env=env_for(mark, TMPDIR=str(shared)))
    assert p.returncode == 0, p.stderr[-3000:]
    assert c.cleared == []                      # record's nsys left nothing there to clear
    assert not list(shared.glob("clef-prof-nsys-*"))        # its own folder is removed after the capture
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["attempt"] == 1
    con = sqlite3.connect(out / "capture.sqlite")
    batches = con.execute("SELECT count(*) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                          "WHERE e.eventType = 59 AND s.value LIKE 'pooler n=%'").fetchone()[0]
    batches += con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'pooler n=%'"
                           ).fetchone()[0]
    osrt = con.execute("SELECT count(*) FROM OSRT_API").fetchone()[0]
    con.close()
    assert batches >= m["server_counts"]["batches"] > 0 and osrt > 0


@pytest.mark.nsys("2023.4")
def test_quiet_record_says_when_it_retries(tmp_path, mark):
    """Under --quiet a retry used to be silent: the recording took twice as long and said nothing
    of the failed attempt. With every attempt losing its NVTX (the session's event files removed
    as in test_no_nvtx_from_an_annotated_server_fails) and --retries 1, the retry is one line
    before the error, and the manifest counts two attempts."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    out, port = tmp_path / "cap", free_port()
    with Clearing(shared, "clef-prof-nsys-*/nvidia/nsight_systems/quadd_session_*/injection_files/*"):
        p = record(out, port, *FAST, "-q", "--retries", "1", server_args=("--variant", "pr"), mark=mark,
                   env=env_for(mark, TMPDIR=str(shared)))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2, p.stderr
    assert lines[0].startswith("record: attempt 1: ") and "recorded again with a fresh server (--retries 1)" in lines[0]
    assert lines[1].startswith("clef-prof: error: ") and "after 2 attempts, --retries 1" in lines[1]
    assert json.loads((out / "manifest.json").read_text())["attempt"] == 2
