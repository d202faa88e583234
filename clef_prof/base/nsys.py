"""Find Nsight Systems' `nsys`, probe what it supports, and build its command lines.

Standard library only: `clef-prof record` runs on GPU machines that have no pandas.

Where nsys is looked for: `--nsys PATH` (the binary, or a folder holding `nsys`, `bin/nsys` or
`target-linux-x64/nsys`), then the environment variable CLEF_PROF_NSYS (same forms), win.
Otherwise every nsys found, in this order: `nsys` on PATH; the project's `.nsys/<version>/nsys`
(scripts/install-nsys.sh), newest version first; the usual install places (/usr/local/cuda/bin,
/opt/nvidia/nsight-systems/*/bin), then the nsys that Nsight Compute bundles
(/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys), newest version first. With a CUDA
driver on the machine, the newest of them whose CUPTI is not older than the driver's CUDA major
is used (an older CUPTI loses records without failing: clef_prof/base/cupti.py); without one, or when
none is known to fit, the first.

When nsys leaves a `.qdstrm` and no `.nsys-rep` (its QdstrmImporter could not load, e.g. for
lack of libdw.so.1/libelf.so.1), `import_command` runs the importer itself, with
LD_LIBRARY_PATH set for the importer only (`--importer-libs DIR` or $CLEF_PROF_IMPORTER_LIBS).

Switches differ between releases (2022.4 has no Python sampling, and its `nsys launch`
crashes on `--wait=primary`), so each optional switch is checked against `nsys profile --help`
/ `nsys launch --help` before it is used, and left out with a note when it is unknown.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

from .cupti import cupti_major, driver_major, local_driver_version, nsys_release
from .errors import ClefError

ENV_NSYS = "CLEF_PROF_NSYS"
ENV_IMPORTER_LIBS = "CLEF_PROF_IMPORTER_LIBS"
INSTALL_PLACES = ("/usr/local/cuda/bin/nsys", "/usr/local/cuda-*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
                  "/opt/nvidia/nsight-systems-cli/*/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")
PKG_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(PKG_DIR)
HOW_TO_GET = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems; on Debian/Ubuntu the "
              "`nsight-systems` package, or `bash scripts/install-nsys.sh` in a clef-prof checkout) and put "
              f"`nsys` on PATH, set {ENV_NSYS}=/path/to/nsys, or pass --nsys PATH")


class NsysMissing(ClefError):
    """No usable nsys binary."""


def _candidates_in(path: str) -> list[str]:
    if os.path.isdir(path):
        return [os.path.join(path, p) for p in ("nsys", "bin/nsys", "target-linux-x64/nsys")]
    return [path]


def _usable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _version_key(path: str) -> tuple[int, ...]:
    """The version in a path's folders (`.nsys/2023.4/nsys`, `nsight-compute/2025.3.1/host/...`)."""
    m = re.search(r"[/-](\d{4}(?:\.\d+)+)(?:/|$)", path)
    return tuple(int(x) for x in m.group(1).split(".")) if m else (0,)


def _project_nsys() -> list[str]:
    found = []
    for root in dict.fromkeys([REPO_DIR, os.getcwd()]):
        found += glob.glob(os.path.join(root, ".nsys", "*", "nsys"))
    return sorted(set(found), key=_version_key, reverse=True)


def installed_nsys(patterns: tuple[str, ...] = INSTALL_PLACES) -> list[str]:
    """nsys in the usual install places, in the order of `patterns`, newest version first in each."""
    out = []
    for pattern in patterns:
        out += [c for c in sorted(glob.glob(pattern), key=_version_key, reverse=True) if _usable(c)]
    return out


def locate(explicit: str | None = None, driver: int | None = None) -> str:
    """The path of the nsys to use, or NsysMissing with how to get one (one line). `--nsys` and
    $CLEF_PROF_NSYS win; otherwise, of every nsys found (PATH, .nsys/, the install places), the
    newest whose CUPTI is not older than the CUDA driver (`driver`, as cuDriverGetVersion encodes
    it; read from this machine when None), else the first found (no driver: the CPU path)."""
    for label, value in (("--nsys", explicit), (ENV_NSYS, os.environ.get(ENV_NSYS))):
        if value:
            for c in _candidates_in(os.path.expanduser(value)):
                if _usable(c):
                    return os.path.abspath(c)
            raise NsysMissing(f"nsys not found at {value} (from {label}); {HOW_TO_GET}")
    found = list(dict.fromkeys(filter(None, [shutil.which("nsys"), *filter(_usable, _project_nsys()),
                                             *installed_nsys()])))
    if not found:
        raise NsysMissing(f"nsys (Nsight Systems) is not installed: {HOW_TO_GET}")
    if driver is None:
        driver = local_driver_version()[0]
    return choose([(c, _release_text(c)) for c in found] if driver else [(found[0], None)], driver)


