"""Matplotlib for the figure modules: the non-interactive backend, and saving a figure."""

from __future__ import annotations




def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (figures are written, never shown)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str) -> None:
    """Lay out, write (under a temporary name, then renamed: a kill leaves the previous file whole)
    and close ``fig``."""
    from delaylab.sim import store

    fig.tight_layout()
    store.write_figure(fig, path)
