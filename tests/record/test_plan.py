"""How `clef-prof record` turns its options into nsys commands (clef_prof.record.plan, clef_prof.base.nsys),
held against README "Record": the default switches (`-t cuda,nvtx,osrt`, Python sampling at 100 Hz,
the CUDA graph trace, the capture range of each window, fork tracing, output naming), the options
that change them, switches passed with --nsys-arg replacing record's own (nsys refuses a switch
given twice: checked with the real nsys) or refused where the window depends on them, the
differences between the installed nsys releases, and the command lines in the manifest, whose
secrets are removed unless --keep-env. Plans are built in this process; no server runs."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import replace

import pytest

from clef_prof.cli import app as cli
from clef_prof.cli.record import config_from
from clef_prof.base.errors import ClefError
from clef_prof.base.nsys import Nsys
from clef_prof.record.plan import plan, server_env
from clef_prof.record.presets import DEFAULT_NVTX_CAPTURE
from clef_prof.record.session import Recording
from clicheck import assert_one_line, run_main
from recording import nsys_path

SERVER = ["python3", "-m", "srv", "--port", "8000"]
APP = ["env", "-u", "TMPDIR", *SERVER]           # nsys runs the server with the TMPDIR it had (none, in build)
DEFAULTS = {"--trace": "cuda,nvtx,osrt", "--cuda-graph-trace": "graph", "--trace-fork-before-exec": "true"}


def build(monkeypatch, tmp_path, *argv, server=SERVER, gpu=False, nsys=None):
    """(RecordConfig, Plan) of `clef-prof record --out TMP/out ARGV -- SERVER`, on a machine with or
    without an NVIDIA GPU (as record's probe of /dev/nvidia* would say)."""
    for where in ("plan", "session"):
        monkeypatch.setattr(f"clef_prof.record.{where}.gpu_present", lambda: gpu)
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    args = cli.build_parser().parse_args(["record", "--out", str(tmp_path / "out"), *argv, "--", *server])
    cfg = config_from(args, list(server))
    return cfg, plan(cfg, nsys or Nsys.assumed())


def switches(cmd: list[str], server=APP) -> dict[str, str | None]:
    """The nsys switches of a command (between the subcommand and the server), each given once."""
    assert cmd[-len(server):] == server
    body = cmd[2:-len(server)]
    names = [a.split("=", 1)[0] for a in body if a.startswith("-")]
    assert len(names) == len(set(names)), names
    return {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else None) for a in body if a.startswith("-")}


# --------------------------------------------------------------------------------------------
# the default commands of each window


def test_profiler_api_window_has_the_documented_switches(monkeypatch, tmp_path):
    cfg, pl = build(monkeypatch, tmp_path, "--window", "profiler-api")
    base = str(tmp_path / "out" / "capture")
    assert pl.window == "profiler-api" and pl.main[:2] == ["nsys", "profile"] and pl.start is None and pl.stop is None
    sw = switches(pl.main)
    assert {k: sw[k] for k in DEFAULTS} == DEFAULTS
    assert (sw["--capture-range"], sw["--capture-range-end"]) == ("cudaProfilerApi", "stop")
    assert (sw["--output"], sw["--force-overwrite"]) == (base, "true")
    assert (sw["--sample"], sw["--cpuctxsw"]) == ("none", "none")            # CPU sampling off by default
    assert sw["--session-new"] == pl.session and pl.session.startswith(f"clefprof-{os.getpid()}-")
    assert (pl.report, pl.sqlite) == (base + ".nsys-rep", base + ".sqlite")
    assert pl.export == ["nsys", "export", "--type=sqlite", "--quiet=true", "--force-overwrite=true",
                         f"--output={base}.sqlite", f"{base}.nsys-rep"]
    assert pl.server == SERVER and pl.env == {}
    assert pl.lines() == ["# window: profiler-api", f"TMPDIR={pl.nsys_tmp} " + shlex.join(pl.main),
                          shlex.join(pl.export)]
    # clef-prof's sampler and clock marks, in the server's env
    assert server_env(cfg) == {"CLEF_PROF_PY_SAMPLING_HZ": "100", "CLEF_PROF_CLOCK_MARKS": "1"}
    assert not (tmp_path / "out").exists()                                   # a plan writes nothing


