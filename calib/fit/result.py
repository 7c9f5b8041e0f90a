"""fit.json as typed, frozen objects: the one reader and the one writer of what ``teacache-calib fit`` writes.

A :class:`FitResult` holds the document, a :class:`Candidate` each scored rescale function. Fields absent
from a file stay absent (:data:`MISSING`), so files written before a field existed read and write back
byte-identically. The schema's version is ``format_version`` (:data:`teacache.io.FORMAT_VERSION`), the field
every file has carried. Nested sections are frozen too (tuples and read-only mappings): a change is a new
object (``dataclasses.replace``), never an edit of one a caller still holds. Both read like the JSON mapping
they write (``fit["selected"]["label"]``), so code that walks the file reads the same names.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from calib.fit.errors import FitError
from teacache.io import FORMAT_VERSION, write_json
from teacache.rescale import RescaleFunction

FIT_KIND = "teacache-calib fit"
TABLES: Final = ("candidates",)  # fit.json's lists written one candidate a line


class _Missing:
    """The value of a field the document does not have (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()


def freeze(value: Any) -> Any:
    """JSON data made immutable: objects become read-only mappings, arrays tuples (records stay as they are)."""
    if isinstance(value, _Record):
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The JSON-ready form of frozen data: the inverse of :func:`freeze`."""
    if isinstance(value, _Record):
        return value.to_json()
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


class _Record(Mapping):
    """A frozen dataclass readable as the JSON object it writes: its present fields by their JSON names."""

    _REQUIRED: tuple[str, ...] = ()
    _FLAT: tuple[str, ...] = ()  # JSON names of a field held flat in the record's object (Candidate's function)

    def __post_init__(self) -> None:
        for name in self._names():  # frozen however it was made: from a file, by a fit or by dataclasses.replace
            object.__setattr__(self, name, freeze(getattr(self, name)))

    def _present(self) -> dict[str, Any]:
        """The fields the JSON object has, by their JSON names."""
        return {name: value for name in self._names() if (value := getattr(self, name)) is not MISSING}

    def __getitem__(self, key: str) -> Any:
        return self._present()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def _fields_of(cls, data: Mapping, where: str) -> dict[str, Any]:
        """The frozen field values of a JSON object; FitError names a missing or unknown field."""
        if not isinstance(data, Mapping):
            raise FitError(f"{where}: expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - {*cls._names(), *cls._FLAT})
        if unknown:
            raise FitError(f"{where}: unknown field {unknown[0]!r}")
        missing = [name for name in cls._REQUIRED if name not in data]
        if missing:
            raise FitError(f"{where}: missing field {missing[0]!r}")
        return dict(data)  # frozen by __post_init__

    def to_json(self) -> dict:
        """The JSON object of this record: its present fields, thawed."""
        return {name: thaw(value) for name, value in self._present().items()}


# The rescale function's fields in a candidate's JSON object: flat, beside its scores.
FUNCTION_KEYS = (
    "form", "coefficients", "time_coefficients", "x_range", "interaction_coefficients", "region", "knots", "time_knots",
)  # fmt: skip


@dataclass(frozen=True, eq=True)
class Candidate(_Record):
    """One scored candidate of fit.json (``candidates[i]`` and ``selected``): its rescale function and its scores,
    side by side in its JSON object. ``absent``: empty coefficient fields an older file lacks (written back so)."""

    label: str
    function: RescaleFunction
    r2: float
    cv_r2: float
    rmse: float
    n_prompts: int
    n_pairs: int
    selected: bool
    degree: int | _Missing = MISSING
    mode: str | _Missing = MISSING
    time_degree: int | _Missing = MISSING
    interaction_degree: int | _Missing = MISSING
    n_params: int | _Missing = MISSING
    cv_r2_se: float | _Missing = MISSING
    cv_fold_loss: tuple[float, ...] | _Missing = MISSING
    rmse_in_sample: float | _Missing = MISSING
    safety: Mapping | _Missing = MISSING
    decision_excess: float | None | _Missing = MISSING
    decision_excess_worst: float | None | _Missing = MISSING
    absent: tuple[str, ...] = ()

    _REQUIRED = ("label", "form", "coefficients", "x_range", "r2", "cv_r2", "rmse", "n_prompts", "n_pairs")
    _FLAT = FUNCTION_KEYS

    def _present(self) -> dict[str, Any]:
        fields = super()._present()
        del fields["function"], fields["absent"]
        function = {"interaction_coefficients": [], **self.function.to_dict()}
        function = {k: v for k, v in function.items() if k in FUNCTION_KEYS and k not in self.absent}
        return {"label": fields.pop("label"), **freeze(function), **fields}

    @classmethod
    def from_json(cls, data: Mapping, where: str = "candidate") -> Candidate:
        """A candidate from its JSON object (``selected`` defaults to False for hand-made entries)."""
        fields = cls._fields_of(data, where)
        function = {k: thaw(fields.pop(k)) for k in FUNCTION_KEYS if k in fields}
        try:
            fields["function"] = RescaleFunction.from_dict(function)
        except (TypeError, ValueError) as exc:
            raise FitError(f"{where}: {exc}") from None
        fields["absent"] = tuple(k for k in ("time_coefficients", "interaction_coefficients") if k not in function)
        fields.setdefault("selected", False)
        return cls(**fields)

    @property
    def rescale(self) -> RescaleFunction:
        """This candidate as the gate's rescale function (no fit document: no date, commit or variant)."""
        return self.rescale_with()

    def rescale_with(
        self, date_utc: str | None = None, git_commit: str | None = None, variant: str | list | None = None
    ) -> RescaleFunction:
        """This candidate's function with the fit's scores as its provenance."""
        provenance = {
            "source": FIT_KIND,
            "fitted_model": self.label,
            "r2": self.r2,
            "cv_r2": self.cv_r2,
            "rmse_cv": self.rmse,
            "n_prompts": self.n_prompts,
            "n_pairs": self.n_pairs,
            "date_utc": date_utc,
            "git_commit": git_commit,
            "variant": variant,
        }
        return dataclasses.replace(self.function, provenance=provenance)


@dataclass(frozen=True, eq=True)
class FitResult(_Record):
    """fit.json: the selected candidate, every candidate, how the choice was made and what the fit saw."""

    selected: Candidate
    format_version: int | _Missing = MISSING
    kind: str | _Missing = MISSING
    variant: str | None | _Missing = MISSING
    form: str | _Missing = MISSING
    fitted_model: str | _Missing = MISSING
    candidates: tuple[Candidate, ...] | _Missing = MISSING
    selection: Mapping | _Missing = MISSING
    decision: Mapping | _Missing = MISSING
    ceiling: Mapping | _Missing = MISSING
    comparison: Mapping | _Missing = MISSING
    data: Mapping | _Missing = MISSING
    options: Mapping | _Missing = MISSING
    input: Mapping | _Missing = MISSING
    provenance: Mapping | _Missing = MISSING
    plots: tuple[str, ...] | _Missing = MISSING

    _REQUIRED = ("selected",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.selected, Candidate):
            object.__setattr__(self, "selected", Candidate.from_json(self.selected, "selected"))
        if self.candidates is not MISSING and not all(isinstance(c, Candidate) for c in self.candidates):
            candidates = tuple(Candidate.from_json(c, f"candidates[{i}]") for i, c in enumerate(self.candidates))
            object.__setattr__(self, "candidates", candidates)

    @classmethod
    def from_json(cls, data: Mapping, where: str = "fit") -> FitResult:
        """A fit from its JSON object; FitError (one line, naming ``where``) when the schema does not hold."""
        if isinstance(data, FitResult):
            return data
        if not isinstance(data, Mapping):
            raise FitError(f"{where}: expected an object, got {type(data).__name__}")
        version = data.get("format_version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise FitError(f"{where} has format_version {version!r}; this toolkit reads {FORMAT_VERSION}")
        fields = cls._fields_of(data, where)
        fields["selected"] = Candidate.from_json(fields["selected"], f"{where}: selected")
        if "candidates" in fields:  # converted here, so a bad entry is named with the file
            fields["candidates"] = tuple(
                Candidate.from_json(c, f"{where}: candidates[{i}]") for i, c in enumerate(fields["candidates"])
            )
        return cls(**fields)

    @classmethod
    def read(cls, path: str | os.PathLike) -> FitResult:
        """Load and check a fit.json (or a folder holding one); FitError says in one line what is wrong."""
        p = Path(path)
        if p.is_dir():
            p = p / "fit.json"
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FitError(f"FIT: {p} does not exist") from None
        except (OSError, ValueError) as exc:
            raise FitError(f"FIT: cannot read {p} as JSON: {exc}") from None
        if not isinstance(data, dict) or "selected" not in data:
            raise FitError(f"FIT: {p} is not a fit.json written by teacache-calib fit (no 'selected' field)")
        if "format_version" not in data:  # a document built in memory may lack it (from_json); a file may not
            raise FitError(f"FIT: {p} has format_version None; this toolkit reads {FORMAT_VERSION}")
        return cls.from_json(data, f"FIT: {p}")

    def write(self, path: str | os.PathLike) -> None:
        """Write fit.json atomically: sorted keys, portable paths, each candidate (of ``candidates`` and of
        ``decision``) and each list of numbers on one line."""
        write_json(path, self.to_json(), rows=TABLES)

    @property
    def rescale(self) -> RescaleFunction:
        """The selected candidate as a RescaleFunction, its provenance naming the fit's date, commit and variant."""
        prov = self.provenance or {}
        variants = list((self.input or {}).get("variants") or [])
        return self.selected.rescale_with(
            date_utc=prov.get("date_utc"),
            git_commit=(prov.get("git") or {}).get("commit"),
            variant=variants[0] if len(variants) == 1 else (variants or None),
        )


def rescale_from_fit(fit: Mapping | str | os.PathLike) -> RescaleFunction:
    """The selected rescale function of a fit: a document in memory, or a fit.json (or folder) read from disk."""
    return (FitResult.from_json(fit) if isinstance(fit, Mapping) else FitResult.read(fit)).rescale
