#!/bin/sh
# Renders an attention heatmap SVG with headless Chromium (Debian's
# `chromium` package) to a PNG, so a person can look at what --heatmap drew.
# usage: tools/heatmap_screenshot.sh FILE.svg OUT.png
set -e
svg=$(realpath "$1"); out=$(realpath -m "$2")
command -v chromium >/dev/null || { echo "needs Debian's chromium: apt-get install chromium" >&2; exit 2; }
prof=$(mktemp -d)
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$prof" --window-size=1200,900 --screenshot="$out" "file://$svg" >/dev/null 2>&1
rm -rf "$prof"
test -s "$out" && echo "wrote $out"
