"""Cost of clef-prof's Python sampler (clef_prof.annotate.sampler) to a CPU-bound Python server.

    python benchmarks/bench_sampler.py                   # nsys 2023.4, off / 100 / 1000 Hz, 3 rounds
    python benchmarks/bench_sampler.py --rates 0,100,1000 --rounds 5 --seconds 3 --nsys PATH

Each run is one `nsys profile -t nvtx` of a child that serves "requests" as fast as it can for
--seconds: a CPU-bound handler (JSON decode, a pure-Python loop, JSON encode; about 1 ms) inside a
batch and a stage range, on one thread, beside 4 idle threads waiting on a queue (their stacks are
sampled too, as a server's pool threads are). The child reports requests/s from its own clock;
runs of the rates alternate within each round so that the machine's load drifts over all of
them alike. Printed: per rate the median requests/s over the rounds, the change against the
sampler off, the samples taken, and the sampler thread's CPU time as a share of the run (it runs
holding the GIL, so that is time the server's threads wait: the steadier figure on a busy machine). The sampler starts only under a profiler, so the runs
without it are under nsys too.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, queue, sys, threading, time
import clef_prof
from clef_prof.annotate import sampler

def handler(body):
    req = json.loads(body)
    s = 0
    for i in range(req["n"]):
        s += (i * 7) % 13
    return json.dumps({"id": req["id"], "sum": s})

q = queue.Queue()
for _ in range(4):
    threading.Thread(target=q.get, daemon=True).start()
seconds = float(sys.argv[1])
body = json.dumps({"id": "r", "n": 12000})
done = 0
t0 = time.perf_counter()
while time.perf_counter() - t0 < seconds:
    with clef_prof.batch(n=1):
        with clef_prof.stage("head"):
            handler(body)
    done += 1
span = time.perf_counter() - t0
s = sampler._sampler
cpu = 0.0
if s:   # the sampler thread's CPU time (utime + stime), which it spends holding the GIL
    import os
    f = open(f"/proc/self/task/{s.native_id}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
print(json.dumps({"rps": done / span, "samples": s.taken if s else 0, "sampler_cpu_s": cpu}))
"""


def run_one(nsys: str, hz: float, seconds: float, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_")}
    env["PYTHONPATH"] = str(ROOT)
    if hz:
        env["CLEF_PROF_PY_SAMPLING_HZ"] = f"{hz:g}"
    p = subprocess.run([nsys, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none", "-o", str(tmp / "b"),
                        "--force-overwrite", "true", sys.executable, "-c", CHILD, str(seconds)],
                       capture_output=True, text=True, env=env, timeout=300)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{\"rps\"")]
    if not line:
        raise SystemExit(f"the child printed no result (exit {p.returncode}): {p.stderr[-500:]}")
    return json.loads(line[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nsys", default=str(ROOT / ".nsys" / "2023.4" / "nsys"))
    ap.add_argument("--rates", default="0,100,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    rates = [float(x) for x in a.rates.split(",")]
    got: dict[float, list[dict]] = {r: [] for r in rates}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for r in rates:
                got[r].append(run_one(a.nsys, r, a.seconds, Path(tmp)))
    base = statistics.median(x["rps"] for x in got[rates[0]])
    print(f"CPU-bound handler under nsys, {a.rounds} rounds of {a.seconds:g} s, median requests/s "
          f"(os.cpu_count() = {os.cpu_count()}, load average {os.getloadavg()[0]:.1f})")
    for r in rates:
        rps = statistics.median(x["rps"] for x in got[r])
        samples = statistics.median(x["samples"] for x in got[r])
        print(f"  sampler {'off' if not r else f'{r:g} Hz':>8}: {rps:8.1f} requests/s ({100 * (rps / base - 1):+.1f}%), "
              f"{samples:,.0f} samples per run ({samples / a.seconds:,.0f} per s, 5 threads per tick), sampler CPU "
              f"{100 * statistics.median(x['sampler_cpu_s'] for x in got[r]) / a.seconds:.1f}% of the run; "
              f"runs: {', '.join(format(x['rps'], '.0f') for x in got[r])}")


if __name__ == "__main__":
    main()
