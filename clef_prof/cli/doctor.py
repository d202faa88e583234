"""`clef-prof doctor`: which nsys and which Python `nvtx` this machine has, whether the
ranges a server emits will be recorded, and what to do when they will not.

The rule it checks: Nsight Systems up to 2023.4 drops every range emitted by the Python
`nvtx` package from 0.2.12 on ("compatibility ID 260 != 259"); `nvtx` <= 0.2.11 works with
them, and newer nsys accepts both. clef_prof's own ranges (clef_prof.annotate.api,
`clef-prof inject`) speak the NVTX core API directly and are recorded by every nsys from
2022.4 on, whatever `nvtx` is installed.

nsys is looked for as clef_prof.base.nsys does (`clef-prof record`): `--nsys PATH` (repeatable),
$CLEF_PROF_NSYS, `nsys` on PATH, the project's `.nsys/*/nsys` (scripts/install-nsys.sh), the
usual install places (Nsight Compute's bundled nsys included). With --nsys or $CLEF_PROF_NSYS
only those are judged, otherwise every one found. It also reads the CUDA driver's version
(libcuda's cuDriverGetVersion, else `nvidia-smi`) and says when an nsys's CUPTI is older than
it (clef_prof.base.cupti): such an nsys loses records. Exit 0 when everything found is usable, 1
otherwise.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field

from ..base.errors import ClefError
from ..base import cupti
from ..base.nsys import ENV_NSYS, _candidates_in, _project_nsys, _usable, installed_nsys

LAST_OLD_NSYS = (2023, 4)          # the last nsys that rejects nvtx >= 0.2.12
FIRST_NEW_NVTX = (0, 2, 12)        # the first nvtx whose ranges those nsys drop
_NSYS_VERSION = re.compile(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, ...] | None:
    """(major, minor, ...) of a version string: '0.2.11' -> (0, 2, 11); None when unreadable."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def nsys_version(text: str) -> tuple[int, ...] | None:
    """(2023, 4, 4, 54) from 'NVIDIA Nsight Systems version 2023.4.4.54-...'."""
    m = _NSYS_VERSION.search(text or "")
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def records_python_nvtx(nsys: tuple[int, ...] | None, nvtx: tuple[int, ...] | None) -> bool | None:
    """Whether this nsys records ranges from this Python nvtx; None when either is unknown."""
    if nsys is None or nvtx is None:
        return None
    return not (tuple(nsys[:2]) <= LAST_OLD_NSYS and tuple(nvtx[:3]) >= FIRST_NEW_NVTX)


def _fmt(v: tuple[int, ...] | None) -> str:
    return ".".join(map(str, v)) if v else "?"


@dataclass
class NsysInfo:
    path: str
    source: str                       # --nsys, $CLEF_PROF_NSYS, PATH, project
    version: str | None = None        # the version line, when it ran
    error: str | None = None
    records_python_nvtx: bool | None = None

    @property
    def parsed(self) -> tuple[int, ...] | None:
        return nsys_version(self.version or "")


@dataclass
class Report:
    nsys: list[NsysInfo] = field(default_factory=list)
    python: str = sys.executable
    python_version: str | None = None
    nvtx: str | None = None           # version of the `nvtx` package; None when not installed
    nvtx_error: str | None = None
    client: str | None = None         # clef_prof's NVTX client: "ctypes NVTX v3 client" or why not
    reader: str | None = None         # how analyze reads exports: the C reader, or why not
    cuda_driver_version: int | None = None   # cuDriverGetVersion's encoding (13000 = 13.0); None: no driver
    cuda_driver_source: str | None = None    # libcuda, nvidia-smi, or why there is none
    problems: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def find_nsys(explicit: list[str] | None = None, env: dict | None = None) -> list[NsysInfo]:
    """The nsys binaries to judge, in clef_prof.base.nsys's order of precedence, without duplicates.

    `--nsys` values (or else $CLEF_PROF_NSYS) are judged alone; otherwise nsys on PATH and
    every project copy (.nsys/<version>/nsys) are."""
    env = os.environ if env is None else env
    found: list[NsysInfo] = []
    seen: set[str] = set()

    def add(path: str, source: str) -> None:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            found.append(NsysInfo(os.path.abspath(path), source))

    def add_given(value: str, source: str) -> None:
        for c in _candidates_in(os.path.expanduser(value)):
            if _usable(c):
                return add(c, source)
        found.append(NsysInfo(value, source, error="no nsys there (not an executable file, nor a folder "
                                                   "holding nsys, bin/nsys or target-linux-x64/nsys)"))

    if explicit:
        for value in explicit:
            add_given(shutil.which(value) or value, "--nsys")
        return found
    if env.get(ENV_NSYS):
        add_given(env[ENV_NSYS], f"${ENV_NSYS}")
        return found
    on_path = shutil.which("nsys", path=env.get("PATH", ""))
    if on_path:
        add(on_path, "PATH")
    for p in _project_nsys():
        if _usable(p):
            add(p, "project .nsys")
    for p in installed_nsys():
        add(p, "installed")
    return found


