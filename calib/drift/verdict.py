"""The verdict per variant: pure functions from the code report, the numbers comparison and the oracles.

Statuses, worst first:
- ``integration-broken``: a no-op oracle failed or a run raised;
- ``refit-recommended``: the change alters what a calibrated gate decides beyond the measured tolerance
  (:mod:`calib.drift.effect`); a fit that moved beyond its noise is said beside it;
- ``saved-on-other-hardware``: the save judged by was made on other hardware than this machine, so what moved
  says nothing about the release (whatever the gate's decisions did): save on this machine;
- ``moved-calibration-holds``: numbers or traces moved, the gate's decisions stay within the tolerance;
- ``moved-effect-unchecked``: the numbers moved above the noise floor, no before traces to judge the effect by;
- ``code-changed-integration-holds``: hooked code differs, the oracles hold, nothing moved;
- ``numbers-unchecked``: no reference for this hardware (code only); ``unchanged``: bit-identical.
"The bits moved" alone never recommends a refit. Exit status: 1 when any variant is broken or needs a refit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from teacache._compat import DRIFT_COMMAND as PROG

BROKEN = "integration-broken"
REFIT = "refit-recommended"
OTHER_HARDWARE = "saved-on-other-hardware"
HOLDS = "moved-calibration-holds"
MOVED_UNCHECKED = "moved-effect-unchecked"
CODE_HOLDS = "code-changed-integration-holds"
UNCHECKED = "numbers-unchecked"
UNCHANGED = "unchanged"
SEVERITY = (BROKEN, REFIT, OTHER_HARDWARE, HOLDS, MOVED_UNCHECKED, CODE_HOLDS, UNCHECKED, UNCHANGED)
FAILING = (BROKEN, REFIT)
FORMAT = 1  # verdict.json's format_version


@dataclass(frozen=True)
class FamilyEvidence:
    """What was measured for one family: changed functions, numbers per dtype, oracles."""

    family: str
    changed_functions: list[str] = field(default_factory=list)
    moved: dict[str, bool] | None = None  # dtype -> moved above the floor; None: no reference
    oracles: dict | None = None  # {"holds": bool, "checks": [...]}; None: not run
    error: str | None = None  # a run that raised
    ratios: dict[str, float] | None = None  # dtype -> largest distance / threshold over the metrics
    effect: dict | None = None  # calib.drift.effect.judge on the family's effect model; None: not measured


def status_of(evidence: FamilyEvidence) -> str:
    if evidence.error or (evidence.oracles is not None and not evidence.oracles["holds"]):
        return BROKEN
    numbers_moved = bool(evidence.moved and any(evidence.moved.values()))
    if evidence.effect is not None:
        if other_hardware(evidence.effect):
            return OTHER_HARDWARE
        if evidence.effect["verdict"] != "holds":
            return REFIT
        traces_moved = not evidence.effect["identical"] or not evidence.effect.get("latents_identical", True)
        if traces_moved or numbers_moved:
            return HOLDS
        return CODE_HOLDS if evidence.changed_functions else UNCHANGED
    if numbers_moved:
        return MOVED_UNCHECKED
    if evidence.changed_functions:
        return CODE_HOLDS
    if evidence.moved is None:
        return UNCHECKED
    return UNCHANGED


def other_hardware(effect: dict | None) -> bool:
    """Whether the save an effect was judged by comes from other hardware than the repeated runs."""
    saved, here = (effect or {}).get("saved_on"), (effect or {}).get("here")
    return saved is not None and here is not None and saved != here


def refit_commands(
    variant: str, prompt_set: str, version: str, model: str | None = None, recipe_options: str = "", tag: str = ""
) -> list[str]:
    """record / fit / emit for one variant, at its own generation settings (the journey of docs/refit-and-drift.md);
    ``model``: the user's own model (a folder or name) to record instead of the variant's; ``recipe_options``:
    record's options for the recipe a recipe question asked about, ``tag`` its short name. A recipe's refit is
    emitted beside its fit: the packaged module keeps serving the recipe it was fitted on."""
    name = f"{variant}-{tag}" if tag else variant
    traces, fit = f"runs/{name}-mflux-{version}-traces", f"runs/{name}-mflux-{version}-fit"
    source = f"--model {variant}" if model is None else f"--model {model} --base-model {variant}"
    recipe = f" {recipe_options}" if recipe_options else ""
    emitted = f" --out {fit}/{name.replace('-', '_').replace('.', '_')}.py" if recipe_options else ""
    return [
        f"teacache-calib record {source} --prompts {prompt_set} --seeds 0,1,2{recipe} --out {traces}",
        f"teacache-calib fit {traces}/traces.parquet --out {fit} --compare packaged",
        f"teacache-calib emit {fit}/fit.json --variant {variant}{emitted}",
    ]


def _numbers_text(moved: dict[str, bool] | None, ratios: dict[str, float] | None = None) -> str:
    if moved is None:
        return "numbers not checked: no reference for this hardware"

    def one(dtype: str, m: bool) -> str:
        ratio = (ratios or {}).get(dtype)
        return (
            f"{dtype} moved ({ratio:.3g}x the threshold)"
            if m and ratio is not None
            else (f"{dtype} {'moved' if m else 'unchanged'}")
        )

    return "numbers " + ", ".join(one(dtype, m) for dtype, m in moved.items())


def _code_text(changed: list[str]) -> str:
    if not changed:
        return "hooked code unchanged"
    names = ", ".join(name.split(":")[-1] for name in changed)
    return f"hooked code changed ({names})"


def _effect_text(effect: dict | None) -> str:
    if effect is None:
        return ""
    from calib.drift.effect import describe
    from calib.drift.model_runs import describe_recipe
    from calib.drift.quality import describe as quality

    at = f" at {describe_recipe(effect['recipe'])}" if effect.get("recipe") else ""
    cost = quality(effect.get("quality"))
    return f"; on {effect['model']}{at} with its gate ({effect['gate']}): {describe(effect)}{cost}"


def _refit_reason(effect: dict | None) -> str:
    """Which of the two questions asked for the refit: the gate's decisions, its fit, or both."""
    if not effect:
        return ""
    decisions = [c for c in effect["thresholds"] if not c.get("within", True)]
    fit = effect["fit"]
    parts = []
    if decisions:
        what = "decisions differ" if effect.get("aligned", True) else "the share of steps skipped moved"
        parts.append(f"{what} beyond the tolerance at " + ", ".join(f"{c['threshold']:.3g}" for c in decisions))
    if not fit.get("within", True):
        before = fit["before"]["rmse"]
        rise = fit["rmse_rise"] / before if before else float("inf")
        changed = [c for c in effect["thresholds"] if c.get("decisions_differ")]
        calls = ""
        if changed and not decisions:  # within resampling's allowance, but the calls did move with the fit
            worst = max(changed, key=lambda c: c["decisions_differ"])
            calls = (
                f", with {worst['decisions_differ']}/{worst['decisions']} decisions changed at {worst['threshold']:.3g}"
            )
        parts.append(
            f"the gate's RMSE rose {rise:+.1%} (its noise {fit['allowed_rmse_rise'] / before if before else 0:.1%})"
            + calls
        )
    return f" ({'; '.join(parts)})" if parts else ""


