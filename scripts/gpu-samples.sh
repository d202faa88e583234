#!/usr/bin/env bash
# Python samples on the GPU machine (docs/sampling.md): what nsys 2025.3's own sampler stores, and
# the per-stage functions of a real third-party server (tests/programs/bertsrv: transformers'
# BertModel behind aiohttp) from each source, results under OUT.
#
#   nsyspy   nsys 2025.3 `--python-sampling` on tests/programs/sampled_{split,threads}.py (split
#            3:1 by construction), as scripts/make-nsys-python-captures.py makes them for 2023.4;
#            where the frames are (the SQLite export's NVTX_EVENTS.binaryData, the JSON export).
#   bertpy   bertsrv recorded with nsys' own sampler alone (--python-sampling 0
#            --nsys-python-sampling 200) and analyzed.
#   stack    bertsrv recorded with the torch profiler with and without Python stacks
#            (--torch-stack), their profiler_cost side by side.
#   ab       bertsrv `--attn eager` vs `--attn sdpa` (transformers' two attention paths), AB rounds
#            of `clef-prof ab` with the torch profiler and Python stacks (AB_PROFILER=nsys: under
#            nsys with clef-prof's sampler, record's defaults), then compare.
#
# Usage: scripts/gpu-samples.sh OUT [PART...]   (parts: nsyspy bertpy stack ab; default all)
# Env: WARMUP (s, default 5), DURATION (s, default 2), AB (rounds, default 3), AB_PROFILER (torch),
#      BERTPY_ARGS (more record options for bertpy, e.g. --nsys-arg=--backtrace=none), PYTHON, NSYS.
# Writes OUT/samples.txt and tarballs OUT/PART.tar.xz (captures, manifests, analyze's JSON).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: $0 OUT [PART...]}
shift
PARTS=${*:-nsyspy bertpy stack ab}
PY=${PYTHON:-python3}
WARMUP=${WARMUP:-5} DURATION=${DURATION:-2} AB=${AB:-3} AB_PROFILER=${AB_PROFILER:-torch} BERTPY_ARGS=${BERTPY_ARGS:-}
NSYS=${NSYS:-$(ls -d /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | sort -V | tail -n1)}
LIBS=$ROOT/.device/libs
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" CLEF_PROF_NSYS=$NSYS PYTHONUNBUFFERED=1
SPEC=(--spec "$ROOT/tests/programs/bertsrv.toml")
BERT_PATH=$ROOT/tests/programs:$PYTHONPATH
PORT=8811
cd "$ROOT"
exec > >(tee -a "$OUT/samples.txt") 2>&1
echo "== $(date -u +%FT%TZ) nsys: $NSYS; parts: $PARTS"

binary_data() {   # where the Python Backtrace marks keep their frames in a SQLite export
  "$PY" - "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
cols = [r[1] for r in c.execute("PRAGMA table_info(NVTX_EVENTS)")]
print("NVTX_EVENTS columns:", cols)
tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
print("tables:", sorted(tables))
if "binaryData" in cols:
    for row in c.execute("SELECT eventType, COUNT(*), COUNT(binaryData), typeof(binaryData), MIN(length(binaryData)), "
                         "MAX(length(binaryData)) FROM NVTX_EVENTS GROUP BY eventType, typeof(binaryData)"):
        print("eventType, rows, with binaryData, type, min len, max len:", row)
    for (b,) in c.execute("SELECT binaryData FROM NVTX_EVENTS WHERE binaryData IS NOT NULL LIMIT 2"):
        print("binaryData head:", bytes(b)[:64].hex() if isinstance(b, (bytes, memoryview)) else repr(b)[:200])
for row in c.execute("SELECT eventType, COUNT(*) FROM NVTX_EVENTS GROUP BY eventType"):
    print("eventType count:", row)
PY
}

analyze() {   # analyze's JSON and terminal text of a capture; args: capture, name, extra options
  local cap=$1 name=$2; shift 2
  timeout 300 "$PY" -m clef_prof analyze "$cap" -f json "$@" > "$WORK/$name.analyze.json" 2> "$WORK/$name.analyze.err"
  echo "(analyze $name exit $?)"; tail -3 "$WORK/$name.analyze.err"
  timeout 300 "$PY" -m clef_prof analyze "$cap" "$@" 2>&1 | sed -n '/Python/,$p' | head -60
}

bert() { echo "$PY -m bertsrv.server --port $1 ${2:+--attn $2}"; }

