"""calib.fit.fit with FitOptions, no command line: the fit the command writes, and the command's refusals."""

from __future__ import annotations

import json

import pytest

from calib.fit import FitOptions, fit
from calib.fit import command as fitmod
from calib.fit.files import PLOT_FILES, PROG
from calib.fit.result import FitResult
from teacache.errors import TeaCacheError
from tests.calib.conftest import make_fit, traces

ARGPARSE_TAIL = f" (see {PROG} --help)"  # the parser's own refusals end so; the API's message is the rest


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A trace table and the fit.json the command writes from it (polynomials only: a quick fit)."""
    root = tmp_path_factory.mktemp("api")
    return root / "rec" / "traces.parquet", make_fit(root, traces(), "--form", "poly")


def _without_provenance(document: dict) -> dict:
    return {key: value for key, value in document.items() if key != "provenance"}


def test_the_api_fits_what_the_command_writes(written, tmp_path):
    table, path = written
    result = fit(table, FitOptions(form="poly", no_plots=True))
    on_disk = FitResult.read(path)
    assert result.selected.label == on_disk.selected.label
    assert result.selected.function == on_disk.selected.function
    result.write(tmp_path / "api.json")  # through the one writer: the whole document, to the last digit
    assert _without_provenance(json.loads((tmp_path / "api.json").read_text())) == _without_provenance(
        json.loads(path.read_text())
    )


def test_the_command_line_given_is_the_one_recorded(written, tmp_path):
    table, path = written
    argv = [str(table), "--out", str(path.parent), "--no-plots", "--form", "poly"]
    fit([table], FitOptions(form="poly", no_plots=True), command=argv).write(tmp_path / "api.json")
    assert (
        FitResult.read(tmp_path / "api.json")["provenance"]["command"] == FitResult.read(path)["provenance"]["command"]
    )


def test_plots_are_handed_back_by_name_unless_none_are_asked_for(written):
    table, _path = written
    plots: dict[str, bytes] = {}
    result = fit(table, FitOptions(form="poly", degree=2, mode="free"), plots=plots)
    assert plots and set(result.plots) == {PLOT_FILES[name] for name in plots}
    assert all(png.startswith(b"\x89PNG") for png in plots.values())
    plots.clear()
    assert fit(table, FitOptions(form="poly", degree=2, mode="free", no_plots=True), plots=plots).plots == ()
    assert plots == {}


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["--folds", "0"], {"folds": 0}),
        (["--folds", "99"], {"folds": 99}),  # past the prompts: refused once the traces are read
        (["--degree", "9"], {"degree": 9}),
        (["--form", "cubic"], {"form": "cubic"}),
        (["--se", "own"], {"se": "own"}),
        (["--min-step", "0"], {"min_step": 0}),
        (["--min-step", "40"], {"min_step": 40}),
        (["--margin", "-1"], {"margin": -1}),
        (["--x-range", "0,1"], {"x_range": "0,1"}),
        (["--compare", " "], {"compare": " "}),
        (["--variant", "nope"], {"variant": "nope"}),
    ],
)
def test_a_bad_option_is_refused_as_the_command_refuses_it(argv, options, written, tmp_path, capsys):
    table, _path = written
    command = [str(table), "--out", str(tmp_path / "fit"), "--no-plots", *argv]
    assert fitmod.main(command) == 2
    line = capsys.readouterr().err.strip()
    with pytest.raises(TeaCacheError) as refused:
        fit(table, FitOptions(no_plots=True, **options))
    assert line.removesuffix(ARGPARSE_TAIL) == f"{PROG}: {refused.value}"
    if not line.endswith(ARGPARSE_TAIL):  # past the parser: the command raises the same class
        with pytest.raises(TeaCacheError) as by_command:
            fitmod.run(fitmod.setup_arg_parser().parse_args(command), command)
        assert type(by_command.value) is type(refused.value) and str(by_command.value) == str(refused.value)


def test_options_are_checked_when_made():
    with pytest.raises(TeaCacheError, match=r"^--folds: expected at least 2"):
        FitOptions(folds=1)
    with pytest.raises(TeaCacheError, match=r"^argument --folds: invalid int value: 2\.5$"):
        FitOptions(folds=2.5)
    assert FitOptions(margin=0).margin == 0.0 and isinstance(FitOptions(margin=0).margin, float)


def test_the_options_default_as_the_command_does():
    args = fitmod.setup_arg_parser().parse_args(["t.parquet", "--out", "o"])
    assert FitOptions.from_args(args) == FitOptions()
