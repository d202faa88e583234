#!/usr/bin/env bash
# The real series of docs/history.md on a GPU machine: the demo server recorded 10 times as main
# and 10 times as pr (`clef-prof ab`, ABBA, so that drift of the machine falls on both alike),
# each analysed and stored (`analyze --store`, commit `main` for the main captures, then `pr`),
# then `clef-prof history` over the store: the change points, as text and JSON.
#
# Usage: scripts/gpu-history-series.sh NSYS_DIR OUT_DIR   (NSYS_DIR as for gpu-record-demo.sh)
# Env:   ROUNDS (default 10), WARMUP (default 4), DURATION (default 2), and gpu-record-demo.sh's.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -eq 2 ] || { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2; }
NSYS_IN=$1 OUT=$2 PY=${PYTHON:-python3}
AB=${ROUNDS:-10} WARMUP=${WARMUP:-4} DURATION=${DURATION:-2} \
  bash "$ROOT/scripts/gpu-record-demo.sh" "$NSYS_IN" "$OUT/record" || true
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
DB=$OUT/history.db
for arm in main pr; do
  for m in $(ls -d "$OUT"/record/ab/*-"$arm" | sort -t/ -k1 -V); do
    [ -f "$m/manifest.json" ] || { echo "gpu-history-series: $m has no manifest: skipped" >&2; continue; }
    CLEF_PROF_COMMIT=$arm CLEF_PROF_BRANCH=trunk "$PY" -m clef_prof analyze "$m" -f json \
      -o "$m/analyze.json" --store "$DB" || echo "gpu-history-series: analyze $m failed" >&2
  done
done
"$PY" -m clef_prof history "$DB" --last 0 | tee "$OUT/history.txt"
"$PY" -m clef_prof history "$DB" --last 0 -f json -o "$OUT/history.json" --html "$OUT/history.html"
