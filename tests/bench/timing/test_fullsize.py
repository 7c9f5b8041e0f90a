"""Full-size random-weight models: built at the real configs (checked from shapes, nothing evaluated at
full size), weights from a seed, text stand-ins of the real shapes, mflux's quantization rule, and the
``teacache-bench fullsize`` argument checks. Running them is for a GPU (``teacache-bench fullsize``)."""

from __future__ import annotations

import gc
import json
import math
import re

import mlx.core as mx
import pytest
from mlx import nn
from mlx.utils import tree_flatten

import teacache  # noqa: F401  (first: OpenBLAS preload before MLX)
from bench.timing import fullsize as bench_fullsize
from bench.timing import fullsize_measure, fullsize_records, fullsize_tables
from teacache import variants
from teacache.models import fullsize
from teacache.rescale import RescaleFunction

# Parameter counts of the released transformers (FLUX.1-dev's transformer checkpoint holds 11,901,408,320;
# the others are the model cards' "4B", "9B", "20B", "6B" at mflux's configs of those releases).
FULL_COUNTS = {
    "flux1-dev": 11_901_408_320,
    "flux2-klein-base-4b": 3_875_544_576,
    "flux2-klein-9b": 9_078_581_248,
    "qwen-image": 20_430_401_088,
    "z-image": 6_154_908_736,
}


def _count(module: nn.Module) -> int:
    return fullsize.parameter_count(module)


def _linear(d_in: int, d_out: int, bias: bool = True) -> int:
    return d_in * d_out + (d_out if bias else 0)


@pytest.mark.parametrize("variant", sorted(FULL_COUNTS))
def test_full_transformers_have_the_released_parameter_counts(variant):
    assert _count(fullsize.full_transformer(variant)) == FULL_COUNTS[variant]


def test_flux1_dev_blocks_match_the_real_config():
    """19 joint + 38 single blocks of width 3072 (24 heads x 128), MLP 4x, T5 4096 in: counted by formula."""
    tr = fullsize.full_transformer("random-flux1-dev")
    assert (len(tr.transformer_blocks), len(tr.single_transformer_blocks)) == (19, 38)
    d, mlp, head = 3072, 4 * 3072, 128
    joint = 2 * _linear(d, 6 * d) + 8 * _linear(d, d) + 4 * head + 2 * (_linear(d, mlp) + _linear(mlp, d))
    single = _linear(d, 3 * d) + 3 * _linear(d, d) + 2 * head + _linear(d, mlp) + _linear(d + mlp, d)
    assert _count(tr.transformer_blocks[0]) == joint
    assert _count(tr.single_transformer_blocks[0]) == single
    assert tr.context_embedder.weight.shape == (d, 4096)
    assert tr.transformer_blocks[0].attn.to_q.weight.shape == (d, d)


def test_qwen_image_block_matches_the_real_config():
    """60 dual-stream blocks of width 3072, GELU MLP 4x, text context 3584."""
    tr = fullsize.full_transformer("random-qwen-image")
    assert len(tr.transformer_blocks) == 60
    d, mlp = 3072, 4 * 3072
    per_stream = _linear(d, 6 * d) + 4 * _linear(d, d) + 2 * 128 + _linear(d, mlp) + _linear(mlp, d)
    assert _count(tr.transformer_blocks[0]) == 2 * per_stream
    assert tr.txt_in.weight.shape == (d, 3584)


def test_flux2_and_zimage_shapes_follow_their_configs():
    klein = fullsize.full_transformer("random-flux2-klein-9b")
    assert (len(klein.transformer_blocks), len(klein.single_transformer_blocks)) == (8, 24)
    assert klein.context_embedder.weight.shape == (32 * 128, 12288)
    base4b = fullsize.full_transformer("random-flux2-klein-base-4b")
    assert (len(base4b.transformer_blocks), len(base4b.single_transformer_blocks)) == (5, 20)
    assert base4b.context_embedder.weight.shape == (3072, 7680)
    z = fullsize.full_transformer("random-z-image")
    assert (len(z.layers), len(z.noise_refiner), len(z.context_refiner)) == (30, 2, 2)
    assert z.layers[0].attention.to_q.weight.shape == (3840, 3840)