for part in $PARTS; do
  t0=$(date +%s)
  echo "== part $part"
  case $part in
    nsyspy)
      NSYS=$NSYS PREFIX=gpu25 DATA="$WORK/nsyspy" IMPORTER_LIBS=$LIBS timeout 180 "$PY" scripts/make-nsys-python-captures.py "$WORK/nsyspy-work" 2>&1 | grep -av Processing
      mkdir -p "$WORK/nsyspy"
      binary_data "$WORK/nsyspy-work/gpu25-nsyspy-split.sqlite"
      analyze "$WORK/nsyspy-work/gpu25-nsyspy-split.sqlite" nsyspy-split
      cp "$WORK"/nsyspy-split.analyze.* "$WORK/nsyspy/"
      (cd "$WORK/nsyspy" && tar cJf "$OUT/nsyspy.tar.xz" .) ;;
    bertpy)
      PYTHONPATH=$BERT_PATH timeout 240 "$PY" -m clef_prof record --nsys "$NSYS" --importer-libs "$LIBS" --python-sampling 0 \
          --nsys-python-sampling 200 $BERTPY_ARGS "${SPEC[@]}" --warmup "$WARMUP" --duration "$DURATION" --url "http://127.0.0.1:$PORT" \
          --out "$WORK/bertpy" -- $(bert $PORT)
      echo "(record exit $?)"; PORT=$((PORT + 1))
      "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print("stop call answered after", [round((e["ack_ns"] - e["sent_ns"]) / 1e9, 1) for e in m["window"]["events"]], "s; record took", round((m["finished_ns"] - m["started_ns"]) / 1e9), "s")' "$WORK/bertpy/manifest.json"
      binary_data "$WORK/bertpy/capture.sqlite"
      analyze "$WORK/bertpy" bertpy "${SPEC[@]}"
      cp "$WORK"/bertpy.analyze.* "$WORK/bertpy/"
      (cd "$WORK/bertpy" && tar cJf "$OUT/bertpy.tar.xz" manifest.json capture.sqlite capture.stderr.log bertpy.analyze.* 2>/dev/null) ;;
    stack)
      for mode in stack nostack; do
        PYTHONPATH=$BERT_PATH timeout 100 "$PY" -m clef_prof record --profiler torch $([ $mode = stack ] && echo --torch-stack) \
            "${SPEC[@]}" --warmup "$WARMUP" --duration "$DURATION" --url "http://127.0.0.1:$PORT" --out "$WORK/$mode" -- $(bert $PORT)
        echo "(record $mode exit $?)"; PORT=$((PORT + 1))
        "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(sys.argv[2], "profiler_cost", m["client"].get("profiler_cost"), "trace", m["trace"])' \
            "$WORK/$mode/manifest.json" $mode
      done
      analyze "$WORK/stack" stack "${SPEC[@]}"
      cp "$WORK"/stack.analyze.* "$WORK/stack/"
      (cd "$WORK/stack" && tar cJf "$OUT/stack.tar.xz" manifest.json capture.torch stack.analyze.* 2>/dev/null) ;;
    ab)
      PYTHONPATH=$BERT_PATH timeout ${AB_LIMIT:-330} "$PY" -m clef_prof ab --arm "eager=$(bert $PORT eager)" --arm "sdpa=$(bert $PORT sdpa)" \
          --rounds "$AB" $([ "$AB_PROFILER" = torch ] && echo --profiler torch --torch-stack || echo --nsys "$NSYS" --importer-libs "$LIBS") "${SPEC[@]}" --warmup "$WARMUP" --duration "$DURATION" \
          --url "http://127.0.0.1:$PORT" --out "$WORK/ab"
      echo "(ab exit $?)"
      timeout 300 "$PY" -m clef_prof compare "$WORK/ab" "${SPEC[@]}" -f json > "$WORK/ab/compare.json" 2> "$WORK/ab/compare.err"
      echo "(compare exit $?)"; tail -3 "$WORK/ab/compare.err"
      timeout 300 "$PY" -m clef_prof compare "$WORK/ab" "${SPEC[@]}" 2>&1 | head -120
      for d in "$WORK"/ab/1-*/; do analyze "$d" "ab-$(basename "$d")" "${SPEC[@]}" | head -40; done
      # every manifest and the compare JSON; nsys: the captures of round 1 (the size limit)
      (cd "$WORK/ab" && tar cJf "$OUT/ab.tar.xz" ab.json compare.* */manifest.json 1-*/capture.sqlite 2>/dev/null)
      # torch: a real with_stack trace cut to TRIM_MS from its first range (every event that overlaps the cut)
      [ "$AB_PROFILER" = torch ] && "$PY" - "$WORK"/ab/1-eager/capture.torch "$OUT/kineto-bert-stack.pt.trace.json.xz" "${TRIM_MS:-150}" <<'PY'
import glob, gzip, json, lzma, sys
src = sorted(glob.glob(sys.argv[1] + "/*.json*"))[0]
with (gzip.open if src.endswith(".gz") else open)(src, "rt") as fh:
    tr = json.load(fh)
ev = tr["traceEvents"]
t0 = min(e["ts"] for e in ev if e.get("cat") == "user_annotation")
t1 = t0 + float(sys.argv[3]) * 1000
keep = [e for e in ev if e.get("ph") == "M" or ("ts" in e and e["ts"] <= t1 and e["ts"] + e.get("dur", 0) >= t0)]
tr["traceEvents"] = keep
with lzma.open(sys.argv[2], "wt", preset=9) as out:
    json.dump(tr, out)
print("cut", src, len(ev), "->", len(keep), "events")
PY
      cp "$WORK"/ab-*.analyze.json "$WORK/ab/" 2>/dev/null; (cd "$WORK" && tar cJf "$OUT/ab-analyze.tar.xz" ab-*.analyze.*) ;;
  esac
  echo "(part $part: $(( $(date +%s) - t0 )) s)"
done
ls -la "$OUT"
