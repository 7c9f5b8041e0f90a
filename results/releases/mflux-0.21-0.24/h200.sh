#!/usr/bin/env bash
# Full-size drift numbers, mflux 0.21.0 against 0.24.0: random-weight FLUX.1-dev, FLUX.2 Klein 4B,
# Qwen-Image and Z-Image in bfloat16 (teacache-calib drift-numbers --fullsize), 0.21.0 and 0.24.0 side by
# one after the other on one GPU (two full-size processes at once run out of memory on Qwen-Image and
# Z-Image), then 0.24.0 again in another order for the noise floor, then the comparison.
# Run from the repo root with MLX-CUDA importable and both mflux wheels somewhere under .whl/:
#   . /root/mlxenv.sh && OUT=$OUT bash results/releases/mflux-0.21-0.24/h200.sh
# Writes $OUT/mflux-<release>[-repeat].json (+ .log) and $OUT/comparison.md. STEPS, SIZE, EXTRA override
# (e.g. EXTRA='--variants qwen-image,z-image').
set -euo pipefail
: "${OUT:?set OUT}"
PY=${PYTHON:-python3}
STEPS=${STEPS:-3}
SIZE=${SIZE:-1024}
sites=$(mktemp -d)
for v in 0.21.0 0.24.0; do
  whl=$(find .whl -name "mflux-$v-py3-none-any.whl" | head -1)
  [ -n "$whl" ] || { echo "no mflux-$v wheel under .whl/" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$sites/$v" "$whl"
done
run() {  # release order name
  PYTHONPATH="$sites/$1:$PWD${PYTHONPATH:+:$PYTHONPATH}" TQDM_DISABLE=1 "$PY" -m calib.cli drift-numbers \
    --fullsize --steps "$STEPS" --size "$SIZE" --order "$2" ${EXTRA:-} --out "$OUT/$3.json" > "$OUT/$3.log" 2>&1
}
start=$(date +%s)
run 0.21.0 0 mflux-0.21.0
run 0.24.0 0 mflux-0.24.0
run 0.24.0 1 mflux-0.24.0-repeat
echo "runs took $(( $(date +%s) - start )) s"
PYTHONPATH="$sites/0.24.0:$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m calib.cli drift-compare "$OUT/mflux-0.21.0.json" \
  "$OUT/mflux-0.24.0.json" --repeat "$OUT/mflux-0.24.0-repeat.json" --out "$OUT/comparison.md"
