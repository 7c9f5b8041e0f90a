"""``fullsize.keep_bfloat16``: a quantized linear put back in bfloat16 holds its dequantized weight and computes
the bfloat16 matmul of it; the other quantized linears stay as they were."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx import nn

import teacache
from teacache.errors import InputError
from teacache.models import fullsize


@pytest.fixture
def quantized():
    """tiny-flux1 quantized to 8 bits as mflux does: its x_embedder is 64 -> 256, K equal to the group size, like
    FLUX.1-dev's 64 -> 3072."""
    return teacache.load_model("tiny-flux1", quantize=8).transformer


def test_a_kept_linear_holds_the_dequantized_weight_and_computes_the_bfloat16_matmul(quantized):
    q = quantized.x_embedder
    assert isinstance(q, nn.QuantizedLinear) and q.group_size == 64
    expected = mx.dequantize(q.weight, q.scales, q.biases, q.group_size, q.bits).astype(mx.bfloat16)
    bias = q.bias
    others = {n: m for n, m in quantized.named_modules() if isinstance(m, nn.QuantizedLinear) and n != "x_embedder"}
    fullsize.keep_bfloat16(quantized, ["x_embedder"])
    kept = quantized.x_embedder
    assert type(kept) is nn.Linear and kept.weight.dtype == mx.bfloat16 and kept.weight.shape == (256, 64)
    assert mx.array_equal(kept.weight, expected).item() and mx.array_equal(kept.bias, bias).item()
    x = mx.random.normal((1, 16, 64), key=mx.random.key(0)).astype(mx.bfloat16)
    assert mx.array_equal(kept(x), mx.addmm(bias, x, expected.T)).item()  # the plain matmul of that weight
    assert mx.allclose(kept(x), q(x), rtol=1e-2, atol=1e-2).item()  # the quantized layer's values, by another kernel
    still = {n: m for n, m in quantized.named_modules() if isinstance(m, nn.QuantizedLinear)}
    assert still.keys() == others.keys() and all(still[n] is others[n] for n in still)


def test_a_name_that_is_no_quantized_linear_is_refused_before_any_swap(quantized):
    with pytest.raises(InputError, match=r"'nope' is not a quantized linear of the transformer \(no such layer\)"):
        fullsize.keep_bfloat16(quantized, ["x_embedder", "nope"])
    assert isinstance(quantized.x_embedder, nn.QuantizedLinear)
    fullsize.keep_bfloat16(quantized, ["x_embedder"])
    with pytest.raises(InputError, match=r"\(Linear\)"):
        fullsize.keep_bfloat16(quantized, ["x_embedder"])
