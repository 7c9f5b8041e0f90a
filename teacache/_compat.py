"""The mflux releases this package is verified on, and the one-line reason an older release is refused.

Reading the installed version needs only the package metadata, never an mflux import: the console scripts
check it before anything else, so a release outside the range is refused in well under a second.
"""

from __future__ import annotations

from importlib import metadata

from teacache._warnings import warn
from teacache.errors import TeaCacheError

# Every release from the oldest to the newest here passes the adapter and no-op tests (`make test MFLUX=...`).
VERIFIED_RELEASES = ("0.21.0", "0.22.0", "0.23.0", "0.24.0")
OLDEST_MFLUX = VERIFIED_RELEASES[0]
NEWEST_MFLUX = VERIFIED_RELEASES[-1]
DRIFT_COMMAND = "teacache-calib drift"

# What stops an older release, each with the first release that no longer has it (newest first).
_BLOCKERS = (
    ("0.21.0", "below 0.21 mflux imports torch at import time, and this package installs mflux without torch"),
    ("0.19.0", "FLUX.2's transformer call differs before 0.19"),
    ("0.18.0", "FLUX.2's blocks take no kv_cache argument before 0.18"),
)
_warned_newer = False


class MfluxVersionError(TeaCacheError, RuntimeError):
    """The installed mflux is outside the range this package supports (or not installed)."""


def parse_release(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release string; a suffix such as ``rc1`` or ``.dev0`` is dropped."""
    parts = []
    for piece in str(version).split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def installed_mflux() -> str:
    """The installed mflux release, from its package metadata (mflux itself is not imported)."""
    try:
        return metadata.version("mflux")
    except metadata.PackageNotFoundError:
        raise MfluxVersionError(
            f"mflux is not installed; install a release from {OLDEST_MFLUX} to {NEWEST_MFLUX} (make install)"
        ) from None


def refusal(version: str) -> str | None:
    """Why ``version`` cannot run this package, in one line; None when it can."""
    parsed = parse_release(version)
    if parsed >= parse_release(OLDEST_MFLUX):
        return None
    reasons = [why for release, why in _BLOCKERS if parsed < parse_release(release)]
    return (
        f"mflux {version} is older than {OLDEST_MFLUX}, the oldest supported release: {'; '.join(reasons)}. "
        f"Install mflux>={OLDEST_MFLUX} ({NEWEST_MFLUX} is the pinned release)"
    )


def check_mflux_version(version: str | None = None) -> str:
    """Refuse an mflux older than the oldest supported release; warn once on one newer than the newest verified."""
    global _warned_newer
    version = version or installed_mflux()
    reason = refusal(version)
    if reason is not None:
        raise MfluxVersionError(reason)
    if parse_release(version) > parse_release(NEWEST_MFLUX) and not _warned_newer:
        _warned_newer = True
        warn(
            f"mflux {version} is newer than {NEWEST_MFLUX}, the newest release this package was verified on: run "
            f"`{DRIFT_COMMAND}` to see whether the hooked code or the numbers changed (a refit may be due)",
            UserWarning,
        )
    return version
