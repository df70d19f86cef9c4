"""Reading numeric arguments: one helper for every layer above (algos, sim), so that a bad value
is refused with a message naming the argument rather than numpy's own."""

from __future__ import annotations

import numpy as np


def as_numbers(value, argument: str) -> np.ndarray:
    """``value`` as a float64 array, or a ValueError naming ``argument`` (a string, None, a bool or a
    ragged list is not a number, and numpy's own message would not say which argument it was)."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None or (
            isinstance(value, (list, tuple)) and any(isinstance(v, (bool, str, bytes)) or v is None for v in value)):
        raise ValueError(f"{argument} must be a number (or numbers); got {value!r}")
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{argument} must be a number (or numbers); got {value!r} ({err})") from None
