"""Built-in prompt sets with stable ids, and prompt files.

Ids never change once published: traces, fits and sweeps refer to prompts by id.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

from teacache import variants
from teacache.errors import InputError, InputTypeError

# Diverse prompts for real models: objects, scenes, portraits, text rendering, abstract, fine detail.
DEFAULT = {
    "obj-teapot": "a porcelain teapot with blue floral patterns on a wooden table, soft window light",
    "obj-bicycle": "a red vintage bicycle leaning against a brick wall",
    "obj-watch": "macro photograph of a mechanical wristwatch movement, gears and jewels",
    "obj-sneakers": "a pair of white sneakers on a pastel background, product photo",
    "scene-harbor": "a fishing harbor at sunrise, boats and seagulls, mist over the water",
    "scene-city": "a rainy city street at night with neon signs reflected in puddles",
    "scene-forest": "a dense pine forest with sunbeams through fog",
    "scene-desert": "sand dunes under a starry sky with the milky way",
    "scene-kitchen": "a cozy kitchen interior with copper pots and hanging herbs",
    "portrait-elder": "close-up portrait of an elderly fisherman with a weathered face, natural light",
    "portrait-child": "a smiling child wearing a yellow raincoat, shallow depth of field",
    "portrait-dancer": "full-body photo of a ballet dancer mid-leap in an empty studio",
    "text-sign": "a wooden sign that says 'OPEN DAILY' hanging on a cafe door",
    "text-poster": "a retro travel poster with the words 'VISIT MARS' in bold letters",
    "text-neon": "a neon sign reading 'midnight diner' on a dark wall",
    "abstract-fluid": "abstract swirling fluid of gold and teal ink",
    "abstract-geometry": "a composition of overlapping translucent geometric shapes, bauhaus style",
    "abstract-fractal": "an intricate fractal pattern in purple and orange",
    "detail-feathers": "extreme close-up of peacock feathers showing fine barbs",
    "detail-lace": "white lace fabric with intricate floral embroidery, studio lighting",
    "detail-circuit": "top-down view of a dense printed circuit board with tiny components",
    "animal-fox": "a red fox in fresh snow looking at the camera",
    "animal-owl": "a barn owl perched on a fence post at dusk",
    "food-ramen": "a steaming bowl of ramen with egg, nori and scallions, overhead shot",
}

# Three prompts for tests and quick checks.
FAST = {k: DEFAULT[k] for k in ("obj-teapot", "scene-city", "portrait-elder")}

# tiny-shapes understands only its training vocabulary (teacache.models.shapes); its sets are named as its spec says.
_SHAPES_SET = variants.built_by("teacache.models.shapes:load_tiny_shapes").prompt_set
TINY_SHAPES = {
    "shapes-00": "a red circle on a blue background at the center",
    "shapes-01": "a yellow square on a black background at the left",
    "shapes-02": "a green triangle on a white background at the top",
    "shapes-03": "a purple ring on a orange background at the right",
    "shapes-04": "a blue square on a yellow background at the bottom",
    "shapes-05": "a white circle on a green background at the left",
    "shapes-06": "a orange triangle on a purple background at the center",
    "shapes-07": "a black ring on a red background at the top",
    "shapes-08": "a red square on a white background at the right",
    "shapes-09": "a blue triangle on a orange background at the bottom",
    "shapes-10": "a green circle on a black background at the right",
    "shapes-11": "a yellow ring on a purple background at the center",
    "shapes-12": "a purple square on a green background at the top",
    "shapes-13": "a white triangle on a red background at the left",
    "shapes-14": "a black circle on a yellow background at the bottom",
    "shapes-15": "a orange ring on a blue background at the left",
}

# tiny-open-flux1 and tiny-open-flux2 understand only their training vocabulary (teacache.models.open_data); 16
# distinct captions drawn from its train split (open_data.sample_specs(numpy.random.default_rng(2026), 1) in turn).
TINY_OPEN = {
    "open-00": "a yellow triangle at the left",
    "open-01": "a blue circle at the top",
    "open-02": "a purple triangle at the left",
    "open-03": "a green circle",
    "open-04": "a green triangle",
    "open-05": "a orange square",
    "open-06": "a purple square",
    "open-07": "a purple triangle at the center",
    "open-08": "a green triangle at the center",
    "open-09": "a green circle at the center",
    "open-10": "a blue square at the top",
    "open-11": "a red circle",
    "open-12": "a blue circle at the right",
    "open-13": "a yellow square at the right",
    "open-14": "a green triangle at the right",
    "open-15": "a orange circle at the center",
}

# tiny-open-flux1's captions call every object "shape" (open_data.ANY_SHAPE); 16 distinct ones drawn from its train
# split the same way (open_data.sample_specs(numpy.random.default_rng(2026), 1, captions=ANY_SHAPE) in turn).
TINY_OPEN_ANY = {
    "open-any-00": "a yellow shape at the bottom",
    "open-any-01": "a green shape at the center",
    "open-any-02": "a purple shape at the center",
    "open-any-03": "a red shape",
    "open-any-04": "a blue shape",
    "open-any-05": "a purple shape",
    "open-any-06": "a orange shape at the left",
    "open-any-07": "a green shape at the bottom",
    "open-any-08": "a green shape at the left",
    "open-any-09": "a blue shape at the right",
    "open-any-10": "a yellow shape at the top",
    "open-any-11": "a green shape at the top",
    "open-any-12": "a orange shape at the right",
    "open-any-13": "a yellow shape",
    "open-any-14": "a orange shape at the bottom",
    "open-any-15": "a purple shape at the left",
}


def _with_subsets(name: str, prompts: dict[str, str], fast: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """An embedded model's prompt set ``name`` and its subsets: ``name-fast`` (the ids ``fast``) and ``name-sweep``
    (its first 8 ids)."""
    return {
        name: prompts,
        f"{name}-fast": {k: prompts[k] for k in fast},
        f"{name}-sweep": {k: prompts[k] for k in sorted(prompts)[:8]},
    }


SETS = {
    "default": DEFAULT,
    "fast": FAST,
    **_with_subsets(_SHAPES_SET, TINY_SHAPES, ("shapes-00", "shapes-01", "shapes-02")),
    **_with_subsets("tiny-open", TINY_OPEN, ("open-00", "open-01", "open-03")),
    **_with_subsets("tiny-open-any", TINY_OPEN_ANY, ("open-any-00", "open-any-01", "open-any-03")),
}
TINY_SHAPES_FAST = SETS[f"{_SHAPES_SET}-fast"]


def default_set(model: str) -> str:
    """The prompt set a model uses when none is named: its variant's spec, else ``default``."""
    spec = variants.find(model)
    return spec.prompt_set if spec is not None else "default"


