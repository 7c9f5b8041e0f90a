"""``teacache-calib fit`` (``command``): candidate rescale functions, fitting, selection, decision scores,
fit.json (``result``: the one reader and writer), its plots, and where a rescale function to use or score comes
from (``coefficient_sources``)."""
