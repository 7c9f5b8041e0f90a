#!/usr/bin/env bash
# Does tiny-open-flux2's packaged calibration serve it with each committed LoRA, at scales 0.5, 1 and 1.5?
# Then, where a scale says refit, the refit drift prints, and a sweep that sets the packaged calibration and the
# refit side by side on a seed no recording used. From the project root, after `. .venv/bin/activate`.
set -euo pipefail
L=teacache/models/weights/tiny-open-flux2-loras
teacache-calib drift --model tiny-open-flux2 --save runs/lora-before
for lora in stripes shape-swap; do
  teacache-calib drift --model tiny-open-flux2 --against runs/lora-before --lora-paths $L/$lora/$lora.safetensors \
    --lora-scales 0.5,1,1.5 --out runs/lora-$lora || true   # exit 1 where a scale says refit
done
# stripes at 1.5 says refit: record with the LoRA, fit, emit (the commands drift printed), then compare
R=runs/tiny-open-flux2-lora-stripes-1.5-mflux-0.24.0
teacache-calib record --model tiny-open-flux2 --prompts tiny-open --seeds 0,1,2 \
  --lora-paths $L/stripes/stripes.safetensors --lora-scales 1.5 --out $R-traces --yes
teacache-calib fit $R-traces/traces.parquet --out $R-fit --compare packaged
teacache-calib emit $R-fit/fit.json --variant tiny-open-flux2 --out $R-fit/tiny_open_flux2_lora_stripes_1_5.py
teacache-bench sweep --model tiny-open-flux2 --lora-paths $L/stripes/stripes.safetensors --lora-scales 1.5 \
  --prompts tiny-open-sweep --seeds 7 --thresholds 0.3,0.5 --repeats 1 \
  --compare-coefficients packaged,$R-fit/fit.json --out runs/lora-stripes-1.5-sweep --yes
teacache-bench report runs/lora-stripes-1.5-sweep --out runs/lora-stripes-1.5-report