def _file_id(text: str) -> str:
    return "file-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


# Ids name files (<id>-s<seed>.parquet, images/<id>-...): letters, digits, '.', '_' and '-' only, not starting
# with '.', so no id is a path ('../x', 'a/b'), a hidden file or '..'; 128 leaves room for the seed and the
# suffix under the 255-byte limit of a file name.
ID_ALPHABET = "A-Z a-z 0-9 . _ -"
MAX_ID_LENGTH = 128
_SAFE_ID = re.compile(rf"[A-Za-z0-9_-][A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 1}}}")


def check_prompt_id(prompt_id: str, where: str = "--prompts") -> str:
    """An id that is a safe file name, else InputError naming ``where`` (file and row) and the alphabet."""
    if not isinstance(prompt_id, str) or _SAFE_ID.fullmatch(prompt_id) is None:
        raise InputError(
            f"{where}: id {prompt_id!r} is not a safe file name (ids name files: 1 to {MAX_ID_LENGTH} characters "
            f"of {ID_ALPHABET}, not starting with '.')"
        )
    return prompt_id


def _json_rows(path: Path) -> list[tuple[object, object]]:
    """[(id, text)] of {id: text} or [{id, text}], duplicate keys kept (json.loads keeps only the last)."""
    data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=lambda pairs: pairs)
    if isinstance(data, list) and all(isinstance(row, list) for row in data):  # [{id, text}], each as its pairs
        rows = [dict(row) for row in data]
        return [(row["id"], row["text"]) for row in rows]
    if isinstance(data, list):  # {id: text}, as its pairs
        return list(data)
    raise InputTypeError(f"--prompts: {path}: expected {{id: text}} or [{{id, text}}], got {type(data).__name__}")


def _rows(path: Path) -> tuple[str, list[tuple[int, object, object]]]:
    """(what a row is called, [(row number, id, text)]) of a prompt file, in file order."""
    if path.suffix == ".json":
        return "entry", [(n, k, v) for n, (k, v) in enumerate(_json_rows(path), start=1)]
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or not {"id", "text"} <= set(reader.fieldnames):
                raise InputError(f"--prompts: {path} needs the columns id,text; found {reader.fieldnames}")
            return "line", [(reader.line_num, row["id"], row["text"]) for row in reader]
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return "line", [
        (n, _file_id(line), line) for n, line in enumerate(lines, start=1) if line and not line.startswith("#")
    ]


