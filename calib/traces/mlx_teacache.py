"""mlx-teacache calibration files (``_calibration_<variant>.json``) as traces and as coefficients.

Such a file holds a fit's tuple (``coefficients_c4_to_c0``, highest power first), often its x range
(``x_min``/``x_max``) and R^2, and usually the raw pairs it was fitted on (``x_values``/``y_values``).
Some hold several candidate signals under ``signals`` (``signals.A``, ``signals.B``); name one as
``PATH#A``. The raw pairs are stored prompt by prompt, each prompt's steps 1..N-1 in order (step 0 has
no previous step), so prompt and step are recovered from the position. Pure JSON/pandas: no MLX.
"""

from __future__ import annotations

import math

import pandas as pd

from teacache import variants
from teacache.errors import InputError
from teacache.rescale import RescaleFunction

SOURCE = "mlx-teacache calibration"


def is_calibration(data) -> bool:
    """True for the JSON object of an mlx-teacache calibration (one signal or several)."""
    if not isinstance(data, dict):
        return False
    if "coefficients_c4_to_c0" in data:
        return True
    signals = data.get("signals")
    return isinstance(signals, dict) and any(
        isinstance(s, dict) and "coefficients_c4_to_c0" in s for s in signals.values()
    )


def signal_block(data: dict, signal: str | None, name: str) -> tuple[dict, str | None]:
    """The part of the file that holds one signal's fit and pairs, and the signal's name."""
    signals = data.get("signals")
    if not isinstance(signals, dict):
        if signal is not None:
            raise InputError(f"'#{signal}' given, but the file holds a single signal (no 'signals' field)")
        return data, None
    if signal is None:
        if len(signals) != 1:
            raise InputError(f"holds signals {', '.join(map(str, signals))}; name one as {name}#{next(iter(signals))}")
        signal = next(iter(signals))
    if signal not in signals:
        raise InputError(f"no signal {signal!r}; the file holds {', '.join(map(str, signals))}")
    return signals[signal], signal


def num_steps_of(data: dict) -> int | None:
    steps = data.get("num_inference_steps")
    if steps is None and isinstance(data.get("recipe"), dict):
        steps = data["recipe"].get("num_inference_steps")
    return int(steps) if isinstance(steps, int | float) and not isinstance(steps, bool) else None


def variant_name(data: dict) -> str | None:
    """The file's variant (or model) name, as the other tool spells it."""
    name = data.get("variant") or data.get("model")
    return str(name) if name else None


def provenance(data: dict, block: dict, signal: str | None, name: str) -> dict:
    """What the file says about its recording, in the keys this toolkit's provenance uses."""
    width, height = data.get("width"), data.get("height")
    source_variant = variant_name(data)
    prov = {
        "source": f"{SOURCE} {name}" + (f"#{signal}" if signal else ""),
        "format": SOURCE,
        "source_variant": source_variant,
        "num_steps": num_steps_of(data),
        "guidance": data.get("guidance", (data.get("recipe") or {}).get("guidance")),
        "resolution": f"{width}x{height}" if width and height else None,
        "seed": data.get("seed"),
        "quantization": data.get("quantize"),
        "fit_mode": data.get("fit_mode"),
        "r2": block.get("fit_r_squared", block.get("r2")),
        "heldout_r2": block.get("heldout_r_squared"),
    }
    known = _known_variant(source_variant)
    if known:
        prov["variant"] = known
    return {k: v for k, v in prov.items() if v is not None}


def calibration_traces(data: dict, signal: str | None, name: str) -> tuple[pd.DataFrame, dict]:
    """The raw pairs as trace rows (prompt_id, step, x_rel_l1, y_rel_l1, num_steps, seed) and provenance."""
    block, signal = signal_block(data, signal, name)
    xs, ys = block.get("x_values"), block.get("y_values")
    if xs is None or ys is None:
        raise InputError(
            "holds no raw x_values/y_values, only a fitted tuple: use it as coefficients "
            "(--compare / --coefficients), not as traces"
        )
    if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys):
        raise InputError(f"x_values and y_values: expected two lists of one length, got {len(xs)} and {len(ys)}")
    steps = num_steps_of(data)
    if steps is None or steps < 2:
        raise InputError("no num_inference_steps: the pairs cannot be placed on steps")
    per_prompt = steps - 1
    if not xs or len(xs) % per_prompt:
        raise InputError(
            f"{len(xs)} pairs is not a whole number of prompts of {per_prompt} pairs (steps 1..{steps - 1})"
        )
    n_prompts = len(xs) // per_prompt
    declared = {data.get(k) for k in ("n_fit_prompts", "num_prompts", "n_prompts") if data.get(k) is not None}
    if declared and n_prompts not in declared:
        raise InputError(
            f"{len(xs)} pairs make {n_prompts} prompts of {per_prompt} steps; the file declares "
            f"{', '.join(map(str, sorted(declared)))} prompts"
        )
    texts = data.get("calibration_prompts") or []
    frame = pd.DataFrame(
        {
            "prompt_id": [f"p{i // per_prompt:02d}" for i in range(len(xs))],
            "prompt": [str(texts[i // per_prompt]) if i // per_prompt < len(texts) else "" for i in range(len(xs))],
            "step": [i % per_prompt + 1 for i in range(len(xs))],
            "num_steps": steps,
            "x_rel_l1": pd.to_numeric(pd.Series(xs), errors="coerce"),
            "y_rel_l1": pd.to_numeric(pd.Series(ys), errors="coerce"),
        }
    )
    if isinstance(data.get("seed"), int):
        frame["seed"] = data["seed"]
    return frame, provenance(data, block, signal, name)


def calibration_rescale(data: dict, signal: str | None, name: str) -> RescaleFunction:
    """The file's fitted tuple with its calibrated x range (x_min/x_max, else the range of its x_values)."""
    block, signal = signal_block(data, signal, name)
    coefficients = block.get("coefficients_c4_to_c0")
    if not isinstance(coefficients, list) or not coefficients:
        raise InputError("coefficients_c4_to_c0: expected a list of numbers")
    lo, hi = block.get("x_min"), block.get("x_max")
    if (lo is None or hi is None) and block.get("x_values"):
        finite = [float(v) for v in block["x_values"] if isinstance(v, int | float) and math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (None, None)
    x_range = (float(lo), float(hi)) if lo is not None and hi is not None else (0.0, math.inf)
    prov = provenance(data, block, signal, name)
    prov["x_range_from"] = "x_min/x_max" if "x_min" in block else ("x_values" if lo is not None else "none")
    return RescaleFunction(coefficients=tuple(coefficients), x_range=x_range, provenance=prov)


def _known_variant(name: str | None) -> str | None:
    """This toolkit's name for the file's variant when the registry knows it (by name or mflux alias)."""
    if not name:
        return None

    spec = variants.find(name)
    return spec.name if spec is not None and spec.supported else None
