"""Make tests/data/cpu23-samples-{main,pr}-{1,2,3}.sqlite.xz: real captures of
tests/programs/sampled_split.py under nsys 2023.4 (NVTX only, clef-prof's sampler at 200 Hz,
3 s each) in two variants, for compare's function-level change per stage: main runs
`three(3K)` then `one(K)` per batch, pr runs `three(6K)` then `one(K)` (three twice as slow, one
unchanged). The arms alternate (main, pr, main, ...) so that the machine's load drifts over both.
Each export is scrubbed (`clef-prof scrub`); the program's own perf_counter_ns split goes to
tests/data/cpu23-samples-compare.truth.json.

    python3 scripts/make-samples-compare-captures.py [WORKDIR]
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
DATA = ROOT / "tests" / "data"
ARMS = {"main": 3, "pr": 6}


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="samples-compare-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    env.update(PYTHONPATH=str(ROOT), CLEF_PROF_PY_SAMPLING_HZ="200")
    truth = {}
    for i in (1, 2, 3):
        for arm, factor in ARMS.items():
            name = f"cpu23-samples-{arm}-{i}"
            stem, facts = work / name, work / f"{name}.json"
            subprocess.run([NSYS, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none", "-o", stem,
                            "--force-overwrite", "true", sys.executable, "sampled_split.py", "--seconds", "3",
                            "--three-factor", str(factor), "--out", facts],
                           check=True, cwd=ROOT / "tests" / "programs", env={**env, "TMPDIR": str(work)})
            raw, clean = work / f"{name}.sqlite", work / f"{name}-scrubbed.sqlite"
            subprocess.run([NSYS, "export", "--type", "sqlite", "-o", raw, "--force-overwrite", "true",
                            f"{stem}.nsys-rep"], check=True)
            clean.unlink(missing_ok=True)
            scrub_file(str(raw), str(clean))
            out = DATA / f"{name}.sqlite.xz"
            with open(clean, "rb") as src, lzma.open(out, "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
                dst.write(src.read())
            truth[name] = json.loads(facts.read_text())
            print(f"{out}: {out.stat().st_size} bytes, {truth[name]}")
    (DATA / "cpu23-samples-compare.truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