def _fit_note(effect: dict | None) -> str:
    """Where the calibration holds by its decisions while its fit moved beyond its noise: said beside it."""
    fit = (effect or {}).get("fit", {})
    if not fit or fit.get("within", True) or not fit["before"]["rmse"]:
        return ""
    rise = fit["rmse_rise"] / fit["before"]["rmse"]
    return (
        f" (no decision moved beyond its tolerance; the gate's RMSE rose {rise:+.2%}, beyond its noise of "
        f"{fit['allowed_rmse_rise'] / fit['before']['rmse']:.2%})"
    )


def advice(status: str, has_coefficients: bool, evidence: FamilyEvidence) -> str:
    if status == BROKEN:
        failed = [c["name"] for c in (evidence.oracles or {}).get("checks", []) if not c["holds"]]
        why = evidence.error or f"no-op oracle failed: {', '.join(failed)}"
        return f"the integration does not hold ({why}): do not use TeaCache on this release"
    recipe = (evidence.effect or {}).get("recipe")
    if status == OTHER_HARDWARE:
        effect = evidence.effect or {}
        mine = f" --model {effect.get('source_model')}" if effect.get("own_model") else ""
        return (
            f"the save comes from other hardware ({effect['saved_on']}; this machine is {effect['here']}): what "
            "differs is the hardware as much as the release, so this says nothing about the release; save on this "
            f"machine before an upgrade ({PROG}{mine} --save DIR) and judge by that save after it (--against DIR)"
        )
    if status == REFIT:
        why = _refit_reason(evidence.effect)
        if recipe:
            return "refit recommended for this recipe: the saved calibration does not serve it" + why
        return ("refit recommended" if has_coefficients else "refit recommended for calibrations of this family") + why
    if status in (HOLDS, UNCHANGED) and recipe:
        same = " (its runs are bit-identical to the saved ones)" if status == UNCHANGED else ""
        return f"the saved calibration serves this recipe{same}: no refit needed{_fit_note(evidence.effect)}"
    if status == HOLDS:
        return f"the calibration holds: no refit needed{_fit_note(evidence.effect)}"
    if status == MOVED_UNCHECKED:
        return (
            "whether the calibration holds is unmeasured: record before/after traces (drift --model VARIANT "
            "--save DIR before an upgrade, --against DIR after it)"
        )
    if status == CODE_HOLDS:
        return "the no-op oracles hold; packaged coefficients still apply"
    if status == UNCHECKED:
        return "save numbers before an upgrade (--save DIR) and compare after it (--against DIR)"
    return "packaged coefficients still apply"


