#!/usr/bin/env bash
# The parity pair on a GPU machine: the demo server (variants main and pr) recorded with the
# PyTorch profiler (`clef-prof record --profiler torch`) and with Nsight Systems
# (scripts/gpu-record-demo.sh, the same load), the annotation emission check and its cost
# (benchmarks/bench_annotate_torch.py), and each capture analyzed; results under OUT.
#
# Usage: scripts/gpu-kineto-parity.sh OUT [BASELINE_ROOT]
#   BASELINE_ROOT: another checkout whose clef_prof the annotation cost is compared with.
# Env: WARMUP (s, default 5), DURATION (s, default 0.5), CONCURRENCY (default 16), NSYS (default
#      auto: the nsys of Nsight Compute), PYTHON (default python3).
# Writes OUT/results.txt, OUT/analyze.json, OUT/bench_annotate_torch.json and, xz-compressed,
# OUT/torch-{main,pr}.tar.xz (manifest + traces) and OUT/nsys-{main,pr}.tar.xz (manifest + export).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: $0 OUT [BASELINE_ROOT]}
BASE=${2:-}
PY=${PYTHON:-python3}
WARMUP=${WARMUP:-5} DURATION=${DURATION:-0.5} CONCURRENCY=${CONCURRENCY:-16} NSYS=${NSYS:-auto}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
exec > >(tee "$OUT/results.txt") 2>&1

echo "== versions"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

echo "== annotation emission and cost (benchmarks/bench_annotate_torch.py)"
"$PY" benchmarks/bench_annotate_torch.py -n 200000 --repeat 7 ${BASE:+--baseline "$BASE"} --out "$WORK/bench"
cp "$WORK/bench/bench_annotate_torch.json" "$OUT/" 2>/dev/null

PORT=8765
for variant in main pr; do
  echo "== torch profiler: $variant"
  "$PY" -m clef_prof record --profiler torch --warmup "$WARMUP" --duration "$DURATION" --concurrency "$CONCURRENCY" \
      --url "http://127.0.0.1:$PORT" --out "$WORK/torch-$variant" -- "$PY" -m clef_prof demo-server --variant "$variant" \
      --port "$PORT"
  PORT=$((PORT + 1))
done

echo "== nsys: main and pr (scripts/gpu-record-demo.sh)"
WARMUP=$WARMUP DURATION=$DURATION CONCURRENCY=$CONCURRENCY PORT=$PORT bash scripts/gpu-record-demo.sh "$NSYS" "$WORK/nsys"

echo "== analyze"
"$PY" - "$WORK" "$OUT/analyze.json" <<'EOF'
import json, sys
from clef_prof.analyze.inputs import resolve
from clef_prof.analyze.result import analyze
work, out = sys.argv[1], sys.argv[2]
docs = {}
for name, path in (("torch-main", f"{work}/torch-main"), ("torch-pr", f"{work}/torch-pr"),
                   ("nsys-main", f"{work}/nsys/main"), ("nsys-pr", f"{work}/nsys/pr")):
    try:
        r = analyze(resolve(path)[0]).result
        docs[name] = r.to_json()
        pr = r.per_request
        print(f"{name}: requests {r.requests}, batches {r.batches}, per request: H2D {pr.h2d_copies} copies "
              f"{pr.h2d_bytes} B, kernels {pr.kernel_launches}, D2H {pr.d2h_copies}, pooler host {pr.pooler_host_ms} ms; "
              f"warnings {r.warnings}")
        for s, f in r.stages.items():
            print(f"   {s}: {f.instances} instances, host {f.host_ms_per_request} ms/request, cuda {f.cuda.to_json()}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
json.dump(docs, open(out, "w"), indent=1)
EOF

echo "== pack"
for v in main pr; do
  (cd "$WORK/torch-$v" && tar cJf "$OUT/torch-$v.tar.xz" manifest.json capture.torch capture.stderr.log)
  (cd "$WORK/nsys/$v" && tar cJf "$OUT/nsys-$v.tar.xz" manifest.json capture.sqlite)
done
ls -la "$OUT"
