"""Levels of hierarchical averaging, shared by the algorithm (``algos.hierarchical_sgd``) and its
schedule (``sim.schedules.hierarchical``): which group size averages after which step. Plain
Python on integers; no engine, no arrays. It lives in ``theory``, the lowest layer, because both
``algos`` and ``sim`` need it and neither may import the other's concrete modules."""

from __future__ import annotations


def check_levels(levels, num_workers: int) -> tuple[tuple[int, int], ...]:
    """Validate hierarchical-averaging levels ``{period: group size}`` (PyTorch's
    HierarchicalModelAverager convention): periods increasing, group sizes increasing, each
    dividing the next and the last equal to n. Returns ``((period, size), ...)`` sorted by period."""
    try:
        items = sorted((int(p), int(s)) for p, s in dict(levels).items())
    except (TypeError, ValueError):
        raise ValueError(f"levels must be a dict {{period: group size}} of positive integers; got {levels!r}") from None
    if not items:
        raise ValueError("levels must name at least one {period: group size}")
    periods = [p for p, _ in items]
    sizes = [s for _, s in items]
    if periods[0] < 1 or sizes[0] < 1:
        raise ValueError(f"levels: periods and group sizes must be >= 1; got {dict(items)}")
    if any(b <= a for a, b in zip(sizes, sizes[1:])) or any(b % a for a, b in zip(sizes, sizes[1:])):
        raise ValueError(f"levels: group sizes must increase with the period, each dividing the next; got {dict(items)}")
    if sizes[-1] != num_workers:
        raise ValueError(f"levels: the longest period's group must hold all {num_workers} workers; got {dict(items)}")
    return tuple(items)


def sync_level(step: int, levels: tuple[tuple[int, int], ...], warmup: int) -> int:
    """The group size that averages after local step ``step`` (0-based), 0 for none: during the
    first ``warmup`` steps all n; then the group of the longest period dividing ``step``."""
    if step < warmup:
        return levels[-1][1]
    for p, s in reversed(levels):
        if step % p == 0:
            return s
    return 0


def check_warmup(warmup) -> int:
    """The warm-up (synchronous steps before the levels apply) must be an integer >= 0."""
    if isinstance(warmup, bool) or int(warmup) != warmup or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0; got {warmup!r}")
    return int(warmup)
