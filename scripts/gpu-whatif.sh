#!/usr/bin/env bash
# On the GPU machine (no network): what transfer and head cost the demo server (main) with
# `clef-prof whatif`, then `clef-prof bench` of main vs pr, both unprofiled (no nsys needed).
#
# Usage:
#   scripts/gpu-whatif.sh OUT_DIR
#
#   OUT_DIR  gets whatif.json (the observations, for `clef-prof whatif --from`), whatif.md and
#            whatif.txt (the slopes), bench.json and bench.md (main vs pr), device.txt (the GPU,
#            driver, torch), and the server logs under logs-whatif/ and logs-bench/.
#
# Env: PYTHON (default python3), PORT (default 8765), CONCURRENCY (default 16), LEVELS (default
#      0,100%,300%: +10%, +25% and +100/+250 us a call of the demo's 0.2 ms stages hid under the
#      servers' spread; 0,100%,300% resolved both, docs/whatif.md),
#      SERVERS (whatif servers per level, default 3), ROUNDS (bench servers per arm, default 4),
#      WINDOWS (default 2), WINDOW_S (default 6), WARMUP (default 4), CHECK_GPU (default 1;
#      0 runs on a machine without one, e.g. to try the script on a CPU).
#
# Wall time at the defaults: whatif 15 servers (1 + 2 stages x 2 levels, x 3) and bench 8,
# each about 4 s warm-up + 2 x 6 s windows + start-up: about 23 x 20 s, under 8 minutes.
# Needs: Python 3 with torch (CUDA), numpy and aiohttp; nothing else.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2; }
OUT=$1
PY=${PYTHON:-python3}
PORT=${PORT:-8765} CONCURRENCY=${CONCURRENCY:-16} LEVELS=${LEVELS:-0,100%,300%} SERVERS=${SERVERS:-3}
ROUNDS=${ROUNDS:-4} WINDOWS=${WINDOWS:-2} WINDOW_S=${WINDOW_S:-6} WARMUP=${WARMUP:-4} CHECK_GPU=${CHECK_GPU:-1}

die() { echo "gpu-whatif: $*" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"

[ "$CHECK_GPU" = 0 ] || "$PY" - <<'PYEOF' > "$OUT/device.txt" || { cat "$OUT/device.txt"; die "this Python cannot run the demo on a GPU (see above)"; }
import subprocess, sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"available: {torch.cuda.is_available()}" + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
try:
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=20).stdout.strip())
except OSError:
    pass
sys.exit(0 if torch.cuda.is_available() else 1)
PYEOF
[ ! -f "$OUT/device.txt" ] || cat "$OUT/device.txt"
date -u +"date: %Y-%m-%dT%H:%M:%SZ" | tee -a "$OUT/device.txt"

DEMO="$PY -m clef_prof demo-server --quiet --port $PORT"
TIMING=(--url "http://127.0.0.1:$PORT" -c "$CONCURRENCY" --warmup "$WARMUP" --windows "$WINDOWS" --window-s "$WINDOW_S")

echo "== whatif: transfer and head of the demo server (main), levels $LEVELS, $SERVERS servers a level"
"$PY" -m clef_prof whatif --stages transfer,head --levels "$LEVELS" --servers "$SERVERS" "${TIMING[@]}" \
  --save "$OUT/whatif.json" --out "$OUT/logs-whatif" -o "$OUT/whatif.txt" -- $DEMO --variant main \
  || echo "gpu-whatif: whatif exited $? (a server failed? see above); going on to bench" >&2
"$PY" -m clef_prof whatif --from "$OUT/whatif.json" -f markdown -o "$OUT/whatif.md" || true
cat "$OUT/whatif.txt" 2>/dev/null || true

echo "== bench: main vs pr, $ROUNDS servers an arm"
"$PY" -m clef_prof bench --arm main="$DEMO --variant main" --arm pr="$DEMO --variant pr" --rounds "$ROUNDS" \
  "${TIMING[@]}" --format json -o "$OUT/bench.json" --out "$OUT/logs-bench" \
  || echo "gpu-whatif: bench exited $?" >&2
"$PY" -m clef_prof bench --from "$OUT/bench.json" -f markdown -o "$OUT/bench.md" || true
cat "$OUT/bench.md" 2>/dev/null || true
echo "gpu-whatif: results in $OUT"
