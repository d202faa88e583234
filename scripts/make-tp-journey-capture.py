"""Make tests/data/cpu23-tp-journey.sqlite.xz and its truth file: a real capture of a tensor-parallel
server (tests/programs/journey_tp.py: an API process with request ranges, 2 rank processes running
every batch with the same ids) under nsys 2023.4 (NVTX only), scrubbed (`clef-prof scrub`).

The truth file holds the program's own count (requests, ranks, the ids of each step in order and
which rank ended each step last by its own clock), written by the program, not by clef-prof.

    python3 scripts/make-tp-journey-capture.py [REQUESTS] [WORKDIR]
"""
import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from clef_prof.capture.scrub import scrub_file  # noqa: E402

NSYS = ROOT / ".nsys" / "2023.4" / "nsys"
NAME = "cpu23-tp-journey"
OUT = ROOT / "tests" / "data" / f"{NAME}.sqlite.xz"
TRUTH = ROOT / "tests" / "data" / f"{NAME}.truth.json"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    work = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="tp-journey-"))
    work.mkdir(parents=True, exist_ok=True)
    rep, raw, clean, own = work / "tp.nsys-rep", work / "tp.sqlite", work / "tp-scrubbed.sqlite", work / "own.json"
    subprocess.run([NSYS, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none", "-o", work / "tp",
                    "--force-overwrite", "true", sys.executable, ROOT / "tests" / "programs" / "journey_tp.py",
                    str(n), own], check=True, cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT)})
    subprocess.run([NSYS, "export", "--type", "sqlite", "-o", raw, "--force-overwrite", "true", rep], check=True)
    clean.unlink(missing_ok=True)
    scrub_file(str(raw), str(clean))
    with open(clean, "rb") as src, lzma.open(OUT, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
        dst.write(src.read())
    truth = {"program": "tests/programs/journey_tp.py", "nsys": "2023.4", "trace": "nvtx",
             **json.loads(own.read_text())}
    TRUTH.write_text(json.dumps(truth, indent=1) + "\n")
    print(f"{OUT}: {OUT.stat().st_size} bytes; {TRUTH}: {len(truth['steps'])} steps, {truth['requests']} requests")


if __name__ == "__main__":
    main()