def test_server_env_under_nsys_only_and_never_over_env(monkeypatch, tmp_path):
    """The sampler's rate and the clock marks are added to the server's environment under nsys;
    --env wins over each; --python-sampling 0 drops the sampler only; the torch profiler gets none."""
    cfg, _ = build(monkeypatch, tmp_path, "--python-sampling", "0")
    assert server_env(cfg) == {"CLEF_PROF_CLOCK_MARKS": "1"}
    cfg, _ = build(monkeypatch, tmp_path, "--env", "CLEF_PROF_CLOCK_MARKS=0", "--env", "CLEF_PROF_PY_SAMPLING_HZ=7")
    assert server_env(cfg) == {}
    assert server_env(replace(cfg, env={}, profiler="torch")) == {}


def test_nvtx_window(monkeypatch, tmp_path):
    _, pl = build(monkeypatch, tmp_path, "--window", "nvtx")
    sw = switches(pl.main)
    assert (sw["--capture-range"], sw["--nvtx-capture"], sw["--capture-range-end"]) == ("nvtx", DEFAULT_NVTX_CAPTURE, "stop")
    assert pl.env == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}       # ranges with unregistered names open it too
    _, pl = build(monkeypatch, tmp_path, "--window", "nvtx", "--nvtx-capture", "win@dom", "--capture-range-end",
                  "stop-shutdown")
    sw = switches(pl.main)
    assert (sw["--nvtx-capture"], sw["--capture-range-end"]) == ("win@dom", "stop-shutdown")


def test_nsys_window_is_launch_start_stop(monkeypatch, tmp_path):
    """`nsys launch` injects at start-up and collects nothing until `nsys start`; sampling and the
    output belong to start."""
    _, pl = build(monkeypatch, tmp_path, "--window", "nsys")
    base = str(tmp_path / "out" / "capture")
    assert pl.main[:2] == ["nsys", "launch"] and not pl.probe
    sw = switches(pl.main)
    assert {k: sw[k] for k in DEFAULTS} == DEFAULTS and sw["--session-new"] == pl.session
    assert not {"--output", "--sample", "--cpuctxsw", "--capture-range"} & sw.keys()
    assert pl.start == ["nsys", "start", f"--session={pl.session}", "--sample=none", "--cpuctxsw=none",
                        f"--output={base}", "--force-overwrite=true"]
    assert pl.stop == ["nsys", "stop", f"--session={pl.session}"]
    lines = pl.lines()
    assert lines[0] == "# window: nsys" and lines[2] == f"TMPDIR={pl.nsys_tmp} {shlex.join(pl.start)}    # opens the window"


@pytest.mark.parametrize("given, start, launch", [
    (["-s", "cpu"], ["--cpuctxsw=none", "-s", "cpu"], []),
    (["--sample", "cpu"], ["--cpuctxsw=none", "--sample", "cpu"], []),
    (["--sample=cpu", "-bdwarf"], ["--cpuctxsw=none", "--sample=cpu", "-bdwarf"], []),
    (["--cpuctxsw=process-tree", "-t", "nvtx", "--sampling-period", "4000000", "--samples-per=2"],
     ["--sample=none", "--cpuctxsw=process-tree", "--sampling-period", "4000000", "--samples-per=2"], ["-t", "nvtx"])])
def test_nsys_window_gives_start_the_switches_only_start_takes(monkeypatch, tmp_path, given, start, launch):
    """nsys launch refuses --sample, --cpuctxsw, -b/--backtrace, --samples-per-backtrace and
    --sampling-period ('set it with the start command instead'): under launch + start they go to
    start with their values, replacing record's own; the rest stays on launch."""
    _, pl = build(monkeypatch, tmp_path, "--window", "nsys", *(f"--nsys-arg={a}" for a in given))
    assert pl.start[3:-2] == start
    assert pl.main == ["nsys", "launch", f"--session-new={pl.session}",
                       *(f"{k}={v}" for k, v in DEFAULTS.items() if not (launch and k == "--trace")), *launch, *APP]


@pytest.mark.parametrize("argv, gpu, window, probe, note", [
    ((), False, "nsys", False, "--window auto: nsys (no NVIDIA GPU here)"),
    (("--preset", "vllm"), False, "nsys", False, "--window auto: nsys (no NVIDIA GPU here)"),
    (("--no-endpoints",), True, "nsys", False, "--window auto: nsys (no profiling endpoints)"),
    (("--preset", "none"), True, "nsys", False, "--window auto: nsys (no profiling endpoints)"),
    (("--preset", "vllm"), True, "profiler-api", False, "--window auto: profiler-api"),
    ((), True, "nsys", True, "--window auto: nsys session control, probed once the server is healthy")])