def test_blocks_keeps_every_width_and_says_it_is_not_full_size():
    tr = fullsize.full_transformer("flux1-dev", blocks=1)
    assert (len(tr.transformer_blocks), len(tr.single_transformer_blocks)) == (1, 1)
    full = fullsize.full_transformer("flux1-dev")
    assert _count(tr.transformer_blocks[0]) == _count(full.transformer_blocks[0])
    assert fullsize.model_label("flux1-dev", 1) == "random-flux1-dev[blocks=1, NOT full size]"
    assert fullsize.model_label("flux1-dev") == "random-flux1-dev"


def test_weights_come_from_the_seed_alone():
    """Same seed, same weights; another seed, others; bounded by 1/sqrt(fan_in); global RNG untouched.
    Drawn lazily at full size: only the small output projection is evaluated."""
    mx.random.seed(123)
    before = mx.random.uniform(shape=(4,))
    mx.random.seed(123)
    drawn = []
    for seed in (7, 7, 8):
        tr = fullsize.full_transformer("flux1-dev")
        fullsize.draw_weights(tr, seed, mx.bfloat16, evaluate=False)
        drawn.append(tr.proj_out.weight)
    assert mx.array_equal(mx.random.uniform(shape=(4,)), before)
    a, b, c = drawn
    assert a.dtype == mx.bfloat16 and a.shape == (64, 3072)
    assert mx.array_equal(a, b) and not mx.array_equal(a, c)
    largest = float(mx.max(mx.abs(a.astype(mx.float32))))
    assert 0.99 * 3072**-0.5 <= largest <= 3072**-0.5 * (1 + 2**-8)  # bfloat16 rounds to 8 significant bits


def test_draw_weights_evaluates_every_linear_in_the_dtype():
    module = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4, bias=False))
    fullsize.draw_weights(module, 0, mx.bfloat16)
    params = dict(tree_flatten(module.parameters()))
    assert {p.dtype for p in params.values()} == {mx.bfloat16}
    assert mx.array_equal(params["layers.1.weight"], mx.ones((16,), mx.bfloat16))  # norms keep mflux's values


def test_text_stand_ins_give_the_real_shapes():
    encode = fullsize.flux2_prompt_pair(7680, 512)
    embeds, ids, neg, neg_ids = encode(prompt="a cat", negative_prompt=" ", guidance=4.0)
    assert embeds.shape == neg.shape == (1, 512, 7680) and ids.shape[:2] == (1, 512)
    assert encode(prompt="a cat", negative_prompt=" ", guidance=1.0)[2] is None
    assert mx.array_equal(encode(prompt="a cat", negative_prompt=None, guidance=1.0)[0], embeds)

    cache = fullsize.QwenPromptCacheRealShape()
    key = "a red apple on a table|NEG| "
    assert key in cache and "no separator" not in cache
    pos, pos_mask, negative, _ = cache[key]
    assert pos.shape == (1, fullsize.prompt_tokens("a red apple on a table", 5), 3584)
    assert pos_mask.shape == pos.shape[:2] and negative.shape[-1] == 3584

    tokens = fullsize.ZImageTokenizerRealShape().tokenize("a red apple on a table")
    assert tokens.input_ids.shape == tokens.attention_mask.shape == (1, 512)
    assert int(tokens.attention_mask.sum()) == fullsize.prompt_tokens("a red apple on a table", 10)
    features = fullsize.ZImageTextEncoderRealShape(0)(tokens.input_ids, tokens.attention_mask)
    assert features.shape == (1, 512, 2560)


def test_quantize_follows_mflux_s_per_family_rule():
    """Qwen keeps its modulation producers at 8 bits when the rest goes to 4 (mflux's QwenWeightDefinition)."""

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.img_mod_linear = nn.Linear(128, 128)
            self.to_q = nn.Linear(128, 128)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer_blocks = [Block()]

    model = Model()
    fullsize.quantize_like_mflux(model, 4, variants.attribute(variants.family("qwen").weights))
    block = model.transformer_blocks[0]
    assert isinstance(block.to_q, nn.QuantizedLinear) and block.to_q.bits == 4 and block.to_q.group_size == 64
    assert isinstance(block.img_mod_linear, nn.QuantizedLinear) and block.img_mod_linear.bits == 8


