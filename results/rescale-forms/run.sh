#!/usr/bin/env bash
# Re-measures forms.csv: the default selection of `teacache-calib fit` against the monotone ceiling and against
# the selection before mono+step, on the nine trace sets of mlx-teacache's calibration files.
# Usage (from the project root, after `make install`):
#   pip download --no-deps --no-binary :all: mlx-teacache -d runs/sdist && tar xzf runs/sdist/mlx_teacache-*.tar.gz -C runs/sdist
#   results/rescale-forms/run.sh runs/sdist/mlx_teacache-*/scripts
set -euo pipefail
scripts="${1:?usage: $0 FOLDER-WITH-_calibration_-FILES}"
here="$(cd "$(dirname "$0")" && pwd)"
work="${WORK:-runs/rescale-forms}"
mkdir -p "$work"
PATH="$PWD/.venv/bin:$PATH" .venv/bin/python "$here/collect.py" "$scripts" "$work" "$here/forms.csv"