def test_window_auto(monkeypatch, tmp_path, argv, gpu, window, probe, note):
    """README: nsys without a GPU; with one, the profiler API for --preset vllm; otherwise the server
    starts under `nsys launch` and is probed once healthy."""
    _, pl = build(monkeypatch, tmp_path, *argv, gpu=gpu)
    assert (pl.window, pl.probe, pl.main[1]) == (window, probe, "profile" if window == "profiler-api" else "launch")
    assert any(n.startswith(note) for n in pl.notes), pl.notes


@pytest.mark.parametrize("argv", [("--window", "profiler-api", "--no-endpoints"), ("--window", "nvtx", "--preset", "none")])
def test_windows_that_need_the_endpoints(monkeypatch, tmp_path, argv):
    with pytest.raises(ClefError, match="needs the server's /start_profile endpoint"):
        build(monkeypatch, tmp_path, *argv)


# --------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize("argv, present, absent", [
    ((), {}, {"--python-sampling", "--python-sampling-frequency"}),     # clef-prof's sampler replaces nsys'
    (("--nsys-python-sampling", "0"), {}, {"--python-sampling", "--python-sampling-frequency"}),
    (("--nsys-python-sampling", "250"), {"--python-sampling": "true", "--python-sampling-frequency": "250"}, set()),
    (("--no-trace-fork",), {}, {"--trace-fork-before-exec"}),
    (("--trace", "nvtx,osrt"), {"--trace": "nvtx,osrt"}, {"--cuda-graph-trace"}),    # no CUDA, no graph trace
    (("--cuda-graph-trace", "node"), {"--cuda-graph-trace": "node"}, set()),
    (("--sample", "cpu", "--cpuctxsw", "process-tree"), {"--sample": "cpu", "--cpuctxsw": "process-tree"}, set()),
    (("--sample", "", "--cpuctxsw", ""), {}, {"--sample", "--cpuctxsw"}),
    (("--nsys-arg=--osrt-threshold=10000",), {"--osrt-threshold": "10000", **DEFAULTS}, set()),
])
def test_options_change_the_switches(monkeypatch, tmp_path, argv, present, absent):
    _, pl = build(monkeypatch, tmp_path, "--window", "profiler-api", *argv)
    sw = switches(pl.main)
    assert {k: sw.get(k) for k in present} == present and not absent & sw.keys()


def test_output_naming(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    _, pl = build(monkeypatch, tmp_path, "--window", "profiler-api", "--name", "run1", "--no-export")
    assert switches(pl.main)["--output"] == str(tmp_path / "out" / "run1") and pl.export is None
    args = cli.build_parser().parse_args(["record", "--out", "rel", "--window", "nsys", "--", *SERVER])
    pl = plan(config_from(args, SERVER), Nsys.assumed())
    assert pl.start[-2] == f"--output={tmp_path / 'rel' / 'capture'}"                # absolute
    assert pl.export[-2:] == [f"--output={tmp_path / 'rel' / 'capture.sqlite'}", str(tmp_path / "rel" / "capture.nsys-rep")]


# --------------------------------------------------------------------------------------------
# switches passed with --nsys-arg


@pytest.mark.nsys("2022.4", "2023.4")
@pytest.mark.parametrize("version", ["2022.4", "2023.4"])
def test_nsys_refuses_a_switch_given_twice(version):
    """Why --nsys-arg must replace record's switch rather than add a second one."""
    p = subprocess.run([nsys_path(version), "profile", "--trace=nvtx", "--trace=osrt", "/bin/true"],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "NSYS_WRAPPER_RAW": "1"})
    assert p.returncode != 0 and "cannot be specified more than once" in p.stdout + p.stderr


