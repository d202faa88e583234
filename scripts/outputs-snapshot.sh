#!/usr/bin/env bash
# Every CLI output over every capture in tests/data and traces/, one file each, into DIR: run it
# before and after a refactor that must not change behaviour, then `diff -r BEFORE AFTER`.
#
#   scripts/outputs-snapshot.sh DIR      (from the repository root; DIR must not exist)
#
# Per capture: analyze -f table/markdown/csv/json (and --wide), export --chrome-trace/--csv,
# report --html, scrub --check; per pair of arms: compare -f table/markdown/json; once: slice and
# scrub of one export (their SQL dump), whatif --from and predict on the saved what-if run. Each
# command's stdout, stderr and exit status are kept.
# Inputs are copied into a scratch folder of fixed name length (terminal tables wrap paths, so two
# snapshots must see paths of one length): .sqlite.xz exports decompressed (nsys' Python samples
# JSON beside its export, a record manifest into a folder with its export), Kineto .json.xz traces
# as they are (the CLI reads them); XDG_CACHE_HOME is in it too. Normalised, in every output: the
# scratch folder, written <DIR>; the hash in a converted Kineto trace's cache name, <HASH>; the
# minute an HTML page was generated ("YYYY-MM-DD HH:MM UTC"), <TIME>.
set -u
DIR=${1:?usage: scripts/outputs-snapshot.sh DIR}
[ -e "$DIR" ] && { echo "outputs-snapshot: $DIR exists" >&2; exit 2; }
mkdir -p "$DIR"
DEST=$(cd "$DIR" && pwd)
DIR=$(mktemp -d /tmp/clef-snapshot.XXXXXXXX)
mkdir -p "$DIR/in" "$DIR/out" "$DIR/cache"
export XDG_CACHE_HOME="$DIR/cache" COLUMNS=120 LC_ALL=C.UTF-8 TZ=UTC CLEF_PROF_COMMIT=snapshot CLEF_PROF_BRANCH=snapshot
PY=${PYTHON:-python3}
OUT="$DIR/out"

run() {   # run LABEL ARGS...: stdout, stderr and status of `python3 -m clef_prof ARGS`
    local label=$1; shift
    "$PY" -m clef_prof "$@" >"$OUT/$label.stdout" 2>"$OUT/$label.stderr"
    echo $? >"$OUT/$label.rc"
}

for f in tests/data/*.sqlite.xz; do
    b=$(basename "$f" .sqlite.xz)
    xz -dc "$f" >"$DIR/in/$b.sqlite"
    [ -e "tests/data/$b.json.xz" ] && xz -dc "tests/data/$b.json.xz" >"$DIR/in/$b.json"
done
cp tests/data/*.pt.trace.json.xz "$DIR/in/"
mkdir -p "$DIR/in/gpu25-journey-record"
cp "$DIR/in/gpu25-journey.sqlite" "$DIR/in/gpu25-journey-record/capture.sqlite"
cp tests/data/gpu25-journey.manifest.json "$DIR/in/gpu25-journey-record/manifest.json"

CAPS=("$DIR"/in/*.sqlite "$DIR/in/gpu25-journey-record" "$DIR"/in/*.pt.trace.json.xz traces/*.sqlite)
for c in "${CAPS[@]}"; do
    l=$(basename "$c"); l=${l%.sqlite}; l=${l%.pt.trace.json.xz}
    case $c in traces/*) l="traces-$l";; *.pt.trace.json.xz) l="kineto-$l";; esac
    for fmt in table markdown csv json; do run "$l.analyze-$fmt" analyze -f "$fmt" "$c"; done
    run "$l.analyze-wide" analyze --wide "$c"
    run "$l.export" export --chrome-trace "$OUT/$l.chrome.json" --csv "$OUT/$l.journeys.csv" "$c"
    run "$l.report" report --html "$OUT/$l.report.html" "$c"
    case $c in *.sqlite) run "$l.scrub-check" scrub --check "$c";; esac
done

I="$DIR/in"
pair() {  # pair LABEL MAIN PR
    for fmt in table markdown json; do run "compare-$1.$fmt" compare -f "$fmt" --arm "main=$2" --arm "pr=$3"; done
}
pair q1c16 "$I/gpu-q1c16-main.sqlite" "$I/gpu-q1c16-pr.sqlite"
pair samples "$I/cpu23-samples-main-1.sqlite,$I/cpu23-samples-main-2.sqlite,$I/cpu23-samples-main-3.sqlite" \
    "$I/cpu23-samples-pr-1.sqlite,$I/cpu23-samples-pr-2.sqlite,$I/cpu23-samples-pr-3.sqlite"
pair kineto-demo "$I/kineto-demo-main.pt.trace.json.xz" "$I/kineto-demo-pr.pt.trace.json.xz"
pair kineto-pair "$I/kineto-bert-pair.pt.trace.json.xz" "$I/kineto-pair-pr.pt.trace.json.xz"
pair bert-pair "$I/gpu25-bert-pair.sqlite" "$I/gpu25-pair-pr.sqlite"
pair traces-slice traces/gpu-main-slice.sqlite traces/gpu-pr-slice.sqlite

W=docs/data/gpu-whatif-2026-12-07/whatif.json
for fmt in table markdown json html; do run "whatif.$fmt" whatif --from "$W" -f "$fmt"; done
for fmt in table markdown json; do
    run "predict.$fmt" predict --whatif "$W" --compare "$OUT/compare-q1c16.json.stdout" -f "$fmt"
done

run slice slice --from 0.1 --to 0.2 traces/gpu25-pr-slice.sqlite "$DIR/sliced.sqlite"
run scrub scrub traces/gpu25-pr-slice.sqlite "$DIR/scrubbed.sqlite"
for s in sliced scrubbed; do
    [ -e "$DIR/$s.sqlite" ] && sqlite3 "$DIR/$s.sqlite" .dump >"$OUT/$s.sql" && rm "$DIR/$s.sqlite"
done

# normalise the scratch folder, the Kineto cache names' hash and the HTML pages' minute
for f in "$OUT"/*; do
    sed -i -E -e "s#$DIR#<DIR>#g" -e 's/(kineto-[a-z0-9-]+)-[0-9a-f]{16}\.sqlite/\1-<HASH>.sqlite/g' \
        -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC/<TIME> UTC/g' "$f"
done
mv "$OUT" "$DEST/out"
rm -rf "$DIR"
echo "outputs-snapshot: $(find "$DEST/out" -type f | wc -l) files in $DEST/out"
