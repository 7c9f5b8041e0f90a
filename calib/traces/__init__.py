"""Trace tables in: the one reader (``reader``), mlx-teacache calibration files, and table helpers."""
