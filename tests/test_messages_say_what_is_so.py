"""Messages that named an option a command lacks, a file the user did not name, a folder that is not there, or
facts of another model: each now says what is so."""

from __future__ import annotations

import contextlib
import types

import PIL.Image

from calib import record as record_cmd
from calib.generate.output import written_facts
from teacache import variants
from teacache.coefficients import load_recipe
from tests.conftest import command_main


def test_campaign_refuses_an_oversized_sweep_before_recording_naming_its_own_options(tmp_path, capsys):
    out = tmp_path / "c"
    argv = ["--model", "tiny-shapes", "--record-seeds", "0", "--repeats", "100000", "--out", str(out)]
    code = command_main("teacache-bench campaign")(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2, err
    assert "the sweep stage after it is about" in err and "pass --yes" in err and "--repeats" in err, err
    assert not (out / "traces" / "traces.parquet").exists() and not (out / "fit").exists()
    with contextlib.suppress(SystemExit):
        command_main("teacache-bench campaign")(["--help"])
    assert "--yes" in capsys.readouterr().out  # the option the message names exists


def test_an_interrupted_recording_with_nothing_saved_names_no_folder(tmp_path):
    settings = record_cmd.plan("tiny-shapes", tmp_path / "r", prompts="tiny-shapes-fast", seeds="0")
    message = record_cmd._interrupted_message(settings)
    assert message.startswith("interrupted: none of ") and str(tmp_path / "r" / "runs") not in message


def test_tiny_flux1_s_recipe_is_its_own_settings():
    # its tuple is FLUX.1-dev's, fitted at 28 steps and 1024x1024: that recipe warned at every default run
    gen = variants.get("tiny-flux1").generation
    recipe = load_recipe("tiny-flux1")
    assert (recipe["num_steps"], recipe["resolution"], recipe["guidance"]) == (
        gen.steps,
        f"{gen.width}x{gen.height}",
        gen.guidance,
    )


def test_image_metadata_names_the_variant_and_the_written_size():
    open_flux1 = types.SimpleNamespace(teacache_variant="tiny-open-flux1")  # an mflux Flux1 on FLUX.1-dev's config
    assert written_facts(open_flux1, PIL.Image.new("RGB", (64, 64))) == {"model": "tiny-open-flux1", "width": 64,
                                                                         "height": 64}  # fmt: skip
    released = types.SimpleNamespace(teacache_variant="flux1-dev")
    assert written_facts(released, PIL.Image.new("RGB", (32, 16))) == {"width": 32, "height": 16}
