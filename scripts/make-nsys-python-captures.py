"""Make tests/data/cpu23-nsyspy-{split,threads,idle}.{sqlite,json}.xz: real captures under nsys
2023.4 with nsys' own Python sampler (`--python-sampling=true --python-sampling-frequency=200`,
clef-prof's sampler off), 1.5 s each, for analyze's reading of nsys' samples (docs/sampling.md):

- split: tests/programs/sampled_split.py (`head` calls `three` then `one`, 3:1 by construction);
- threads: tests/programs/sampled_threads.py (`head` on the main thread, `encode` on w-light);
- idle: the same with --idle (a third Python thread that waits, no range).

Each SQLite export is scrubbed (`clef-prof scrub`). The JSON export (`nsys export --type json`)
is cut to what analyze reads, in nsys' own format: its first line (the string table) with every
string no kept payload names blanked (ids keep their places: the environment and command lines
go), the domain-create lines (Type 75) and the Python Backtrace marks (Type 33, 34); every other
line dropped. The programs' own facts go to tests/data/cpu23-nsyspy.truth.json.

    python3 scripts/make-nsys-python-captures.py [WORKDIR]

On the GPU machine, with nsys 2025.3 (its importer needs libdw/libelf: IMPORTER_LIBS, put on the
importer's LD_LIBRARY_PATH alone), the same runs as gpu25-nsyspy-* into OUT instead of tests/data:

    NSYS=/opt/.../nsys PREFIX=gpu25 DATA=OUT IMPORTER_LIBS=.device/libs python3 scripts/make-nsys-python-captures.py
"""
import base64
import json
import lzma
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from clef_prof.capture.scrub import scrub_file  # noqa: E402
from clef_prof.base.nsys import import_command, importer_path  # noqa: E402

NSYS = Path(os.environ.get("NSYS", ROOT / ".nsys" / "2023.4" / "nsys"))
DATA = Path(os.environ.get("DATA", ROOT / "tests" / "data"))
PREFIX = os.environ.get("PREFIX", "cpu23")
RUNS = {"split": ["sampled_split.py"], "threads": ["sampled_threads.py"], "idle": ["sampled_threads.py", "--idle"]}


def cut_json(src: Path, dst: Path) -> None:
    """The JSON export reduced to the string table (unused strings blanked) and NVTX lines 33/34/75."""
    keep, used = [], set()
    with open(src) as fh:
        table = json.loads(fh.readline())["data"]
        for line in fh:
            if line.startswith(('{"Type":33,', '{"Type":34,', '{"Type":75,')):
                keep.append(line)
                ev = json.loads(line)["NvtxEvent"]
                for b in (ev.get("Payload") or {}).get("BinaryData") or []:
                    raw = base64.b64decode(b["Data"])
                    n = struct.unpack_from("<I", raw, 8)[0]
                    for i in range(n):
                        f, fl, _ = struct.unpack_from("<QQQ", raw, 16 + 24 * i)
                        used.update((f, fl))
    table = [s if i in used else "" for i, s in enumerate(table)]
    with lzma.open(dst, "wt", preset=9 | lzma.PRESET_EXTREME) as out:
        out.write(json.dumps({"data": table}, separators=(",", ":")) + "\n")
        out.writelines(keep)


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="nsyspy-"))
    work.mkdir(parents=True, exist_ok=True)
    DATA.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "PYTHONPATH": str(ROOT), "TMPDIR": str(work),
           "CLEF_PROF_PY_SAMPLING_HZ": "0"}
    truth = {}
    for tag, argv in RUNS.items():
        name = f"{PREFIX}-nsyspy-{tag}"
        stem, facts = work / name, work / f"{name}.facts.json"
        subprocess.run([NSYS, "profile", "-t", "nvtx,osrt", "--sample=none", "--cpuctxsw=none",
                        "--python-sampling=true", "--python-sampling-frequency=200", "-o", stem,
                        "--force-overwrite", "true", sys.executable, *argv, "--seconds", "1.5", "--out", facts],
                       check=True, cwd=ROOT / "tests" / "programs", env=env)
        qd = Path(f"{stem}.qdstrm")
        if not Path(f"{stem}.nsys-rep").exists() and qd.exists():     # the importer could not load: again, with its libs
            argv_i, env_i = import_command(importer_path(str(NSYS)), str(qd), os.environ.get("IMPORTER_LIBS"), env)
            subprocess.run(argv_i, check=True, env=env_i)
        raw, clean, js = work / f"{name}.sqlite", work / f"{name}-scrubbed.sqlite", work / f"{name}.json"
        for kind, out in (("sqlite", raw), ("json", js)):
            subprocess.run([NSYS, "export", "--type", kind, "-o", out, "--force-overwrite", "true",
                            f"{stem}.nsys-rep"], check=True, env=env, stdout=subprocess.DEVNULL)
        clean.unlink(missing_ok=True)
        scrub_file(str(raw), str(clean))
        with open(clean, "rb") as src, lzma.open(DATA / f"{name}.sqlite.xz", "wb", preset=9 | lzma.PRESET_EXTREME) as dst:
            dst.write(src.read())
        cut_json(js, DATA / f"{name}.json.xz")
        truth[name] = json.loads(facts.read_text())
        print(name, truth[name], [(p.name, p.stat().st_size) for p in DATA.glob(f"{name}.*")])
    (DATA / f"{PREFIX}-nsyspy.truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