def test_unknown_names_and_bad_settings_are_refused():
    with pytest.raises(ValueError, match="random-flux1-dev"):
        fullsize.parse_random_name("random-flux3")
    with pytest.raises(ValueError, match="quantize"):
        fullsize.random_transformer("flux1-dev", quantize=3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "random-nope"], "--models"),  # noqa: RUF001
        (["--size", "1000"], "--size"),
        (["--steps", "2"], "--steps"),
        (["--repeats", "0"], "--repeats"),
        (["--skip-fractions", "1.5"], "--skip-fractions"),
        (["--thresholds", "0"], "--thresholds"),
        (["--blocks", "1"], "--out"),
    ],
)
def test_bad_arguments_exit_2_before_any_model_loads(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(bench_fullsize, "measure_model", lambda *a: pytest.fail("a model was built"))
    assert bench_fullsize.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not list(tmp_path.iterdir())


def test_thresholds_are_chosen_by_replaying_the_signal():
    """The smallest threshold whose replayed schedule reaches the target: 2 % less skips fewer."""
    from teacache.gate import GateConfig, replay

    identity = RescaleFunction((1.0, 0.0))
    xs = [None] + [0.01 * (i + 1) for i in range(27)]

    def skipped(threshold: float) -> int:
        return sum(not d.compute for d in replay(GateConfig(threshold, identity), xs, num_steps=28))

    for target in (5, 10, 13):
        threshold, predicted = fullsize_measure.choose_threshold(xs, 28, target, identity)
        assert predicted == skipped(threshold) >= target
        assert skipped(threshold * 0.98) < target
    assert fullsize_measure.choose_threshold([None, 0.0, 0.0], 3, 1, identity) == (1.0, 0)


def _runs(model: str, speedup: float, tag: str = "", quantize=None, vanilla=(1.0, 1.1, 0.9)) -> list[dict]:
    """runs.csv rows of one configuration: vanilla, proxy-all (5 % slower, exact) and a gate ``speedup`` x faster."""
    facts = {"model": model, "quantize": quantize, "resolution": "64x64", "steps": 4, "tag": tag, "family": "qwen",
             "variant": "qwen-image", "params_b": 0.1, "dtype": "float32", "guidance": 4.0, "full_size": False,
             "rescale": "identity", "hardware": "test-chip"}  # fmt: skip
    arms = (("vanilla", "vanilla", 1.0, 0), ("proxy-all", "proxy-all", 1.05, 0), ("gate 0.3", "gate", 1 / speedup, 2))
    rows = []
    for repeat, v in enumerate(vanilla):
        for position, (arm, kind, factor, skipped) in enumerate(arms):
            timed = kind != "vanilla"
            rows.append({
                **facts, "repeat": repeat, "position": position, "arm": arm, "kind": kind,
                "threshold": 0.3 if kind == "gate" else None, "predicted_skipped": 2 if kind == "gate" else None,
                "loop_s": v * factor, "total_s": v * factor + 0.1, "skipped": skipped, "peak_memory_gib": 1.0 + repeat,
                "cache_memory_mib": 3.0 if timed else 0.0, "branches": 1 if timed else None,
                "exact": kind == "proxy-all" if timed else None,
                "max_abs_diff": (0.5 if kind == "gate" else 0.0) if timed else None,
            })  # fmt: skip
    return rows


def test_the_summary_is_derived_from_runs_csv_at_full_precision(tmp_path):
    import pandas as pd

    rows = _runs("random-a", 2.0, vanilla=(1.0 / 3, 0.1 + 0.2, 2**-30))
    summary = fullsize_tables.write_outputs(tmp_path, rows, {"a": {"model": "random-a"}})
    runs = fullsize_records.read_table(tmp_path / "runs.csv", fullsize_records.RUNS)
    assert list(runs["loop_s"]) == [r["loop_s"] for r in rows]  # every digit kept
    rebuilt = fullsize_tables.summarize(runs).to_csv(index=False, float_format="%.6g")
    assert rebuilt == (tmp_path / "summary.csv").read_text()  # summary.csv rebuilds from runs.csv alone
    assert list(summary["arm"]) == ["proxy-all", "gate"] and list(summary["repeats"]) == [3, 3]
    proxy, gate = summary.to_dict("records")
    assert proxy["noop_exact"] is True and gate["noop_exact"] is None and gate["skipped"] == 2
    assert math.isclose(proxy["proxy_overhead_pct"], 5.0) and math.isclose(gate["speedup"], 2.0)
    assert math.isclose(gate["ideal"], 2.0) and gate["max_abs_diff"] == 0.5
    assert gate["peak_memory_gib"] == 2.0  # the median of the repeats' 1, 2 and 3 GiB, not their maximum
    written = pd.read_csv(tmp_path / "summary.csv")
    assert list(written.columns) == list(fullsize_tables.SUMMARY_COLUMNS) and len(written) == 2


def test_outputs_merge_by_configuration(tmp_path):
    """A configuration measured again replaces its runs (also read back from the CSV: 4 vs 4.0, "" vs NaN) and
    the summary is rebuilt; another tag or quantization is kept beside it."""
    import pandas as pd

    fullsize_tables.write_outputs(tmp_path, _runs("random-a", 2.0), {"a": {"model": "random-a"}})
    fullsize_tables.write_outputs(tmp_path, _runs("random-a", 1.0, quantize=4), {"a4": {"model": "random-a"}})
    fullsize_tables.write_outputs(tmp_path, _runs("random-a", 1.1, tag="before"), {"a-before": {}})
    fullsize_tables.write_outputs(tmp_path, _runs("random-a", 1.9), {"a": {"model": "random-a"}})
    fullsize_tables.write_outputs(tmp_path, _runs("random-a", 0.8, quantize=4), {"a4": {"model": "random-a"}})
    summary = pd.read_csv(tmp_path / "summary.csv", keep_default_na=False, na_values=[""])
    assert sorted(summary.loc[summary["arm"] == "gate", "speedup"]) == pytest.approx([0.8, 1.1, 1.9])
    assert len(pd.read_csv(tmp_path / "runs.csv")) == 3 * 9
    assert set(json.loads((tmp_path / "provenance.json").read_text())["models"]) == {"a", "a4", "a-before"}


def test_configurations_measured_before_runs_csv_held_every_field_keep_their_summary_rows(tmp_path):
    import pandas as pd

    old_runs = pd.DataFrame(_runs("random-old", 1.5)).reindex(columns=fullsize_tables.RUN_COLUMNS[:13])
    old_runs.to_csv(tmp_path / "runs.csv", index=False)
    old_summary = fullsize_tables.summarize(pd.DataFrame(_runs("random-old", 1.5)))[-1:].assign(speedup=1.234)
    old_summary.drop(columns="note").to_csv(tmp_path / "summary.csv", index=False)  # its campaign had no note column
    fullsize_tables.write_outputs(tmp_path, _runs("random-new", 2.0), {"new": {}})
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert list(summary["model"]) == ["random-old", "random-new", "random-new"]
    assert summary["speedup"].iloc[0] == 1.234  # as it was written, not re-derived from the old runs
    assert len(pd.read_csv(tmp_path / "runs.csv")) == 18


def test_the_loader_builds_random_names_with_the_family_builder(monkeypatch):
    """``load_model("random-<variant>")`` goes to the registry's random builder of that family; nothing else."""
    calls = []
    monkeypatch.setattr(fullsize, "build_random_qwen", lambda *a, **k: calls.append((a, k)) or "pipeline")
    assert teacache.load_model("random-qwen-image-2512", seed=5, quantize=8) == "pipeline"
    assert calls == [(("qwen-image-2512",), {"seed": 5, "quantize": 8})]
    from teacache.loading import model_defaults

    assert model_defaults("random-z-image") == {"steps": 50, "width": 1024, "height": 1024, "guidance": 4.0}
    with pytest.raises(ValueError, match="random-flux1-dev"):
        teacache.load_model("random-tiny-flux1")


@pytest.mark.slow
def test_the_campaign_runs_end_to_end_at_full_width_with_one_block(tmp_path):
    """``teacache-bench fullsize`` on random-qwen-image with one block of each kind (widths real, NOT full
    size): every arm gets a row, the proxy computing every step is bit-exact (Qwen-Image is never compiled)."""
    import pandas as pd

    argv = ["--models", "random-qwen-image", "--blocks", "1", "--size", "32", "--steps", "3", "--repeats", "1"]
    assert bench_fullsize.main([*argv, "--skip-fractions", "0.3", "--fast-path", "--out", str(tmp_path)]) == 0
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert list(summary.columns) == list(fullsize_tables.SUMMARY_COLUMNS)
    assert list(summary["arm"]) == ["proxy-all", "fast-path", "gate"]
    assert summary["model"].iloc[0] == "random-qwen-image[blocks=1, NOT full size]" and not summary["full_size"].any()
    assert summary.set_index("arm").loc[["proxy-all", "fast-path"], "noop_exact"].all()
    assert summary.set_index("arm").loc["gate", "skipped"] == 1
    log = (tmp_path / "progress.log").read_text()  # what it printed, timestamped, for a run watched from afar
    assert "teacache-bench fullsize on" in log and "wrote" in log.splitlines()[-1]


def test_ctrl_c_keeps_the_finished_models_and_exits_130(tmp_path, monkeypatch, capsys):
    """Ctrl-C inside mflux's loop arrives as StopImageGenerationException: not a model failure to skip."""
    from mflux.utils.exceptions import StopImageGenerationException

    def measure(variant, *_):
        if variant == "z-image":
            raise StopImageGenerationException("Stopping image generation at step 3/20")
        return _runs(fullsize.model_label(variant), 1.0), {"model": fullsize.model_label(variant)}

    monkeypatch.setattr(bench_fullsize, "measure_model", measure)
    argv = ["--models", "random-qwen-image,random-z-image,random-flux1-dev", "--size", "64", "--steps", "4"]
    assert bench_fullsize.main([*argv, "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "qwen-image" in err[0] and "summary.csv" in err[0]
    import pandas as pd

    assert set(pd.read_csv(tmp_path / "summary.csv")["model"]) == {"random-qwen-image"}


def test_the_runs_a_campaign_keeps_hold_no_device_memory(tiny_flux1):
    """Each run's latents are kept for the comparison with vanilla; on the device they would raise every later
    run's peak by one latent array per run before it (the creep of ~1 MiB per run in the first H200 tables)."""
    session = fullsize_measure.Session(tiny_flux1, steps=2, size=64, guidance=3.5)
    session.run(None)  # mflux's own caches (prompt encodings) filled first
    gc.collect()
    gc.disable()  # frees by reference count only: the memory read back is the runs' own
    try:
        start = mx.get_active_memory()
        kept = [session.run(None) for _ in range(3)]
        grown = mx.get_active_memory() - start
    finally:
        gc.enable()
    # what stays is mflux's own (12 bytes a generation here, with nothing kept): less than one latent array
    assert grown < kept[0]["latents"].values.nbytes, grown
    assert kept[0]["latents"].equals(kept[2]["latents"]) and kept[0]["latents"].max_abs(kept[1]["latents"]) == 0.0


def test_a_full_size_model_that_cannot_fit_is_refused_before_any_weight_is_drawn(monkeypatch):
    """Its memory comes from its config (parameters x the precision it is drawn in); the available memory is
    injected, so the test is the same on any machine."""
    from teacache import load_model
    from teacache.errors import TeaCacheError

    def no_draw(*_, **__):
        raise AssertionError("weights were drawn")

    monkeypatch.setattr(fullsize, "draw_weights", no_draw)
    monkeypatch.setattr(fullsize, "available_memory", lambda: 24 << 30)  # a 24 GiB machine
    with pytest.raises(fullsize.NotEnoughMemoryError, match=r"^model: random-flux1-dev \(11\.9 B parameters") as e:
        load_model("random-flux1-dev")
    assert isinstance(e.value, TeaCacheError)
    assert re.search(r"needs about \d+\.\d GiB of memory .* has 24\.0 GiB available", str(e.value))
    needed = fullsize.memory_needed(fullsize.parameter_count(fullsize.full_transformer("flux1-dev")), mx.bfloat16)
    assert needed > 24 << 30  # at bfloat16 too: no precision makes FLUX.1-dev fit in 24 GiB
    fullsize.check_memory("flux1-dev", 10**9, mx.float32, None)  # memory not known: not refused
    with pytest.raises(AssertionError, match="weights were drawn"):  # fits: goes on to draw
        fullsize.random_transformer("flux1-dev", blocks=1, available=1 << 40)
