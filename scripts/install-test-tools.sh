#!/usr/bin/env bash
# What the tests need from outside Python, for the README's test command (and .ci/run, which
# runs that command): Debian's chromium (the test that renders the HTML report), a C compiler and
# Python's headers (the C reader), when missing, then Nsight Systems 2022.4 and 2023.4 into .nsys/
# (scripts/install-nsys.sh, which takes the same arguments).
# apt-get runs as root, or through sudo where there is one; without either, it says which tests
# will be skipped (failed under CI=true) and goes on to Nsight Systems, which needs no root.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# the names tests/conftest.py's CHROMIUM_NAMES looks for
have_browser=""
for b in chromium chromium-browser google-chrome google-chrome-stable; do command -v "$b" >/dev/null 2>&1 && have_browser=1; done
[ -n "$have_browser" ] || need+=(chromium)
command -v cc >/dev/null 2>&1 || need+=(gcc)
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need+=(python3-dev)
if [ "${#need[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=$(command -v sudo || true)
  if [ "$(id -u)" != 0 ] && [ -z "$sudo" ]; then
    echo "install-test-tools: ${need[*]} missing and no root or sudo: the tests needing them are skipped (failed under CI=true); as root: apt-get install -y ${need[*]}" >&2
  else
    echo "install-test-tools: apt-get install ${need[*]}"
    ${sudo:+$sudo} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    ${sudo:+$sudo} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
exec bash scripts/install-nsys.sh "$@"
