"""What the embedded builders set only where the installed mflux has it (0.21.0 lacks both; see teacache._compat)."""

from __future__ import annotations


def no_compute_precision():
    """mflux's ``ComputePrecision(None)`` (0.22+: attention and feed-forward stay in the model precision), or
    None on a release without the module, whose pipelines read no compute precision."""
    try:
        from mflux.models.common.compute_precision import ComputePrecision
    except ImportError:
        return None
    return ComputePrecision(None)


def stream_in_model_precision(transformer) -> None:
    """Z-Image's hidden stream in the model precision, as mflux 0.22+ runs it by default (``set_float32(False)``).

    Before 0.22 there is no switch: the float32 time embedding promotes the stream, which is that release's path.
    """
    if hasattr(transformer, "set_float32"):
        transformer.set_float32(False)
