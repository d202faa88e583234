#!/usr/bin/env python3
"""Does redaction stay linear in a value's length? `clef-prof scrub` runs every rule over every
text value of an export, and a hostile export can hold one huge string: a rule that backtracks
(a name of unbounded length before a secret word, a lazy gap between a command and its flag)
turns a 100 kB value into minutes.

    python benchmarks/bench_redact.py [--sizes 20000,200000] [--json out.json]

For each shape of hostile value (long runs of one character, of a secret word, of commands
without their flag, of base64 characters, ...), at each size, the CPU time of one
clef_prof.base.redact.redact_text call (best of 3), and the exponent p of time ~ size^p between the
smallest and largest size (p near 1: linear; near 2: quadratic). Measured on the 2-core dev box
(shared): every shape p <= 1.05 and at most 0.25 s at 200,000 characters. Before this round's
bounds the secret-named assignment rule was quadratic: `key` x 20,000 took 0.72 s and x 60,000
7.3 s (p = 2.1; about 70 s at 200,000), and a first version of the curl and mysql rules (command,
lazy gap, flag) took 24 s and 45 s on `curl ` / `mysql ` x 20,000. No timing is asserted.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clef_prof.base.redact import redact_text  # noqa: E402

SHAPES = {"letters": "a", "words": "ab1 ", "secret word": "key", "secret words": "token secret ",
          "name before word": "apikey_", "curl": "curl ", "mysql": "mysql ", "curl -u": "curl -u ",
          "base64": "Ab1+", "base64 lines": "Ab1+\n", "hex": "0123456789abcdef", "equals": "=",
          "yaml keys": "key: ", "json keys": '"key": ', "flags": "--token ", "urls": "http://a:",
          "url-encoded": "token%3D", "home": "/home/a", "pem ends": "-----END PRIVATE KEY-----",
          "rid": "rid=a,", "headers": "Authorization: x "}


def cpu(value: str, repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t = time.process_time()
        redact_text(value)
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20000,200000", help="value lengths in characters (comma-separated)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    print("| shape | " + " | ".join(f"{n:,} chars (s)" for n in sizes) + " | p |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for name, unit in SHAPES.items():
        times = [cpu(unit * (n // len(unit))) for n in sizes]
        p = math.log(max(times[-1], 1e-6) / max(times[0], 1e-6)) / math.log(sizes[-1] / sizes[0]) if len(sizes) > 1 else None
        rows.append({"shape": name, "sizes": sizes, "cpu_s": times, "p": p})
        print(f"| {name} | " + " | ".join(f"{t:.3f}" for t in times) + (f" | {p:.2f} |" if p is not None else " | |"))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