def choose(found: list[tuple[str, str | None]], driver: int | None) -> str:
    """Of (path, version text) in the order found, the newest nsys whose CUPTI is of the driver's
    CUDA major, else the newest whose CUPTI is newer; the first found when none is known to fit,
    or without a driver."""
    drv = driver_major(driver)
    if drv is None:
        return found[0][0]
    lows = [cupti_major(v)[0] for _, v in found]
    for fits in (lambda lo: lo == drv, lambda lo: lo is not None and lo > drv):
        ok = [(nsys_release(v), -i) for i, ((_, v), lo) in enumerate(zip(found, lows)) if fits(lo)]
        if ok:
            return found[-max(ok)[1]][0]
    return found[0][0]


def _release_text(path: str) -> str | None:
    """The release in the path's folders ('2025.3.1'), else what `nsys --version` says."""
    key = _version_key(path)
    if key != (0,):
        return ".".join(map(str, key))
    try:
        return _run_text([path, "--version"], timeout=20)
    except NsysMissing:
        return None


def _run_text(argv: list[str], timeout: float = 60) -> str:
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                           errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NsysMissing(f"{argv[0]} does not run ({exc}); {HOW_TO_GET}") from None
    return p.stdout + p.stderr


@lru_cache(maxsize=None)
def _probe(path: str) -> tuple[str, str, str]:
    version = _run_text([path, "--version"]).strip()
    if "Nsight Systems" not in version and not re.search(r"\d{4}\.\d", version):
        raise NsysMissing(f"{path} is not an Nsight Systems CLI (`--version` said: {version[:120]!r}); {HOW_TO_GET}")
    return version, _run_text([path, "profile", "--help"]), _run_text([path, "launch", "--help"])


@dataclass
class Nsys:
    """An nsys binary and the switches it knows."""

    path: str
    version_text: str = ""
    profile_help: str = field(default="", repr=False)
    launch_help: str = field(default="", repr=False)
    probed: bool = True

    @classmethod
    def find(cls, explicit: str | None = None) -> "Nsys":
        path = locate(explicit)
        return cls(path, *_probe(path))

    @classmethod
    def assumed(cls, path: str = "nsys") -> "Nsys":
        """Stand-in for --dry-run without nsys: every switch is assumed to exist."""
        return cls(path, "", "", "", probed=False)

    @property
    def version(self) -> str | None:
        m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", self.version_text)
        return m.group(1) if m else None

    def supports(self, switch: str, command: str = "profile") -> bool:
        if not self.probed:
            return True
        text = self.profile_help if command == "profile" else self.launch_help
        return re.search(rf"(^|[\s,])--{re.escape(switch)}\b", text, re.M) is not None

    @property
    def install_root(self) -> str:
        """The folder holding target-linux-x64/ (so nsys' helper processes can be told apart)."""
        real = os.path.realpath(self.path)
        if os.path.basename(os.path.dirname(real)).startswith("target-"):
            return os.path.dirname(os.path.dirname(real))
        if os.path.isdir(os.path.join(os.path.dirname(real), "target-linux-x64")):
            return os.path.dirname(real)
        return os.path.dirname(real)


