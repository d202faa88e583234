"""Make tests/data/cpu23-dp-rids.sqlite.xz: a real capture of two data-parallel ranks whose batch
messages carry request ids (tests/programs/dp_rids.py under nsys 2023.4, NVTX + OSRT).

The export is scrubbed (`clef-prof scrub`), then the batch messages get their original request
ids back: they are random (`embd-` + uuid4 hex, made by the program) and the scrub test needs
them as recorded, to check that scrubbing them keeps the two ranks apart. Everything else in the
file is scrubbed, so `scrub --check` finds only the rule request-id in it.

    python3 scripts/make-dp-rids-capture.py [WORKDIR]
"""
import lzma
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from clef_prof.capture.scrub import scrub_file  # noqa: E402

NSYS = ROOT / ".nsys" / "2023.4" / "nsys"
OUT = ROOT / "tests" / "data" / "cpu23-dp-rids.sqlite.xz"


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="dp-rids-"))
    work.mkdir(parents=True, exist_ok=True)
    rep, raw, clean = work / "dp.nsys-rep", work / "dp.sqlite", work / "dp-scrubbed.sqlite"
    subprocess.run([NSYS, "profile", "-t", "nvtx,osrt", "--sample=none", "--cpuctxsw=none", "-o", work / "dp",
                    "--force-overwrite", "true", sys.executable, ROOT / "tests" / "programs" / "dp_rids.py"],
                   check=True, cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT)})
    subprocess.run([NSYS, "export", "--type", "sqlite", "-o", raw, "--force-overwrite", "true", rep], check=True)
    clean.unlink(missing_ok=True)
    scrub_file(str(raw), str(clean))
    con = sqlite3.connect(clean)
    with con:
        con.execute("ATTACH ? AS raw", (f"file:{raw}?mode=ro",))
        n = con.execute("UPDATE NVTX_EVENTS SET text = (SELECT r.text FROM raw.NVTX_EVENTS r WHERE r.start = "
                        "NVTX_EVENTS.start AND r.globalTid = NVTX_EVENTS.globalTid AND r.eventType = "
                        "NVTX_EVENTS.eventType AND r.text LIKE 'pooler n=% rid=embd-%') "
                        "WHERE text LIKE 'pooler n=% rid=[rid-%'").rowcount
    con.execute("DETACH raw")
    con.execute("VACUUM")
    con.close()
    with open(clean, "rb") as src, lzma.open(OUT, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
        dst.write(src.read())
    print(f"{OUT}: {n} batch messages with their request ids, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
