#!/usr/bin/env bash
# Per-request journeys from a PyTorch profiler trace, on a GPU machine, in one call: the demo server
# (variant pr: clef_prof.request on its HTTP threads, clef_prof.enqueued where a request joins the
# queue, batches naming their ids) recorded with `clef-prof record --profiler torch`; then the trace's
# own count of request/enqueue user_annotation events (plain json, no clef_prof code), analyze's
# journey section (text and JSON) and benchmarks/bench_annotate_torch.py (emission and cost of the
# request and enqueue annotations beside stages and batches). Results under OUT; the recording,
# xz-compressed, as OUT/torch-journey.tar.xz (scrub before committing any of it).
#
# Usage: scripts/gpu-torch-journey.sh OUT [BASELINE_ROOT]
#   BASELINE_ROOT: another checkout whose clef_prof the annotation cost is compared with.
# Env: WARMUP (s, default 5), DURATION (s, default 1), CONCURRENCY (default 16), PORT (8765),
#      PYTHON (default python3), BENCH_N (200000).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: $0 OUT [BASELINE_ROOT]}
BASE=${2:-}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XDG_CACHE_HOME="$WORK/cache"
cd "$ROOT"
exec > >(tee "$OUT/results.txt") 2>&1

echo "== versions"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

echo "== record: demo server (pr) under the torch profiler"
timeout 120 "$PY" -m clef_prof record --profiler torch --warmup "${WARMUP:-5}" --duration "${DURATION:-1}" \
    --concurrency "${CONCURRENCY:-16}" --url "http://127.0.0.1:${PORT:-8765}" --out "$WORK/rec" \
    -- "$PY" -m clef_prof demo-server --variant pr --port "${PORT:-8765}"
(cd "$WORK/rec" && tar cJf "$OUT/torch-journey.tar.xz" manifest.json capture.torch capture.stderr.log 2>/dev/null)

echo "== the trace's own count (json.load over every trace file)"
"$PY" - "$WORK/rec/capture.torch" <<'PY'
import glob, gzip, json, os, sys
from collections import Counter
c, durs, threads = Counter(), [], Counter()
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json*"))):
    op = gzip.open if f.endswith(".gz") else open
    for e in json.load(op(f, "rt")).get("traceEvents", []):
        if e.get("cat") == "user_annotation" and e.get("ph") == "X":
            kind = e["name"].split(" ")[0]
            c[kind] += 1
            if kind == "request":
                threads[(e["pid"], e["tid"])] += 1
            if kind == "enqueued":
                durs.append(float(e["dur"]))
print(json.dumps(dict(c)))
print(f"request ranges on {len(threads)} threads; enqueued events: dur min {min(durs, default=None)} "
      f"max {max(durs, default=None)} us")
PY

echo "== analyze (journey section)"
"$PY" -m clef_prof analyze "$WORK/rec" > "$OUT/analyze.txt" 2>&1
sed -n '/request journey/,$p' "$OUT/analyze.txt"
"$PY" -m clef_prof analyze -f json -o "$OUT/analyze.json" "$WORK/rec"
"$PY" - "$OUT/analyze.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
j = d.get("journey") or {}
keys = ("request_ranges", "complete", "cut_by_window", "without_batch", "without_enqueue", "without_encode",
        "unclaimed_batch_ids", "out_of_order", "e2e_ms_mean", "e2e_ms_p99")
print("journey:", json.dumps({k: j.get(k) for k in keys}))
print("requests", d.get("requests"), "batches", d.get("batches"), "warnings", json.dumps(d.get("warnings")))
print("client check:", json.dumps(j.get("client")))
PY

echo "== annotation emission and cost (benchmarks/bench_annotate_torch.py)"
timeout 90 "$PY" benchmarks/bench_annotate_torch.py -n "${BENCH_N:-200000}" --repeat 5 ${BASE:+--baseline "$BASE"} \
    --out "$WORK/bench"
cp "$WORK/bench/bench_annotate_torch.json" "$OUT/" 2>/dev/null
ls -la "$OUT"
