"""What ``teacache-bench sweep`` writes into its folder, how the output rule (:mod:`teacache.outputs`) tells a
folder it wrote, and where a sharded sweep keeps each pair: the names a campaign checks a sweep folder by."""

from __future__ import annotations

from calib.run import arguments, fingerprint, units
from calib.run.folder import LOG, RunFolder

PROG = "teacache-bench sweep"
# What the sweep writes into its folder: --force-new removes exactly these. pairs: each pair's parts until the tables
# are merged (bench.sweep.parts), then rebuilt from the tables by a rerun.
TABLES = ("runs.parquet", "decisions.parquet", "noop.parquet", "schedules.parquet")  # bench.sweep.records
OUTPUTS = ("pairs", "images", *TABLES, "provenance.json", units.SHARDS, LOG)  # LOG: a line per measured pair
# What shows that a folder holds a sweep's results (images and shard folders alone are no sweep to check): the merged
# tables of a finished sweep, the pairs of an interrupted one
RESULTS = ("pairs", *TABLES, "provenance.json")
# What the output rule (teacache.outputs) lets it write: a sweep, in a folder its fingerprint names it in.
WRITES = arguments.Writes(PROG, names=(*OUTPUTS, fingerprint.FILE), marker=fingerprint.FILE)
# A pair is the unit of a sharded sweep: its parts under <folder>/pairs (OUT/pairs, a plain sweep's, goes once merged),
# its images under OUT/images
LAYOUT = units.UnitLayout("pairs", ".runs.parquet", shared=("images/{key}-*.png",))


def run_folder(extendable: tuple[str, ...]) -> RunFolder:
    """The sweep's folder; the settings a rerun may add to depend on the sweep (bench.sweep.settings)."""
    return RunFolder(PROG, RESULTS, OUTPUTS, extendable, LAYOUT)
