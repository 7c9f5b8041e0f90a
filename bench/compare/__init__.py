"""``teacache-bench compare-hardware`` (``command``): two hardware's campaigns found, compared and rendered."""
