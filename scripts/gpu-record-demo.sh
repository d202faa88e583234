#!/usr/bin/env bash
# Record the demo server's two variants on a GPU machine with `clef-prof record`, using an
# Nsight Systems that was copied there (no nsys of its own, no pip downloads needed).
#
# Usage:
#   scripts/gpu-record-demo.sh NSYS_DIR OUT_DIR [extra `clef-prof record` options...]
#
#   NSYS_DIR  `auto`: the newest nsys bundled with Nsight Compute
#             (/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys; 2025.3 ships CUPTI 13,
#             which a CUDA 13 driver needs: an older nsys loses records). Or an unpacked Nsight
#             Systems: the folder holding `nsys`, its target-linux-x64/ folder, or the binary.
#             nsys turns its raw .qdstrm into a .nsys-rep with QdstrmImporter
#             (target-linux-x64/../host-linux-x64/); when that importer cannot load (libdw.so.1,
#             libelf.so.1 missing), record runs it again with IMPORTER_LIBS on its
#             LD_LIBRARY_PATH (the importer's only, never the server's).
#   OUT_DIR   where the captures go: OUT_DIR/main/ and OUT_DIR/pr/, each with capture.nsys-rep,
#             capture.sqlite, manifest.json and the logs; with AB=N also OUT_DIR/ab/ (N rounds).
#
# Env: WARMUP (s, default 15), DURATION (s, default 3), PORT (default 8765), CONCURRENCY
#      (default 16), WINDOW (default profiler-api: POST /start_profile -> cudaProfilerStart),
#      PYTHON (default python3), IMPORTER_LIBS (default .device/libs when it exists: Debian
#      bookworm libdw1/libelf1 0.188, libdw.so.1 and libelf.so.1, carried to the machine), AB (rounds of `clef-prof ab`, default 0 = none),
#      CHECK_GPU (default 1; 0 skips the torch/CUDA check, e.g. to try the script with WINDOW=nsys
#      on a CPU machine), SYNC (item or device: also record OUT_DIR/pr-sync-SYNC, variant pr with
#      `--sync SYNC`, one synchronizing call per request in transfer, for the sync finding).
#
# Needs: Python 3 with torch (CUDA), numpy and aiohttp (the load generator); nothing else
# (record and the demo server are standard library; pandas is only needed to analyze).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2; }
NSYS_IN=$1 OUT=$2
shift 2
PY=${PYTHON:-python3}
WARMUP=${WARMUP:-15} DURATION=${DURATION:-3} PORT=${PORT:-8765} CONCURRENCY=${CONCURRENCY:-16}
WINDOW=${WINDOW:-profiler-api} AB=${AB:-0} CHECK_GPU=${CHECK_GPU:-1} SYNC=${SYNC:-}

die() { echo "gpu-record-demo: $*" >&2; exit 1; }

# locate nsys in what was handed over
NSYS=
if [ "$NSYS_IN" = auto ]; then
  NSYS_IN=$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V | tail -n1)
  [ -n "$NSYS_IN" ] || die "NSYS_DIR auto: no /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys here"
fi
IMPORTER_LIBS=${IMPORTER_LIBS:-}
[ -n "$IMPORTER_LIBS" ] || { [ -d "$ROOT/.device/libs" ] && IMPORTER_LIBS=$ROOT/.device/libs; } || true
for c in "$NSYS_IN" "$NSYS_IN/nsys" "$NSYS_IN/target-linux-x64/nsys" "$NSYS_IN/bin/nsys"; do
  if [ -f "$c" ] && [ -x "$c" ]; then NSYS=$(readlink -f "$c"); break; fi
done
[ -n "$NSYS" ] || die "no executable nsys in $NSYS_IN (looked for nsys, target-linux-x64/nsys, bin/nsys)"
"$NSYS" --version >/dev/null 2>&1 || die "$NSYS --version fails (missing libraries? try: ldd $NSYS)"
echo "nsys: $NSYS ($("$NSYS" --version 2>&1 | head -n1))"
REAL=$(readlink -f "$NSYS")
case $REAL in */target-linux-x64/nsys)
  IMPORTER=$(dirname "$(dirname "$REAL")")/host-linux-x64/QdstrmImporter
  [ -x "$IMPORTER" ] || echo "gpu-record-demo: WARNING: no $IMPORTER: nsys will leave a .qdstrm and no .nsys-rep" >&2 ;;
esac
[ -z "$IMPORTER_LIBS" ] || echo "importer libraries: $IMPORTER_LIBS (QdstrmImporter only)"

# the Python side
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
[ "$CHECK_GPU" = 0 ] || "$PY" - <<'EOF' || die "this Python cannot run the demo on a GPU (see above)"
import sys
import torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"
      + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
sys.exit(0 if torch.cuda.is_available() else 1)
EOF

RECORD=(-m clef_prof record) AB_CMD=(-m clef_prof ab) DEMO="-m clef_prof demo-server"

mkdir -p "$OUT"
common=(--nsys "$NSYS" ${IMPORTER_LIBS:+--importer-libs "$IMPORTER_LIBS"} --window "$WINDOW" --warmup "$WARMUP" --duration "$DURATION" --concurrency "$CONCURRENCY"
        --url "http://127.0.0.1:$PORT" "$@")
rc=0
for variant in main pr; do
  echo "== $variant -> $OUT/$variant"
  # shellcheck disable=SC2086
  "$PY" "${RECORD[@]}" --out "$OUT/$variant" "${common[@]}" \
      -- "$PY" $DEMO --variant "$variant" --port "$PORT" || rc=1
done
if [ -n "$SYNC" ]; then
  echo "== pr --sync $SYNC -> $OUT/pr-sync-$SYNC"
  # shellcheck disable=SC2086
  "$PY" "${RECORD[@]}" --out "$OUT/pr-sync-$SYNC" "${common[@]}" \
      -- "$PY" $DEMO --variant pr --sync "$SYNC" --port "$PORT" || rc=1
fi
if [ "$AB" -gt 0 ]; then
  echo "== ab, $AB rounds -> $OUT/ab"
  "$PY" "${AB_CMD[@]}" --rounds "$AB" --order ABBA --out "$OUT/ab" "${common[@]}" \
      --arm "main=$PY $DEMO --variant main --port $PORT" \
      --arm "pr=$PY $DEMO --variant pr --port $PORT" || rc=1
fi

echo
echo "captures:"
find "$OUT" -name manifest.json -print | sort | while read -r m; do
  "$PY" - "$m" <<'EOF'
import json, os, sys
m = json.load(open(sys.argv[1]))
c = (m.get("client") or {}).get("capture") or (m.get("client") or {}).get("window") or {}
print(f"  {os.path.dirname(sys.argv[1])}: status {m.get('status')}, export {m.get('export')}, "
      f"client completions in the capture {c.get('completions')}, server counted "
      f"{(m.get('server_counts') or {}).get('requests')}")
EOF
done
echo "next (where pandas is installed): clef-prof analyze $OUT/main/capture.sqlite $OUT/pr/capture.sqlite"
echo "                                  clef-prof compare --arm main=$OUT/main --arm pr=$OUT/pr"
exit $rc
