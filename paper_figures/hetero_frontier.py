"""Heterogeneity lab, experiment ``frontier``: see :mod:`paper_figures.hetero` for what it measures.

    delaylab figure hetero-frontier --quick     # the quick preset (under 10 minutes on 2 cores)
    delaylab figure hetero-frontier             # the full preset
"""

from paper_figures.hetero import PRESETS, make_write  # noqa: F401  (PRESETS: the CLI's --preset choices)

write = make_write("frontier")
