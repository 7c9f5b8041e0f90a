"""A resumed campaign refits the way its fit.json was made, so a new fit default does not refuse its folder."""

from __future__ import annotations

import json

from bench.campaign import _earlier_options
from tests import ROOT


def test_a_fit_from_before_the_spline_forms_is_refitted_from_the_polynomial_forms_by_the_best_error():
    committed = json.loads((ROOT / "results/cpu-amd-epyc-2c/tiny-shapes/0.24.0/fit/fit.json").read_text())
    assert "se" not in committed["options"]  # made before the option existed
    assert _earlier_options(committed) == {"no_splines": True, "se": "best"}


def test_a_fit_that_records_its_options_is_refitted_with_them_and_a_new_campaign_takes_the_defaults():
    assert _earlier_options({"options": {"no_splines": False, "se": "paired"}}) == {"no_splines": False, "se": "paired"}
    assert _earlier_options({"options": {"no_splines": True, "se": "paired"}}) == {"no_splines": True, "se": "paired"}
    assert _earlier_options(None) == {}


def test_the_campaign_records_the_command_line_its_options_would_have_been_given_on():
    from calib.fit.options import flags

    given = {"compare": "packaged", "min_step": 2, **_earlier_options({"options": {}})}
    assert flags(given) == ["--compare", "packaged", "--min-step", "2", "--no-splines", "--se", "best"]
    assert flags({"min_step": 1, "no_splines": False, "folds": None}) == ["--min-step", "1"]