@pytest.mark.parametrize("window", ["profiler-api", "nsys"])
@pytest.mark.parametrize("given, replaced, value", [
    (["--nsys-arg=--trace=cuda,nvtx,osrt,cublas"], "--trace", "cuda,nvtx,osrt,cublas"),
    (["--nsys-arg=-t", "--nsys-arg=cuda,nvtx"], "--trace", None),
    (["--nsys-arg=--python-sampling=false"], "--python-sampling", "false"),
    (["--nsys-arg=--python-sampling-frequency=1000"], "--python-sampling-frequency", "1000"),
    (["--nsys-arg=--cuda-graph-trace=node"], "--cuda-graph-trace", "node"),
    (["--nsys-arg=--trace-fork-before-exec=false"], "--trace-fork-before-exec", "false"),
])
def test_nsys_args_replace_records_switches(monkeypatch, tmp_path, window, given, replaced, value):
    """The nsys-jax way: a switch the user gives wins over the default, which is left out; the
    others stay."""
    _, pl = build(monkeypatch, tmp_path, "--window", window, *given)
    sw = switches(pl.main)
    user = [g.split("=", 1)[1] for g in given]
    before = pl.main[:-len(APP)]                       # the user's switches come last, before --output
    if window == "profiler-api":
        assert before[-2:] == [f"--output={tmp_path / 'out' / 'capture'}", "--force-overwrite=true"]
        before = before[:-2]
    assert before[-len(user):] == user
    if replaced in sw:
        assert sw[replaced] == value
    else:
        assert value is None and "-t" in sw                  # the one-letter form: ours left out
    assert {k: v for k, v in sw.items() if k in DEFAULTS and k != replaced} == \
        {k: v for k, v in DEFAULTS.items() if k != replaced}


@pytest.mark.nsys("2023.4")
@pytest.mark.parametrize("given, ours", [("--cuda-graph=node", "--cuda-graph-trace"),
                                         ("--python-sampling-f=10", "--python-sampling-frequency"),
                                         ("--trace-fork=false", "--trace-fork-before-exec"),
                                         ("--cpuctx=process-tree", "--cpuctxsw")])
