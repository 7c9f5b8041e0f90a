"""The runs whose effect the drift judges: a model's traces and final latents, saved before an upgrade and
repeated exactly after it.

One folder per model, ``<DIR>/effect/<name>/``: ``fingerprint.json`` (its settings are the runs: model, weights
(``weights_identity``), variant, prompts, seeds, recipe with its LoRAs, dtype; an older save:
:func:`read_old_settings`), ``runs/<run_id>.parquet`` and ``.json`` (the recorder's rows and the final latent's
summary, written as each run finishes, so a stopped save resumes), ``rerun/`` (the first run once more in the same
process: a same-release rerun), and once every run is in, ``traces.parquet``, ``gate.json`` (the calibrated gate:
the packaged rescale function where it belongs to the model, else one fitted on these traces) and ``tolerance.json``
(:func:`calib.drift.effect.measure_tolerance`, with its provenance). Progress goes to the terminal and to
``<DIR>/progress.log`` (:class:`calib.run.folder.RunFolder`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from calib.drift import effect, integrity
from calib.run import fingerprint
from calib.run.folder import RunFolder
from teacache._compat import DRIFT_COMMAND
from teacache.errors import InputError, TeaCacheError
from teacache.io import read_json_object, write_json, write_parquet

DEFAULT_PROMPTS = 4  # a small default set: the first prompts of the model's own set
DEFAULT_SEEDS = "0"
MATCHED = ("weights", "variant", "prompts", "seeds", "steps", "width", "height", "guidance", "quantize", "lora",
           "base_model", "dtype")  # fmt: skip
# what --against may ask at another value: a LoRA changes the model as quantization does, so the saved runs with a
# LoRA (or another one) ask whether the calibration without it serves the model with it
RECIPE = ("steps", "width", "height", "guidance", "quantize", "lora")
LORA_FIELDS = ("lora_paths", "lora_sha256", "lora_scales")  # the fields "lora" compares by (sha256, scale)


@dataclass(frozen=True)
class ModelRuns:
    """One model's runs: everything that makes two recordings the same recording."""

    name: str
    model: str
    variant: str
    weights: dict | str  # weights_identity; a line of another model's weights in a save from before fingerprints
    prompts: dict[str, str]
    seeds: list[int]
    steps: int
    width: int
    height: int
    guidance: float
    base_model: str | None = None
    quantize: int | None = None
    dtype: str = "float32"
    # LoRA files loaded with the model: where they lie on this machine, their SHA-256 and scales (a repeat
    # compares the last two: "lora")
    lora_paths: tuple[str, ...] = ()
    lora_scales: tuple[float, ...] = ()
    lora_sha256: tuple[str, ...] = ()

    @property
    def runs(self) -> list[tuple[str, str, int]]:
        return [(pid, text, seed) for pid, text in self.prompts.items() for seed in self.seeds]

    @property
    def loras(self):
        """The LoRA files, read again (their SHA-256 checked against ``lora_sha256`` by whoever planned the runs)."""
        from teacache.lora import Loras

        return Loras.of(self.lora_paths, self.lora_scales) if self.lora_paths else Loras()

    @property
    def lora(self) -> list[dict]:
        """The LoRAs as the runs are compared by: each file's SHA-256 and scale (not where it lies)."""
        # not strict: a save made before the SHA-256 had a field of its own holds it in ``weights`` (refused there)
        return [{"sha256": h, "scale": s} for h, s in zip(self.lora_sha256, self.lora_scales, strict=False)]

    @property
    def lora_records(self) -> list[dict]:
        """The LoRAs as provenance records them (``teacache.lora.Loras.provenance``): path, SHA-256, scale."""
        return [{"path": p, **i} for p, i in zip(self.lora_paths, self.lora, strict=True)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelRuns:
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for key in LORA_FIELDS:  # JSON lists, as the dataclass holds them
            if isinstance(fields.get(key), list):
                fields[key] = tuple(fields[key])
        return cls(**fields)


def plan_model(
    model: str,
    prompts: str | None = None,
    seeds: str | None = None,
    steps: int | None = None,
    size: str | None = None,
    guidance: float | None = None,
    base_model: str | None = None,
    quantize: int | None = None,
    lora_paths: list[str] | None = None,
    lora_scales: list[str] | None = None,
) -> ModelRuns:
    """Every argument checked (record's checks), nothing loaded; InputError naming the argument."""
    from calib.run import arguments
    from calib.run.prompts import parse_seeds
    from teacache.loading import resolve_spec

    steps_, width, height, guidance_ = arguments.generation_settings(
        model, base_model, steps, size, guidance, 3, " steps (the first and last are always computed)"
    )
    chosen = arguments.read_prompts(prompts, model, base_model)
    if prompts is None:
        chosen = dict(list(chosen.items())[:DEFAULT_PROMPTS])
    spec = resolve_spec(model, base_model)
    name = spec.name if spec.embedded or Path(model).expanduser().exists() is False else Path(model).name
    loras = arguments.check_loras(model, base_model, lora_paths, lora_scales)
    return ModelRuns(
        name=_slug(name), model=model, variant=spec.name, weights=_identity(model, base_model),
        prompts=chosen, seeds=parse_seeds(seeds or DEFAULT_SEEDS), steps=steps_, width=width, height=height,
        guidance=guidance_, base_model=base_model, quantize=quantize, dtype=compute_dtype(),
        lora_paths=tuple(str(p) for p in loras.paths), lora_scales=loras.scales, lora_sha256=loras.sha256,
    )  # fmt: skip


def _identity(model: str, base_model: str | None) -> dict:
    """As the fingerprint holds it, without LoRAs (a recipe setting --against may ask otherwise) and without a local
    folder's path: a save is judged wherever the same weights are, on another machine too."""
    identity = fingerprint.weights_identity(model, base_model)
    return fingerprint.canonical({k: v for k, v in identity.items() if k != "folder"})


def compute_dtype() -> str:
    """The dtype mflux will build and run in here: float32 on the CPU backend, else mflux's precision."""
    from teacache._platform import on_cpu_backend

    if on_cpu_backend():  # where teacache.load_model builds in float32
        return "float32"
    from mflux.models.common.config.model_config import ModelConfig  # heavy (mflux): after the arguments

    return str(ModelConfig.precision).removeprefix("mlx.core.")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip(".-") or "model"


def _compared(runs: ModelRuns) -> dict:
    """The settings as two recordings are compared: a LoRA by its files' SHA-256 and scales, not their paths."""
    return {**runs.to_dict(), "lora": runs.lora}


def mismatch(saved: ModelRuns, wanted: ModelRuns) -> str | None:
    """The first setting in which two recordings differ, said as one clause; None when they match."""
    a, b = _compared(saved), _compared(wanted)
    for key in MATCHED:
        if a.get(key) != b.get(key):
            if key == "prompts":
                extra = [k for k in b[key] if k not in a[key]] or [k for k in b[key] if a[key].get(k) != b[key][k]]
                missing = [k for k in a[key] if k not in b[key]]
                detail = f"first differing prompt {(extra or missing)[0]!r}"
                return f"prompts differ ({detail})"
            if key == "lora":
                was, now = describe_loras(saved.lora_records), describe_loras(wanted.lora_records)
                return f"lora differs (saved {was}, now {now})"
            return f"{key} differs (saved {a.get(key)!r}, now {b.get(key)!r})"
    return None


def recipe_change(saved: ModelRuns, now: ModelRuns) -> dict[str, dict]:
    """The recipe settings in which ``now`` repeats the saved runs otherwise: {setting: {"saved", "now"}} (a LoRA
    as provenance records it: path, SHA-256, scale)."""
    a, b = _compared(saved), _compared(now)
    change = {k: {"saved": a.get(k), "now": b.get(k)} for k in RECIPE if a.get(k) != b.get(k)}
    if "lora" in change:
        change["lora"] = {"saved": saved.lora_records, "now": now.lora_records}
    return change


def recipe_spellings(runs: ModelRuns, change: dict[str, dict]) -> tuple[str, str]:
    """The changed recipe settings of ``runs`` as record's options (``--steps 20 --quantize 4``) and as a few
    characters for folder names (``20steps-q4``, ``lora-style-1.5``): the refits of several recipe questions must
    not share a folder."""
    parts: list[tuple[str, str]] = []  # (option, tag); an option may be empty (the default needs none)
    if "steps" in change:
        parts.append((f"--steps {runs.steps}", f"{runs.steps}steps"))
    if "width" in change or "height" in change:
        parts.append((f"--size {runs.width}x{runs.height}", f"{runs.width}x{runs.height}"))
    if "guidance" in change:
        parts.append((f"--guidance {runs.guidance:g}", f"guidance{runs.guidance:g}"))
    if "quantize" in change:
        quantized = runs.quantize is not None
        parts.append(
            (f"--quantize {runs.quantize}" if quantized else "", f"q{runs.quantize}" if quantized else "unquantized")
        )
    if "lora" in change:
        scales = " ".join(f"{s:g}" for s in runs.lora_scales)
        option = f"--lora-paths {' '.join(runs.lora_paths)} --lora-scales {scales}" if runs.lora_paths else ""
        said = [f"{Path(p).stem}-{s:g}" for p, s in zip(runs.lora_paths, runs.lora_scales, strict=True)]
        parts.append((option, "lora-" + "-".join(said) if said else "no-lora"))
    return " ".join(option for option, _ in parts if option), _slug("-".join(tag for _, tag in parts))


def describe_loras(records: list[dict]) -> str:
    """LoRAs as :attr:`ModelRuns.lora_records` holds them, in one clause ("none" without any)."""
    from teacache.lora import describe

    return describe(records) if records else "none"


def describe_recipe(change: dict[str, dict]) -> str:
    """``steps 12 -> 20, quantize none -> 4, lora none -> style.safetensors (sha256 0123456789ab, scale 1.5)``."""
    said = lambda v: "none" if v is None else f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    return ", ".join(
        f"{k} {describe_loras(v['saved'])} -> {describe_loras(v['now'])}"
        if k == "lora"
        else f"{k} {said(v['saved'])} -> {said(v['now'])}"
        for k, v in change.items()
    )


# ------------------------------------------------------------------------------------------ the folder


def folder_of(root: Path, runs: ModelRuns) -> Path:
    return root / "effect" / runs.name


FINISHED = ("traces.parquet", "gate.json", "tolerance.json", integrity.NAME)  # any of them: the save got that far


def sealed_names(runs: ModelRuns, settings: str = fingerprint.FILE) -> list[str]:
    """The files of a model's save that --against reads (``settings``: its runs'), which its integrity must list."""
    from calib.record import run_id

    return [settings, *FINISHED[:-1], *(f"runs/{run_id(p, s)}.json" for p, _t, s in runs.runs)]


def read_saved(root: Path, arg: str) -> list[tuple[Path, ModelRuns]]:
    """Every model folder a save finished under ``root``, its integrity verified (a damaged one is refused:
    :class:`calib.drift.integrity.DamagedSave`); a model whose save stopped before its traces, gate and tolerance
    (it failed under that release, or was stopped) is left out: see :func:`unfinished`."""
    found = []
    for folder, (settings, runs) in _saved_runs(root, arg):
        if any((folder / name).is_file() for name in FINISHED):
            integrity.verify(folder, sealed_names(runs, settings), arg)
            found.append((folder, runs))
    return found


def unfinished(root: Path, arg: str) -> list[str]:
    """The names of the models whose save under ``root`` did not finish."""
    done = {folder for folder, _ in read_saved(root, arg)}
    return [runs.name for folder, (_s, runs) in _saved_runs(root, arg) if folder not in done]


def _saved_runs(root: Path, arg: str) -> list[tuple[Path, tuple[str, ModelRuns]]]:
    folders = sorted(p for p in (root / "effect").glob("*") if p.is_dir())
    return [(folder, found) for folder in folders if (found := read_runs(folder, arg)) is not None]


def read_runs(folder: Path, arg: str = "--against") -> tuple[str, ModelRuns] | None:
    """The runs a model folder records and the file that records them; None where it records none."""
    data = RUNS.read(folder)
    settings = fingerprint.FILE if data is not None else RUNS.adopted_from
    if not (folder / settings).is_file():
        return None
    try:
        return settings, ModelRuns.from_dict((data or RUNS.adopt(folder, {}))["settings"])
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(f"{arg}: {folder} does not hold a drift save's runs ({exc})") from None


def read_old_settings(folder: Path, _current: dict) -> dict:
    """A model folder saved before fingerprints: its settings.json, whose weights line stands for the identity of
    the weights its model names here where it describes them, so that a save is judged as when it was made."""
    data = read_json_object(folder / RUNS.adopted_from)
    identity = _identity(data["model"], data.get("base_model"))
    name = identity.get("embedded")
    line = (f"embedded {name}.safetensors:{identity['weights_sha256'][:16]}" if "weights_sha256" in identity
            else f"embedded {name} (random weights from {identity['builder']}, seed 0)" if name
            else f"folder sha256:{identity['files_sha256']}" if "files_sha256" in identity
            else f"name {data['model']}")  # fmt: skip
    if data.get("weights") == line:
        data["weights"] = identity
    return {"command": DRIFT_COMMAND, "settings": data}


RUNS = RunFolder(DRIFT_COMMAND, adopt=read_old_settings, adopted_from="settings.json")  # settings: the runs (mismatch)


class ModelUnavailable(TeaCacheError, RuntimeError):
    """The model's weights do not load under the installed release."""


def record(runs: ModelRuns, folder: Path, log: Callable[[str], None], rerun: bool = True, arg: str = "--save") -> None:
    """Record every run not yet in ``folder`` (and the rerun), each saved as soon as it finishes; ``arg``: the
    option that named the folder."""
    import numpy as np

    from calib.drift.numbers import summarize
    from calib.record import run_id
    from calib.run import arguments
    from teacache import apply_teacache

    previous = read_runs(folder, arg)
    if previous is not None and (why := mismatch(previous[1], runs)) is not None:
        raise InputError(f"{arg}: {folder} holds another recording ({why}); choose a new folder")
    todo = [r for r in runs.runs if not (folder / "runs" / f"{run_id(r[0], r[2])}.json").is_file()]
    want_rerun = rerun and not (folder / "rerun" / f"{run_id(runs.runs[0][0], runs.runs[0][2])}.parquet").is_file()
    if RUNS.read(folder) is None:
        RUNS.save(folder, runs.to_dict())
    log(f"{runs.name}: {len(runs.runs)} runs ({len(runs.runs) - len(todo)} already saved), {runs.steps} steps, "
        f"{runs.width}x{runs.height}, guidance {runs.guidance:g} -> {folder}")  # fmt: skip
    if not todo and not want_rerun:
        return
    try:
        model = arguments.load_model(runs.model, runs.base_model, runs.quantize, runs.loras)
    except Exception as exc:  # noqa: BLE001 - whatever keeps the weights from loading under this release
        raise ModelUnavailable(f"{runs.name}: does not load under this release ({type(exc).__name__}: {exc})") from exc
    jobs = [(r, "runs") for r in todo] + ([(runs.runs[0], "rerun")] if want_rerun else [])
    for index, ((pid, text, seed), where) in enumerate(jobs, 1):
        frame, latents = _record_one(model, runs, pid, text, seed, apply_teacache)
        ident = run_id(pid, seed)
        write_parquet(folder / where / f"{ident}.parquet", frame)
        write_json(folder / where / f"{ident}.json", summarize(np.asarray(latents), runs.dtype))
        log(f"{runs.name}: {where[:-1] if where == 'runs' else where} {ident} saved ({index}/{len(jobs)})")


def _record_one(model, runs: ModelRuns, pid: str, text: str, seed: int, apply_teacache):
    import mlx.core as mx

    from calib.record import record_run
    from teacache import variants

    settings = {"model": runs.model, "steps": runs.steps, "width": runs.width, "height": runs.height,
                "guidance": runs.guidance}  # fmt: skip
    with apply_teacache(model, calibrate=True) as handle:
        frame, gen = record_run(model, handle, settings, pid, text, seed, variants.variant_of(model))
    return frame, gen.latents.astype(mx.float32)


def traces(folder: Path, runs: ModelRuns, where: str = "runs"):
    """The saved runs' rows as one table, in the runs' order."""
    import pandas as pd

    from calib.record import run_id

    parts = [folder / where / f"{run_id(p, s)}.parquet" for p, _t, s in runs.runs]
    parts = [p for p in parts if p.is_file()]
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)


