#!/usr/bin/env bash
# Full size on one H200, random weights, bfloat16: each family's random-<variant> saved under mflux 0.21.0 and
# judged by effect under mflux 0.24.0 (teacache-calib drift --model ... --save / --against). From the repository
# root on the GPU machine, MLX-CUDA set up as for the other full-size runs (. /root/mlxenv.sh), the mflux 0.21.0
# wheel anywhere under .whl/:
#   bash results/releases/effect-h200/run.sh save "random-flux1-dev random-flux2-klein-4b"   # under 0.21.0
#   bash results/releases/effect-h200/run.sh judge "random-flux1-dev ..."                   # under 0.24.0
# SAVES (default $OUT/saves) holds the saves between the two; STEPS (default 20) and SIZE (1024x1024) the recipe.
set -euo pipefail
stage=$1; models=$2
steps=${STEPS:-20}; size=${SIZE:-1024x1024}; saves=${SAVES:-$OUT/saves}
export TQDM_DISABLE=1
if [ "$stage" = save ]; then
  old=/tmp/mflux-0.21.0
  if [ ! -d "$old/mflux" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$old" "$(ls .whl/*/mflux-0.21.0-py3-none-any.whl | head -1)"
  fi
  for m in $models; do
    PYTHONPATH="$old${PYTHONPATH:+:$PYTHONPATH}" python3 -m calib.cli drift --model "$m" --steps "$steps" --size "$size" \
      --save "$saves" --out "$OUT/o-save-$m"
  done
else
  for m in $models; do
    python3 -m calib.cli drift --model "$m" --against "$saves" --out "$OUT/o-0.24.0-$m" || echo "exit $? for $m"
  done
fi
