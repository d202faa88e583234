#!/usr/bin/env bash
# Record the demo server (variant pr) with its request ranges under `clef-prof record`, then run
# analyze (table and JSON, with the client check), export --chrome-trace/--csv (the p50 and p99+
# requests) and scrub; OUT_DIR gets the outputs and the scrubbed capture, xz-compressed.
#
# Usage: scripts/gpu-journey.sh OUT_DIR
# Env:   NSYS (default: the newest nsys bundled with Nsight Compute), IMPORTER_LIBS (default
#        .device/libs here or one folder up), WINDOW (default profiler-api), WARMUP (s, 8),
#        DURATION (s, 2), PORT (8765), NAME (gpu25-journey: the capture's file name)
set -uo pipefail
OUT=${1:?usage: scripts/gpu-journey.sh OUT_DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PYTHONPATH=$ROOT PYTHONUNBUFFERED=1
NSYS=${NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V | tail -n1)}
LIBS=${IMPORTER_LIBS:-}
for d in "$ROOT/.device/libs" "$ROOT/../.device/libs"; do [ -z "$LIBS" ] && [ -d "$d" ] && LIBS=$d; done
NAME=${NAME:-gpu25-journey} PORT=${PORT:-8765}
REC=$(mktemp -d)/rec
mkdir -p "$OUT"
python3 -m clef_prof record --nsys "$NSYS" ${LIBS:+--importer-libs "$LIBS"} --window "${WINDOW:-profiler-api}" \
    --warmup "${WARMUP:-8}" --duration "${DURATION:-2}" --concurrency 16 --url "http://127.0.0.1:$PORT" \
    --out "$REC" -- python3 -m clef_prof demo-server --variant pr --port "$PORT" 2>&1 | tee "$OUT/record.log"
python3 -m clef_prof analyze "$REC" > "$OUT/analyze.txt" 2>&1
python3 -m clef_prof analyze -f json -o "$OUT/analyze.json" "$REC"
python3 -m clef_prof export --chrome-trace "$OUT/trace.json" --csv "$OUT/journeys.csv" --requests p50,p99 "$REC" \
    > "$OUT/export.log" 2>&1
python3 -m clef_prof scrub "$REC/capture.sqlite" "$REC/scrubbed.sqlite" > "$OUT/scrub.log" 2>&1
xz -T4 -6 -c "$REC/scrubbed.sqlite" > "$OUT/$NAME.sqlite.xz"
# the manifest's parts the client check and the window check read (no host, command or git facts)
python3 - "$REC/manifest.json" > "$OUT/$NAME.manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
keep = {k: m.get(k) for k in ("schema", "status", "server_counts")}
keep["export"] = "capture.sqlite"
keep["load"] = {"concurrency": (m.get("load") or {}).get("concurrency")}
keep["window"] = {"mode": (m.get("window") or {}).get("mode")}
keep["nsys"] = {"version": (m.get("nsys") or {}).get("version"), "messages": (m.get("nsys") or {}).get("messages")}
keep["client"] = {"capture": (m.get("client") or {}).get("capture")}
print(json.dumps(keep, indent=1))
PY
cat "$OUT/analyze.txt" "$OUT/export.log"
ls -la "$OUT"
