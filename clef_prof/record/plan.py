"""What a recording will do, before it runs: its configuration (RecordConfig) and the nsys
commands, windows and environment built from it (Plan, `plan()`), with secrets redacted for
the manifest. Standard library only."""
from __future__ import annotations

import os
import secrets
import shlex
import tempfile
from dataclasses import dataclass, field

from ..base.config import DEFAULT_PY_SAMPLING_HZ, ENV_CLOCK_MARKS, ENV_PY_SAMPLING_HZ as ENV_HZ
from ..base.errors import ClefError
from .load import LoadSettings
from ..base.nsys import (Nsys, TraceOptions, export_command, launch_command, profile_command, quote, start_command,
                   stop_command, switch_names)
from ..base.redact import REMOVED, redact_args, redact_text
from .presets import (DEFAULT_NVTX_CAPTURE, PRESETS, VLLM_PROFILER_CONFIG, VLLM_PROFILER_FLAG, Preset, torch_setup,
                      vllm_profiler_config)


@dataclass
class RecordConfig:
    out: str
    server: list[str]
    name: str = "capture"
    nsys: str | None = None
    window: str = "auto"
    preset: str = "generic"
    url: str | None = None                # None: the preset's
    health_url: str | None = None
    health_timeout: float = 120.0
    start_path: str | None = None
    stop_path: str | None = None
    start_body: str | None = None
    stop_body: str | None = None
    call_endpoints: bool = True
    nvtx_capture: str = DEFAULT_NVTX_CAPTURE
    capture_range_end: str = "stop"
    trace: TraceOptions = field(default_factory=TraceOptions)
    warmup_s: float = 15.0
    warmup_requests: int = 0
    duration_s: float = 3.0
    load: LoadSettings | None = field(default_factory=LoadSettings)
    client_cmd: str | None = None
    spec: str | None = None
    env: dict = field(default_factory=dict)
    stop_timeout: float = 15.0
    retries: int = 1
    finalize_timeout: float = 300.0
    export: bool = True
    importer_libs: str | None = None       # LD_LIBRARY_PATH for QdstrmImporter alone
    arm: str | None = None
    round: int | None = None
    argv: list[str] | None = None
    quiet: bool = False
    keep_env: bool = False          # the manifest keeps --env values and secret-looking arguments
    profiler: str = "nsys"          # "torch": the server's own PyTorch profiler, no nsys (presets.torch_setup)
    py_sampling_hz: float = DEFAULT_PY_SAMPLING_HZ  # clef-prof's Python sampler (annotate.sampler); 0: off
    torch_stack: bool = False       # --profiler torch: with_stack=True (python_function events)

    @property
    def torch_dir(self) -> str:
        """--profiler torch: the folder the server writes its traces into."""
        return os.path.join(os.path.abspath(self.out), self.name + ".torch")

    def __post_init__(self):
        if self.url is None:
            self.url = PRESETS[self.preset].url

    @property
    def preset_obj(self) -> Preset:
        return PRESETS[self.preset]

    def endpoint(self, which: str) -> tuple[str | None, str | None]:
        p = self.preset_obj
        path = self.start_path if which == "start" else self.stop_path
        body = self.start_body if which == "start" else self.stop_body
        path = path if path is not None else (p.start if which == "start" else p.stop)
        body = body if body is not None else (p.start_body if which == "start" else p.stop_body)
        if which == "start" and self.profiler == "torch" and self.start_body is None:
            body = torch_setup(self.preset, self.torch_dir, self.server, self.torch_stack)[2]
        if not self.call_endpoints or not path:
            return None, None
        return self.url.rstrip("/") + path, body

    @property
    def health(self) -> str:
        return self.health_url or self.url.rstrip("/") + self.preset_obj.health


def gpu_present() -> bool:
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        return True
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


@dataclass
class Plan:
    window: str
    nsys: Nsys
    server: list[str]
    main: list[str]                       # nsys profile ... / nsys launch ...
    start: list[str] | None = None        # nsys start (window nsys)
    stop: list[str] | None = None         # nsys stop
    export: list[str] | None = None
    env: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    session: str = ""
    token: str = ""
    report: str = ""
    sqlite: str = ""
    probe: bool = False                   # --window auto: probe the endpoints once healthy
    torch_dir: str | None = None          # --profiler torch: the server's trace folder
    nsys_tmp: str | None = None           # TMPDIR of this capture's nsys processes alone (see nsys_tmpdir)

    def lines(self) -> list[str]:
        tmp = f"TMPDIR={shlex.quote(self.nsys_tmp)} " if self.nsys_tmp else ""
        env = "".join(f"{k}={shlex.quote(v)} " for k, v in self.env.items() if k != "TMPDIR")
        out = [f"# window: {self.window}", tmp + env + quote(self.main)]
        if self.start:
            out += [tmp + quote(self.start) + "    # opens the window", tmp + quote(self.stop) + "    # closes it"]
        if self.export:
            out.append(quote(self.export))
        return out