def latents(folder: Path, runs: ModelRuns, where: str = "runs") -> dict[str, dict]:
    from calib.record import run_id

    out = {}
    for p, _t, s in runs.runs:
        path = folder / where / f"{run_id(p, s)}.json"
        if path.is_file():
            out[run_id(p, s)] = json.loads(path.read_text(encoding="utf-8"))
    return out


def calibrated_gate(runs: ModelRuns, fresh: tuple) -> effect.Gate:
    """The packaged rescale function of the model's variant, else the fresh fit of the before traces
    (``fresh``: :func:`calib.drift.effect.fresh_fit` of them)."""
    from teacache import coefficients, variants

    spec = variants.get(runs.variant)
    steps = {"skip_first_n_steps": spec.skip_first_n_steps}
    if spec.coefficients:
        rescale = coefficients.load_packaged(spec.name)
        return effect.Gate.of(rescale, f"packaged {spec.name} (teacache.coefficients.{spec.coefficients})", **steps)
    _selected, rescale, spec_ = fresh
    return effect.Gate.of(rescale, f"fitted on the before traces ({spec_.label})", **steps)


def conclude(folder: Path, runs: ModelRuns, log: Callable[[str], None], command: list[str]) -> dict:
    """traces.parquet, gate.json and tolerance.json of a folder whose runs are all in, then its integrity record."""
    from teacache import variants
    from teacache.provenance import collect

    (folder / integrity.NAME).unlink(missing_ok=True)  # what follows rewrites the sealed files
    table = traces(folder, runs)
    before = effect.Signals.from_frame(table)
    fresh = effect.fresh_fit(before)  # the tolerance needs it, and it is the gate where nothing is packaged
    gate = calibrated_gate(runs, fresh)
    thresholds = effect.thresholds_that_matter(gate, before, variants.get(runs.variant).default_threshold)
    rerun = effect.Signals.from_frame(traces(folder, runs, "rerun")) if (folder / "rerun").is_dir() else None
    tolerance = effect.measure_tolerance(gate, before, thresholds, rerun, fresh)
    tolerance["provenance"] = collect(command, model=runs.model, variant=runs.variant, steps=runs.steps,
                                      resolution=f"{runs.width}x{runs.height}", guidance=runs.guidance,
                                      seeds=runs.seeds, prompts=list(runs.prompts), n=len(runs.runs),
                                      **runs.loras.recorded())  # fmt: skip
    write_parquet(folder / "traces.parquet", table)
    write_json(folder / "gate.json", gate.to_dict())
    write_json(folder / "tolerance.json", tolerance)
    integrity.write(folder)  # last: a folder without it did not finish
    allowed = ", ".join(f"{t['threshold']:.3g}: {t['allowed']:.1%}" for t in tolerance["thresholds"])
    log(f"{runs.name}: gate {gate.source}; tolerance measured (decisions allowed to differ {allowed}; "
        f"RMSE rise {tolerance['fit']['allowed_rmse_rise']:.2g})")  # fmt: skip
    return tolerance


