"""``--quantize`` on an embedded model quantizes it as mflux quantizes an unquantized checkpoint (it was ignored)."""

from __future__ import annotations

import pytest
from mlx import nn

import teacache


def _quantized_layers(model) -> int:
    return sum(isinstance(m, nn.QuantizedLinear) for _, m in model.transformer.named_modules())


@pytest.mark.parametrize("bits", [4, 8])
def test_an_embedded_model_asked_for_bits_runs_quantized(bits):
    plain, quantized = teacache.load_model("tiny-flux1"), teacache.load_model("tiny-flux1", quantize=bits)
    assert _quantized_layers(plain) == 0
    assert _quantized_layers(quantized) == sum(isinstance(m, nn.Linear) for _, m in plain.transformer.named_modules())
    assert {m.bits for _, m in quantized.transformer.named_modules() if isinstance(m, nn.QuantizedLinear)} == {bits}


def test_a_model_too_narrow_for_the_group_size_says_so_about_quantize():
    with pytest.raises(ValueError, match=r"^--quantize: tiny-shapes cannot be quantized to 4 bits"):
        teacache.load_model("tiny-shapes", quantize=4)
