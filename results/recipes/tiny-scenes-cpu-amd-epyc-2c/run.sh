#!/usr/bin/env bash
# Recipe questions on tiny-scenes: its own recipe saved, then the same prompts and seeds asked at other recipes.
# Usage (from the project root, after `make install`): results/recipes/tiny-scenes-cpu-amd-epyc-2c/run.sh
# Writes the saves and verdicts under runs/recipes/ and copies what the RUN.md reads next to this script.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${WORK:-runs/recipes/tiny-scenes}"
rm -rf "$work" && mkdir -p "$work"
PATH="$PWD/.venv/bin:$PATH"
teacache-calib drift --model tiny-scenes --save "$work/before" --out "$work/save-out"
for asked in "--guidance 2.5" "--quantize 8" "--quantize 4" "--steps 20" "--steps 40"; do
    name="$(echo "$asked" | tr -d ' -')"
    teacache-calib drift --model tiny-scenes --against "$work/before" $asked --out "$work/$name"
    echo "$asked: exit $?"
    mkdir -p "$here/$name" && cp "$work/$name/verdict.json" "$here/$name/verdict.json"
done
mkdir -p "$here/before" && cp "$work/before/effect/tiny-scenes/"{settings,gate,tolerance}.json "$here/before/"