def compare(saved: Path, runs: ModelRuns, current: Path) -> dict:
    """The effect of whatever changed between the saved folder and the current recording of the same runs
    (at the saved recipe, or at another one: then ``recipe`` says which settings differ)."""
    import pandas as pd

    settings, as_saved = read_runs(saved)
    sealed = integrity.verify(saved, sealed_names(as_saved, settings), "--against")
    after = effect.Signals.from_frame(traces(current, runs))
    try:
        gate = effect.Gate.from_dict(read_json_object(saved / "gate.json"))
        tolerance = read_json_object(saved / "tolerance.json")
        before = effect.Signals.from_frame(pd.read_parquet(saved / "traces.parquet"))
        result = effect.judge(gate, before, after, tolerance)
    except (KeyError, TypeError, IndexError) as exc:  # sealed by a writer that wrote it wrong: still not the release
        raise integrity.DamagedSave(f"--against: damaged save: {saved} cannot be read ({type(exc).__name__}: "
                                    f"{exc})") from None  # fmt: skip
    result["saved_on"] = sealed["machine"]["hardware"]
    result["here"] = integrity.machine()["hardware"]
    old, new = latents(saved, runs), latents(current, runs)
    result["latents_identical"] = bool(old) and all(new.get(k, {}).get("sha256") == v["sha256"] for k, v in old.items())
    result["model"] = runs.name
    result["source_model"] = runs.model
    change = recipe_change(as_saved, runs)
    if change:  # the saved runs at another recipe: whether their calibration serves it
        result["recipe"] = change
        result["recipe_options"], result["recipe_tag"] = recipe_spellings(runs, change)
    return result
