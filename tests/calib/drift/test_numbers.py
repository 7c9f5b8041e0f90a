"""teacache-calib drift, numbers half: summaries, distances, the noise floor rule, every parameter drawn."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn
from mlx.utils import tree_flatten

from calib.drift import noise, numbers
from calib.drift.against import compare_numbers, moved_by_family


def test_projection_is_fixed_and_balanced():
    first = numbers.projection(4, 8)
    assert np.array_equal(first, numbers.projection(4, 8))
    assert set(np.unique(first * 2)) == {-1.0, 1.0}  # +-1/sqrt(4)
    assert abs(numbers.projection(64, 4096).mean()) < 0.01


def test_sketch_distance_estimates_the_relative_l2_distance():
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(20):
        a = rng.normal(size=1024)
        b = a + rng.normal(size=1024) * 0.03
        estimate = numbers.latent_distance(numbers.summarize(b, "float32"), numbers.summarize(a, "float32"))
        ratios.append(estimate / (np.linalg.norm(b - a) / np.linalg.norm(a)))
    # a 64-dimensional +-1 projection: the estimate's relative spread is about 1/sqrt(2*64) = 9 %
    assert min(ratios) > 0.7 and max(ratios) < 1.3


def test_identical_latents_are_at_distance_zero_and_other_shapes_at_infinity():
    a = numbers.summarize(np.ones((2, 3)), "float32")
    assert numbers.latent_distance(a, a) == 0.0
    assert numbers.latent_distance(numbers.summarize(np.ones((3, 2)), "float32"), a) == float("inf")


def test_trace_distance_is_the_largest_relative_difference_and_infinite_for_other_steps():
    ref = [{"step": 0, "branch": "cond", "x_rel_l1": None, "y_rel_l1": None},
           {"step": 1, "branch": "cond", "x_rel_l1": 0.5, "y_rel_l1": 0.25}]  # fmt: skip
    cur = [dict(ref[0]), {**ref[1], "y_rel_l1": 0.3}]
    assert numbers.trace_distance(cur, ref) == pytest.approx(0.2)
    assert numbers.trace_distance(cur[:1], ref) == float("inf")


def test_min_move_is_about_the_error_of_rounding_once_to_the_dtype():
    x = mx.random.normal((4096,), key=mx.random.key(0))
    for dtype, limit in noise.MIN_MOVE.items():
        rounded = x.astype(getattr(mx, dtype)).astype(mx.float32)
        if dtype == "float32":  # already float32: round a float64 copy instead
            wide = np.asarray(x, dtype=np.float64) * (1 + 1e-3)
            measured = np.linalg.norm(wide.astype(np.float32) - wide) / np.linalg.norm(wide)
        else:
            measured = float(mx.linalg.norm(rounded - x).item() / mx.linalg.norm(x).item())
        assert limit / 2 < measured < limit * 2, (dtype, measured, limit)


def _run(variant, dtype, values, trace_y=0.25):
    return {
        "variant": variant, "dtype": dtype,
        "vanilla": numbers.summarize(values, dtype), "recorded": numbers.summarize(values, dtype),
        "trace": [{"step": 1, "branch": "cond", "x_rel_l1": 0.5, "y_rel_l1": trace_y}],
    }  # fmt: skip


def test_moved_means_above_the_measured_floor_never_byte_inequality_alone():
    base = np.linspace(1, 2, 256)
    floor = {"floor": {"float32": {"vanilla": 1e-6, "recorded": 1e-6, "trace": 1e-6},
                       "bfloat16": dict.fromkeys(numbers.METRICS, 0.0)}}  # fmt: skip
    reference = {"runs": {"tiny-flux1/float32": _run("tiny-flux1", "float32", base),
                          "tiny-flux1/bfloat16": _run("tiny-flux1", "bfloat16", base)}}  # fmt: skip
    jitter = base * (1 + 1e-7)  # bytes differ, far below 10 x the floor
    current = {"runs": {"tiny-flux1/float32": _run("tiny-flux1", "float32", jitter),
                        "tiny-flux1/bfloat16": _run("tiny-flux1", "bfloat16", base * (1 + 1e-4))}}  # fmt: skip
    result = compare_numbers(current, reference, floor)
    assert not result["tiny-flux1/float32"]["identical"] and not result["tiny-flux1/float32"]["moved"]
    assert not result["tiny-flux1/bfloat16"]["moved"]  # a zero floor still leaves the dtype's resolution
    moved = {"runs": {"tiny-flux1/float32": _run("tiny-flux1", "float32", base * 1.01),
                      "tiny-flux1/bfloat16": _run("tiny-flux1", "bfloat16", base, trace_y=0.3)}}  # fmt: skip
    result = compare_numbers(moved, reference, floor)
    assert result["tiny-flux1/float32"]["metrics"]["vanilla"]["moved"]
    assert result["tiny-flux1/bfloat16"]["metrics"]["trace"]["moved"]
    assert not result["tiny-flux1/bfloat16"]["metrics"]["vanilla"]["moved"]
    assert moved_by_family(result, numbers.DTYPES)["flux1"] == {"float32": True, "bfloat16": True}
    assert moved_by_family(None, numbers.DTYPES)["flux1"] is None


def test_floor_is_the_largest_distance_between_processes_per_dtype():
    base = np.linspace(1, 2, 256)
    results = [
        {"runs": {"tiny-flux1/float32": _run("tiny-flux1", "float32", base * (1 + eps))}} for eps in (0, 1e-6, 3e-6)
    ]
    floor = noise.floor_from(results)["floor"]["float32"]
    assert floor["vanilla"] == pytest.approx(3e-6, rel=0.3)
    assert floor["trace"] == 0.0


def test_zero_parameters_are_drawn_by_name_so_a_new_one_shifts_nothing():
    class Pads(nn.Module):
        def __init__(self, extra: bool) -> None:
            super().__init__()
            self.pad = mx.zeros((4,))
            self.scale = mx.ones((4,))
            if extra:
                self.new_bias = mx.zeros((4,))

    plain, extended = Pads(False), Pads(True)
    assert numbers.draw_zero_parameters(plain, 0) == ["pad"]
    assert sorted(numbers.draw_zero_parameters(extended, 0)) == ["new_bias", "pad"]
    assert mx.array_equal(plain.pad, extended.pad).item() and mx.all(plain.pad != 0).item()
    assert mx.array_equal(plain.scale, mx.ones((4,))).item()


@pytest.mark.parametrize("variant", numbers.embedded_variants())
def test_every_parameter_of_the_drift_models_is_non_zero(variant):
    """So a parameter a release starts to load or read (FLUX.1's norm_out bias in 0.22) moves the numbers."""
    with numbers.model_precision("float32"):
        model, _ = numbers.build(variant)
    zero = [name for name, value in tree_flatten(model.transformer.parameters()) if not mx.any(value != 0).item()]
    assert zero == []


def test_one_model_per_family_embedded_and_at_full_size():
    from teacache import variants

    every = sorted(f.name for f in variants.families())
    assert sorted(variants.get(v).family for v in numbers.embedded_variants()) == every
    assert sorted(variants.get(v).family for v in numbers.fullsize_variants()) == every


def test_plan_orders_differ_but_cover_the_same_runs():
    orders = [numbers.plan(("a", "b"), numbers.DTYPES, k) for k in range(4)]
    assert all(sorted(o) == sorted(orders[0]) for o in orders)
    assert len({tuple(o) for o in orders}) == 4
