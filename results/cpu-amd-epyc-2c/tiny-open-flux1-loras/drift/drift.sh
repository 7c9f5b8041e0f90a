#!/usr/bin/env bash
# Does tiny-open-flux1's packaged calibration serve it with each committed LoRA, at scales 0.5, 1 and 1.5?
# From the project root, after `. .venv/bin/activate`; copies each verdict and log next to this script.
set -euo pipefail
L=teacache/models/weights/tiny-open-flux1-loras
D=results/cpu-amd-epyc-2c/tiny-open-flux1-loras/drift
teacache-calib drift --model tiny-open-flux1 --save runs/lora1-before
for lora in stripes colour-swap; do
  teacache-calib drift --model tiny-open-flux1 --against runs/lora1-before --lora-paths $L/$lora/$lora.safetensors \
    --lora-scales 0.5,1,1.5 --out runs/lora1-$lora 2>&1 | tee runs/lora1-$lora.log || true   # exit 1 where a scale says refit
  mkdir -p $D/$lora
  cp runs/lora1-$lora.log $D/$lora/drift.log
  cp runs/lora1-$lora/verdict.json $D/$lora/verdict.json
  for s in 0.5 1 1.5; do cp runs/lora1-$lora/lora-scale-$s/verdict.json $D/$lora/verdict-scale-$s.json; done
done