# nsys switches that the window and the report's path depend on: set by record (with the option
# named here), never replaced through --nsys-arg
_OWNED = {"output": "--out and --name", "force-overwrite": None, "session-new": None, "capture-range": "--window",
          "capture-range-end": "--capture-range-end", "nvtx-capture": "--nvtx-capture"}


def server_env(cfg: RecordConfig) -> dict:
    """The variables added to the server's environment at its start under nsys, unless given by
    --env: the one that starts clef-prof's Python sampler (annotate.sampler) when asked for, and
    the one that starts its clock marks (annotate.clock), which place the capture on record's
    clock."""
    if cfg.profiler != "nsys":
        return {}
    env = {} if ENV_CLOCK_MARKS in cfg.env else {ENV_CLOCK_MARKS: "1"}
    if cfg.py_sampling_hz > 0 and ENV_HZ not in cfg.env:
        env[ENV_HZ] = f"{cfg.py_sampling_hz:g}"
    return env


def plan(cfg: RecordConfig, nsys: Nsys | None = None) -> Plan:
    if not cfg.server:
        raise ClefError("record: no server command: put it after `--`, e.g. "
                        "clef-prof record --out runs/x -- clef-prof demo-server --variant pr")
    owned = sorted(switch_names(cfg.trace.extra) & _OWNED.keys())
    if owned:
        hint = _OWNED[owned[0]]
        raise ClefError(f"--nsys-arg: record sets nsys' --{owned[0]} itself" + (f"; use {hint}" if hint else ""))
    if cfg.profiler == "torch":
        return _torch_plan(cfg, nsys)
    if nsys is None:
        nsys = Nsys.find(cfg.nsys)
    window = cfg.window
    notes: list[str] = []
    preset = cfg.preset_obj
    server = list(cfg.server)
    if cfg.preset == "vllm" and not vllm_profiler_config(server)[1]:
        server += [VLLM_PROFILER_FLAG, VLLM_PROFILER_CONFIG]
        notes.append(f"--preset vllm: added {VLLM_PROFILER_FLAG} {shlex.quote(VLLM_PROFILER_CONFIG)} to the server "
                     "command (vLLM mounts /start_profile and /stop_profile only with it)")
    probe = False
    if window == "auto":
        has_endpoints = cfg.endpoint("start")[0] is not None
        if not gpu_present() or not has_endpoints:
            window = "nsys"
            notes.append("--window auto: nsys (" + ("no NVIDIA GPU here" if has_endpoints else "no profiling endpoints")
                         + ")")
        elif preset.endpoints_sure:
            window = "profiler-api"
            notes.append(f"--window auto: profiler-api (an NVIDIA GPU is present; --preset {cfg.preset} mounts the "
                         "endpoints)")
        else:
            window, probe = "nsys", True
            notes.append("--window auto: nsys session control, probed once the server is healthy: with "
                         "/start_profile the window is the profiler API's (cudaProfilerApi), without it nsys' own")
    if window in ("profiler-api", "nvtx") and cfg.endpoint("start")[0] is None:
        raise ClefError(f"record: --window {window} needs the server's /start_profile endpoint "
                        "(not --preset none / --no-endpoints); use --window nsys")
    token = secrets.token_hex(6)
    session = f"clefprof-{os.getpid()}-{token[:6]}"
    base = os.path.join(os.path.abspath(cfg.out), cfg.name)
    env = {k: v for k, v in preset.env if k not in os.environ}
    if env:
        notes.append(f"--preset {cfg.preset}: " + " ".join(f"{k}={v}" for k, v in env.items()))
    if cfg.spec:
        env.update(spec_env(cfg.spec))
    if cfg.py_sampling_hz > 0:
        notes.append(f"Python samples: clef-prof's sampler at {cfg.py_sampling_hz:g} Hz ({ENV_HZ}); nsys' own "
                     + (f"--python-sampling at {cfg.trace.python_sampling_hz} Hz too" if cfg.trace.python_sampling_hz
                        else "--python-sampling off (analyze reads clef-prof's samples first; nsys' only without them)"))
    env.update(cfg.env)
    nsys_tmp = nsys_tmpdir(token)
    app = keep_tmpdir(server, env)
    if window == "nsys":
        main = launch_command(nsys, cfg.trace, app, session=session, notes=notes)
        start = start_command(nsys, cfg.trace, base, session=session)
        stop = stop_command(nsys, session=session)
    else:
        rng = "cudaProfilerApi" if window == "profiler-api" else "nvtx"
        if window == "nvtx":
            env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
        main = profile_command(nsys, cfg.trace, base, app, session=session, capture_range=rng,
                               capture_range_end=cfg.capture_range_end, nvtx_capture=cfg.nvtx_capture, notes=notes)
        start = stop = None
    report, sqlite = base + ".nsys-rep", base + ".sqlite"
    exp = export_command(nsys, report, sqlite) if cfg.export else None
    return Plan(window, nsys, server, main, start, stop, exp, env, notes, session, token, report, sqlite, probe,
                nsys_tmp=nsys_tmp)


