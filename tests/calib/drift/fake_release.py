"""Fake mflux releases for the drift command's tests: the installed mflux copied into a site folder with one
source file edited, run in a subprocess with that folder first on the path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mflux

from tests import ROOT

_FLUX2 = Path("models/flux2/model/flux2_transformer")
# each: (file under mflux, the line as the installed release has it, the line the fake release has)
EDITS = {
    # every attention output 2^-20 larger: the bits move, a calibrated gate decides as before
    "flux2-bits": (
        _FLUX2 / "single_transformer_block.py",
        "hidden_states = hidden_states + mod_gate * attn_output",
        "hidden_states = hidden_states + mod_gate * attn_output * (1.0 + 2.0**-20)",
    ),
    # the modulation's shift, scale and gate half again as large: the signal the gate reads (block 0's modulated
    # input) and what each step does both change, and with them the gate's calls
    "flux2-decisions": (
        _FLUX2 / "modulation.py",
        "mod = self.linear(mod)",
        "mod = 1.5 * self.linear(mod)",
    ),
    # a hooked function that no longer runs as the adapters call it
    "flux2-broken": (
        _FLUX2 / "modulation.py",
        "mod = nn.silu(temb)",
        "raise TypeError('Flux2Modulation.__call__() takes a different argument now')",
    ),
}


def build(kind: str, site: Path) -> Path:
    """A site folder holding mflux with the edit ``kind``; returns it."""
    target = site / "mflux"
    shutil.copytree(Path(mflux.__file__).parent, target, ignore=shutil.ignore_patterns("__pycache__"))
    relative, old, new = EDITS[kind]
    path = target / relative
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: the installed release no longer has {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return site


def run_drift(args: list[str], site: Path | None, cwd: Path) -> subprocess.CompletedProcess:
    """``teacache-calib drift ARGS`` in a fresh process, under the fake release in ``site`` (None: installed)."""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    command = [sys.executable, "-m", "calib.cli", "drift", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
