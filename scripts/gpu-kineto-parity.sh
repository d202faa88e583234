#!/usr/bin/env bash
# The parity pairs on a GPU machine: each server recorded in one session with the PyTorch
# profiler (`clef-prof record --profiler torch`) and with Nsight Systems (`clef-prof record
# --nsys`, as scripts/gpu-record-demo.sh runs it), the same load; analyze of each side by side
# (per-stage host ms per request, counts per request, each manifest's profiler_cost); and the
# annotation emission check and its cost (benchmarks/bench_annotate_torch.py); results under OUT.
# Servers (SERVERS): demo-pr, demo-main (the demo server's variants), bertsrv (a transformers
# BertModel behind aiohttp, stages injected from tests/programs/bertsrv.toml).
#
# Usage: scripts/gpu-kineto-parity.sh OUT [BASELINE_ROOT]
#   BASELINE_ROOT: another checkout whose clef_prof the annotation cost is compared with.
# Env: SERVERS (default 'demo-pr bertsrv'), WARMUP (s, default 8), DURATION (s, default 2),
#      TORCH_LIMIT/NSYS_LIMIT (s a recording may take, 120/240), CONCURRENCY (default 16), NSYS (default
#      auto: the nsys of Nsight Compute), PYTHON (default python3).
# Writes OUT/results.txt, OUT/bench_annotate_torch.json and, xz-compressed,
# OUT/torch-SERVER.tar.xz (manifest + traces) and OUT/nsys-SERVER.tar.xz (manifest + export).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: $0 OUT [BASELINE_ROOT]}
BASE=${2:-}
PY=${PYTHON:-python3}
WARMUP=${WARMUP:-8} DURATION=${DURATION:-2} CONCURRENCY=${CONCURRENCY:-16} NSYS=${NSYS:-auto}
SERVERS=${SERVERS:-demo-pr bertsrv} TORCH_LIMIT=${TORCH_LIMIT:-120} NSYS_LIMIT=${NSYS_LIMIT:-240}
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
# each server with each profiler in turn, each capture packed as soon as it is made (a cut run keeps them)
for server in $SERVERS; do
  for profiler in torch nsys; do
    case $server in
      demo-*) cmd=("$PY" -m clef_prof demo-server --variant "${server#demo-}" --port "$PORT"); spec=(); path=$PYTHONPATH ;;
      # the server's module path goes into record's environment, which the server inherits with
      # the injection's startup folder put first (an `env PYTHONPATH=...` in the command would drop it)
      bertsrv) cmd=("$PY" -m bertsrv.server --port "$PORT"); spec=(--spec "$ROOT/tests/programs/bertsrv.toml")
               path=$ROOT/tests/programs:$PYTHONPATH ;;
      *) echo "unknown server $server"; continue ;;
    esac
    if [ $profiler = torch ]; then
      prof=(--profiler torch); limit=$TORCH_LIMIT; files=(manifest.json capture.torch capture.stderr.log)
    else
      prof=(--nsys "$NSYS_BIN" ${IMPORTER_LIBS:+--importer-libs "$IMPORTER_LIBS"} --window profiler-api)
      limit=$NSYS_LIMIT; files=(manifest.json capture.sqlite capture.stderr.log)
    fi
    echo "== $server under $profiler"
    t0=$(date +%s)
    PYTHONPATH=$path timeout "$limit" "$PY" -m clef_prof record "${prof[@]}" "${spec[@]}" "${common[@]}" --url "http://127.0.0.1:$PORT" \
        --out "$WORK/$profiler-$server" -- "${cmd[@]}"
    echo "(record exit $?, $(( $(date +%s) - t0 )) s)"
    (cd "$WORK/$profiler-$server" && tar cJf "$OUT/$profiler-$server.tar.xz" "${files[@]}" 2>/dev/null)
    PORT=$((PORT + 1))
  done
  echo "== $server: the two profilers side by side"
  "$PY" - "$WORK/torch-$server" "$WORK/nsys-$server" "${spec[@]}" <<'PY'
import json, subprocess, sys
rows = {}
for d in sys.argv[1:3]:
    p = subprocess.run([sys.executable, "-m", "clef_prof", "analyze", d, "-f", "json", *sys.argv[3:]], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        print(d, "analyze failed:", p.stderr[-800:]); continue
    r = json.loads(p.stdout)
    m = json.load(open(d + "/manifest.json"))
    rows[d.rsplit("/", 1)[1].split("-")[0]] = (r, m)
    print(d, "cost:", m["client"].get("profiler_cost"), "window client:", {k: m["client"]["window"].get(k) for k in ("throughput_rps", "latency_ms_mean")})
    print("  requests", r.get("requests"), "batches", r.get("batches"), "warnings", r.get("warnings"))
if len(rows) == 2:
    (rt, _), (rn, _) = rows["torch"], rows["nsys"]
    print(f"{'stage':10} {'torch ms/req':>13} {'nsys ms/req':>12} {'ratio':>6}")
    for s in rt["stages"]:
        a = rt["stages"][s].get("host_ms_per_request"); b = rn["stages"].get(s, {}).get("host_ms_per_request")
        print(f"{s:10} {a!s:>13.13} {b!s:>12.12} {(a / b if a and b else float('nan')):6.3f}")
    for k in rt["per_request"]:
        print(f"per request {k}: torch {rt['per_request'][k]} nsys {rn['per_request'].get(k)}")
    for s in rt["stages"]:
        for k in ("h2d_copies_per_request", "h2d_bytes_per_request", "kernel_launches_per_request", "d2h_copies_per_request"):
            print(f"{s} {k}: torch {rt['stages'][s].get(k)} nsys {rn['stages'].get(s, {}).get(k)}")
PY
done
ls -la "$OUT"