def test_a_prefix_that_nsys_takes_replaces_records_switch(monkeypatch, tmp_path, given, ours):
    """nsys takes an unambiguous prefix of a switch for the switch ('--cuda-graph' is
    --cuda-graph-trace), so record leaves its own out for it too: the real nsys runs the
    command (it refused it as a switch given twice)."""
    _, pl = build(monkeypatch, tmp_path, "--window", "nvtx", f"--nsys-arg={given}", server=["/bin/true"],
                  nsys=Nsys.find(str(nsys_path("2023.4"))))
    assert given in pl.main and not any(a.startswith(ours + "=") for a in pl.main)
    os.makedirs(pl.nsys_tmp)        # as record runs it: in the capture's own TMPDIR, which no other nsys clears
    try:
        p = subprocess.run(pl.main, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TMPDIR": pl.nsys_tmp})
    finally:
        shutil.rmtree(pl.nsys_tmp, ignore_errors=True)
    assert p.returncode == 0 and "more than once" not in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.parametrize("given, sample, cpuctxsw", [("-s", None, "none"), ("--sample=cpu", "cpu", "none"),
                                                     ("--cpuctxsw=process-tree", "none", "process-tree")])
def test_nsys_args_replace_the_sampling_switches(monkeypatch, tmp_path, given, sample, cpuctxsw):
    argv = ["--nsys-arg=-s", "--nsys-arg=cpu"] if given == "-s" else [f"--nsys-arg={given}"]
    _, pl = build(monkeypatch, tmp_path, "--window", "profiler-api", *argv)
    sw = switches(pl.main)
    assert (sw.get("--sample"), sw.get("--cpuctxsw")) == (sample, cpuctxsw)
    assert ("-s" in sw) == (given == "-s")


@pytest.mark.parametrize("given, name, hint", [
    ("--output=/tmp/elsewhere", "output", "--out and --name"), ("-o", "output", "--out and --name"),
    ("--force-overwrite=false", "force-overwrite", None), ("-f", "force-overwrite", None),
    ("--session-new=mine", "session-new", None),
    ("--capture-range=none", "capture-range", "--window"), ("-c", "capture-range", "--window"),
    ("--capture-range-end=repeat", "capture-range-end", "--capture-range-end"),
    ("--nvtx-capture=a@b", "nvtx-capture", "--nvtx-capture"), ("-p", "nvtx-capture", "--nvtx-capture"),
    ("--outp=/tmp/elsewhere", "output", "--out and --name"),         # prefixes, as nsys reads them
    ("--capture-range-e=repeat", "capture-range-end", "--capture-range-end")])
def test_switches_the_window_depends_on_are_refused(tmp_path, monkeypatch, given, name, hint):
    monkeypatch.setenv("CLEF_PROF_NSYS", str(tmp_path / "no-nsys"))          # --dry-run goes on without nsys
    p = run_main("record", "--out", tmp_path / "o", "--dry-run", f"--nsys-arg={given}", "--", *SERVER)
    line = f"record sets nsys' --{name} itself" + (f"; use {hint}" if hint else "")
    assert_one_line(p, 1, line)
    assert p.stderr.strip().endswith(line) and not (tmp_path / "o").exists()


@pytest.mark.parametrize("option", ["--url", "--health-url"])
@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://127.0.0.1:port", "ftp://h:1"])
def test_bad_urls_are_refused_before_anything_runs(tmp_path, monkeypatch, option, url):
    """Before: a port out of range or an unclosed IPv6 bracket came out of the port probe as an
    internal ValueError after the plan was printed, and ftp:// waited out --health-timeout."""
    monkeypatch.setenv("CLEF_PROF_NSYS", str(tmp_path / "no-nsys"))
    p = run_main("record", "--out", tmp_path / "o", "--dry-run", option, url, "--", *SERVER)
    assert_one_line(p, 1, f"{option}: expected an http:// or https:// URL with a host, not {url!r}")
    assert p.stdout == "" and not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_duration_must_be_positive(tmp_path, monkeypatch, value):
    """NaN passed `<= 0` (a window of no time), inf overflowed later."""
    monkeypatch.setenv("CLEF_PROF_NSYS", str(tmp_path / "no-nsys"))
    p = run_main("record", "--out", tmp_path / "o", "--dry-run", "--duration", value, "--", *SERVER)
    assert_one_line(p, 1, "--duration must be positive")


def test_dry_run_prints_the_plan(tmp_path, monkeypatch):
    """`--dry-run` without nsys: the switches of a recent nsys, said so; nothing written."""
    monkeypatch.setenv("CLEF_PROF_NSYS", str(tmp_path / "no-nsys"))
    monkeypatch.delenv("TMPDIR", raising=False)
    p = run_main("record", "--out", tmp_path / "o", "--dry-run", "--window", "profiler-api",
                 "--nsys-arg=--trace=cuda,nvtx", "--", *SERVER)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "# nsys not found here: switches shown as for a recent nsys"
    assert "# window: profiler-api" in lines
    (main,) = [shlex.split(ln) for ln in lines if ln.startswith("TMPDIR=/") and " nsys profile " in ln]
    main = main[1:]                                     # nsys in a TMPDIR of the capture's own
    sw = switches(main)
    assert sw["--trace"] == "cuda,nvtx" and sw["--output"] == str(tmp_path / "o" / "capture")
    assert any(ln.startswith("nsys export --type=sqlite") for ln in lines)
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------
# nsys releases


@pytest.mark.nsys("2022.4", "2023.4")
@pytest.mark.parametrize("version, sampling", [("2022.4", False), ("2023.4", True)])
@pytest.mark.parametrize("window", ["profiler-api", "nsys"])
def test_nsys_releases(monkeypatch, tmp_path, version, sampling, window):
    """2022.4 has no Python sampling of its own (left out, with a note); both have the rest."""
    nsys = Nsys.find(str(nsys_path(version)))
    assert nsys.version.startswith(version)
    _, pl = build(monkeypatch, tmp_path, "--window", window, "--nsys-python-sampling", "100", nsys=nsys)
    sw = switches(pl.main)
    assert pl.main[0] == nsys.path
    assert ("--python-sampling" in sw, "--python-sampling-frequency" in sw) == (sampling, sampling)
    assert (sw["--trace"], sw["--cuda-graph-trace"], sw["--trace-fork-before-exec"]) == ("cuda,nvtx,osrt", "graph", "true")
    said = [n for n in pl.notes if "has no --python-sampling" in n]
    assert said == ([] if sampling else [f"nsys {nsys.version} has no --python-sampling (2022.4 lacks it, 2023.4 has "
                                         "it): recorded without it"])


# --------------------------------------------------------------------------------------------
# the manifest's command lines

SECRETS = {"hf": "hf_QwErTyUiOpAsDfGhJkLz", "sk": "sk-proj-AbCdEfGhIjKlMnOpQrSt", "aws": "wJalrXUtnFEMI/K7MDENG+bPxRfiCY",
           "plain": "plain-env-value"}


def manifest_of(monkeypatch, tmp_path, *extra):
    server = ["vllm", "serve", "m", "--api-key", SECRETS["sk"], f"--hf-token={SECRETS['hf']}", "--port", "8000"]
    argv = ["--window", "nsys", "--env", f"HF_TOKEN={SECRETS['hf']}", "--env", f"PLAIN={SECRETS['plain']}",
            f"--nsys-arg=--env-var=AWS_SECRET_ACCESS_KEY={SECRETS['aws']}",
            "--client-cmd", f"curl -s -H 'X-Api-Key: {SECRETS['sk']}' $CLEF_PROF_URL", *extra]
    cfg, pl = build(monkeypatch, tmp_path, *argv, server=server)
    cfg.argv = ["clef-prof", "record", "--out", cfg.out, *argv, "--", *server]
    return Recording(cfg, pl).manifest(None)


def test_manifest_commands_lose_their_secrets(monkeypatch, tmp_path):
    m = manifest_of(monkeypatch, tmp_path)
    text = json.dumps(m)
    assert not [k for k, s in SECRETS.items() if s in text]
    c = m["commands"]
    assert c["env"] == {"HF_TOKEN": "[removed]", "PLAIN": "[removed]"}              # every --env value
    assert c["server"] == ["vllm", "serve", "m", "--api-key", "[removed]", "--hf-token=[removed]", "--port", "8000"]
    assert c["nsys"][-8:] == c["server"] and "--env-var=AWS_SECRET_ACCESS_KEY=[removed]" in c["nsys"]
    assert "--trace=cuda,nvtx,osrt" in c["nsys"] and c["nsys_stop"][:2] == ["nsys", "stop"]
    assert "HF_TOKEN=[removed]" in c["clef_prof"] and "PLAIN=[removed]" in c["clef_prof"]
    assert c["client"].startswith("curl -s -H") and m["load"]["command"] == c["client"]
    assert c["cwd"] == os.getcwd()


def test_keep_env_keeps_the_command_lines(monkeypatch, tmp_path):
    m = manifest_of(monkeypatch, tmp_path, "--keep-env")
    c = m["commands"]
    assert c["env"] == {"HF_TOKEN": SECRETS["hf"], "PLAIN": SECRETS["plain"]}
    assert c["server"][4] == SECRETS["sk"] and f"--env-var=AWS_SECRET_ACCESS_KEY={SECRETS['aws']}" in c["nsys"]
    assert SECRETS["sk"] in c["client"] and m["load"]["command"] == c["client"]
    assert f"HF_TOKEN={SECRETS['hf']}" in c["clef_prof"]


def test_nsys_gets_a_tmpdir_of_its_own_and_the_server_keeps_its(monkeypatch, tmp_path):
    """nsys keeps its sessions' files under $TMPDIR/nvidia/nsight_systems, where any other nsys may
    clear them (the capture then holds no NVTX at all): each capture's nsys gets a folder of its own
    as TMPDIR, and nsys runs the server with the TMPDIR it would have had."""
    import tempfile

    _, pl = build(monkeypatch, tmp_path, "--window", "nsys")
    _, again = build(monkeypatch, tmp_path, "--window", "nsys")
    assert os.path.dirname(pl.nsys_tmp) == tempfile.gettempdir() and pl.nsys_tmp != again.nsys_tmp
    assert "TMPDIR" not in pl.env and not os.path.exists(pl.nsys_tmp)     # made by the recording, not the plan
    assert pl.main[-len(APP):] == APP
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    for argv, value in (((), str(tmp_path)), (("--env", "TMPDIR=/srv/tmp"), "/srv/tmp")):
        args = cli.build_parser().parse_args(["record", "--out", str(tmp_path / "o"), "--window", "nsys", *argv,
                                              "--", *SERVER])
        pl = plan(config_from(args, SERVER), Nsys.assumed())
        assert pl.main[-len(SERVER) - 2:] == ["env", f"TMPDIR={value}", *SERVER]
    rec = Recording(config_from(args, SERVER), pl)
    assert rec._env()["TMPDIR"] == pl.nsys_tmp and rec._env(nsys=False)["TMPDIR"] == "/srv/tmp"