def session_state(nsys_path: str, session: str, env: dict | None = None) -> str | None:
    """The state `nsys sessions list` shows for a session (Configured, StartRange, RangeCollection,
    RangeGeneration, RangeImportation, Launched, ...), or None when it is not listed. `env`: the
    environment the session's nsys ran with (its TMPDIR holds the sessions nsys lists)."""
    try:
        p = subprocess.run([nsys_path, "sessions", "list"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=20, errors="replace", env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1] == session:
            return parts[2]
    return None


@dataclass
class TraceOptions:
    """What to record: the switches shared by `nsys profile` and `nsys launch`."""

    trace: str = "cuda,nvtx,osrt"
    python_sampling_hz: int = 0            # nsys' own Python sampler (2023.4+); 0: off (clef-prof's replaces it)
    cuda_graph_trace: str | None = "graph"
    trace_fork: bool = True
    sample: str | None = "none"            # CPU IP sampling (`-s`); profile/start only
    cpuctxsw: str | None = "none"
    extra: list[str] = field(default_factory=list)   # passed verbatim (profile / launch); they replace ours


# nsys' one-letter forms of the switches clef-prof sets
_SHORT = {"t": "trace", "s": "sample", "o": "output", "f": "force-overwrite", "c": "capture-range", "p": "nvtx-capture",
          "b": "backtrace"}
# the switches `nsys launch` no longer takes ("set it with the start command instead", 2022.4 and 2023.4)
_START_ONLY = ("sample", "cpuctxsw", "backtrace", "samples-per-backtrace", "sampling-period")
# the long names of the switches clef-prof sets, refuses or moves
_NAMES = ("trace", "python-sampling", "python-sampling-frequency", "cuda-graph-trace", "trace-fork-before-exec",
          "output", "force-overwrite", "session-new", "capture-range", "capture-range-end", "nvtx-capture", *_START_ONLY)


def _long_name(name: str) -> str:
    """nsys takes an unambiguous prefix of a switch (`--cuda-graph=node` is --cuda-graph-trace):
    the one of ours that `name` is, or is the only prefix of; else `name`."""
    if name in _NAMES:
        return name
    hits = [n for n in _NAMES if n.startswith(name)]
    return hits[0] if len(hits) == 1 else name


def switch_names(args: list[str]) -> set[str]:
    """The long names of the switches in `args` (`--name=V`, `--name V`, `-t V`, `-tV`, and a
    prefix of one of ours as nsys reads it)."""
    out = set()
    for a in args:
        if a.startswith("--"):
            out.add(_long_name(a[2:].split("=", 1)[0]))
        elif a.startswith("-") and a[1:2] in _SHORT:
            out.add(_SHORT[a[1]])
    return out


def split_start_switches(args: list[str]) -> tuple[list[str], list[str]]:
    """(the switches of `args` that only `nsys start` takes, each with its value; the others),
    in order: under `nsys launch` + `nsys start` those go to start (launch refuses them)."""
    start: list[str] = []
    rest: list[str] = []
    value_next = False
    for a in args:
        if value_next:
            start.append(a)
            value_next = False
        elif a.startswith("-") and switch_names([a]) & set(_START_ONLY):
            start.append(a)
            value_next = "=" not in a and (a.startswith("--") or len(a) == 2)     # `--sample cpu`, `-s cpu`
        else:
            rest.append(a)
    return start, rest


def _trace_switches(nsys: Nsys, opts: TraceOptions, command: str, notes: list[str]) -> list[str]:
    """Our defaults, less those `opts.extra` gives: nsys refuses a switch given twice."""
    given = switch_names(opts.extra)
    out = [] if "trace" in given else [f"--trace={opts.trace}"]
    if opts.python_sampling_hz:
        if nsys.supports("python-sampling", command):
            out += [s for s in ("--python-sampling=true", f"--python-sampling-frequency={int(opts.python_sampling_hz)}")
                    if s[2:].split("=")[0] not in given]
        else:
            notes.append(f"nsys {nsys.version or '?'} has no --python-sampling (2022.4 lacks it, 2023.4 has it): "
                         "recorded without it")
    if opts.cuda_graph_trace and "cuda" in opts.trace.split(",") and "cuda-graph-trace" not in given:
        if nsys.supports("cuda-graph-trace", command):
            out.append(f"--cuda-graph-trace={opts.cuda_graph_trace}")
        else:
            notes.append(f"nsys {nsys.version or '?'} has no --cuda-graph-trace: left out")
    if opts.trace_fork and "trace-fork-before-exec" not in given:
        if nsys.supports("trace-fork-before-exec", command):
            out.append("--trace-fork-before-exec=true")
        else:
            notes.append(f"nsys {nsys.version or '?'} has no --trace-fork-before-exec: left out")
    return out


def _sampling_switches(opts: TraceOptions, given: set[str] = frozenset()) -> list[str]:
    out = []
    if opts.sample and "sample" not in given:
        out.append(f"--sample={opts.sample}")
    if opts.cpuctxsw and "cpuctxsw" not in given:
        out.append(f"--cpuctxsw={opts.cpuctxsw}")
    return out


def profile_command(nsys: Nsys, opts: TraceOptions, output: str, server: list[str], *, session: str,
                    capture_range: str = "cudaProfilerApi", capture_range_end: str = "stop",
                    nvtx_capture: str | None = None, notes: list[str] | None = None) -> list[str]:
    """`nsys profile` whose window is opened by the application (cudaProfilerStart or an NVTX range)."""
    notes = [] if notes is None else notes
    cmd = [nsys.path, "profile"]
    if nsys.supports("session-new"):
        cmd.append(f"--session-new={session}")
    cmd += _trace_switches(nsys, opts, "profile", notes) + _sampling_switches(opts, switch_names(opts.extra))
    cmd += [f"--capture-range={capture_range}", f"--capture-range-end={capture_range_end}"]
    if capture_range == "nvtx":
        cmd.append(f"--nvtx-capture={nvtx_capture}")
    cmd += [*opts.extra, f"--output={output}", "--force-overwrite=true", *server]
    return cmd


def launch_command(nsys: Nsys, opts: TraceOptions, server: list[str], *, session: str,
                   notes: list[str] | None = None) -> list[str]:
    """`nsys launch`: inject at start-up, collect nothing until `nsys start`."""
    notes = [] if notes is None else notes
    return [nsys.path, "launch", f"--session-new={session}", *_trace_switches(nsys, opts, "launch", notes),
            *split_start_switches(opts.extra)[1], *server]


def start_command(nsys: Nsys, opts: TraceOptions, output: str, *, session: str,
                  capture_range: str | None = None) -> list[str]:
    """`nsys start`: collect now, or (capture_range="cudaProfilerApi") from the app's
    cudaProfilerStart to its cudaProfilerStop; with the --nsys-arg switches only start takes."""
    rng = [f"--capture-range={capture_range}", "--capture-range-end=stop"] if capture_range else []
    extra = split_start_switches(opts.extra)[0]
    return [nsys.path, "start", f"--session={session}", *_sampling_switches(opts, switch_names(extra)), *extra, *rng,
            f"--output={output}", "--force-overwrite=true"]


def stop_command(nsys: Nsys, *, session: str) -> list[str]:
    return [nsys.path, "stop", f"--session={session}"]


def export_command(nsys: Nsys, report: str, sqlite: str) -> list[str]:
    return [nsys.path, "export", "--type=sqlite", "--quiet=true", "--force-overwrite=true", f"--output={sqlite}", report]


def run_export(nsys_path: str, report: str, kind: str, output: str) -> str | None:
    """Run `nsys export --type KIND` of `report` into `output`: None when it wrote the file, else
    why not, as `(exit code N): nsys' last line`, for the caller's one-line error."""
    p = subprocess.run([nsys_path, "export", f"--type={kind}", "--force-overwrite=true", f"--output={output}", report],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
    if p.returncode == 0 and os.path.isfile(output):
        return None
    lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
    return f"(exit code {p.returncode}): {lines[-1] if lines else 'no output'}"


def importer_path(nsys_path: str) -> str | None:
    """The QdstrmImporter that an nsys uses: target-linux-x64/../host-linux-x64/ in the Nsight
    Systems layout, beside nsys, or in another host folder beside nsys's own (the layouts that
    bundle nsys, such as Nsight Compute's, name it by platform), nearest first."""
    real = os.path.realpath(nsys_path)
    here = os.path.dirname(real)
    up = os.path.dirname(here)
    found = [os.path.join(up, "host-linux-x64", "QdstrmImporter"), os.path.join(here, "QdstrmImporter")]
    found += sorted(glob.glob(os.path.join(glob.escape(up), "*", "QdstrmImporter")))
    found += sorted(glob.glob(os.path.join(glob.escape(os.path.dirname(up)), "*", "*", "QdstrmImporter")))
    for c in found:
        if _usable(c):
            return c
    return None


def import_command(importer: str, qdstrm: str, libs: str | None, env: dict | None = None) -> tuple[list[str], dict]:
    """(argv, environment) that turn `qdstrm` into a .nsys-rep beside it; `libs` (a folder holding
    e.g. libdw.so.1 and libelf.so.1) goes first on LD_LIBRARY_PATH of the importer alone."""
    run_env = dict(os.environ if env is None else env)
    if libs:
        old = run_env.get("LD_LIBRARY_PATH")
        run_env["LD_LIBRARY_PATH"] = os.path.abspath(libs) + (os.pathsep + old if old else "")
    return [importer, "-i", qdstrm], run_env


def quote(cmd: list[str]) -> str:
    return shlex.join(cmd)
