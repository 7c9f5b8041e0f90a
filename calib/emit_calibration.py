"""``teacache-calib emit --format mlx-teacache``: a fit as mlx-teacache's calibration JSON
(:mod:`calib.traces.mlx_teacache_format` builds the object; this writes it and says what it wrote)."""

from __future__ import annotations

import argparse
from pathlib import Path

from calib.emit_checks import check_emittable
from calib.fit.result import FitResult
from calib.run.arguments import check_out_file, check_variant_name
from teacache.outputs import Writes


def _is_calibration_file(path: Path) -> bool:
    """An mlx-teacache calibration JSON (this command's kind of file): rewritten without --force."""
    import json

    from calib.traces.mlx_teacache import is_calibration

    try:
        return is_calibration(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError):
        return False


CALIBRATION_WRITES = Writes("teacache-calib emit --format mlx-teacache", is_own=_is_calibration_file)


def emit_calibration(args: argparse.Namespace) -> int:
    """``--format mlx-teacache``: the fit as mlx-teacache's calibration JSON (calib.traces.mlx_teacache_format)."""
    from calib.traces import mlx_teacache_format as fmt
    from teacache.io import write_json

    if args.variant is not None:
        check_variant_name(args.variant)
    fit_dir = Path(args.fit) if Path(args.fit).is_dir() else Path(args.fit).parent
    if args.out is not None:
        check_out_file(args.out, what=".json file", writes=CALIBRATION_WRITES, force=args.force)
    result = FitResult.read(args.fit)
    check_emittable(result, "teacache-calib emit", args.allow_unsafe)
    fit = result.to_json()
    data, note = fmt.calibration_object(fit, args.traces, args.variant, args.polynomial)
    path = args.out if args.out is not None else fit_dir / fmt.default_name(data["variant"])
    if note:
        print(f"note: {note}")
    write_json(path, data)
    coefficients = ", ".join(f"{c:.6g}" for c in data["coefficients_c4_to_c0"])
    print(
        f"wrote {path}: {data['fitted_model']} ({coefficients}), x {data['x_min']:.4g}..{data['x_max']:.4g}, "
        f"R^2 {data['fit_r_squared']:.4f}, {data['num_pairs']} pairs of {data['num_prompts']} runs"
    )
    return 0
