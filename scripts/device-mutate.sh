#!/usr/bin/env bash
# Mutation passes (benchmarks/mutate.py) side by side on a lent many-core machine, until a deadline.
#
#   bash scripts/device-mutate.sh JOBFILE [SECONDS]
#
# Each line of JOBFILE is NAME ARGS...: one `benchmarks/mutate.py ARGS` pass whose result lands in
# $OUT/res/NAME.json (and .jsonl as it goes); JOBS of them run at once (default: the cores). A pass
# still running at the deadline is stopped with SIGTERM, which benchmarks/mutate.py answers by writing what
# it has. Wheels under $WHEELS (default .device/wheels: packages the machine lacks) go to /tmp/site
# first. Tests that fail there without any mutation (another machine's packages) are left out and named in the log.
# The results come back as one archive, $OUT/mutate-results.tar.xz: combine them with
# `python3 benchmarks/mutate.py --report res/*.json`.
set -u
jobfile=$1
budget=${2:-520}
out=${OUT:-/tmp/mutate-out}
mkdir -p "$out/res"
wheels=${WHEELS:-.device/wheels}
if compgen -G "$wheels/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$wheels"/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
export deadline=$(( $(date +%s) + budget )) out
one() {
    local name=$1 left
    shift
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 90 ]; then echo "$name: not started"; return; fi
    timeout -s TERM -k 60 "$left" python3 benchmarks/mutate.py --drop-failing --json "$out/res/$name.json" "$@" \
        >"$out/res/$name.log" 2>&1
    echo "$name: exit $? $(grep -m1 '^| \*\*all' "$out/res/$name.log")"
}
export -f one
# a line's trailing blanks would make xargs -L join it to the next
grep -v '^\s*\(#\|$\)' "$jobfile" | sed 's/[[:space:]]*$//' | xargs -P "${JOBS:-$(nproc)}" -L 1 bash -c 'one "$@"' _
tar -C "$out" -cJf "$out/mutate-results.tar.xz" res && rm -rf "$out/res"