def nsys_tmpdir(token: str) -> str:
    """A temporary folder of one capture's own, given to its nsys processes as TMPDIR.

    Every nsys on a machine keeps its sessions' files under $TMPDIR/nvidia/nsight_systems
    (quadd_session_<id>/: the injection's event files, the server's streams), and any nsys
    running beside it there, of the same release or another, may remove them as another's dead
    session's: the agent then finds no event file at `nsys stop` and the export holds no NVTX,
    OS-runtime or sampling row at all. Under a TMPDIR of its own no other nsys sees them. The injection finds the folder through nsys' NSYS_AGENT_TMP_DIR, so the server
    keeps its own TMPDIR (keep_tmpdir)."""
    return os.path.join(tempfile.gettempdir(), f"clef-prof-nsys-{token}")


def keep_tmpdir(server: list[str], env: dict) -> list[str]:
    """The server command run with the TMPDIR it would have had without record's (its --env
    TMPDIR, else this process's, else none): nsys passes its own environment on."""
    value = env.get("TMPDIR", os.environ.get("TMPDIR"))
    return ["env", "-u", "TMPDIR", *server] if value is None else ["env", f"TMPDIR={value}", *server]


def _torch_plan(cfg: RecordConfig, nsys: Nsys | None) -> Plan:
    """--profiler torch: the server runs as it is (no nsys); its /start_profile and /stop_profile
    start and stop its own torch profiler, which writes Kineto traces into cfg.torch_dir."""
    if cfg.window not in ("auto", "profiler-api"):
        raise ClefError(f"record --profiler torch: --window {cfg.window} is an nsys window; the torch profiler's "
                        "window is the server's /start_profile and /stop_profile (--window auto)")
    if cfg.endpoint("stop")[0] is None:
        raise ClefError("record --profiler torch needs the server's /start_profile and /stop_profile endpoints "
                        "(not --preset none / --no-endpoints)")
    server, env, _, notes = torch_setup(cfg.preset, cfg.torch_dir, list(cfg.server), cfg.torch_stack)
    preset = cfg.preset_obj
    env.update({k: v for k, v in preset.env if k not in os.environ})
    if cfg.spec:
        env.update(spec_env(cfg.spec))
    env.update(cfg.env)
    notes.append(f"--profiler torch: the server's PyTorch profiler writes its traces into {cfg.torch_dir}")
    return Plan("profiler-api", nsys or Nsys.assumed(), server, list(server), env=env, notes=notes,
                token=secrets.token_hex(6), torch_dir=cfg.torch_dir)


def redact_commands(commands: dict) -> dict:
    """The manifest's command lines with environment values, secret-named flags' values and
    key-like tokens removed (clef_prof.capture.scrub's rules)."""
    out = {}
    for key, v in commands.items():
        if key == "env":
            out[key] = {k: REMOVED for k in v}
        elif isinstance(v, list):
            out[key] = redact_args(v)
        elif isinstance(v, str) and key != "cwd":
            out[key] = redact_text(v)[0]
        else:
            out[key] = v
    return out


def spec_env(spec_path: str) -> dict:
    if not os.path.isfile(spec_path):
        raise ClefError(f"--spec {spec_path}: no such file")
    from ..annotate.spec import load
    load(spec_path)                       # a malformed spec fails here, with its own one line
    try:
        from ..annotate.envform import environment
    except ImportError:
        raise ClefError("--spec needs clef_prof.annotate.envform, which this installation lacks") from None
    return environment(spec_path, base=os.environ)
