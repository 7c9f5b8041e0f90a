"""The mflux versions this package was verified against."""

from __future__ import annotations

import warnings
from importlib import metadata

VERIFIED_MFLUX = "0.24.0"
MIN_MFLUX = (0, 24, 0)
_warned = False


class MfluxVersionError(RuntimeError):
    pass


def _parse(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_mflux_version(version: str | None = None) -> str:
    """Refuse mflux older than the verified release; warn once on a newer one (a refit may be due)."""
    global _warned
    version = version or metadata.version("mflux")
    parsed = _parse(version)
    if parsed < MIN_MFLUX:
        raise MfluxVersionError(
            f"mflux {version} is older than the oldest supported release {VERIFIED_MFLUX}: the hook points "
            f"differ. Install mflux>={VERIFIED_MFLUX}."
        )
    if parsed > _parse(VERIFIED_MFLUX) and not _warned:
        _warned = True
        warnings.warn(
            f"mflux {version} is newer than {VERIFIED_MFLUX}, the release this package was verified against. "
            "The packaged rescale coefficients may no longer fit: see 'Refit after a new mflux release' in "
            "the README (teacache-calib record / fit / emit).",
            UserWarning,
            stacklevel=2,
        )
    return version
