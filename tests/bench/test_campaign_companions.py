"""A committed campaign folder holds studies filed beside its stages; the campaign runs again beside them."""

from __future__ import annotations

from bench import campaign
from teacache.outputs import check_folder_is_own
from tests import committed


def test_every_committed_campaign_folder_is_the_campaigns_own():
    """Each entry of a committed campaign folder is a stage or a companion study, so `teacache-bench campaign
    --model M` on that hardware is not refused for the studies beside it (the tolerance journey runs it)."""
    folders = sorted({p.parents[1] for p in committed("results/*/*/*/sweep/runs.parquet")})
    assert folders
    for folder in folders:
        check_folder_is_own(folder, campaign.WRITES)
