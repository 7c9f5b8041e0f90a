"""The fifth session's memory figures from session5/peaks.json (written by peaks.py): per arm, the peak above
the memory in use when the run starts, in the denoising loop and in the VAE decode, and what is still held
after the loop, each against vanilla of the same round and against the cache. Round 0 is the warm-up.

    python3 results/cuda-nvidia-h200/proxy-cost-flux1/peaks_summary.py
"""

import json
from pathlib import Path

runs = json.loads((Path(__file__).parent / "session5" / "peaks.json").read_text())["runs"]
vanilla = {r["round"]: r for r in runs["v"]}
print("arm         round  loop peak - vanilla - cache   decode peak - vanilla - cache   held after loop - vanilla - cache")
for arm, results in runs.items():
    for r in results:
        if arm == "v" or r["round"] == 0:
            continue
        v = vanilla[r["round"]]
        loop = max(r["step_peaks"]) - max(v["step_peaks"]) - r["cache_bytes"]
        decode = r["decode_peak"] - v["decode_peak"] - r["cache_bytes"]
        held = r["active_between"][-1] - v["active_between"][-1] - r["cache_bytes"]
        print(f"{arm:11} {r['round']:5}  {loop:+27,d} B  {decode:+29,d} B  {held:+33,d} B"
              f"   (cache {r['cache_bytes']:,d} B, max-abs vs vanilla {r['max_abs_vs_vanilla']})")