def load_prompts(spec: str) -> dict[str, str]:
    """A built-in set name, or a file.

    Files: .txt (one prompt per line), .json ({id: text} or [{id, text}]), .csv (id,text). Every id must be a
    safe file name (check_prompt_id) and come once, also ignoring case, and every text be a string: a file is refused
    naming the row, never read in part.
    """
    if spec in SETS:
        return dict(SETS[spec])
    path = Path(spec)
    if not path.exists():
        raise InputError(f"--prompts: {spec!r} is neither a built-in set ({', '.join(SETS)}) nor an existing file")
    row, rows = _rows(path)
    rows_word = {"entry": "entries", "line": "lines"}[row]
    prompts: dict[str, str] = {}
    first_row: dict[str, int] = {}
    first_folded: dict[str, str] = {}  # an id with case folded -> the id as the file has it
    for number, raw_id, text in rows:
        number_id = isinstance(raw_id, int | float) and not isinstance(raw_id, bool)  # JSON's {"id": 7}
        prompt_id = check_prompt_id(str(raw_id) if number_id else raw_id, f"--prompts: {path} {row} {number}")
        if prompt_id in first_row:
            raise InputError(
                f"--prompts: {path} {rows_word} {first_row[prompt_id]} and {number}: the id {prompt_id!r} comes "
                "twice (an id names its prompt's files and rows: each must be unique)"
            )
        same = first_folded.get(prompt_id.casefold())
        if same is not None:  # their files would be one file where names ignore case (macOS, Windows)
            raise InputError(
                f"--prompts: {path} {rows_word} {first_row[same]} and {number}: the ids {same!r} and {prompt_id!r} "
                "differ only in case (an id names files, and some file systems ignore case): rename one"
            )
        if not isinstance(text, str):  # JSON: null, a number, a list; a prompt is text
            shown_text = "null" if text is None else json.dumps(text)
            raise InputError(
                f"--prompts: {path} {row} {number}: the text of {prompt_id!r} is {shown_text}; expected a string"
            )
        first_row[prompt_id] = number
        first_folded[prompt_id.casefold()] = prompt_id
        if text.strip():
            prompts[prompt_id] = text
    if not prompts:
        raise InputError(f"--prompts: {spec} holds no prompts")
    return prompts


def pair_id(prompt_id: str, seed: int) -> str:
    """One (prompt, seed) pair's name in every table: a recording's run_id, a sweep's pair_id."""
    return f"{prompt_id}-s{seed}"


# A seed is what mflux's generators take (a uint32: 0..2^32-1); a larger one fails inside the first generation.
MAX_SEED = 2**32 - 1
# More seeds than any run could finish (each is one generation per prompt); also keeps '0-99999999999' from
# building a list that fills the memory before the plan line prints.
MAX_SEEDS = 1_000_000


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' or '0-4' or a mix of distinct seeds in 0..2^32-1; refuses anything else in one line."""
    seeds: list[int] = []
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = (int(v) for v in part.split("-", 1))
                _check_seed(lo, text)
                _check_seed(hi, text)
                if hi - lo + 1 + len(seeds) > MAX_SEEDS:
                    raise InputError(f"--seeds: at most {MAX_SEEDS} seeds, got {text!r}")
                seeds.extend(range(lo, hi + 1))
            elif part:
                seeds.append(_check_seed(int(part), text))
    except ValueError as exc:
        if str(exc).startswith("--seeds"):
            raise
        raise InputError(f"--seeds: expected integers like '0,1,2' or '0-4', got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds: expected distinct non-negative integers, got {text!r}")
    return seeds


def _check_seed(seed: int, text: str) -> int:
    if seed > MAX_SEED:
        raise InputError(f"--seeds: a seed is at most 2^32-1 = {MAX_SEED} (what the generators take), got {text!r}")
    return seed


def parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in str(text).lower().split("x"))
    except ValueError:
        raise InputError(f"--size: expected WIDTHxHEIGHT like 256x256, got {text!r}") from None
    if width <= 0 or height <= 0:
        raise InputError(f"--size: expected positive sizes, got {text!r}")
    return width, height
