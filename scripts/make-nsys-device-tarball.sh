#!/usr/bin/env bash
# Build .nsys/nsys-2023.4-device.tar.xz: a trimmed copy of the Nsight Systems
# 2023.4 CLI (target-linux-x64/ and host-linux-x64/, as laid out by
# scripts/install-nsys.sh) small enough to carry to a GPU machine.
#
# Usage:
#   scripts/make-nsys-device-tarball.sh [--check] [--gpu-metrics]
#     --check        unpack the tarball into a temporary folder and run its
#                    `nsys --version`, a CPU-only `nsys profile -t nvtx,osrt`,
#                    export and stats (needs .nsys/venv-nvtx-0.2.11 from
#                    install-nsys.sh --check)
#     --gpu-metrics  keep libnvperf_grfx_host.so (needed by --gpu-metrics-device;
#                    adds ~6 MB to the tarball)
#   Env: NSYS_DIR (default <repo>/.nsys), NSYS_XZ_LEVEL (default -9).
#
# On the GPU machine:
#   mkdir nsys && tar -xJf nsys-2023.4-device.tar.xz -C nsys
#   nsys/target-linux-x64/nsys profile -t cuda,nvtx,osrt -o cap python3 app.py
# The tarball holds the folders side by side at its top (no version folder);
# nsys finds QdstrmImporter in target-linux-x64/../host-linux-x64.
#
# Left out: CUPTI 10.x/11.x (only CUPTI 12.4 stays, for CUDA tracing with a
# CUDA 12+/13 driver), CollectX (NIC metrics), the cuBLAS 10/11 and cuDNN 7/8
# injection libraries, libnvperf_grfx_host.so (GPU metrics sampling) unless
# --gpu-metrics, the host's second sqlite3, and everything of the GUI:
# Qt 6 and QtWebEngine, ICU, the GUI's own libraries (timeline, exporter,
# nsys-ui server), Plugins/, resources/, translations/, libexec/, CrashReporter,
# ImportNvtxt. Kept: everything QdstrmImporter needs (checked with ldd), and
# the libraries install-nsys.sh bundles (libssh, libpfm, krb5, libcrypto,
# libelf: Debian 12 builds, glibc >= 2.34), reports/rules/python for
# `nsys stats` (which needs a python3 on the PATH).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${NSYS_DIR:-$ROOT/.nsys}
XZ_LEVEL=${NSYS_XZ_LEVEL:--9}
CHECK=0 GPU_METRICS=0
for a in "$@"; do
  case $a in
    --check) CHECK=1 ;;
    --gpu-metrics) GPU_METRICS=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-nsys-device-tarball: unknown argument: $a" >&2; exit 2 ;;
  esac
done
log() { echo "make-nsys-device-tarball: $*" >&2; }
die() { echo "make-nsys-device-tarball: ERROR: $*" >&2; exit 1; }

