#!/usr/bin/env bash
# The parity pair on a GPU machine: the demo server (variants main and pr) recorded with the
# PyTorch profiler (`clef-prof record --profiler torch`) and with Nsight Systems
# (`clef-prof record --nsys`, as scripts/gpu-record-demo.sh runs it, the same load), and the
# annotation emission check and its cost (benchmarks/bench_annotate_torch.py); results under OUT.
#
# Usage: scripts/gpu-kineto-parity.sh OUT [BASELINE_ROOT]
#   BASELINE_ROOT: another checkout whose clef_prof the annotation cost is compared with.
# Env: WARMUP (s, default 5), DURATION (s, default 0.5), CONCURRENCY (default 16), NSYS (default
#      auto: the nsys of Nsight Compute), PYTHON (default python3).
# Writes OUT/results.txt, OUT/bench_annotate_torch.json and, xz-compressed,
# OUT/torch-{pr,main}.tar.xz (manifest + traces) and OUT/nsys-{pr,main}.tar.xz (manifest + export).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: $0 OUT [BASELINE_ROOT]}
BASE=${2:-}
PY=${PYTHON:-python3}
WARMUP=${WARMUP:-5} DURATION=${DURATION:-0.5} CONCURRENCY=${CONCURRENCY:-16} NSYS=${NSYS:-auto}
BENCH_N=${BENCH_N:-200000}
# QdstrmImporter's libdw/libelf (scripts/gpu-record-demo.sh): this checkout's .device/libs, else the baseline's
for d in "$ROOT/.device/libs" ${BASE:+"$BASE/.device/libs"}; do
  [ -n "${IMPORTER_LIBS:-}" ] || { [ -d "$d" ] && IMPORTER_LIBS=$d; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
exec > >(tee "$OUT/results.txt") 2>&1

echo "== versions"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

echo "== annotation emission and cost (benchmarks/bench_annotate_torch.py)"
timeout 60 "$PY" benchmarks/bench_annotate_torch.py -n "$BENCH_N" --repeat 5 ${BASE:+--baseline "$BASE"} --out "$WORK/bench"
cp "$WORK/bench/bench_annotate_torch.json" "$OUT/" 2>/dev/null

PORT=8765
NSYS_BIN=$NSYS
[ "$NSYS" != auto ] || NSYS_BIN=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V | tail -n1)
common=(--warmup "$WARMUP" --duration "$DURATION" --concurrency "$CONCURRENCY")
# pr first, each profiler in turn, each capture packed as soon as it is made (a cut run keeps them)
for variant in pr main; do
  echo "== torch profiler: $variant"
  timeout 60 "$PY" -m clef_prof record --profiler torch "${common[@]}" --url "http://127.0.0.1:$PORT" \
      --out "$WORK/torch-$variant" -- "$PY" -m clef_prof demo-server --variant "$variant" --port "$PORT"
  (cd "$WORK/torch-$variant" && tar cJf "$OUT/torch-$variant.tar.xz" manifest.json capture.torch capture.stderr.log)
  PORT=$((PORT + 1))
  echo "== nsys ($NSYS_BIN): $variant"
  timeout 90 "$PY" -m clef_prof record --nsys "$NSYS_BIN" ${IMPORTER_LIBS:+--importer-libs "$IMPORTER_LIBS"} \
      --window profiler-api "${common[@]}" --url "http://127.0.0.1:$PORT" --out "$WORK/nsys-$variant" \
      -- "$PY" -m clef_prof demo-server --variant "$variant" --port "$PORT"
  (cd "$WORK/nsys-$variant" && tar cJf "$OUT/nsys-$variant.tar.xz" manifest.json capture.sqlite)
  PORT=$((PORT + 1))
done
ls -la "$OUT"
