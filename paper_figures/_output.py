"""What every figure module writes: the PNG, the data behind it as CSV, and a findings text."""

from __future__ import annotations

import os
from typing import Callable

from sim import store


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (figures are written, never shown)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_outputs(out_dir: str, stem: str, data: dict, plot: Callable[[dict, str], None], rows: list[dict],
                  text: str) -> str:
    """``<stem>.png`` (drawn by ``plot``), ``<stem>.csv`` (``rows``) and ``<stem>.txt``; returns the PNG path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{stem}.png")
    plot(data, path)
    store.write_csv(os.path.join(out_dir, f"{stem}.csv"), rows)
    with open(os.path.join(out_dir, f"{stem}.txt"), "w") as fh:
        fh.write(text)
    return path
