#!/usr/bin/env bash
# Remake docs/img/report.png, the README's picture of the HTML report: `clef-prof report` on the
# first command's capture, rendered by headless Chromium (apt-get install -y chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH=$PWD python3 -m clef_prof report traces/gpu25-pr-slice.sqlite --html "$tmp/report.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1500 \
  --user-data-dir="$tmp/profile" --screenshot="$tmp/report.png" "file://$tmp/report.html" 2>/dev/null
mv "$tmp/report.png" docs/img/report.png
