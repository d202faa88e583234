"""Whether an nsys can trace this CUDA driver: the CUPTI it ships against the driver's CUDA version.

An nsys whose CUPTI is older than the driver's CUDA major loses records (seen: nsys 2023.4,
CUPTI 12.4, on a CUDA 13.0 driver printed `Unknown runtime API function index: 468` and
`Importation succeeded with non-fatal errors`, and its export lacked 14 of 189 batches'
ranges and the last 1.2 s of CUDA records). Standard library only (record and doctor use it).

CUPTI shipped by each nsys release, as verified (nothing is guessed; a release not listed
is "unknown" unless the releases around it agree on the CUDA major):

| nsys    | CUPTI | source |
|---------|-------|--------|
| 2022.4  | 11.8  | Debian bookworm `nsight-systems` 2022.4.2 (libcupti 11.8 in target-linux-x64) |
| 2023.4  | 12.4  | Debian trixie `nsight-systems` 2023.4.4 (libcupti 12.4) |
| 2025.3  | 13.0  | the nsys bundled with Nsight Compute 2025.3.1 (CUPTI 13) |
"""
from __future__ import annotations

import re

# (year, release) -> (CUDA major, CUPTI version) of the CUPTI that nsys ships
NSYS_CUPTI: dict[tuple[int, int], tuple[int, str]] = {
    (2022, 4): (11, "11.8"),
    (2023, 4): (12, "12.4"),
    (2025, 3): (13, "13.0"),
}

# nsys lines (profile, import, export) that say records were lost or not understood
NSYS_PROBLEM = re.compile(
    r"Importation (?:succeeded with non-fatal errors|failed)|Importer error status|"
    r"Unknown (?:runtime|driver) API function index|events? (?:were|might have been) (?:lost|dropped)|"
    r"Not all .*events might have been collected|Analysis failed|CUPTI.*(?:error|not supported|unsupported)",
    re.I)


def nsys_release(version: str | None) -> tuple[int, int] | None:
    """(2023, 4) from '2023.4.4.54' or 'NVIDIA Nsight Systems version 2023.4.4.54-...'."""
    m = re.search(r"(\d{4})\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def cupti_major(version: str | None) -> tuple[int | None, int | None, str]:
    """(lowest, highest) CUDA major that this nsys's CUPTI can be, and how it is known. A newer nsys
    never ships an older CUPTI, so a release not listed lies between its listed neighbours
    (None: no bound on that side)."""
    rel = nsys_release(version)
    if rel is None:
        return None, None, "nsys version unknown"
    if rel in NSYS_CUPTI:
        major, cupti = NSYS_CUPTI[rel]
        return major, major, f"CUPTI {cupti}"
    below = [NSYS_CUPTI[k][0] for k in sorted(NSYS_CUPTI) if k < rel]
    above = [NSYS_CUPTI[k][0] for k in sorted(NSYS_CUPTI) if k > rel]
    lo, hi = (below[-1] if below else None), (above[0] if above else None)
    return lo, hi, f"nsys {rel[0]}.{rel[1]} is not in clef-prof's table of bundled CUPTI versions"


def driver_major(cuda_driver_version: int | None) -> int | None:
    """13 from CudaDriverVersion 13000 (cuDriverGetVersion's encoding: 1000 * major + 10 * minor)."""
    return None if not cuda_driver_version else int(cuda_driver_version) // 1000


def fmt_driver(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def check(nsys_version: str | None, cuda_driver_version: int | None) -> list[str]:
    """A warning when this nsys's CUPTI is older than the driver's CUDA major, or cannot be told."""
    drv = driver_major(cuda_driver_version)
    if drv is None:
        return []
    lo, hi, how = cupti_major(nsys_version)
    where = f"the driver's CUDA {fmt_driver(int(cuda_driver_version))} (CudaDriverVersion {cuda_driver_version})"
    fix = (f"record with an nsys whose CUPTI is CUDA {drv} or newer (e.g. the nsys bundled with Nsight Compute "
           "2025.3, CUPTI 13, at /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys)")
    if lo is not None and lo >= drv:
        return []
    if hi is not None and hi < drv:
        return [f"nsys {nsys_version} ships {how if lo == hi else f'a CUPTI of CUDA {hi} at most ({how})'}, older "
                f"than {where}: such an nsys loses CUDA records and NVTX ranges without failing ('Unknown runtime "
                f"API function index', 'Importation succeeded with non-fatal errors'), so counts may be short; {fix}"]
    return [f"cannot tell whether nsys {nsys_version or '?'} can trace {where}: {how}; an nsys whose CUPTI is "
            f"older than the driver loses CUDA records and NVTX ranges without failing"]


def problem_lines(text: str, limit: int = 20) -> list[str]:
    """nsys's own lines about lost or misread records, each once, with its count when repeated."""
    counts: dict[str, int] = {}
    for raw in (text or "").replace("\r", "\n").splitlines():
        line = raw.strip()
        if line and NSYS_PROBLEM.search(line):
            counts[line] = counts.get(line, 0) + 1
    return [f"{k} (x{n})" if n > 1 else k for k, n in list(counts.items())[:limit]]


def local_driver_version() -> tuple[int | None, str]:
    """(CUDA driver version as cuDriverGetVersion encodes it, or None; where it came from or why not):
    libcuda's cuDriverGetVersion through ctypes, else `nvidia-smi`."""
    import ctypes
    import shutil
    import subprocess

    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
            return v.value, f"{name} cuDriverGetVersion"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", out)
        if m:
            return int(m.group(1)) * 1000 + int(m.group(2)) * 10, "nvidia-smi"
    return None, "no NVIDIA driver (no libcuda, no nvidia-smi)"