def variant_verdict(spec, evidence: FamilyEvidence, version: str, packaged_note: str | None = None) -> dict:
    """``packaged_note``: where the packaged coefficients were fitted on another numeric path than ``version``
    runs (teacache.coefficients.numeric_change_note); said beside the verdict, which it does not change."""
    status = status_of(evidence)
    has_coefficients = bool(spec.coefficients)
    effect = evidence.effect or {}
    own = effect.get("source_model") if effect.get("own_model") else None  # the user's model, not the family's
    own = None if own in (None, spec.name) else own
    options, tag = effect.get("recipe_options", ""), effect.get("recipe_tag", "")
    commands = refit_commands(spec.name, spec.prompt_set, version, own, options, tag) if status == REFIT else []
    if evidence.moved is None and evidence.effect is not None:  # a model of the user's: its traces are the numbers
        numbers_text = "traces bit-identical" if evidence.effect["identical"] else "traces moved"
    else:
        numbers_text = _numbers_text(evidence.moved, evidence.ratios)
    found = f"{_code_text(evidence.changed_functions)}; {numbers_text}{_effect_text(evidence.effect)}"
    line = f"{spec.name}: {status} ({found}) -> {advice(status, has_coefficients, evidence)}"
    if packaged_note:
        line += f"; note: {packaged_note}"
    return {
        "variant": spec.name,
        "family": spec.family,
        "status": status,
        "line": line,
        "changed_functions": evidence.changed_functions,
        "moved": evidence.moved,
        "ratios": evidence.ratios,
        "oracles": evidence.oracles,
        "commands": commands,
        "effect": evidence.effect,
        "packaged_fit_note": packaged_note,
    }


def verdicts(
    specs, evidence: dict[str, FamilyEvidence], version: str, packaged_notes: dict[str, str] | None = None
) -> list[dict]:
    """One verdict per variant, from its family's evidence (and the note on its packaged fit, by variant)."""
    notes = packaged_notes or {}
    return [
        variant_verdict(spec, evidence[spec.family], version, notes.get(spec.name))
        for spec in specs
        if spec.family in evidence
    ]


def exit_status(results: list[dict] | tuple[dict, ...]) -> int:
    return 1 if any(r["status"] in FAILING for r in results) else 0


@dataclass(frozen=True)
class Verdict:
    """What drift concludes on one question, and what it rests on: the judge's answer, which the write stage
    serialises as ``verdict.json``. Its exit status follows from its verdicts, so it cannot disagree with them."""

    mflux: str
    mlx: str
    hardware: str
    baseline: str | None  # what the numbers or traces were judged against
    code: dict
    numbers: dict | None
    numbers_by_release: dict
    effect: dict[str, dict]
    verdicts: tuple[dict, ...]
    provenance: dict

    @property
    def exit_status(self) -> int:
        return exit_status(self.verdicts)

    def to_json(self) -> dict:
        """``verdict.json``: the fields in their order, the exit status before the provenance."""
        found = {name: value for name, value in vars(self).items() if name != "provenance"}
        return {"format_version": FORMAT, **found, "exit_status": self.exit_status, "provenance": self.provenance}