NSYS_DIR=$DEST bash "$ROOT/scripts/install-nsys.sh" --quiet 2023.4 >/dev/null
SRC=$DEST/2023.4
OUT=$DEST/nsys-2023.4-device.tar.xz
# libnvperf_grfx_host.so (27 MB, ~6 MB packed) serves only --gpu-metrics-*.
gpu_metrics_exclude=--exclude=target-linux-x64/libnvperf_grfx_host.so
[ "$GPU_METRICS" = 0 ] || gpu_metrics_exclude=--exclude=nothing-to-exclude
STAGE=$(mktemp -d "$DEST/.tarball-stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT

log "staging a trimmed copy of $SRC"
# Patterns are matched against paths inside the tar stream.
tar -C "$SRC" -cf - \
    --exclude='target-linux-x64/libcupti.so.10.*' \
    --exclude='target-linux-x64/libcupti.so.11.*' \
    --exclude='target-linux-x64/CollectX' \
    --exclude='target-linux-x64/libToolsInjectionCuBLAS64_1[01].so' \
    --exclude='target-linux-x64/libToolsInjectionCuDNN64_[78].so' \
    "$gpu_metrics_exclude" \
    --exclude='host-linux-x64/sqlite3' \
    --exclude='host-linux-x64/libQt6*' \
    --exclude='host-linux-x64/libicu*' \
    --exclude='host-linux-x64/libNvQtGui.so' \
    --exclude='host-linux-x64/libQtPropertyBrowser.so' \
    --exclude='host-linux-x64/libTimelineWidget.so' \
    --exclude='host-linux-x64/libTimelineUIUtils.so' \
    --exclude='host-linux-x64/libEventsView.so' \
    --exclude='host-linux-x64/libAppLib.so' \
    --exclude='host-linux-x64/libAppLibInterfaces.so' \
    --exclude='host-linux-x64/libInterfaceShared.so' \
    --exclude='host-linux-x64/libInterfaceSharedCore.so' \
    --exclude='host-linux-x64/libexporter.so' \
    --exclude='host-linux-x64/libCommonNsysServer.so' \
    --exclude='host-linux-x64/libNsysServerProto.so' \
    --exclude='host-linux-x64/libTelemetryQuadDClient.so' \
    --exclude='host-linux-x64/ImportNvtxt' \
    --exclude='host-linux-x64/CrashReporter' \
    --exclude='host-linux-x64/nsys-ui*' \
    --exclude='host-linux-x64/Plugins' \
    --exclude='host-linux-x64/resources' \
    --exclude='host-linux-x64/translations' \
    --exclude='host-linux-x64/libexec' \
    --exclude='__pycache__' \
    target-linux-x64 host-linux-x64 bundled-libs-doc \
  | tar -C "$STAGE" -xf -

# Every ELF file left in host-linux-x64 must find its libraries (the trim must
# not cut into what the CLI loads); target-linux-x64 is only trimmed of whole
# optional features, but check it too (nvgpucs wants the driver's libcuda.so.1).
missing=""
while IFS= read -r f; do
  head -c4 "$f" | grep -q 'ELF' || continue
  # The libraries carry no RPATH of their own: they rely on the executables'
  # RPATH $ORIGIN, which LD_LIBRARY_PATH stands in for here.
  nf=$(LD_LIBRARY_PATH=$(dirname "$f") ldd "$f" 2>/dev/null | grep 'not found' | grep -v 'libcuda.so.1' || true)
  [ -z "$nf" ] || missing="$missing
${f#"$STAGE"/}: $nf"
done < <(find "$STAGE/host-linux-x64" "$STAGE/target-linux-x64" -maxdepth 1 -type f)
[ -z "$missing" ] || die "trimmed tree misses libraries:$missing"

cat >"$STAGE/README-nsys-device.txt" <<EOF
NVIDIA Nsight Systems $(cat "$SRC/.installed" | cut -d' ' -f1) CLI, trimmed
(from Debian trixie non-free nsight-systems / nsight-systems-target; built by
scripts/make-nsys-device-tarball.sh of clef-prof). NVIDIA's license applies
(/usr/share/doc/nsight-systems/copyright in the Debian package). Bundled
Debian 12 libraries and their copyright files:
bundled-libs-doc/.

  mkdir nsys && tar -xJf nsys-2023.4-device.tar.xz -C nsys
  nsys/target-linux-x64/nsys --version
  nsys/target-linux-x64/nsys profile -t cuda,nvtx,osrt -o cap python3 app.py
  nsys/target-linux-x64/nsys export --type sqlite -o cap.sqlite cap.nsys-rep

Trimmed away: the GUI, CUPTI 10.x/11.x (libcupti.so.12.4 is kept),
CollectX (NIC metrics), cuBLAS 10/11 and cuDNN 7/8 injection libraries$(
[ "$GPU_METRICS" = 1 ] || printf ',\nlibnvperf_grfx_host.so (so no --gpu-metrics-device)').
EOF

log "compressing (xz $XZ_LEVEL)"
rm -f "$OUT.tmp"
tar -C "$STAGE" --owner=0 --group=0 --numeric-owner -cf - \
    README-nsys-device.txt bundled-libs-doc target-linux-x64 host-linux-x64 \
  | xz "$XZ_LEVEL" -T0 >"$OUT.tmp"
mv -f "$OUT.tmp" "$OUT"
log "$OUT: $(du -h "$OUT" | cut -f1) ($(stat -c %s "$OUT") bytes; unpacked $(du -sh "$STAGE" | cut -f1))"

if [ "$CHECK" = 1 ]; then
  py=$DEST/venv-nvtx-0.2.11/bin/python
  [ -x "$py" ] || die "no $py: run scripts/install-nsys.sh --check first"
  t=$(mktemp -d "${TMPDIR:-/tmp}/nsys-device-check.XXXXXX")
  tar -xJf "$OUT" -C "$t"
  n=$t/target-linux-x64/nsys
  "$n" --version
  timeout 300 "$n" profile -t nvtx,osrt -o "$t/cap" --force-overwrite true "$py" -c '
import nvtx
for i in range(3):
    nvtx.push_range("r%d" % i, domain="clef"); nvtx.pop_range(domain="clef")
' </dev/null >"$t/profile.log" 2>&1 || { cat "$t/profile.log" >&2; die "profile failed"; }
  timeout 300 "$n" export --type sqlite --quiet true -o "$t/cap.sqlite" "$t/cap.nsys-rep" </dev/null >/dev/null \
    || die "export failed"
  got=$("$py" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(
      "select count(*) from NVTX_EVENTS where eventType = 59").fetchone()[0])' "$t/cap.sqlite")
  [ "$got" = 3 ] || die "expected 3 NVTX ranges, found $got"
  # shellcheck disable=SC2015
  timeout 300 "$n" stats -r nvtx_sum "$t/cap.sqlite" </dev/null >"$t/stats.log" 2>&1 && ! grep -q ERROR "$t/stats.log" \
    || { cat "$t/stats.log" >&2; die "stats failed"; }
  rm -rf "$t"
  log "check OK: unpacked tarball records NVTX ranges (CPU only), exports and runs stats"
fi
echo "$OUT"
