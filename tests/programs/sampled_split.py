"""A stage whose time splits 3:1 between two functions, for clef-prof's sampler tests.

    python sampled_split.py --seconds S --out facts.json   (under nsys, with CLEF_PROF_PY_SAMPLING_HZ)

Each batch's `head` stage calls `three(3 * K)` then `one(K)`: the same loop body, three times the
iterations, so `three` takes about 3/4 of the stage by construction. No call in the stage gives up
the GIL (no I/O, no sleep), so the sampler sees the stage where its timer fires. `--out` gets what
the program itself measured with perf_counter_ns around each call: the oracle of the split.
`--three-factor F` makes `three` do F * K iterations (default 3): F = 6 is the "PR" of the compare
captures (scripts/make-samples-compare-captures.py), `three` twice as slow, `one` unchanged.
"""
import argparse
import json
import time

import clef_prof

K = 20_000


def three(n):
    s = 0
    for i in range(n):
        s += i ^ 5
    return s


def one(n):
    s = 0
    for i in range(n):
        s += i ^ 5
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--three-factor", type=int, default=3)
    a = ap.parse_args()
    spent = {"three": 0, "one": 0, "head": 0}
    batches = 0
    deadline = time.monotonic() + a.seconds
    clock = time.perf_counter_ns
    while time.monotonic() < deadline:
        with clef_prof.batch(n=1):
            with clef_prof.stage("head"):
                t0 = clock()
                three(a.three_factor * K)
                t1 = clock()
                one(K)
                t2 = clock()
        spent["three"] += t1 - t0
        spent["one"] += t2 - t1
        spent["head"] += t2 - t0
        batches += 1
    with open(a.out, "w") as f:
        json.dump({"batches": batches, "three_factor": a.three_factor, "ns": spent}, f)


if __name__ == "__main__":
    main()