def _run_version(info: NsysInfo, timeout: float = 60) -> None:
    try:
        p = subprocess.run([info.path, "--version"], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        info.error = f"`{info.path} --version` took more than {timeout:.0f} s"
        return
    except OSError as exc:
        info.error = f"cannot run: {exc.strerror or exc}"
        return
    out = (p.stdout + p.stderr).strip()
    if p.returncode != 0 or nsys_version(out) is None:
        last = out.splitlines()[-1] if out else f"exit code {p.returncode}"
        info.error = f"`nsys --version` failed: {last}"
        return
    info.version = next((line for line in out.splitlines() if nsys_version(line)), out)


# an nvtx that cannot be imported is no nvtx: looked for first, without importlib.metadata (20 ms)
_PY_PROBE = ("import json, sys\n"
             "from importlib.util import find_spec\n"
             "d = {'python': sys.version.split()[0], 'nvtx': None}\n"
             "try:\n"
             "    found = find_spec('nvtx') is not None\n"
             "except (ImportError, ValueError):\n"
             "    found = True\n"
             "if found:\n"
             "    try:\n"
             "        from importlib.metadata import version, PackageNotFoundError\n"
             "        try:\n"
             "            d['nvtx'] = version('nvtx')\n"
             "        except PackageNotFoundError:\n"
             "            pass\n"
             "    except ImportError:\n"
             "        pass\n"
             "if found and d['nvtx'] is None:\n"
             "    try:\n"
             "        import nvtx\n"
             "        d['nvtx'] = getattr(nvtx, '__version__', None) or 'unknown'\n"
             "    except Exception:\n"
             "        pass\n"
             "print(json.dumps(d))\n")


def probe_python(python: str | None = None, timeout: float = 60) -> tuple[str | None, str | None, str | None]:
    """(python version, nvtx version or None, error) of an interpreter (this one by default)."""
    if python is None:
        ns: dict = {}
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(_PY_PROBE, ns)  # noqa: S102 - our own probe text
        d = json.loads(buf.getvalue())
        return d["python"], d["nvtx"], None
    try:
        p = subprocess.run([python, "-c", _PY_PROBE], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, None, f"cannot run {python}: {exc}"
    try:
        d = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
        return None, None, f"{python} did not answer: {tail}"
    return d["python"], d["nvtx"], None


def _client_status() -> str:
    try:
        from ..annotate import nvtx_client  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"unavailable ({type(exc).__name__}: {exc})"
    return "ctypes NVTX v3 client (recorded by every nsys >= 2022.4, whatever nvtx is installed)"


def _reader_status() -> str:
    try:
        from ..analyze.read import _scan
    except ImportError:
        return ("no C reader: exports are read through ADBC or sqlite3, slower (reinstall with a C compiler and "
                "Python's headers: apt-get install gcc python3-dev; pip install -e .)")
    return f"C reader (SQLite {_scan.sqlite_version}): exports read at SQLite's own speed"


def check(nsys: list[str] | None = None, python: str | None = None, env: dict | None = None) -> Report:
    """Find nsys and the Python nvtx, and judge them (see the module docstring)."""
    r = Report()
    r.nsys = find_nsys(nsys, env)
    # each `nsys --version` takes ~20 ms: run them at once, beside the Python probe
    runs = [threading.Thread(target=_run_version, args=(info,)) for info in r.nsys if info.error is None]
    for t in runs:
        t.start()
    r.python = python or sys.executable
    r.python_version, r.nvtx, r.nvtx_error = probe_python(python)
    r.client = _client_status()
    r.reader = _reader_status()
    for t in runs:
        t.join()
    nvtx_v = parse_version(r.nvtx) if r.nvtx else None
    if r.nvtx_error:
        r.problems.append(f"python {r.python}: {r.nvtx_error}")
    if not r.nsys:
        r.problems.append("no nsys found (not on PATH, no $CLEF_PROF_NSYS, nothing in .nsys/)")
        r.advice.append("install one: bash scripts/install-nsys.sh (2022.4 and 2023.4 into .nsys/), or point "
                        f"${ENV_NSYS} / --nsys at an nsys binary")
    for info in r.nsys:
        if info.error:
            r.problems.append(f"nsys {info.path} ({info.source}): {info.error}")
            continue
        info.records_python_nvtx = records_python_nvtx(info.parsed, nvtx_v) if r.nvtx else None
        if info.records_python_nvtx is False:
            r.problems.append(f"nsys {_fmt(info.parsed[:3])} ({info.path}) will not record ranges from Python "
                              f"nvtx {r.nvtx} (nsys <= 2023.4 drops nvtx >= 0.2.12: 'compatibility ID 260 != 259')")
    r.cuda_driver_version, r.cuda_driver_source = cupti.local_driver_version()
    for info in r.nsys:
        if info.error is None and r.cuda_driver_version:
            r.problems += [f"{w} [{info.path}]" for w in cupti.check(_fmt(info.parsed), r.cuda_driver_version)]
    if any(i.records_python_nvtx is False for i in r.nsys):
        r.advice.append("pip install 'nvtx==0.2.11' in the server's environment, or use an nsys newer than 2023.4: "
                        "ranges made through the nvtx package (nvtx.annotate, vLLM's "
                        "VLLM_NVTX_SCOPES_FOR_PROFILING=1) are lost otherwise")
        r.advice.append("clef_prof's own ranges (clef_prof.annotate.api, clef-prof inject) and nsys's "
                        "--python-nvtx-annotations ranges need no nvtx package and are recorded regardless")
    return r


def render(r: Report) -> str:
    lines = []
    if not r.nsys:
        lines.append("nsys      none found")
    for info in r.nsys:
        if info.error:
            state = f"ERROR: {info.error}"
        else:
            rec = {True: "records Python nvtx ranges", False: f"DROPS Python nvtx {r.nvtx} ranges",
                   None: "Python nvtx not installed: nothing to check"}[info.records_python_nvtx]
            state = f"{_fmt(info.parsed)}: {rec}"
        lines.append(f"nsys      {info.path} [{info.source}] {state}")
    py = f"python    {r.python} ({r.python_version or '?'})"
    if r.nvtx_error:
        py += f": ERROR: {r.nvtx_error}"
    else:
        py += f": nvtx {r.nvtx}" if r.nvtx else ": nvtx not installed"
    lines.append(py)
    lines.append(f"clef_prof {r.client}")
    lines.append(f"analyze   {r.reader}")
    lines.append(f"driver    CUDA {cupti.fmt_driver(r.cuda_driver_version)} ({r.cuda_driver_source}): each nsys's CUPTI "
                 "checked against it" if r.cuda_driver_version else
                 f"driver    {r.cuda_driver_source}: CUDA tracing not possible here, nsys's CUPTI not checked")
    for p in r.problems:
        lines.append(f"problem:  {p}")
    for a in r.advice:
        lines.append(f"do:       {a}")
    lines.append("verdict:  " + ("ok" if r.ok else f"{len(r.problems)} problem(s)"))
    from ..explore.termtable import width, wrap

    cols = width()
    return "\n".join(w for line in lines for w in wrap(line[10:], cols, " " * 10, line[:10])) + "\n"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor", help="which nsys and Python nvtx are here, and whether their ranges will be recorded",
        description="Report the nsys binaries (--nsys, $CLEF_PROF_NSYS, PATH, the project's .nsys/*/nsys) and "
                    "the Python nvtx package found, whether each nsys records that nvtx's ranges (nsys <= "
                    "2023.4 drops nvtx >= 0.2.12), and what to do. Exit 0 when fine, 1 otherwise.")
    p.add_argument("--nsys", action="append", metavar="PATH", help="judge this nsys (repeatable)")
    p.add_argument("--python", metavar="PY", help="the server's interpreter, to look for nvtx in (default: this one)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    if args.python and not (shutil.which(args.python) or os.path.exists(args.python)):
        raise ClefError(f"--python {args.python}: no such interpreter")
    r = check(args.nsys, args.python)
    if args.json:
        sys.stdout.write(json.dumps(r.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render(r))
    if not r.ok:
        print(f"clef-prof: doctor: {r.problems[0]}" + (f" (+{len(r.problems) - 1} more)" if len(r.problems) > 1 else ""),
              file=sys.stderr)
    return 0 if r.ok else 1
