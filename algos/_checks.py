"""Host-side validation of hyperparameters, run before anything is compiled."""

from __future__ import annotations

import numpy as np

from delaylab.theory.arguments import as_numbers as _as_numbers


def _show(value: np.ndarray) -> str:
    flat = np.ravel(value)
    text = np.array2string(flat[:8], precision=6, separator=", ")
    return text if flat.size <= 8 else text[:-1] + ", ...]"


def as_numbers(name: str, value, argument: str) -> np.ndarray:
    """``value`` as a float64 array, or a ValueError naming ``name: argument``."""
    return _as_numbers(value, f"{name}: {argument}")


def check_stepsize(name: str, value, *, argument: str = "stepsize") -> None:
    """Step sizes must be finite and non-negative (a sweep axis is allowed)."""
    arr = as_numbers(name, value, argument)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(
            f"{name}: {argument} must be finite and >= 0; got {_show(arr)}"
        )


def check_taus(name: str, taus, num_workers: int | None = None, *, argument: str = "taus") -> None:
    """τ vectors must be positive, finite, and have one entry per worker (last axis)."""
    arr = as_numbers(name, taus, argument)
    if arr.ndim == 0:
        raise ValueError(f"{name}: {argument} must be a vector with one entry per worker; got a scalar")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name}: {argument} must be positive and finite; got {_show(arr)}")
    if num_workers is not None and arr.shape[-1] != num_workers:
        raise ValueError(
            f"{name}: {argument} has {arr.shape[-1]} entries but the problem has "
            f"{num_workers} workers; give one τ per worker"
        )


def stepsize_only(name: str):
    """A ``validate`` function for algorithms whose only checked hyperparameter is ``stepsize``."""

    def validate(hparams, num_workers: int) -> None:
        del num_workers
        check_stepsize(name, hparams["stepsize"])

    return validate


def check_int_hparam(name: str, hparams, arg: str, minimum: int = 1) -> None:
    """A hyperparameter that must be whole numbers >= ``minimum`` (a sweep axis is allowed)."""
    v = np.asarray(hparams[arg])
    if v.dtype == bool or not (np.issubdtype(v.dtype, np.integer) or np.all(np.mod(v, 1) == 0)) or np.any(v < minimum):
        raise ValueError(f"{name}: {arg} must be an integer >= {minimum}; got {_show(np.asarray(v, np.float64))}")


def check_int(name: str, arg: str, value, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` (bools refused); returned as ``int``."""
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name}: {arg} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def numbers_arg(name: str, value, argument: str):
    """``value`` as a JAX array for an algorithm's hyperparameters, or a ValueError naming
    ``name: argument`` when it is not numbers (its values are checked by the algorithm's validate)."""
    import jax.numpy as jnp

    as_numbers(name, value, argument)
    return jnp.asarray(value)
