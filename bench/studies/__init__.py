"""Research studies built on sweeps and fits: which selection criterion, whether decision-aware fits help,
how the findings hold across models. They run sweeps and refits; the report (``bench.report``) only reads."""
